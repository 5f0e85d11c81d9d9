//! Errors of the payment aggregate.

use super::status::{PaymentAction, PaymentStatus, RefundStatus};
use crate::domain::ids::RefundId;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PaymentError {
    #[error("payment cannot {action} from {from}")]
    InvalidTransition { from: PaymentStatus, action: PaymentAction },
    /// A refund of nothing, of more than the balance, or in another currency.
    #[error("a refund must be more than 0 and at most the balance {balance}; asked for {requested}")]
    RefundAmountInvalid { requested: i64, balance: i64 },
    /// The refund is not this payment's pending one.
    #[error("refund {refund} is not the payment's pending refund")]
    NotThePendingRefund { refund: RefundId },
    /// The refund already has its outcome.
    #[error("refund {refund} is already {status}")]
    RefundSettled { refund: RefundId, status: RefundStatus },
}
