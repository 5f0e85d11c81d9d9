//! Errors of the payment aggregate.

use super::status::{PaymentAction, PaymentStatus};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    #[error("payment cannot {action} from {from}")]
    InvalidTransition { from: PaymentStatus, action: PaymentAction },
}
