//! Events a payment emits.

use crate::domain::ids::RefundId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentEvent {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        code: String,
    },
    Cancelled {
        reason: String,
    },
    /// One refund succeeded: `amount` of it; the payment's `refunded_amount` and `balance`
    /// after it.
    Refunded {
        refund_id: RefundId,
        amount: i64,
        refunded_amount: i64,
        balance: i64,
        /// The refund's reason, as recorded on it.
        reason: String,
        /// The inbound message that asked for it, if one did.
        causation_id: Option<String>,
    },
    RefundFailed {
        refund_id: RefundId,
        amount: i64,
        reason: String,
    },
}

impl PaymentEvent {
    /// The event type, which is also its routing key (docs/spec.md §6).
    pub fn event_type(&self) -> &'static str {
        match self {
            PaymentEvent::Approved { .. } => "payment.approved",
            PaymentEvent::Declined { .. } => "payment.declined",
            PaymentEvent::Cancelled { .. } => "payment.cancelled",
            PaymentEvent::Refunded { .. } => "payment.refunded",
            PaymentEvent::RefundFailed { .. } => "payment.refund_failed",
        }
    }
}
