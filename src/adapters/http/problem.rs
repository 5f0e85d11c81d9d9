//! Errors as RFC 7807 `application/problem+json`, each with a stable `code`.
//!
//! 5xx bodies say nothing internal; their full cause is logged with the correlation id.

use actix_web::http::StatusCode;
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::application::AppError;
use crate::application::error::Chain;

/// The one error type of every HTTP handler.
#[derive(Debug, thiserror::Error)]
#[error("{status} {code}: {detail}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub detail: String,
    /// The offending field or header, for validation errors.
    pub field: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Problem {
    /// Always `about:blank`: `code` is the machine-readable type.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub title: String,
    pub status: u16,
    pub detail: String,
    /// Stable error code, e.g. `VALIDATION_FAILED`, `IDEMPOTENCY_KEY_REUSED`.
    pub code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, detail: impl Into<String>) -> Self {
        ApiError { status, code, detail: detail.into(), field: None }
    }

    pub fn field(status: StatusCode, field: impl Into<String>, detail: impl Into<String>) -> Self {
        let field = field.into();
        let detail = format!("{field}: {}", detail.into());
        ApiError { status, code: "VALIDATION_FAILED", detail, field: Some(field) }
    }

    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UNAUTHENTICATED", detail)
    }

    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "FORBIDDEN", detail)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", format!("{what} not found"))
    }

    pub fn problem(&self) -> Problem {
        Problem {
            kind: "about:blank",
            title: self.status.canonical_reason().unwrap_or("Error").to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            code: self.code,
            field: self.field.clone(),
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.status
    }

    fn error_response(&self) -> HttpResponse {
        error_builder(self.status).content_type("application/problem+json").json(self.problem())
    }
}

/// An error answer of `status` with the headers every API here gives it, native or dialect:
/// `WWW-Authenticate: Bearer` on a 401 (RFC 6750), `Retry-After: 1` on a 503.
pub fn error_builder(status: StatusCode) -> actix_web::HttpResponseBuilder {
    let mut response = HttpResponse::build(status);
    if status == StatusCode::UNAUTHORIZED {
        response.insert_header(("WWW-Authenticate", "Bearer"));
    }
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response.insert_header(("Retry-After", "1"));
    }
    response
}

impl From<AppError> for ApiError {
    fn from(err: AppError) -> Self {
        match err {
            AppError::Validation { field, message } => {
                ApiError::field(StatusCode::UNPROCESSABLE_ENTITY, field, message)
            }
            AppError::NotFound(what) => ApiError::not_found(what),
            AppError::Forbidden { code, message } => ApiError::new(StatusCode::FORBIDDEN, code, message),
            AppError::Conflict { code, message } => ApiError::new(StatusCode::CONFLICT, code, message),
            AppError::Unprocessable { code, message } => {
                ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
            }
            err @ AppError::Unavailable(_) => {
                tracing::error!(error = %Chain(&err), "dependency unavailable");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "SERVICE_UNAVAILABLE",
                    "a dependency is unavailable; retry later",
                )
            }
            err @ AppError::Internal(_) => {
                tracing::error!(error = %Chain(&err), "internal error");
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL_ERROR", "internal error")
            }
        }
    }
}
