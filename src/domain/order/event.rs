//! Events an order emits; the application turns each into one outbox row.

use super::status::{FailureReason, FailureStage};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderEvent {
    /// The saga finished: paid, settled, the customer told (or told nothing, by policy).
    Completed,
    /// A step failed; compensation or an operator may follow.
    Failed { stage: FailureStage, reason: FailureReason },
    /// The order is off: compensated after a failure, or refunded.
    Cancelled { reason: String },
}

impl OrderEvent {
    /// The event type, which is also its routing key (docs/spec.md §6).
    pub fn event_type(&self) -> &'static str {
        match self {
            OrderEvent::Completed => "order.completed",
            OrderEvent::Failed { .. } => "order.failed",
            OrderEvent::Cancelled { .. } => "order.cancelled",
        }
    }
}
