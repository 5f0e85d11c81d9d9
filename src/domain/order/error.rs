//! Errors of the order aggregate.

use super::status::{OrderAction, OrderStatus};
use crate::domain::money::MoneyError;

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

impl OrderError {
    pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid { field: field.into(), message: message.into() }
    }
}
