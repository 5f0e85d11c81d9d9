//! The outbox relay: publishes committed events, in each aggregate's order, without
//! writing a row per event (docs/relay-design.md).
//!
//! - **Lanes.** The relay publishes only the lanes it leases (docs/spec.md §6): it renews
//!   them every `renew_every`, holds its fair share as workers come and go, sends nothing
//!   once its local view of the lease is about to run out (a paused worker stops before
//!   another may start), and gives its lanes back when it stops.
//! - **Fast path.** Each lane's events are read as snapshot differences (a batch), sent and
//!   confirmed through the pipeline (`super::pipeline`: per-aggregate chains, batches read
//!   ahead and recorded in order), and recorded as one insert-only progress row per lane and
//!   batch, fenced by the lane's epoch: a worker that lost a lane records nothing there and
//!   its next owner sends the batch again (duplicates, never a loss).
//! - **Slow path.** Failed events, and those held back behind them, are rows with a status:
//!   claimed (a lease per row), published and marked in two short transactions, retried
//!   with backoff and jitter, dead-lettered past `max_retries`.
//!
//! No transaction is open while waiting for the broker. Nothing is read while the broker is
//! unreachable, so an outage spends no retry budget.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, Utc};
use futures_util::FutureExt;
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use super::pipeline::{Batch, Ended, Pipeline, Reads, Round, Stages, verdicts_for};
use super::report::{RelayError, RelayReport};
use crate::application::error::Chain;
use crate::application::health::LoopProgress;

/// The relay's name in the worker's readiness.
const RELAY_LOOP: &str = "outbox relay";
use crate::application::meter::Meter;
use crate::application::ports::{
    BatchToken, Clock, DeliveryFailure, EventPublisher, FastBatch, HeldLane, OutboxRecord, PublishOutcome,
    RelayStore, RepoError,
};
use crate::domain::outbox::{FailureCode, FailureOutcome, RetrySchedule};

#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Stored in `claimed_by` and as the lanes' owner; unique per relay.
    pub worker_id: String,
    /// `outbox.lanes`.
    pub lanes: u16,
    pub batch_size: u32,
    /// How long a claim holds (`outbox.processing_timeout`).
    pub lease: Duration,
    /// Idle polling interval: the safety net behind wake-ups, never a cap on throughput.
    pub poll_interval: StdDuration,
    /// The longest a retry that came due waits while the relay is idle.
    pub retry_poll_interval: StdDuration,
    /// How long a wake-up waits for the commits close behind it before the drain it starts
    /// (`outbox.trickle_wait`): at a trickle, fewer and fuller reads.
    pub trickle_wait: StdDuration,
    pub schedule: RetrySchedule,
    /// The longest the broker may take over a send (its confirm timeout): events are sent
    /// only while the lease holds for at least this much longer, so a worker that lost its
    /// lease mid-drain (paused, starved) stops before another may start (docs/spec.md §6).
    pub send_margin: StdDuration,
}

/// The lanes a process's relay holds, for its cross-process wake-ups: a commit's
/// notification names the lanes of its events, and a worker that holds none of them stays
/// asleep — with several workers, each commit wakes the one that owns its lanes, not all.
/// Until the relay has leased lanes, and for a notification that names none (an operator's
/// action), every notification wakes it.
#[derive(Debug, Default)]
pub struct LaneInterest {
    lanes: std::sync::Mutex<Option<Vec<i16>>>,
}

impl LaneInterest {
    fn set(&self, held: &[HeldLane]) {
        let mut lanes: Vec<i16> = held.iter().map(|h| h.lane).collect();
        lanes.sort_unstable();
        // A poisoned lock holds a plain list: keep using it.
        *self.lanes.lock().unwrap_or_else(|e| e.into_inner()) = Some(lanes);
    }

    /// Whether a commit whose events are on `lanes` should wake this relay (`lanes` empty:
    /// not said, so yes).
    pub fn wants(&self, lanes: &[i16]) -> bool {
        match &*self.lanes.lock().unwrap_or_else(|e| e.into_inner()) {
            None => true,
            Some(_) if lanes.is_empty() => true,
            Some(held) => lanes.iter().any(|l| held.binary_search(l).is_ok()),
        }
    }
}

pub struct OutboxRelay {
    store: Arc<dyn RelayStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    settings: RelaySettings,
    wake: Arc<Notify>,
    interest: Arc<LaneInterest>,
    meter: Meter,
    held: Mutex<HeldLanes>,
    /// Past this the lanes' lease may have lapsed: nothing is sent or claimed until it is
    /// renewed. Apart from `held`, so that it is read without waiting for a renewal under
    /// way (the pipeline checks it before each send while its read may be renewing).
    lease_end: std::sync::Mutex<Option<Instant>>,
    /// When the next renewal of the lanes is due between drains (`None`: now), for the idle
    /// loop's sleep.
    renew_due: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Where each round's success or failure is reported (the worker's readiness).
    progress: Option<Arc<LoopProgress>>,
}

/// The lanes this relay leases, as of its last renewal.
#[derive(Debug, Default)]
struct HeldLanes {
    lanes: Vec<HeldLane>,
    /// When the last renewal started (`None`: never renewed, or given back since).
    renewed_at: Option<tokio::time::Instant>,
    /// Whether lanes are changing hands: the relay joined lately, or its last renewal took
    /// or gave back lanes.
    settling: bool,
    /// When the relay first held a lease (`None`: not yet, or given back since).
    joined: Option<tokio::time::Instant>,
}

/// How often an idle relay asks the store for the next retry due in any lane (its own
/// failures' retries it knows from its reports): at a trickle a relay goes idle hundreds of
/// times a second, and one statement each time would cost more than the events.
const RETRY_READ_EVERY: StdDuration = StdDuration::from_millis(250);

/// How often a relay renews its lanes: often enough to rebalance within seconds as workers
/// come and go, and at least three times per lease.
fn renew_every(lease: Duration) -> StdDuration {
    (lease.to_std().unwrap_or_default() / 3).min(StdDuration::from_secs(5))
}

/// How often a relay renews between drains while lanes change hands (it joined lately, or
/// its last renewal took or gave back lanes): workers started together, or one joining,
/// share the lanes within a fraction of a second of one giving lanes back, rather than a
/// renewal interval later. Only between drains, when nothing read is unrecorded: a lane
/// given back then has no batch its next owner would send again. Within a drain a relay
/// renews every renewal interval, as ever.
const SETTLING_RENEW_EVERY: StdDuration = StdDuration::from_millis(100);

/// How long a relay counts as joining: a renewal interval of the workers already there
/// (they see it then, and give lanes back), and a second for their statements.
fn joining(lease: Duration) -> StdDuration {
    renew_every(lease) + StdDuration::from_secs(1)
}

/// The time from one renewal to the next: [`SETTLING_RENEW_EVERY`] while `settling`.
fn renew_interval(lease: Duration, settling: bool) -> StdDuration {
    let every = renew_every(lease);
    if settling { every.min(SETTLING_RENEW_EVERY) } else { every }
}

fn failure_label(code: FailureCode) -> &'static str {
    code.as_str()
}

impl OutboxRelay {
    pub fn new(
        store: Arc<dyn RelayStore>,
        publisher: Arc<dyn EventPublisher>,
        clock: Arc<dyn Clock>,
        settings: RelaySettings,
        wake: Arc<Notify>,
    ) -> Self {
        OutboxRelay {
            store,
            publisher,
            clock,
            settings,
            wake,
            interest: Arc::default(),
            meter: Meter::default(),
            held: Mutex::default(),
            lease_end: std::sync::Mutex::default(),
            renew_due: std::sync::Mutex::default(),
            progress: None,
        }
    }

    /// Reports each round to `progress` (a worker whose relay cannot make progress is not
    /// ready).
    pub fn with_progress(mut self, progress: Arc<LoopProgress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Records this relay's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    pub fn worker_id(&self) -> &str {
        &self.settings.worker_id
    }

    /// How often this relay renews its lanes once they have settled.
    pub fn renewal_interval(&self) -> StdDuration {
        renew_every(self.settings.lease)
    }

    /// The lanes this relay holds, kept current for the wake-up listener.
    pub fn interest(&self) -> Arc<LaneInterest> {
        self.interest.clone()
    }

    /// The lanes this relay may claim from now, renewing the lease when due: between
    /// drains, when nothing read is unrecorded (every [`SETTLING_RENEW_EVERY`] while lanes
    /// change hands). A failed renewal keeps the lanes only while the previous lease surely
    /// holds.
    ///
    /// # Errors
    /// The renewal failed and the previous lease may have lapsed.
    pub async fn lanes(&self) -> Result<Vec<HeldLane>, RepoError> {
        self.renew_when_due(true).await
    }

    /// The lanes, renewed when due; `between_drains`: nothing read is unrecorded, so lanes
    /// may change hands at the settling pace.
    async fn renew_when_due(&self, between_drains: bool) -> Result<Vec<HeldLane>, RepoError> {
        let mut held = self.held.lock().await;
        let started = Instant::now();
        let at = tokio::time::Instant::now();
        let every = renew_interval(self.settings.lease, between_drains && held.settling);
        if held.renewed_at.is_none_or(|renewed| at >= renewed + every) {
            let now = self.clock.now();
            match self
                .store
                .lease_lanes(&self.settings.worker_id, self.settings.lanes, now, now + self.settings.lease)
                .await
            {
                Ok(lanes) => {
                    let changed = lanes != held.lanes;
                    if changed {
                        let ids: Vec<i16> = lanes.iter().map(|h| h.lane).collect();
                        tracing::info!(worker = %self.settings.worker_id, lanes = ?ids, "outbox lanes held");
                    }
                    let joined = held.joined.unwrap_or(at);
                    let settling = changed || at.duration_since(joined) < joining(self.settings.lease);
                    let next = renew_interval(self.settings.lease, settling);
                    // A tenth of the lease is the margin for clock drift and a slow statement.
                    let lease = self.settings.lease.to_std().unwrap_or_default();
                    self.interest.set(&lanes);
                    *held = HeldLanes { lanes, renewed_at: Some(at), settling, joined: Some(joined) };
                    self.set_renew_due(Some(at + next));
                    self.set_lease_end(Some(started + lease - lease / 10));
                }
                Err(err) if self.lease_holds() => {
                    tracing::warn!(error = %Chain(&err), "cannot renew the outbox lanes; the lease still holds");
                }
                Err(err) => {
                    held.lanes.clear();
                    self.set_lease_end(None);
                    return Err(err);
                }
            }
        }
        if self.lease_holds() { Ok(held.lanes.clone()) } else { Ok(Vec::new()) }
    }

    fn set_renew_due(&self, due: Option<tokio::time::Instant>) {
        // A poisoned lock holds a plain instant: keep using it.
        *self.renew_due.lock().unwrap_or_else(|e| e.into_inner()) = due;
    }

    /// How long until the lanes' next renewal between drains is due (zero: now).
    fn until_renewal(&self) -> StdDuration {
        let due = *self.renew_due.lock().unwrap_or_else(|e| e.into_inner());
        due.map_or(StdDuration::ZERO, |due| due.saturating_duration_since(tokio::time::Instant::now()))
    }

    fn set_lease_end(&self, end: Option<Instant>) {
        // A poisoned lock holds a plain instant: keep using it.
        *self.lease_end.lock().unwrap_or_else(|e| e.into_inner()) = end;
    }

    /// Whether the lanes' lease surely holds for `margin` more (by this process's clock).
    fn lease_holds_for(&self, margin: StdDuration) -> bool {
        self.lease_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() + margin < until)
    }

    /// Whether the lanes' lease surely still holds. Checked before each publish: a worker
    /// paused between claim and publish past its lease must not send what another worker
    /// may already be sending.
    fn lease_holds(&self) -> bool {
        self.lease_holds_for(StdDuration::ZERO)
    }

    /// Gives the lanes back (graceful stop): other workers take them at their next renewal.
    pub async fn release(&self) {
        let mut held = self.held.lock().await;
        if let Err(err) = self.store.release_lanes(&self.settings.worker_id).await {
            tracing::warn!(error = %Chain(&err), "cannot give the outbox lanes back; they expire with their lease");
        }
        *held = HeldLanes::default();
        self.set_renew_due(None);
        self.set_lease_end(None);
    }

    /// Claims due slow-path rows in the lanes this relay holds.
    async fn claim(&self, held: &[HeldLane]) -> Result<Vec<OutboxRecord>, RepoError> {
        let lanes: Vec<i16> = held.iter().map(|h| h.lane).collect();
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        self.store
            .claim(&self.settings.worker_id, &lanes, self.settings.batch_size, now, now + self.settings.lease)
            .await
    }

    /// Counts a confirmed row's delivery.
    fn confirmed(&self, row: &OutboxRecord, now: DateTime<Utc>) {
        let latency = (now - row.created_at).to_std().unwrap_or_default();
        self.meter.record(|| {
            metrics::histogram!("outbox_commit_to_confirm_seconds").record(latency.as_secs_f64());
            metrics::counter!("outbox_confirms_total", "outcome" => "ack").increment(1);
        });
    }

    /// What becomes of a row the broker did not take: a retry with backoff and jitter, or a
    /// dead letter past `max_retries`.
    fn failed(
        &self,
        row: &OutboxRecord,
        code: FailureCode,
        reason: &str,
        now: DateTime<Utc>,
        report: &mut RelayReport,
    ) -> DeliveryFailure {
        self.meter.record(|| {
            metrics::counter!("outbox_confirms_total", "outcome" => failure_label(code)).increment(1)
        });
        let outcome = self.settings.schedule.after(code, row.retry_count, fastrand::f64(), now);
        match outcome {
            FailureOutcome::Retry { next_attempt_at, .. } => {
                report.retried += 1;
                report.next_retry_at =
                    Some(report.next_retry_at.map_or(next_attempt_at, |t| t.min(next_attempt_at)));
                self.meter.record(|| metrics::counter!("outbox_retries_total").increment(1));
            }
            FailureOutcome::DeadLetter { .. } => {
                report.dead_lettered += 1;
                self.meter.record(|| {
                    metrics::counter!("outbox_dead_lettered_total", "event_type" => row.event_type.clone())
                        .increment(1)
                });
                tracing::error!(
                    event_id = %row.event_id,
                    event_type = %row.event_type,
                    code = code.as_str(),
                    %reason,
                    "outbox event dead-lettered"
                );
            }
        }
        DeliveryFailure { id: row.id, outcome, code, reason: reason.to_owned() }
    }

    /// Records the broker's verdict on every row of a published batch.
    async fn record_slow(
        &self,
        batch: &[Arc<OutboxRecord>],
        outcomes: Vec<PublishOutcome>,
    ) -> Result<RelayReport, RepoError> {
        let now = self.clock.now();
        let mut published = Vec::with_capacity(batch.len());
        let mut failures = Vec::new();
        let mut report = RelayReport { claimed: batch.len(), ..Default::default() };
        for (row, outcome) in batch.iter().zip(verdicts_for(outcomes)) {
            match outcome {
                PublishOutcome::Confirmed => {
                    published.push(row.id);
                    self.confirmed(row, now);
                }
                PublishOutcome::Failed { code, reason } => {
                    failures.push(self.failed(row, code, &reason, now, &mut report));
                }
            }
        }
        let worker = &self.settings.worker_id;
        if !published.is_empty() {
            report.published = self.store.mark_published(&published, worker, now).await?;
            let published = report.published;
            self.meter.record(|| metrics::counter!("outbox_published_total").increment(published));
        }
        if !failures.is_empty() {
            let marked = self.store.mark_failed(&failures, worker, now).await?;
            report.lost_claims += failures.len() as u64 - marked;
        }
        report.lost_claims += published.len() as u64 - report.published;
        if report.lost_claims > 0 {
            tracing::warn!(
                lost = report.lost_claims,
                "outbox claims lost before marking (lease recovered elsewhere)"
            );
        }
        Ok(report)
    }

    /// Sends due slow-path rows of the lanes held (claimed, published, marked).
    async fn slow_round(&self, held: &[HeldLane]) -> Result<RelayReport, RelayError> {
        let batch: Vec<Arc<OutboxRecord>> = self.claim(held).await?.into_iter().map(Arc::new).collect();
        if batch.is_empty() || !self.lease_holds() {
            return Ok(RelayReport::default());
        }
        let outcomes = self.publisher.publish(&batch).await;
        Ok(self.record_slow(&batch, outcomes).await?)
    }

    /// One round: a fast-path batch, then due slow-path rows.
    ///
    /// # Errors
    /// `Broker` when the broker cannot be reached (nothing was read); `Store` when the
    /// database fails — fast-path events are then sent again next round, claimed slow rows
    /// wait for their lease to be recovered; none is lost.
    pub async fn run_once(&self) -> Result<RelayReport, RelayError> {
        self.publisher.ready().await?;
        let held = self.lanes().await?;
        let (mut report, _) =
            Pipeline::new(self, held.clone(), Reads::One).run(&CancellationToken::new()).await?;
        report.add(self.slow_round(&held).await?);
        Ok(report)
    }

    /// Runs while there is work: the fast path as a pipeline (`super::pipeline`: batches
    /// read, sent and recorded at once, each aggregate's events in order), then due
    /// slow-path rows, again while the slow path finds some (publishing one may make its
    /// aggregate's next due) or the lanes held changed. Stops reading when `stop` is
    /// cancelled, but sends and records what it read; ends when the lease runs short of a
    /// send's margin (the run loop renews it).
    ///
    /// # Errors
    /// As [`Self::run_once`]; what earlier batches did stays recorded.
    pub async fn drain(&self, stop: &CancellationToken) -> Result<RelayReport, RelayError> {
        self.publisher.ready().await?;
        let mut total = RelayReport::default();
        loop {
            let held = self.lanes().await?;
            let (fast, ended) = Pipeline::new(self, held.clone(), Reads::UntilDry).run(stop).await?;
            total.add(fast);
            if ended == Ended::Lapsed {
                // Nothing is sent until the lease is renewed: not at once (the run loop's
                // pause), or a lease too short for a send would have this read the same
                // batch again and again.
                return Ok(total);
            }
            let slow = self.slow_round(&held).await?;
            let again = ended == Ended::LanesChanged || slow.claimed > 0;
            total.add(slow);
            if !again || stop.is_cancelled() {
                return Ok(total);
            }
        }
    }

    /// Runs rounds until `stop` is cancelled: back to back while rows are due, otherwise
    /// waiting for a wake-up (a commit), the next scheduled retry, or the poll interval.
    /// A round in progress finishes — its confirms are awaited and marked — before this
    /// returns, so a graceful stop leaves nothing to the lease timeout.
    pub async fn run_until_stopped(&self, stop: CancellationToken) {
        let mut failures: u32 = 0;
        let mut next_retry: Option<DateTime<Utc>> = None;
        let mut retry_read_at: Option<Instant> = None;
        while !stop.is_cancelled() {
            // A relay round as a span: its rounds show beside the events' publish spans (which
            // belong to the traces of the requests that wrote them).
            let round = tracing::info_span!("outbox.relay", otel.name = "outbox relay round");
            match self.drain(&stop).instrument(round).await {
                Ok(report) => {
                    failures = 0;
                    if let Some(p) = &self.progress {
                        p.ok(RELAY_LOOP);
                    }
                    if let Some(at) = report.next_retry_at {
                        next_retry = Some(next_retry.map_or(at, |t| t.min(at)));
                    }
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    if let Some(p) = &self.progress {
                        p.failed(RELAY_LOOP, Chain(&err));
                    }
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::error!(error = %Chain(&err), failures, "outbox relay round failed");
                    }
                }
            }
            // A drain runs until its lanes are dry: what commits later wakes this relay
            // (a wake-up that came during the drain is kept, so the wait below ends at once).
            let now = self.clock.now();
            if next_retry.is_some_and(|t| t <= now) {
                next_retry = None;
            }
            // Retries scheduled by any worker (or recovered from a dead one's lease), not only
            // this one's: the earliest due one bounds the idle sleep (read at most every
            // `RETRY_READ_EVERY`).
            if retry_read_at.is_none_or(|at| at.elapsed() >= RETRY_READ_EVERY) {
                retry_read_at = Some(Instant::now());
                match self.store.next_retry_at().await {
                    Ok(Some(at)) => next_retry = Some(next_retry.map_or(at, |t| t.min(at))),
                    Ok(None) => {}
                    Err(err) => tracing::warn!(error = %Chain(&err), "cannot read the next retry; polling"),
                }
            }
            let mut pause = self.settings.poll_interval;
            if let Some(at) = next_retry {
                let until = (at - now).to_std().unwrap_or_default();
                pause =
                    pause.min(until.max(StdDuration::from_millis(10))).min(self.settings.retry_poll_interval);
            }
            if failures > 0 {
                // A failing database or broker: back off, with jitter, up to the poll
                // interval, whatever the lanes' state (a relay that never leased any has no
                // renewal due) and whatever commits wake it meanwhile.
                let pause = failure_pause(failures, self.settings.poll_interval, fastrand::f64());
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
                continue;
            }
            // Idle: sleep no longer than the next lane renewal, so that rebalancing and the
            // lease never wait on the poll interval.
            pause = pause.min(self.until_renewal().max(StdDuration::from_millis(10)));
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => {
                    // Woken by a commit: the ones close behind it go in the same read.
                    if !self.settings.trickle_wait.is_zero() {
                        tokio::select! {
                            _ = stop.cancelled() => break,
                            _ = tokio::time::sleep(self.settings.trickle_wait) => {}
                        }
                    }
                }
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.release().await;
    }
}

/// The pause after the `failures`-th round in a row that failed: 100 ms doubling, capped at
/// `poll_interval`, stretched by up to 20 % (`jitter` in `[0, 1)`) so that the workers of a
/// fleet do not knock on a recovering broker in step.
fn failure_pause(failures: u32, poll_interval: StdDuration, jitter: f64) -> StdDuration {
    let base = crate::domain::backoff::doubled_pause(StdDuration::from_millis(50), failures);
    base.min(poll_interval).mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0))
}

#[async_trait::async_trait]
impl Stages for OutboxRelay {
    fn batch_size(&self) -> usize {
        self.settings.batch_size as usize
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn publisher(&self) -> Arc<dyn EventPublisher> {
        self.publisher.clone()
    }

    /// Whether events may be sent now: the lease holds for longer than the broker may take
    /// to confirm them. A drain sends for as long as there is work, so the check before it
    /// is not enough for what it sends later.
    fn may_send(&self) -> bool {
        self.lease_holds_for(self.settings.send_margin)
    }

    fn confirmed(&self, row: &OutboxRecord, now: DateTime<Utc>) {
        OutboxRelay::confirmed(self, row, now);
    }

    fn failed(
        &self,
        row: &OutboxRecord,
        code: FailureCode,
        reason: &str,
        at: DateTime<Utc>,
        report: &mut RelayReport,
    ) -> DeliveryFailure {
        OutboxRelay::failed(self, row, code, reason, at, report)
    }

    /// Within a drain: renewed every renewal interval only (a lane given back now would
    /// leave its unrecorded batches to be sent again by its next owner).
    async fn held_lanes(&self) -> Result<Vec<HeldLane>, RepoError> {
        self.renew_when_due(false).await
    }

    fn woken(&self) -> bool {
        self.wake.notified().now_or_never().is_some()
    }

    /// Reads the next fast-path batch over the lanes held (docs/relay-design.md), past the
    /// batches read and not yet recorded: at most `batch_size` events in all. `None` when
    /// there is nothing to send.
    async fn read(&self, held: &[HeldLane], unrecorded: &[BatchToken]) -> Result<Option<Round>, RelayError> {
        let batch = self
            .store
            .next_batch(&self.settings.worker_id, held, unrecorded, self.settings.batch_size)
            .await?;
        Ok(batch.map(|FastBatch { rows, waiting, token, more }| Round {
            rows: rows.into_iter().map(Arc::new).collect(),
            waiting: waiting.into_iter().collect(),
            token,
            more,
        }))
    }

    /// Records finished batches (in the order they were read) in one fenced transaction:
    /// the lanes' progress, failures and held-back events to the slow path. No row is
    /// updated for an event that went out. Returns what they did and the lanes fenced off
    /// (another worker owns them now and sends their events again).
    async fn record(&self, batches: Vec<Batch>) -> Result<(RelayReport, Vec<i16>), RelayError> {
        let mut report = RelayReport::default();
        for b in &batches {
            report.add(b.report);
            report.held_back += b.held_back.len() as u64;
        }
        let record = Batch::record(&batches, self.clock.now());
        // Dated by the broker's last confirm, not by this write: `publishedAt` says when the
        // broker took the batch (commit -> confirm is what operators and the bench read).
        let confirmed_at = batches.iter().map(|b| b.confirmed_at).max().unwrap_or_else(|| self.clock.now());
        let mut fenced = self.store.record_batches(&self.settings.worker_id, &record, confirmed_at).await?;
        if !fenced.is_empty() {
            let lost =
                batches.iter().flat_map(|b| &b.round.rows).filter(|r| fenced.contains(&r.lane)).count();
            report.lost_claims += lost as u64;
            tracing::warn!(lost, lanes = ?fenced, "outbox lanes lost before their progress was recorded");
        }
        let published = report.published;
        self.meter.record(|| metrics::counter!("outbox_published_total").increment(published));
        fenced.sort_unstable();
        fenced.dedup();
        Ok((report, fenced))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_is_woken_for_its_own_lanes_only_once_it_holds_some() {
        let interest = LaneInterest::default();
        assert!(interest.wants(&[3]), "before any lease: every notification");
        interest.set(&[HeldLane { lane: 7, epoch: 1 }, HeldLane { lane: 2, epoch: 4 }]);
        assert!(interest.wants(&[7]));
        assert!(interest.wants(&[1, 2]));
        assert!(!interest.wants(&[3, 9]), "another worker's lanes");
        assert!(interest.wants(&[]), "a notification naming no lane (an operator's action)");
        interest.set(&[]);
        assert!(!interest.wants(&[7]), "no lane held: nothing to do for a commit");
    }
}

#[cfg(test)]
mod pipeline_tests {
    //! The pipeline against mock ports: which events go out, in what order, and what is
    //! recorded, whatever order the broker's verdicts and the database's answers come in.

    use std::sync::{Arc, Mutex};
    use std::time::Duration as StdDuration;

    use chrono::Duration;
    use tokio::sync::Notify;

    use super::*;
    use crate::application::ports::{
        BrokerUnavailable, Cause, FastRecord, MockClock, MockEventPublisher, MockRelayStore,
    };
    use crate::domain::ids::EventId;
    use crate::domain::outbox::{FailureCode, OutboxStatus, RetrySchedule};

    const LANE: i16 = 3;

    fn event(id: i64, aggregate: &str) -> OutboxRecord {
        OutboxRecord {
            id,
            event_id: EventId::new(),
            aggregate_type: "order".into(),
            aggregate_id: aggregate.into(),
            event_type: "order.test".into(),
            routing_key: "order.test".into(),
            payload: "{}".into(),
            correlation_id: None,
            status: OutboxStatus::Ready,
            retry_count: 0,
            failure_code: None,
            failure_reason: None,
            next_attempt_at: None,
            last_attempt_at: None,
            claimed_by: None,
            claimed_until: None,
            created_at: Utc::now(),
            published_at: None,
            dead_lettered_at: None,
            version: 1,
            lane: LANE,
            traceparent: None,
        }
    }

    fn settings(batch_size: u32, send_margin: StdDuration) -> RelaySettings {
        RelaySettings {
            worker_id: "w".into(),
            lanes: 16,
            batch_size,
            lease: Duration::seconds(30),
            poll_interval: StdDuration::from_millis(100),
            retry_poll_interval: StdDuration::from_millis(100),
            trickle_wait: StdDuration::ZERO,
            schedule: RetrySchedule {
                max_retries: 5,
                backoff_base: Duration::seconds(1),
                backoff_cap: Duration::seconds(60),
            },
            send_margin,
        }
    }

    /// What the mocks saw, in order: `read n` (rows returned), `send id,id`, `record`.
    type Log = Arc<Mutex<Vec<String>>>;

    /// A store whose one lane (`LANE`, held under epoch 1) holds `events`, handed out as the
    /// real one does: the ids not yet recorded past those of the unrecorded batches, at most
    /// `limit`, with a token naming them; records as `fenced` says (`true`: another worker
    /// took the lane, nothing is recorded and the lane is reported fenced). `left` is what
    /// is not recorded yet.
    fn store(
        events: Vec<OutboxRecord>,
        log: Log,
        recorded: Arc<Mutex<Vec<FastRecord>>>,
        fenced: bool,
    ) -> (MockRelayStore, Arc<Mutex<Vec<i64>>>) {
        let mut store = MockRelayStore::new();
        store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
        let left = Arc::new(Mutex::new(events.iter().map(|e| e.id).collect::<Vec<i64>>()));
        let (read_log, read_left) = (log.clone(), Arc::clone(&left));
        store.expect_next_batch().returning(move |_, _, unrecorded, limit| {
            let taken: Vec<i64> =
                unrecorded.iter().flat_map(|t| t.get::<Vec<i64>>().unwrap().clone()).collect();
            let ids: Vec<i64> = read_left
                .lock()
                .unwrap()
                .iter()
                .filter(|id| !taken.contains(id))
                .take(limit as usize)
                .copied()
                .collect();
            read_log.lock().unwrap().push(format!("read {}", ids.len()));
            if ids.is_empty() {
                return Ok(None);
            }
            let rows = events.iter().filter(|e| ids.contains(&e.id)).cloned().collect();
            // As the real store says: more when a batch read before is not recorded yet (its
            // lane was not read afresh) or when this one left events.
            let more = !taken.is_empty() || read_left.lock().unwrap().len() > ids.len();
            Ok(Some(FastBatch { rows, waiting: Vec::new(), token: BatchToken::new(ids), more }))
        });
        let (record_log, record_left) = (log, Arc::clone(&left));
        store.expect_record_batches().returning(move |_, record, _| {
            record_log.lock().unwrap().push("record".into());
            recorded.lock().unwrap().push(record.clone());
            if fenced {
                return Ok(vec![LANE]);
            }
            let done: Vec<i64> =
                record.batches.iter().flat_map(|t| t.get::<Vec<i64>>().unwrap().clone()).collect();
            record_left.lock().unwrap().retain(|id| !done.contains(id));
            Ok(Vec::new())
        });
        store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
        (store, left)
    }

    /// A broker that confirms every message but those of `failing` event ids (nacked).
    fn publisher(log: Log, failing: Vec<i64>) -> MockEventPublisher {
        broker(log, failing, None)
    }

    /// A broker that confirms everything, while a commit wakes the relay during each send.
    fn publisher_while_committing(log: Log, wake: Arc<Notify>) -> MockEventPublisher {
        broker(log, Vec::new(), Some(wake))
    }

    /// Logs each send, nacks the events of `failing`, and signals `commit` (if any) as it sends.
    fn broker(log: Log, failing: Vec<i64>, commit: Option<Arc<Notify>>) -> MockEventPublisher {
        let mut publisher = MockEventPublisher::new();
        publisher.expect_ready().returning(|| Ok(()));
        publisher.expect_send().returning(move |batch| {
            let ids: Vec<String> = batch.iter().map(|r| r.id.to_string()).collect();
            log.lock().unwrap().push(format!("send {}", ids.join(",")));
            if let Some(wake) = &commit {
                wake.notify_one();
            }
            let outcomes = batch
                .iter()
                .map(|r| {
                    if failing.contains(&r.id) {
                        PublishOutcome::Failed { code: FailureCode::Nacked, reason: "nacked".into() }
                    } else {
                        PublishOutcome::Confirmed
                    }
                })
                .collect();
            Box::pin(std::future::ready(outcomes))
        });
        publisher
    }

    fn relay(store: MockRelayStore, publisher: MockEventPublisher, settings: RelaySettings) -> OutboxRelay {
        woken_relay(store, publisher, settings, Arc::new(Notify::new()))
    }

    /// A relay woken through `wake`, as commits wake it.
    fn woken_relay(
        store: MockRelayStore,
        publisher: MockEventPublisher,
        settings: RelaySettings,
        wake: Arc<Notify>,
    ) -> OutboxRelay {
        let mut clock = MockClock::new();
        clock.expect_now().returning(Utc::now);
        OutboxRelay::new(Arc::new(store), Arc::new(publisher), Arc::new(clock), settings, wake)
    }

    fn sent(log: &Log) -> Vec<i64> {
        log.lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix("send "))
            .flat_map(|ids| ids.split(',').map(|id| id.parse::<i64>().unwrap()).collect::<Vec<_>>())
            .collect()
    }

    #[tokio::test]
    async fn a_failure_holds_back_the_later_events_of_its_aggregate_in_later_batches() {
        // Batches of two: [a1, b1], [a2, c1], [a3, b2]. a1 is nacked.
        let events =
            vec![event(1, "a"), event(2, "b"), event(3, "a"), event(4, "c"), event(5, "a"), event(6, "b")];
        let (log, recorded) = (Log::default(), Arc::default());
        let (store, left) = store(events, log.clone(), Arc::clone(&recorded), false);
        let relay = relay(store, publisher(log.clone(), vec![1]), settings(2, StdDuration::from_millis(10)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();

        let sent = sent(&log);
        assert!(!sent.contains(&3) && !sent.contains(&5), "nothing of a after its failure: {sent:?}");
        let position = |id| sent.iter().position(|&s| s == id).unwrap();
        assert!(position(2) < position(6), "b in order: {sent:?}");
        assert_eq!(report.published, 3, "b1, c1, b2");
        assert_eq!(report.retried, 1);
        let recorded = recorded.lock().unwrap();
        let failures: Vec<i64> = recorded.iter().flat_map(|p| p.failures.iter().map(|f| f.id)).collect();
        let mut held: Vec<i64> = recorded.iter().flat_map(|p| p.held_back.clone()).collect();
        held.sort_unstable();
        assert_eq!(failures, vec![1]);
        assert_eq!(held, vec![3, 5], "a2 and a3 to the slow path, behind a1");
        assert!(left.lock().unwrap().is_empty(), "every batch recorded: {:?}", left.lock().unwrap());
    }

    #[tokio::test]
    async fn an_aggregates_next_event_waits_for_the_confirm_of_the_one_before() {
        let events = vec![event(1, "a"), event(2, "a"), event(3, "b"), event(4, "a")];
        let (log, recorded) = (Log::default(), Arc::default());
        let (store, _) = store(events, log.clone(), recorded, false);
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();
        assert_eq!(report.published, 4);
        let sends: Vec<String> =
            log.lock().unwrap().iter().filter(|l| l.starts_with("send")).cloned().collect();
        assert_eq!(
            sends,
            vec!["send 1,3", "send 2", "send 4"],
            "one event of a per send, b beside the first"
        );
    }

    #[tokio::test]
    async fn a_lane_taken_over_records_nothing_and_its_batch_counts_lost() {
        let events: Vec<OutboxRecord> = (1..=6).map(|i| event(i, &format!("agg-{i}"))).collect();
        let (log, recorded) = (Log::default(), Arc::default());
        let (store, left) = store(events, log.clone(), recorded, true);
        let relay = relay(store, publisher(log.clone(), vec![]), settings(2, StdDuration::from_millis(10)));
        let report = relay.run_once().await.unwrap();
        assert_eq!(report.lost_claims, 2, "the batch sent is not recorded: {report:?}");
        assert_eq!(left.lock().unwrap().len(), 6, "nothing recorded: the lane's next owner sends it all");
    }

    #[tokio::test]
    async fn a_lease_too_short_for_a_send_sends_and_records_nothing() {
        let events: Vec<OutboxRecord> = (1..=4).map(|i| event(i, &format!("agg-{i}"))).collect();
        let (log, recorded) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
        let (store, _) = store(events, log.clone(), Arc::clone(&recorded), false);
        // The margin a send needs is longer than the lease itself.
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_secs(3600)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();
        assert!(sent(&log).is_empty());
        let reads = log.lock().unwrap().iter().filter(|l| l.starts_with("read")).count();
        assert_eq!(reads, 1, "the drain ends until the lease is renewed, not reading the batch again");
        assert!(recorded.lock().unwrap().is_empty());
        assert_eq!(report.published, 0);
        assert_eq!(report.lost_claims, 4, "the batch read is left to the lanes' next owner");
    }

    #[tokio::test]
    async fn a_trickle_is_recorded_before_the_next_read() {
        // One event where a batch holds eight: a trickle; a commit comes while it is sent.
        let events = vec![event(1, "a")];
        let (log, recorded, wake) = (Log::default(), Arc::default(), Arc::new(Notify::new()));
        let (store, _) = store(events, log.clone(), recorded, false);
        let publisher = publisher_while_committing(log.clone(), wake.clone());
        let relay = woken_relay(store, publisher, settings(8, StdDuration::from_millis(10)), wake);
        relay.drain(&CancellationToken::new()).await.unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(log, ["read 1", "send 1", "record", "read 0"]);
    }

    /// When a relay that a commit woke reads next, after `trickle_wait`, in tokio's paused
    /// (virtual) time.
    async fn read_after_a_wake_up(trickle_wait: StdDuration) -> StdDuration {
        let reads: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let mut store = MockRelayStore::new();
        store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
        store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
        store.expect_next_retry_at().returning(|| Ok(None));
        store.expect_release_lanes().returning(|_| Ok(()));
        let at = Arc::clone(&reads);
        store.expect_next_batch().returning(move |_, _, _, _| {
            at.lock().unwrap().push(tokio::time::Instant::now());
            Ok(None)
        });
        let mut settings = settings(8, StdDuration::from_millis(10));
        settings.trickle_wait = trickle_wait;
        settings.poll_interval = StdDuration::from_secs(60);
        let wake = Arc::new(Notify::new());
        let relay = woken_relay(store, publisher(Log::default(), vec![]), settings, Arc::clone(&wake));
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { relay.run_until_stopped(stop).await }
        });
        let reads_so_far = |n: usize| {
            let reads = Arc::clone(&reads);
            async move {
                while reads.lock().unwrap().len() < n {
                    tokio::time::sleep(StdDuration::from_micros(100)).await;
                }
            }
        };
        // The drain at start, then a commit's wake-up.
        reads_so_far(1).await;
        let woken = tokio::time::Instant::now();
        wake.notify_one();
        reads_so_far(2).await;
        stop.cancel();
        task.await.unwrap();
        let read = reads.lock().unwrap()[1];
        read - woken
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_up_waits_for_the_commits_close_behind_it() {
        let waited = read_after_a_wake_up(StdDuration::from_millis(5)).await;
        assert!(waited >= StdDuration::from_millis(5), "read {waited:?} after the wake-up");
        let at_once = read_after_a_wake_up(StdDuration::ZERO).await;
        assert!(at_once < StdDuration::from_millis(1), "no wait configured: read {at_once:?} after");
    }

    /// Workers started together: the first takes every lane, and gives most back once it
    /// sees the others. While lanes change hands (the relay joined lately, or its last
    /// renewal took or gave back lanes) a relay renews between drains within a fraction of
    /// a second; within a drain, and once settled, every renewal interval (the lease's
    /// third, at most 5 s).
    #[tokio::test(start_paused = true)]
    async fn lanes_change_hands_quickly_between_drains_only() {
        let held = |n: i16| (0..n).map(|lane| HeldLane { lane, epoch: 1 }).collect::<Vec<_>>();
        let answers = Arc::new(Mutex::new(vec![held(3), held(4), held(4), held(4), held(16)]));
        let renewals = Arc::new(Mutex::new(0));
        let mut store = MockRelayStore::new();
        let (next, count) = (Arc::clone(&answers), Arc::clone(&renewals));
        store.expect_lease_lanes().returning(move |_, _, _, _| {
            *count.lock().unwrap() += 1;
            Ok(next.lock().unwrap().pop().unwrap_or_else(|| held(3)))
        });
        // A lease of 30 s: renewed every 5 s once settled; joining for 6 s.
        let relay = relay(store, MockEventPublisher::new(), settings(8, StdDuration::from_millis(10)));
        let renewed = || *renewals.lock().unwrap();
        let step = StdDuration::from_millis(150);

        assert_eq!(relay.lanes().await.unwrap().len(), 16, "alone at first: every lane");
        tokio::time::advance(step).await;
        assert_eq!(Stages::held_lanes(&relay).await.unwrap().len(), 16);
        assert_eq!(renewed(), 1, "within a drain: no renewal before the interval");
        assert_eq!(relay.lanes().await.unwrap().len(), 4, "between drains: at once, the others seen");
        assert_eq!(renewed(), 2);
        tokio::time::advance(step).await;
        relay.lanes().await.unwrap();
        assert_eq!(renewed(), 3, "still joining: renewed again");

        tokio::time::advance(StdDuration::from_secs(7)).await;
        relay.lanes().await.unwrap();
        assert_eq!(renewed(), 4);
        tokio::time::advance(step).await;
        relay.lanes().await.unwrap();
        assert_eq!(renewed(), 4, "joined and unchanged: not before the renewal interval");
        tokio::time::advance(StdDuration::from_secs(5)).await;
        assert_eq!(Stages::held_lanes(&relay).await.unwrap().len(), 3, "a lane given back");
        assert_eq!(renewed(), 5, "within a drain: every renewal interval");
        tokio::time::advance(step).await;
        relay.lanes().await.unwrap();
        assert_eq!(renewed(), 6, "after a change: renewed at once between drains");
        tokio::time::advance(step).await;
        relay.lanes().await.unwrap();
        assert_eq!(renewed(), 6, "settled again");
    }

    #[tokio::test]
    async fn a_quiet_trickle_ends_the_drain_without_reading_again() {
        // A trickle that took all there was, and no commit since: nothing to read.
        let events = vec![event(1, "a")];
        let (log, recorded) = (Log::default(), Arc::default());
        let (store, _) = store(events, log.clone(), recorded, false);
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();
        assert_eq!(report.published, 1);
        assert_eq!(*log.lock().unwrap(), ["read 1", "send 1", "record"]);
    }

    #[tokio::test]
    async fn a_trickle_that_left_events_is_read_on_without_a_wake_up() {
        // The store says the first trickle left events (a lane read from an older snapshot):
        // they are read without any commit waking the relay; the second took the rest.
        let log = Log::default();
        let mut store = MockRelayStore::new();
        store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
        let reads = Arc::new(Mutex::new(vec![(2, false), (1, true)]));
        let read_log = log.clone();
        store.expect_next_batch().returning(move |_, _, _, _| {
            let Some((id, more)) = reads.lock().unwrap().pop() else {
                read_log.lock().unwrap().push("read 0".into());
                return Ok(None);
            };
            read_log.lock().unwrap().push("read 1".into());
            let rows = vec![event(id, &format!("agg-{id}"))];
            Ok(Some(FastBatch { rows, waiting: Vec::new(), token: BatchToken::new(vec![id]), more }))
        });
        let record_log = log.clone();
        store.expect_record_batches().returning(move |_, _, _| {
            record_log.lock().unwrap().push("record".into());
            Ok(Vec::new())
        });
        store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();
        assert_eq!(report.published, 2);
        assert_eq!(*log.lock().unwrap(), ["read 1", "send 1", "record", "read 1", "send 2", "record"]);
    }

    /// A broker that is down, tried by a relay that never leased a lane (nothing can be
    /// read before the broker answers): in 30 s of virtual time, while commits wake it every
    /// few milliseconds, the relay backs off up to its poll interval instead of trying again
    /// every 10 ms (it tried ~87 times a second).
    #[tokio::test(start_paused = true)]
    async fn a_relay_backs_off_a_dead_broker_up_to_the_poll_interval_whatever_wakes_it() {
        let attempts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
        let mut publisher = MockEventPublisher::new();
        let seen = Arc::clone(&attempts);
        publisher.expect_ready().returning(move || {
            seen.lock().unwrap().push(tokio::time::Instant::now());
            Err(BrokerUnavailable(Cause::msg("connection refused")))
        });
        let mut store = MockRelayStore::new();
        store.expect_next_retry_at().returning(|| Ok(None));
        store.expect_release_lanes().returning(|_| Ok(()));
        let mut settings = settings(8, StdDuration::from_millis(10));
        settings.poll_interval = StdDuration::from_secs(10);
        let wake = Arc::new(Notify::new());
        let relay = woken_relay(store, publisher, settings, Arc::clone(&wake));
        let stop = CancellationToken::new();
        let started = tokio::time::Instant::now();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { relay.run_until_stopped(stop).await }
        });
        while started.elapsed() < StdDuration::from_secs(30) {
            wake.notify_one();
            tokio::time::sleep(StdDuration::from_millis(5)).await;
        }
        stop.cancel();
        task.await.unwrap();
        let attempts = attempts.lock().unwrap().clone();
        assert!(
            (5..=12).contains(&attempts.len()),
            "about a dozen attempts in 30 s, not one every 10 ms: {}",
            attempts.len()
        );
        let gaps: Vec<StdDuration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.windows(2).all(|g| g[1] >= g[0] || g[1] >= StdDuration::from_secs(10)),
            "growing gaps: {gaps:?}"
        );
        assert!(
            gaps.iter().all(|g| *g <= StdDuration::from_secs(12)),
            "never longer than the poll interval and its jitter: {gaps:?}"
        );
    }
}
