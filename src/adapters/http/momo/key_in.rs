//! `POST /payments/test/keyin`: its `CardPaymentTestRequestDto` read as Jackson reads it,
//! checked against the constraints the DTO declares, and the meeting's fee charged to the card
//! through our key-in use case (docs/dialects.md).

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::MomoApi;
use super::auth::Member;
use super::envelope::{MomoError, ok, text};
use crate::adapters::http::HttpState;
use crate::adapters::jackson;
use crate::application::AppError;
use crate::application::money::key_in::{
    ALREADY_PAID, CARD_REFUSED, FREE_MEETING, KeyInPayment, NO_FEE_SOURCE, TEST_KEY_ONLY,
};
use crate::application::ports::KeyedCard;
use crate::domain::payment::PaymentStatus;

/// The card its service charges when the request names none (its `buildKeyInRequest`).
const DEFAULT_CARD: &str = "4242424242424242";
const DEFAULT_EXPIRY: &str = "12/25";
const DEFAULT_BIRTH: &str = "880101";

fn digits(text: &str, n: usize) -> bool {
    text.len() == n && text.bytes().all(|b| b.is_ascii_digit())
}

/// Its DTO: `meetingId` required; each card field, when given, matching its `@Pattern`.
fn read(api: &MomoApi, body: &[u8]) -> Result<KeyInPayment, MomoError> {
    let bad = || api.fail(StatusCode::BAD_REQUEST, text::BAD_INPUT);
    let body: Value = serde_json::from_slice(body).map_err(|_| bad())?;
    if !body.is_object() {
        return Err(bad());
    }
    let meeting = jackson::long(body.get("meetingId")).map_err(|_| bad())?;
    let field = |name: &str| jackson::string(body.get(name)).map_err(|_| bad());
    let (number, expiry, cvc, birth) =
        (field("cardNumber")?, field("cardExpiry")?, field("cardCvc")?, field("birth")?);
    // `\d{2}/\d{2}`, byte by byte (so the slices below are on ASCII).
    let expiry_ok = |e: &str| {
        let b = e.as_bytes();
        b.len() == 5 && b[2] == b'/' && [0, 1, 3, 4].iter().all(|&i| b[i].is_ascii_digit())
    };
    let broken: Vec<&str> = [
        (meeting.is_none(), text::MEETING_ID_REQUIRED),
        (number.as_deref().is_some_and(|n| !digits(n, 16)), text::CARD_NUMBER),
        (expiry.as_deref().is_some_and(|e| !expiry_ok(e)), text::CARD_EXPIRY),
        (cvc.as_deref().is_some_and(|c| !digits(c, 3)), text::CARD_CVC),
        (birth.as_deref().is_some_and(|b| !digits(b, 6)), text::BIRTH),
    ]
    .into_iter()
    .filter_map(|(broken, message)| broken.then_some(message))
    .collect();
    let Some(meeting) = meeting.filter(|_| broken.is_empty()) else {
        return Err(MomoError::invalid(api.zone, &broken));
    };
    let expiry = expiry.unwrap_or_else(|| DEFAULT_EXPIRY.to_owned());
    Ok(KeyInPayment {
        meeting_id: meeting.to_string(),
        card: KeyedCard {
            number: number.unwrap_or_else(|| DEFAULT_CARD.to_owned()),
            expiry_month: expiry[..2].to_owned(),
            expiry_year: expiry[3..].to_owned(),
            identity_number: birth.unwrap_or_else(|| DEFAULT_BIRTH.to_owned()),
        },
    })
}

/// `POST /payments/test/keyin {meetingId, cardNumber?, cardExpiry?, cardCvc?, birth?}`: the
/// member's payment for the meeting, charged to the card at the meeting's fee (test keys
/// only); a repeat answers the payment it has.
#[utoipa::path(
    post,
    path = "/payments/test/keyin",
    tag = "momo",
    request_body = crate::adapters::http::momo::schema::KeyInRequest,
    responses(
        (status = 200, description = "테스트 키인 결제가 완료되었습니다. — data: the payment (its PaymentResponseDto)", body = crate::adapters::http::momo::schema::Answer<crate::adapters::http::momo::schema::PaymentResponse>),
        (status = 202, description = "결제 결과를 확인하고 있습니다. — data: the payment, PENDING: Toss has not answered the charge yet; a repeat answers the same payment and charges nothing", body = crate::adapters::http::momo::schema::Envelope),
        (status = 400, description = "Its DTO's constraint messages joined by ||; 무료 모임 참가 처리에 실패했습니다; 입력 값을 다시 확인해주세요.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 401, description = "Its token texts (docs/dialects.md)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 403, description = "Key-in API는 테스트 키에서만 호출할 수 있습니다.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 404, description = "모임을 찾을 수 없습니다.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 403, description = "다른 사이트에서 보낸 요청은 쿠키로 인증할 수 없습니다. (the cookie's token on a cross-site post)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 409, description = "이미 결제가 완료된 사용자입니다. (a registration for the meeting on its way)", body = crate::adapters::http::momo::schema::Envelope),
        (status = 415, description = "지원하지 않는 Content-Type입니다. application/json으로 보내 주세요.", body = crate::adapters::http::momo::schema::Envelope),
        (status = 502, description = "결제 승인 실패: the card was refused; nothing stored or sent", body = crate::adapters::http::momo::schema::Envelope),
    ),
    security(("bearer" = []))
)]
pub async fn key_in(
    state: web::Data<HttpState>,
    api: web::Data<MomoApi>,
    member: Member,
    req: HttpRequest,
    body: web::Bytes,
) -> Result<HttpResponse, MomoError> {
    super::json_body(&api, &req)?;
    let request = read(&api, &body)?;
    let payment = state.key_in.pay(&member.0, request).await.map_err(|err| match err {
        AppError::Forbidden { code: TEST_KEY_ONLY, .. } => {
            api.fail(StatusCode::FORBIDDEN, text::TEST_KEY_ONLY)
        }
        AppError::NotFound("meeting") => api.fail(StatusCode::NOT_FOUND, text::MEETING_NOT_FOUND),
        AppError::Unprocessable { code: FREE_MEETING, .. } => {
            api.fail(StatusCode::BAD_REQUEST, text::FREE_MEETING)
        }
        AppError::Unprocessable { code: CARD_REFUSED, message } => {
            tracing::info!(refusal = %message, "momo dialect: a keyed-in card was refused");
            api.fail(StatusCode::BAD_GATEWAY, text::CONFIRM_FAILED)
        }
        AppError::Conflict { code: ALREADY_PAID, .. } => api.fail(StatusCode::CONFLICT, text::ALREADY_PAID),
        // Not served where the meetings' fees cannot be read (docs/dialects.md).
        AppError::Conflict { code: NO_FEE_SOURCE, .. } => api.fail(StatusCode::NOT_FOUND, text::NOT_FOUND),
        err => api.app_error(err),
    })?;
    if matches!(payment.payment.status, PaymentStatus::Requested | PaymentStatus::ConfirmationRequired) {
        // Charged or not, Toss has not said yet: the pair stays taken, reconciliation asks
        // until it answers, and a repeat meets this payment (docs/dialects.md).
        let mut answer = ok(api.zone, PENDING, api.payment(&payment));
        *answer.status_mut() = StatusCode::ACCEPTED;
        return Ok(answer);
    }
    Ok(ok(api.zone, "테스트 키인 결제가 완료되었습니다.", api.payment(&payment)))
}

/// A key-in whose charge Toss has not settled yet (ours; the platform has no such answer).
pub const PENDING: &str = "결제 결과를 확인하고 있습니다.";

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> MomoApi {
        MomoApi {
            keys: super::super::auth::MomoKeys::new(&[7; 32]).unwrap(),
            zone: chrono_tz::Asia::Seoul,
            merchant: None,
        }
    }

    fn message(body: &str) -> String {
        read(&api(), body.as_bytes()).unwrap_err().message.into_owned()
    }

    #[test]
    fn its_dto_is_read_as_jackson_reads_it_with_its_defaults() {
        let request = read(&api(), br#"{"meetingId":"12","unknown":1}"#).unwrap();
        assert_eq!(request.meeting_id, "12");
        assert_eq!(
            (
                request.card.number.as_str(),
                request.card.expiry_month.as_str(),
                request.card.expiry_year.as_str()
            ),
            (DEFAULT_CARD, "12", "25")
        );
        assert_eq!(request.card.identity_number, DEFAULT_BIRTH);
        let given = read(
            &api(),
            br#"{"meetingId":3,"cardNumber":"5555444433332222","cardExpiry":"07/29","cardCvc":"123","birth":"990101"}"#,
        )
        .unwrap();
        assert_eq!((given.card.expiry_month.as_str(), given.card.expiry_year.as_str()), ("07", "29"));
        assert_eq!(given.card.number, "5555444433332222");
        // The card number never reaches a log line through `Debug`.
        let shown = format!("{given:?}");
        assert!(!shown.contains("5555444433332222") && shown.contains("****2222"), "{shown}");
    }

    #[test]
    fn each_broken_constraint_is_its_message_joined_by_bars() {
        assert_eq!(message("{}"), text::MEETING_ID_REQUIRED);
        assert_eq!(
            message(
                r#"{"meetingId":1,"cardNumber":"4242","cardExpiry":"1225","cardCvc":"12","birth":"88-01"}"#
            ),
            [text::CARD_NUMBER, text::CARD_EXPIRY, text::CARD_CVC, text::BIRTH].join("||")
        );
        assert_eq!(message(r#"{"meetingId":1,"cardExpiry":"12/2"}"#), text::CARD_EXPIRY);
        assert_eq!(message(r#"{"meetingId":1,"cardExpiry":"1/225"}"#), text::CARD_EXPIRY);
        assert_eq!(message(r#"{"meetingId":1,"cardExpiry":"aé/12"}"#), text::CARD_EXPIRY);
        for unreadable in [
            "",
            "[]",
            "nope",
            r#"{"meetingId":"abc"}"#,
            r#"{"meetingId":1.5}"#,
            r#"{"meetingId":1,"birth":{}}"#,
        ] {
            assert_eq!(message(unreadable), text::BAD_INPUT, "{unreadable}");
        }
    }
}
