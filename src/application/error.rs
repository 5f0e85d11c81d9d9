//! The error every use case returns, shaped so the HTTP and AMQP adapters can map it to a
//! status code / ack decision without knowing the cause.

use crate::application::ports::RepoError;
use crate::domain::order::OrderError;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// Input failed validation; `field` names the offending JSON path.
    #[error("{field}: {message}")]
    Validation { field: String, message: String },
    /// No such resource — or one the caller may not see (never reveal which).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The caller may not do this; `code` is the stable problem code.
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// The resource is not in a state that allows this; `code` is the stable problem code.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A dependency (database, provider) is unavailable; retrying later may succeed.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// A bug or broken invariant; the cause is logged, never shown.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::Validation { field: field.into(), message: message.into() }
    }

    /// Whether a retry of the same request could succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, AppError::Unavailable(_))
    }
}

impl From<RepoError> for AppError {
    fn from(err: RepoError) -> Self {
        match err {
            RepoError::NotFound => AppError::NotFound("resource"),
            RepoError::Conflict => AppError::Conflict {
                code: "CONCURRENT_MODIFICATION",
                message: "the resource was changed concurrently; retry".into(),
            },
            RepoError::Unavailable(cause) => AppError::Unavailable(cause),
            RepoError::Corrupt(cause) => AppError::Internal(cause),
        }
    }
}

impl From<OrderError> for AppError {
    fn from(err: OrderError) -> Self {
        match err {
            OrderError::Invalid { field, message } => AppError::Validation { field, message },
            OrderError::Money { field, source } => {
                AppError::Validation { field, message: source.to_string() }
            }
            OrderError::InvalidTransition { .. } => {
                AppError::Conflict { code: "INVALID_ORDER_STATE", message: err.to_string() }
            }
        }
    }
}
