//! The error every use case returns, shaped so the HTTP and AMQP adapters can map it to a
//! status code / ack decision without knowing the cause.

use std::error::Error;
use std::fmt;

use crate::application::ports::{Cause, RepoError};
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
    /// The request is well-formed but cannot be accepted as it is (e.g. an idempotency key
    /// reused with another body); `code` is the stable problem code.
    #[error("{message}")]
    Unprocessable { code: &'static str, message: String },
    /// The resource is not in a state that allows this; `code` is the stable problem code.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// A dependency (database, provider) is unavailable; retrying later may succeed.
    #[error("unavailable")]
    Unavailable(#[source] Cause),
    /// A bug or broken invariant; the cause is logged, never shown.
    #[error("internal error")]
    Internal(#[source] Cause),
}

/// A domain transition refused where the use case had checked it could not be (a bug):
/// internal, its cause logged, never shown.
pub(crate) fn broken_invariant(err: impl std::fmt::Display) -> AppError {
    AppError::internal(format!("invariant broken: {err}"))
}

/// The order is being changed by another runner right now (try again shortly): the one code
/// every use case answers it with.
pub const ORDER_BUSY: &str = "ORDER_BUSY";

impl AppError {
    /// `Conflict` `ORDER_BUSY`: another runner holds or just changed the order.
    pub fn order_busy() -> Self {
        AppError::Conflict {
            code: ORDER_BUSY,
            message: "the order is being changed right now; retry shortly".into(),
        }
    }

    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        AppError::Validation { field: field.into(), message: message.into() }
    }

    /// `Unavailable` for a cause told in words.
    pub fn unavailable(text: impl Into<String>) -> Self {
        AppError::Unavailable(Cause::msg(text))
    }

    /// `Internal` for a cause told in words.
    pub fn internal(text: impl Into<String>) -> Self {
        AppError::Internal(Cause::msg(text))
    }

    /// Whether a retry of the same request could succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, AppError::Unavailable(_))
    }
}

impl From<RepoError> for AppError {
    fn from(err: RepoError) -> Self {
        match err {
            RepoError::Conflict => AppError::Conflict {
                code: "CONCURRENT_MODIFICATION",
                message: "the resource was changed concurrently; retry".into(),
            },
            err @ RepoError::Unavailable(_) => AppError::Unavailable(Cause::new(err)),
            err @ RepoError::Corrupt(_) => AppError::Internal(Cause::new(err)),
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

/// An error with its whole `source()` chain, `: `-separated — how the edges (HTTP, AMQP,
/// worker loops, CLI) log a failure, once.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(err) = next {
            write!(f, ": {err}")?;
            next = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_failure_keeps_its_cause_up_to_the_edge() {
        let err = AppError::from(RepoError::unavailable("connection refused"));
        assert!(err.is_transient());
        assert_eq!(Chain(&err).to_string(), "unavailable: database unavailable: connection refused");
        let err = AppError::from(RepoError::corrupt("orders.status = \"NOPE\""));
        assert_eq!(Chain(&err).to_string(), "internal error: corrupt row: orders.status = \"NOPE\"");
    }
}
