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

use super::lane_timing::{HeldLanes, renew_every};
use super::pipeline::{Batch, Ended, Pipeline, Reads, Round, Stages};
use super::report::{RelayError, RelayReport, Resend};
use crate::application::error::Chain;
use crate::application::health::LoopProgress;

/// The relay's name in the worker's readiness.
const RELAY_LOOP: &str = "outbox relay";
use crate::application::meter::Meter;
use crate::application::ports::{
    BatchToken, Clock, DeliveryFailure, EventPublisher, FastBatch, HeldLane, OutboxRecord, RelayStore,
    RepoError,
};
use crate::domain::outbox::{FailureCode, RetrySchedule};

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
    pub(super) fn set(&self, held: &[HeldLane]) {
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
    pub(super) store: Arc<dyn RelayStore>,
    pub(super) publisher: Arc<dyn EventPublisher>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: RelaySettings,
    pub(super) wake: Arc<Notify>,
    pub(super) interest: Arc<LaneInterest>,
    pub(super) meter: Meter,
    pub(super) held: Mutex<HeldLanes>,
    /// Past this the lanes' lease may have lapsed: nothing is sent or claimed until it is
    /// renewed. Apart from `held`, so that it is read without waiting for a renewal under
    /// way (the pipeline checks it before each send while its read may be renewing).
    pub(super) lease_end: std::sync::Mutex<Option<Instant>>,
    /// When the next renewal of the lanes is due between drains (`None`: now), for the idle
    /// loop's sleep.
    pub(super) renew_due: std::sync::Mutex<Option<tokio::time::Instant>>,
    /// Where each round's success or failure is reported (the worker's readiness).
    pub(super) progress: Option<Arc<LoopProgress>>,
}

/// How often an idle relay asks the store for the next retry due in any lane (its own
/// failures' retries it knows from its reports): at a trickle a relay goes idle hundreds of
/// times a second, and one statement each time would cost more than the events.
pub(super) const RETRY_READ_EVERY: StdDuration = StdDuration::from_millis(250);

/// How many times a batch's record is tried (a failed one is tried again, with
/// [`RECORD_RETRY_PAUSE`] doubling between tries, while the lease holds): a record is
/// idempotent, and one given up sends its batches again (docs/reliability.md).
pub(super) const RECORD_ATTEMPTS: u32 = 5;

/// The pause before a record's second try; doubled before each later one (0.1 + 0.2 + 0.4 +
/// 0.8 s: a database blip or a replaced connection is ridden out).
pub(super) const RECORD_RETRY_PAUSE: StdDuration = StdDuration::from_millis(100);

pub(super) fn failure_label(code: FailureCode) -> &'static str {
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
            self.round(&stop, &mut failures, &mut next_retry).await;
            let pause = self.idle_pause(&mut next_retry, &mut retry_read_at).await;
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

impl OutboxRelay {
    /// One round: drained until its lanes are dry (as a span, beside the events' publish
    /// spans, which belong to the traces of the requests that wrote them), its health and
    /// its earliest retry noted; a failure counted and logged (the first, then each power of
    /// two).
    async fn round(
        &self,
        stop: &CancellationToken,
        failures: &mut u32,
        next_retry: &mut Option<DateTime<Utc>>,
    ) {
        let round = tracing::info_span!("outbox.relay", otel.name = "outbox relay round");
        match self.drain(stop).instrument(round).await {
            Ok(report) => {
                *failures = 0;
                if let Some(p) = &self.progress {
                    p.ok(RELAY_LOOP);
                }
                if let Some(at) = report.next_retry_at {
                    *next_retry = Some(next_retry.map_or(at, |t| t.min(at)));
                }
            }
            Err(err) => {
                *failures = failures.saturating_add(1);
                if let Some(p) = &self.progress {
                    p.failed(RELAY_LOOP, Chain(&err));
                }
                if *failures == 1 || failures.is_power_of_two() {
                    tracing::error!(error = %Chain(&err), failures = *failures, "outbox relay round failed");
                }
            }
        }
    }

    /// How long an idle relay may sleep: the poll interval, bounded by the next scheduled
    /// retry (any worker's, not only this one's: read at most every `RETRY_READ_EVERY`) and
    /// by the next lane renewal, so that rebalancing and the lease never wait on the poll
    /// interval. What committed since the drain wakes it earlier.
    async fn idle_pause(
        &self,
        next_retry: &mut Option<DateTime<Utc>>,
        retry_read_at: &mut Option<Instant>,
    ) -> StdDuration {
        let now = self.clock.now();
        if next_retry.is_some_and(|t| t <= now) {
            *next_retry = None;
        }
        if retry_read_at.is_none_or(|at| at.elapsed() >= RETRY_READ_EVERY) {
            *retry_read_at = Some(Instant::now());
            match self.store.next_retry_at().await {
                Ok(Some(at)) => *next_retry = Some(next_retry.map_or(at, |t| t.min(at))),
                Ok(None) => {}
                Err(err) => tracing::warn!(error = %Chain(&err), "cannot read the next retry; polling"),
            }
        }
        let mut pause = self.settings.poll_interval;
        if let Some(at) = *next_retry {
            let until = (at - now).to_std().unwrap_or_default();
            pause = pause.min(until.max(StdDuration::from_millis(10))).min(self.settings.retry_poll_interval);
        }
        pause.min(self.until_renewal().max(StdDuration::from_millis(10)))
    }
}

/// The pause after the `failures`-th round in a row that failed: 100 ms doubling, capped at
/// `poll_interval`, stretched by up to 20 % (`jitter` in `[0, 1)`) so that the workers of a
/// fleet do not knock on a recovering broker in step.
fn failure_pause(failures: u32, poll_interval: StdDuration, jitter: f64) -> StdDuration {
    let base = crate::domain::backoff::doubled_pause(StdDuration::from_millis(50), failures, poll_interval);
    base.mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0))
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

    fn resending(&self, cause: Resend, events: usize) {
        OutboxRelay::resending(self, cause, events);
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
        let mut attempt = 1;
        let mut fenced = loop {
            match self.store.record_batches(&self.settings.worker_id, &record, confirmed_at).await {
                Ok(fenced) => break fenced,
                // Tried again: a record writes the lanes' positions (the same again is
                // harmless) and moves failures by id, once.
                Err(err) if err.is_transient() && attempt < RECORD_ATTEMPTS && self.lease_holds() => {
                    tracing::warn!(error = %Chain(&err), attempt, "outbox record failed; trying it again");
                    let pause = crate::domain::backoff::doubled_pause(
                        RECORD_RETRY_PAUSE,
                        attempt - 1,
                        StdDuration::MAX,
                    );
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                Err(err) => {
                    self.resending(Resend::RecordFailed, batches.iter().map(Batch::reached_broker).sum());
                    return Err(err.into());
                }
            }
        };
        if !fenced.is_empty() {
            let lost =
                batches.iter().flat_map(|b| &b.round.rows).filter(|r| fenced.contains(&r.lane)).count();
            report.lost_claims += lost as u64;
            // Of them, those the broker has: the lane's next owner sends them again.
            let resent = batches
                .iter()
                .flat_map(|b| b.round.rows.iter().map(move |r| (b, r)))
                .filter(|(b, r)| {
                    fenced.contains(&r.lane)
                        && !b.held_back.contains(&r.id)
                        && !b.failures.iter().any(|f| f.id == r.id)
                })
                .count();
            self.resending(Resend::LaneLost, resent);
            report.resent += resent as u64;
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
mod tests;
