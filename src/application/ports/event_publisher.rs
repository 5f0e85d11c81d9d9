//! The broker side of the outbox: where the relay sends events.

use async_trait::async_trait;

use crate::domain::outbox::FailureCode;

use super::outbox_store::OutboxRecord;

/// Why the broker cannot be published to now. Its text names the cause and carries no
/// secret (a broker URL's password is never in it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker unavailable: {0}")]
pub struct BrokerUnavailable(pub String);

/// The broker's verdict on one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker confirmed it (or it was returned unroutable and its type allows that).
    Confirmed,
    /// Not confirmed: it must be retried.
    Failed { code: FailureCode, reason: String },
}

/// The broker side of the outbox.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Makes sure the broker can be published to now, connecting if needed. The relay
    /// claims nothing while this fails, so an outage spends no retry budget.
    ///
    /// # Errors
    /// MUST return [`BrokerUnavailable`] when no message could be published now (no
    /// connection, no channel in confirm mode); MUST NOT block longer than its connect
    /// timeout.
    async fn ready(&self) -> Result<(), BrokerUnavailable>;

    /// Publishes a batch and waits, bounded by its confirm timeout, for the broker's
    /// verdict on each message.
    ///
    /// MUST return exactly one outcome per input record, in input order; `Confirmed` only
    /// for a message the broker confirmed (or returned unroutable when its type allows
    /// that), `Failed` with a [`FailureCode`] for every other (nack, return, timeout,
    /// connection lost, broker unreachable). MUST NOT panic on broker failure. Messages
    /// of one aggregate MUST reach the broker in input order.
    async fn publish(&self, batch: &[OutboxRecord]) -> Vec<PublishOutcome>;
}
