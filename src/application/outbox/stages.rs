//! What the pipeline (`pipeline.rs`) asks of the relay it runs for, and what it is
//! handed: the [`Stages`] (lanes, reads, records, the lease's verdict on sending, how a
//! verdict is counted), a batch read ([`Round`]) and the broker's verdicts on it, and a
//! batch as the pipeline carries it to its record ([`Batch`]).

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::report::{RelayError, RelayReport, Resend};
use crate::application::ports::{
    BatchToken, DeliveryFailure, EventPublisher, FastRecord, HeldLane, OutboxRecord, PublishOutcome,
    RepoError,
};
use crate::domain::outbox::FailureCode;

/// What the pipeline asks of the relay it runs for (`OutboxRelay`): its lanes, reads and
/// records, the lease's verdict on sending, and how a verdict is counted.
#[async_trait::async_trait]
pub(super) trait Stages: Send + Sync {
    /// `outbox.batch_size`.
    fn batch_size(&self) -> usize;
    fn now(&self) -> DateTime<Utc>;
    fn publisher(&self) -> Arc<dyn EventPublisher>;
    /// Whether the lease holds long enough for a send's verdicts.
    fn may_send(&self) -> bool;
    /// Counts a confirmed event.
    fn confirmed(&self, row: &OutboxRecord, now: DateTime<Utc>);
    /// What becomes of an event the broker did not take (a retry or a dead letter).
    fn failed(
        &self,
        row: &OutboxRecord,
        code: FailureCode,
        reason: &str,
        at: DateTime<Utc>,
        report: &mut RelayReport,
    ) -> DeliveryFailure;
    /// Counts `events` that reached the broker, or may have, and will be sent again
    /// (`outbox_resent_total{cause}`).
    fn resending(&self, cause: Resend, events: usize);
    /// Whether a commit woke the relay since this was last asked (taking the wake-up: a
    /// commit signals after it is visible, so a read that starts after asking sees it).
    fn woken(&self) -> bool;
    /// The lanes held now, renewing them when due.
    async fn held_lanes(&self) -> Result<Vec<HeldLane>, RepoError>;
    /// The next batch over `held`, past the batches read and not yet recorded (`unrecorded`).
    async fn read(&self, held: &[HeldLane], unrecorded: &[BatchToken]) -> Result<Option<Round>, RelayError>;
    /// Records finished batches (in read order): what they did, and the lanes fenced off.
    async fn record(&self, batches: Vec<Batch>) -> Result<(RelayReport, Vec<i16>), RelayError>;
}

/// A fast-path batch read and ready to send.
#[derive(Debug)]
pub(super) struct Round {
    /// Shared with the publisher while they are sent (no copy per send).
    pub(super) rows: Vec<Arc<OutboxRecord>>,
    /// Aggregates with an event still on the slow path: theirs are held back.
    pub(super) waiting: HashSet<Aggregate>,
    /// What the store needs to read past the batch and to record it.
    pub(super) token: BatchToken,
    /// Whether the lanes may hold more that committed before the batch was read.
    pub(super) more: bool,
}

/// The broker's verdicts on a group of messages, one per message in order: a publisher
/// that returned too few leaves the rest unconfirmed (`CONFIRM_TIMEOUT`). Both paths read
/// verdicts through this.
pub(super) fn verdicts_for(outcomes: Vec<PublishOutcome>) -> impl Iterator<Item = PublishOutcome> {
    outcomes.into_iter().chain(std::iter::repeat_with(|| PublishOutcome::Failed {
        code: FailureCode::ConfirmTimeout,
        reason: "no confirm reported".into(),
    }))
}

/// An aggregate: `(aggregate_type, aggregate_id)`.
pub(super) type Aggregate = (String, String);

pub(super) fn aggregate_of(row: &OutboxRecord) -> Aggregate {
    (row.aggregate_type.clone(), row.aggregate_id.clone())
}

/// A batch read and not yet recorded, with what became of its events so far.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) round: Round,
    /// Its events still without a verdict (sent or waiting to be).
    pub(super) open: usize,
    /// Its events handed to the broker.
    pub(super) sent: usize,
    /// When it was read: its failures' attempt time (their backoff runs from it).
    pub(super) read_at: DateTime<Utc>,
    /// When the broker's last verdict on it arrived: its `publishedAt`.
    pub(super) confirmed_at: DateTime<Utc>,
    pub(super) report: RelayReport,
    pub(super) failures: Vec<DeliveryFailure>,
    pub(super) held_back: Vec<i64>,
}

impl Batch {
    /// Its events the broker has, or may have: sent, and not refused. Abandoned unrecorded,
    /// these are the ones sent twice.
    pub(super) fn reached_broker(&self) -> usize {
        self.sent - self.failures.len()
    }

    /// What recording `batches` writes (`now`: the attempt time if there is no batch).
    pub(super) fn record(batches: &[Batch], now: DateTime<Utc>) -> FastRecord {
        FastRecord {
            batches: batches.iter().map(|b| b.round.token.clone()).collect(),
            failures: batches.iter().flat_map(|b| b.failures.iter().cloned()).collect(),
            held_back: batches.iter().flat_map(|b| b.held_back.iter().copied()).collect(),
            attempted_at: batches.first().map_or(now, |b| b.read_at),
        }
    }
}
