//! The transactional outbox's storage: events appended with their state change, the relay's
//! lanes and progress, failures and operator actions.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::ids::EventId;
use crate::domain::outbox::{FailureCode, FailureOutcome, OutboxStatus};

use super::audit_log::AuditRecord;
use super::error::RepoError;

/// An event to append to the outbox in the same transaction as its state change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxEvent {
    pub event_id: EventId,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub routing_key: String,
    /// The envelope JSON, published as the message body.
    pub payload: String,
    pub correlation_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// One outbox row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxRecord {
    pub id: i64,
    pub event_id: EventId,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub routing_key: String,
    pub payload: String,
    pub correlation_id: Option<String>,
    pub status: OutboxStatus,
    pub retry_count: i32,
    pub failure_code: Option<FailureCode>,
    pub failure_reason: Option<String>,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_attempt_at: Option<DateTime<Utc>>,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub published_at: Option<DateTime<Utc>>,
    pub dead_lettered_at: Option<DateTime<Utc>>,
    pub version: i64,
    /// The aggregate's lane (docs/spec.md §6), fixed at insert.
    pub lane: i16,
    /// The W3C `traceparent` of the request that wrote it, when traces are on.
    pub traceparent: Option<String>,
}

/// What the relay decided for a row whose publish failed.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryFailure {
    pub id: i64,
    pub outcome: FailureOutcome,
    pub code: FailureCode,
    pub reason: String,
}

/// Listing filter for operators, newest first, keyset-paged on `id`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxFilter {
    pub status: Option<OutboxStatus>,
    pub event_type: Option<String>,
    pub failure_code: Option<FailureCode>,
    /// Only rows dead-lettered before this instant.
    pub dead_lettered_before: Option<DateTime<Utc>>,
    pub before_id: Option<i64>,
    pub limit: u32,
}

/// The outbox at a glance, for operators and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxStats {
    /// Rows per status; every status present, zero included.
    pub by_status: Vec<(OutboxStatus, i64)>,
    pub oldest_ready_created_at: Option<DateTime<Utc>>,
    pub oldest_claim_at: Option<DateTime<Utc>>,
    /// Dead letters per event type.
    pub dead_letters_by_type: Vec<(String, i64)>,
    /// Aggregates whose later events wait behind a dead letter.
    pub blocked_aggregates: i64,
    /// Per lane (every lane that exists), the `created_at` of its oldest event not yet
    /// published: the relay's lag lane by lane.
    pub oldest_ready_by_lane: Vec<(i16, Option<DateTime<Utc>>)>,
}

/// A lane a relay holds, with the fencing epoch of its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HeldLane {
    pub lane: i16,
    /// Bumped each time the lane changes hands: progress is recorded only under it.
    pub epoch: i64,
}

/// What a store needs to record a fast-path batch it handed out (which lanes it took, up to
/// where, and where each lane stands once it is done). Opaque to the relay: the relay keeps
/// it while the batch is unrecorded — handing it back to the next reads, which then read
/// past it — and gives it back to record the batch. Only the store that made it reads it.
#[derive(Clone)]
pub struct BatchToken(std::sync::Arc<dyn std::any::Any + Send + Sync>);

impl BatchToken {
    /// Wraps a store's own description of a batch.
    pub fn new<T: std::any::Any + Send + Sync>(inner: T) -> Self {
        BatchToken(std::sync::Arc::new(inner))
    }

    /// The store's description, if this token is of type `T` (`None`: another store's).
    pub fn get<T: std::any::Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for BatchToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BatchToken(..)")
    }
}

/// The next fast-path events, which of their aggregates wait on the slow path, and the
/// token that records them.
#[derive(Debug, Clone)]
pub struct FastBatch {
    /// Ordered by lane, then id.
    pub rows: Vec<OutboxRecord>,
    /// `(aggregate_type, aggregate_id)` of the rows whose aggregate has an event on the slow
    /// path not yet delivered or discarded: their events must wait.
    pub waiting: Vec<(String, String)>,
    pub token: BatchToken,
    /// Whether the lanes may hold events past this batch that committed before it was read
    /// (a lane not read afresh by this read, or more than the batch took). `false`: what
    /// the batch left is only what commits later, and a commit wakes the relay, so a
    /// trickle's relay need not read again until it is woken.
    pub more: bool,
}

/// What fast-path batches came to, recorded in one transaction.
#[derive(Debug, Clone)]
pub struct FastRecord {
    /// The batches' tokens, in the order they were read.
    pub batches: Vec<BatchToken>,
    /// Events the broker did not take: to the slow path, `RETRY_WAIT` or `DEAD_LETTER`.
    pub failures: Vec<DeliveryFailure>,
    /// Events not sent because an earlier event of their aggregate is on the slow path:
    /// to the slow path, `READY`, behind it.
    pub held_back: Vec<i64>,
    /// When the batches were sent: the failures' `last_attempt_at` (their backoff runs from it).
    pub attempted_at: DateTime<Utc>,
}

/// The outbox's storage as the relay uses it: its lanes, the fast path's batches and
/// progress, the slow path's claims and marks. Every state change is a conditional update
/// whose `WHERE` clause is built from [`crate::domain::outbox::OutboxAction::from_statuses`].
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait RelayStore: Send + Sync {
    /// Claims up to `limit` due rows for `worker` (status `READY`, or `RETRY_WAIT` whose
    /// `next_attempt_at` has passed), oldest first, and only the head row of each
    /// aggregate (no earlier row of it still unpublished or dead-lettered), moving them to
    /// `PROCESSING` with the lease `lease_until`. Two workers never claim the same row.
    /// Only rows of `lanes` whose lease `worker` still holds at `now` (fencing: a worker
    /// whose lane was taken over claims nothing there).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing is claimed).
    async fn claim(
        &self,
        worker: &str,
        lanes: &[i16],
        limit: u32,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<OutboxRecord>, RepoError>;

    /// Heartbeats `worker` until `lease_until`, makes sure lanes `0..lanes` exist, renews
    /// the lanes it holds, gives back those above its fair share (`ceil(lanes / live
    /// workers)`, its highest first) and takes free or expired ones up to it (each take
    /// bumps the lane's fencing epoch). Returns the lanes it holds afterwards, ascending.
    /// Two workers never hold one lane: a lane is taken only if free or expired, atomically.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing changed).
    async fn lease_lanes(
        &self,
        worker: &str,
        lanes: u16,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<HeldLane>, RepoError>;

    /// The next fast-path batch of `worker` over the lanes it holds: at most `limit`
    /// events, shared evenly among the lanes that have some (a lane with fewer than its
    /// share leaves the rest to the others), each lane's next ones in id order past the batches
    /// in `unrecorded` (handed out, not yet recorded: read ahead). Where a lane stands
    /// belongs to the store: on PostgreSQL the difference between the lane's last done
    /// snapshot and a newer one, so that an event whose transaction commits late is never
    /// skipped; on SQLite (one writer at a time) the ids past its mark. A lane starts from
    /// its last recorded position when `worker` reads it first, or after its epoch changed.
    /// An event moved to the slow path since its lane was read is simply absent. `None`:
    /// nothing to send now.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (the next read starts again from
    /// where the lanes stood).
    async fn next_batch(
        &self,
        worker: &str,
        held: &[HeldLane],
        unrecorded: &[BatchToken],
        limit: u32,
    ) -> Result<Option<FastBatch>, RepoError>;

    /// Records fast-path batches in one transaction, fenced: only for the lanes `worker`
    /// still holds under the epoch it read them with — a progress row per lane
    /// (insert-only), the failures and held-back events moved to the slow path. Returns the
    /// lanes fenced off, for which nothing is written (another worker owns them now and
    /// sends their events again: duplicates, never a loss).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing recorded).
    async fn record_batches(
        &self,
        worker: &str,
        record: &FastRecord,
        now: DateTime<Utc>,
    ) -> Result<Vec<i16>, RepoError>;

    /// Gives back every lane `worker` holds and ends its heartbeat (a graceful stop), so
    /// that other workers take them at their next renewal instead of after the lease.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn release_lanes(&self, worker: &str) -> Result<(), RepoError>;

    /// Marks rows `PUBLISHED`, only those still `PROCESSING` under `worker`'s claim; returns
    /// how many it marked (a row whose lease was recovered by another worker is skipped).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn mark_published(&self, ids: &[i64], worker: &str, now: DateTime<Utc>) -> Result<u64, RepoError>;

    /// When the earliest `RETRY_WAIT` row falls due, if there is one (whoever scheduled it):
    /// an idle relay sleeps no longer than that.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn next_retry_at(&self) -> Result<Option<DateTime<Utc>>, RepoError>;

    /// Moves failed rows to `RETRY_WAIT` or `DEAD_LETTER` as each [`DeliveryFailure`] says,
    /// only those still `PROCESSING` under `worker`'s claim; returns how many it moved.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn mark_failed(
        &self,
        failures: &[DeliveryFailure],
        worker: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, RepoError>;
}

/// The outbox's upkeep: claims of dead workers recovered, old events removed.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait OutboxUpkeep: Send + Sync {
    /// Returns `PROCESSING` rows whose lease ended before `now` to `RETRY_WAIT`, due at
    /// once; returns how many. Wakes the relay when any moved (they are due now).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn recover_expired(&self, now: DateTime<Utc>) -> Result<u64, RepoError>;

    /// Deletes at most `limit` `PUBLISHED` rows published before `published_before` and
    /// `DEAD_LETTER`/`DISCARDED` rows dead-lettered before `dead_before`; returns how many.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn purge(
        &self,
        published_before: DateTime<Utc>,
        dead_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, RepoError>;

    /// Whether the outbox holds another server's history: a progress row or a fast-path
    /// event whose transaction id this server has not reached yet, which only a restore
    /// from a logical dump (`pg_dump`) brings (ids never go back on one server, crashes
    /// included). Relayed as it is, its snapshots would count this server's new events as
    /// sent. Always `false` on SQLite (no transaction ids).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn restored_history(&self) -> Result<bool, RepoError>;

    /// Makes a restored history this server's own, in one transaction that holds every
    /// lane against the relays: the fast-path events the restored progress log covers
    /// become slow-path `PUBLISHED` rows (the old server sent them), the others are stamped
    /// with this transaction's id (they go out, in their order), and the progress log is
    /// emptied; `audit` is written in the same transaction, its `detail` saying what was kept
    /// and what goes out. Nothing happens (nothing audited) when [`Self::restored_history`]
    /// is `false`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing changed).
    async fn rebase_restored(&self, audit: AuditRecord) -> Result<RestoredRebase, RepoError>;
}

/// What [`OutboxUpkeep::rebase_restored`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RestoredRebase {
    /// Whether the history was another server's (else nothing changed).
    pub restored: bool,
    /// Events the restored progress log covered, kept as sent.
    pub kept_sent: u64,
    /// Events it did not cover, to be sent.
    pub to_send: u64,
}

/// What operators read of the outbox and repair in it (the admin API, `app outbox`, the
/// order view).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait OutboxOperations: Send + Sync {
    /// Counts for operators and metrics.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn stats(&self) -> Result<OutboxStats, RepoError>;

    /// One row.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn get(&self, id: i64) -> Result<Option<OutboxRecord>, RepoError>;

    /// Rows matching the filter, newest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn list(&self, filter: &OutboxFilter) -> Result<Vec<OutboxRecord>, RepoError>;

    /// One aggregate's rows, oldest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn for_aggregate(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Vec<OutboxRecord>, RepoError>;

    /// Moves rows from `DEAD_LETTER` to `READY` (retry count reset) or `DISCARDED`
    /// (`discard = true`), writing `audit` (one row per moved id) in the same transaction.
    /// Only rows still `DEAD_LETTER` move; returns the ids moved. Wakes the relay after the
    /// commit when any moved (docs/spec.md §6: republished rows, and the later events of an
    /// aggregate a discard unblocked, are publishable now).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn resolve_dead_letters(
        &self,
        ids: &[i64],
        discard: bool,
        now: DateTime<Utc>,
        audit: AuditRecord,
    ) -> Result<Vec<i64>, RepoError>;
}

/// The whole of the outbox's storage: what one adapter implements. The composition root
/// hands each user the narrower port it needs.
pub trait OutboxStore: RelayStore + OutboxUpkeep + OutboxOperations {}

impl<T: RelayStore + OutboxUpkeep + OutboxOperations + ?Sized> OutboxStore for T {}
