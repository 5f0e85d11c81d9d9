//! The broker side of the outbox: where the relay sends events.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::domain::outbox::FailureCode;

use super::error::Cause;
use super::outbox_store::OutboxRecord;

/// Why the broker cannot be published to now: the adapter's error, kept whole (its chain
/// names the cause, and carries no secret: a broker URL's password is never in it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("broker unavailable")]
pub struct BrokerUnavailable(#[source] pub Cause);

/// The broker's verdict on one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The broker confirmed it (or it was returned unroutable and its type allows that).
    Confirmed,
    /// Not confirmed: it must be retried.
    Failed { code: FailureCode, reason: String },
}

/// A batch handed to the broker whose verdicts are still to come: resolves to one outcome
/// per message, as [`EventPublisher::publish`] returns them.
pub type PendingVerdicts = Pin<Box<dyn Future<Output = Vec<PublishOutcome>> + Send>>;

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
    ///
    /// The rows are shared, not copied: the relay keeps them for the verdicts.
    async fn publish(&self, batch: &[Arc<OutboxRecord>]) -> Vec<PublishOutcome>;

    /// Hands a batch to the broker and returns once every message of it is sent, with
    /// the verdicts still to come: the relay sends its next batch while this one's confirms
    /// are outstanding, so the broker is never left idle waiting for a batch's last
    /// confirm (a sliding window across batches, as a bare confirming publisher keeps).
    ///
    /// The [`PendingVerdicts`] MUST resolve as [`Self::publish`] would return, bounded by the
    /// same confirm timeout, whether or not further batches are sent meanwhile. Messages
    /// sent by a later call MUST reach the broker after this call's. The default sends and
    /// waits for the verdicts before it returns (no overlap).
    async fn send(&self, batch: &[Arc<OutboxRecord>]) -> PendingVerdicts {
        let outcomes = self.publish(batch).await;
        Box::pin(std::future::ready(outcomes))
    }
}
