//! The platform's answers: `{success, message, data, timestamp}` (its `ApiResponse`), the
//! time its server's clock read in `meetings.timezone` as Jackson writes a `LocalDateTime`,
//! and its error texts: there is no code field, so its Korean `message` is what a client
//! reads (docs/dialects.md).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use super::schema::Answer;
use crate::adapters::jackson::local_date_time;

/// The platform's wall time now, in its zone, to the microsecond as Java's clock reads it.
fn now(zone: chrono_tz::Tz) -> String {
    use chrono::SubsecRound;
    local_date_time(chrono::Utc::now().with_timezone(&zone).naive_local().trunc_subsecs(6))
}

/// A success: `message` and `data` in the envelope.
pub fn ok(zone: chrono_tz::Tz, message: &str, data: impl Serialize) -> HttpResponse {
    HttpResponse::Ok().json(Answer { success: true, message: message.to_owned(), data, timestamp: now(zone) })
}

/// Its texts.
pub mod text {
    pub const UNAUTHENTICATED: &str = "인증이 필요합니다. 로그인해 주세요.";
    pub const EXPIRED: &str = "만료된 토큰입니다.";
    pub const BAD_SIGNATURE: &str = "잘못된 JWT 서명입니다.";
    pub const UNSUPPORTED: &str = "지원되지 않는 JWT 토큰입니다.";
    pub const BAD_TOKEN: &str = "JWT 토큰이 잘못되었습니다.";
    pub const BAD_FORMAT: &str = "잘못된 토큰 형식입니다.";
    pub const NOT_ACCESS: &str = "유효하지 않은 Access 토큰입니다.";
    pub const BAD_INPUT: &str = "입력 값을 다시 확인해주세요.";
    pub const METHOD: &str = "지원하지 않는 HTTP 메서드입니다.";
    pub const INTERNAL: &str = "서버 내부 오류가 발생했습니다.";
    pub const PAYMENT_NOT_FOUND: &str = "결제 정보를 찾을 수 없습니다.";
    pub const USER_NOT_FOUND: &str = "사용자를 찾을 수 없습니다.";
    pub const MEETING_NOT_FOUND: &str = "모임을 찾을 수 없습니다.";
    pub const UNAUTHORIZED_REFUND: &str = "환불 권한이 없습니다.";
    pub const REFUND_NOT_ALLOWED: &str = "완료된 결제만 환불 가능합니다.";
    pub const REFUND_FAILED: &str = "환불 처리 실패";
    /// Ours (the platform has no text for it): the provider refused to show the payment.
    pub const PG_REFUSED: &str = "PG사가 결제 조회를 거절했습니다.";
    pub const TEST_KEY_ONLY: &str = "Key-in API는 테스트 키에서만 호출할 수 있습니다.";
    pub const FREE_MEETING: &str = "무료 모임 참가 처리에 실패했습니다";
    pub const CONFIRM_FAILED: &str = "결제 승인 실패";
    pub const ALREADY_PAID: &str = "이미 결제가 완료된 사용자입니다.";
    /// Its `CardPaymentTestRequestDto`'s constraint messages.
    pub const MEETING_ID_REQUIRED: &str = "모임 ID는 필수입니다";
    pub const CARD_NUMBER: &str = "카드번호는 16자리 숫자여야 합니다";
    pub const CARD_EXPIRY: &str = "카드 유효기간은 MM/YY 형식이어야 합니다";
    pub const CARD_CVC: &str = "CVC는 3자리 숫자여야 합니다";
    pub const BIRTH: &str = "생년월일은 6자리 숫자여야 합니다";
    /// Its `RefundRequestDto`'s `@NotBlank` message.
    pub const REASON_REQUIRED: &str = "환불 사유는 필수입니다";
    /// Ours, where the platform has none (docs/dialects.md).
    pub const MEDIA_TYPE: &str = "지원하지 않는 Content-Type입니다. application/json으로 보내 주세요.";
    pub const TOO_LARGE: &str = "요청 본문이 너무 큽니다. (최대 64 KiB)";
    pub const TOO_SLOW: &str = "요청 본문이 제시간에 도착하지 않았습니다.";
    pub const CROSS_SITE: &str = "다른 사이트에서 보낸 요청은 쿠키로 인증할 수 없습니다.";
    pub const NOT_FOUND: &str = "요청한 리소스를 찾을 수 없습니다.";
    pub const UNAVAILABLE: &str = "일시적으로 요청을 처리할 수 없습니다. 잠시 후 다시 시도해 주세요.";
    pub const REFUND_PENDING: &str =
        "환불 요청이 접수되었으나 아직 완료되지 않았습니다. 잠시 후 결제 내역을 확인해 주세요.";
}

/// An error as the platform answers it: a status, its message, `data: null`, the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MomoError {
    pub status: StatusCode,
    pub message: std::borrow::Cow<'static, str>,
    pub zone: chrono_tz::Tz,
}

impl MomoError {
    pub fn new(zone: chrono_tz::Tz, status: StatusCode, message: &'static str) -> Self {
        MomoError { status, message: message.into(), zone }
    }

    /// Its validation handler's answer: 400, each constraint's message joined by `||`.
    pub fn invalid(zone: chrono_tz::Tz, messages: &[&str]) -> Self {
        MomoError { status: StatusCode::BAD_REQUEST, message: messages.join("||").into(), zone }
    }

    pub fn response(&self) -> HttpResponse {
        let body =
            Answer { success: false, message: self.message.to_string(), data: (), timestamp: now(self.zone) };
        crate::adapters::http::problem::error_builder(self.status).json(body)
    }
}

impl std::fmt::Display for MomoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl ResponseError for MomoError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        self.response()
    }
}
