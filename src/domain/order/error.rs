//! Errors of the order aggregate.

use super::status::{OrderAction, OrderStatus};
use crate::domain::money::MoneyError;
use crate::domain::text::TextError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// The action is not allowed from the current status.
    #[error("order cannot {action} from {from}")]
    InvalidTransition { from: OrderStatus, action: OrderAction },
    /// An input field is invalid; `field` is its JSON path as the client sent it.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    #[error("{field}: {source}")]
    Money { field: String, source: MoneyError },
}

impl From<TextError> for OrderError {
    fn from(err: TextError) -> Self {
        OrderError::Invalid { field: err.field().to_owned(), message: err.message() }
    }
}

impl OrderError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), message: message.into() }
    }
}
