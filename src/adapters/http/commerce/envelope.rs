//! The platform's answers: `{success, code, message, data}` (its `ApiResponse`), its error
//! codes and their Korean messages (its `ErrorCode`), and how our use cases' errors map to
//! them (docs/dialects.md).

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use super::schema::Answer;
use crate::application::AppError;

pub const SUCCESS_MESSAGE: &str = "요청이 정상 처리되었습니다.";

/// A success: `data` in the envelope.
pub fn ok(data: impl Serialize) -> HttpResponse {
    HttpResponse::Ok().json(Answer { success: true, code: "SUCCESS", message: SUCCESS_MESSAGE, data })
}

/// An error as the platform answers it: status, its code, a message, `data: null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommerceError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl CommerceError {
    pub fn coded(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        CommerceError { status, code, message: message.into() }
    }

    pub fn unauthorized() -> Self {
        Self::coded(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.")
    }

    pub fn forbidden() -> Self {
        Self::coded(StatusCode::FORBIDDEN, "FORBIDDEN", "접근 권한이 없습니다.")
    }

    /// Its validation failures: `BAD_REQUEST` with the first field's message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::coded(StatusCode::BAD_REQUEST, "BAD_REQUEST", message)
    }

    /// A body that is not the JSON asked for, or a path variable of the wrong type
    /// (`/api/orders/abc`): the platform answers 500 (docs/dialects.md).
    pub fn malformed() -> Self {
        Self::bad_request("잘못된 요청입니다.")
    }

    pub fn order_not_found() -> Self {
        Self::coded(StatusCode::NOT_FOUND, "ORDER_NOT_FOUND", "주문을 찾을 수 없습니다.")
    }

    /// A path the platform does not serve (the platform: 500 from its catch-all).
    pub fn not_found() -> Self {
        Self::coded(StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.")
    }

    /// A method a path does not serve (the platform: 500 from its catch-all).
    pub fn method_not_allowed() -> Self {
        Self::coded(StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "지원하지 않는 HTTP 메서드입니다.")
    }

    /// The database or a dependency is down: 503 where the platform answers 500.
    pub fn unavailable() -> Self {
        Self::coded(
            StatusCode::SERVICE_UNAVAILABLE,
            "SERVICE_UNAVAILABLE",
            "일시적으로 요청을 처리할 수 없습니다.",
        )
    }

    pub fn internal() -> Self {
        Self::coded(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_SERVER_ERROR",
            "서버 내부 오류가 발생했습니다.",
        )
    }

    pub fn response(&self) -> HttpResponse {
        crate::adapters::http::problem::error_builder(self.status).json(serde_json::json!({
            "success": false,
            "code": self.code,
            "message": self.message,
            "data": null,
        }))
    }
}

impl std::fmt::Display for CommerceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.status.as_u16(), self.code, self.message)
    }
}

impl ResponseError for CommerceError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        self.response()
    }
}

/// Our use cases' errors in the platform's words: what it has a code for keeps it; what it
/// would answer 500 for is ours, listed in docs/dialects.md.
impl From<AppError> for CommerceError {
    fn from(err: AppError) -> Self {
        match err {
            AppError::NotFound("order") => CommerceError::order_not_found(),
            AppError::NotFound(_) => CommerceError::not_found(),
            AppError::Validation { message, .. } | AppError::Unprocessable { message, .. } => {
                CommerceError::bad_request(message)
            }
            AppError::Forbidden { .. } => CommerceError::forbidden(),
            AppError::Conflict { message, .. } => CommerceError::coded(
                StatusCode::BAD_REQUEST,
                "INVALID_ORDER_STATE",
                format!("현재 주문 상태에서는 요청을 처리할 수 없습니다. {message}"),
            ),
            err if err.is_transient() => {
                tracing::warn!(error = %crate::application::error::Chain(&err), "commerce dialect: unavailable");
                CommerceError::unavailable()
            }
            err => {
                tracing::error!(error = %crate::application::error::Chain(&err), "commerce dialect: internal error");
                CommerceError::internal()
            }
        }
    }
}
