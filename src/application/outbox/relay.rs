//! The outbox relay: claims due rows, publishes them, records the broker's verdict.
//!
//! The relay claims only from the lanes it leases (docs/spec.md §6): it renews them every
//! `renew_every`, holds its fair share as workers come and go, claims nothing in a lane once
//! its local view of the lease has run out (a paused worker stops before another may
//! start), and gives its lanes back when it stops.
//!
//! Claim and mark are two short transactions; no transaction is open while waiting for
//! the broker. A claim is a lease: if this worker dies, another recovers the rows when the
//! lease ends, and the mark here is conditional on still holding the claim, so a worker
//! whose lease was recovered can never overwrite the new owner's result. Nothing is
//! claimed while the broker is unreachable, so an outage spends no retry budget.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, Utc};
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use tracing::Instrument;

use crate::application::error::Chain;
use crate::application::health::LoopProgress;

/// The relay's name in the worker's readiness.
const RELAY_LOOP: &str = "outbox relay";
use crate::application::meter::Meter;
use crate::application::ports::{
    BrokerUnavailable, Clock, DeliveryFailure, EventPublisher, FastBatch, FastProgress, HeldLane, LaneCursor,
    LaneFilter, OutboxRecord, OutboxStore, PendingVerdicts, PublishOutcome, RepoError,
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
    pub schedule: RetrySchedule,
    /// The longest a wave can take with the broker (its confirm timeout): a wave is sent only
    /// while the lease holds for at least this much longer, so a worker that lost its lease
    /// mid-batch (paused, starved) stops before another may start (docs/spec.md §6).
    pub wave_margin: StdDuration,
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayReport {
    pub claimed: usize,
    pub published: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    /// Rows whose claim (or lane) was lost before marking (taken over elsewhere).
    pub lost_claims: u64,
    /// Fast-path events held back behind an earlier event of their aggregate.
    pub held_back: u64,
    /// The earliest retry this round scheduled.
    pub next_retry_at: Option<DateTime<Utc>>,
}

/// A fast-path batch read and ready to send.
#[derive(Debug)]
struct Round {
    rows: Vec<OutboxRecord>,
    /// Per lane: the ids taken (in lane order) and the lane's cursor once they are done.
    pages: HashMap<i16, (Vec<i64>, LaneCursor)>,
    aggregates: HashSet<(String, String)>,
    /// Aggregates with an event still on the slow path: theirs are held back.
    waiting: HashSet<(String, String)>,
}

/// What the broker made of a batch.
#[derive(Debug, Default)]
struct Sent {
    /// When sending started (the attempt's time).
    at: DateTime<Utc>,
    /// When the broker's last verdict on it arrived: the batch's `publishedAt`.
    confirmed_at: DateTime<Utc>,
    report: RelayReport,
    failures: Vec<DeliveryFailure>,
    held_back: Vec<i64>,
    /// The lease ran out (or would have during the next wave) before the batch was all
    /// sent: nothing of it may be recorded, its next owner sends it again.
    lapsed: bool,
}

fn aggregate_of(row: &OutboxRecord) -> (String, String) {
    (row.aggregate_type.clone(), row.aggregate_id.clone())
}

/// A round on its way: its first wave is with the broker; awaiting it waits for the
/// confirms and sends the later waves.
type InFlight<'a> = Pin<Box<dyn Future<Output = Sent> + Send + 'a>>;

/// The next wave of `rows[remaining]`: the first remaining event of each aggregate, in
/// order, and the rest for later waves. An event of an aggregate that `failed` in an earlier
/// wave is held back (it goes to the slow path, behind the failed one).
fn next_wave(
    rows: &[OutboxRecord],
    remaining: Vec<usize>,
    failed: &HashSet<(String, String)>,
    held_back: &mut Vec<i64>,
) -> (Vec<OutboxRecord>, Vec<usize>) {
    let mut wave = Vec::new();
    let mut later = Vec::new();
    let mut in_wave: HashSet<(String, String)> = HashSet::new();
    for i in remaining {
        let key = aggregate_of(&rows[i]);
        if failed.contains(&key) {
            held_back.push(rows[i].id);
        } else if in_wave.insert(key) {
            wave.push(rows[i].clone());
        } else {
            later.push(i);
        }
    }
    (wave, later)
}

impl RelayReport {
    fn add(&mut self, r: RelayReport) {
        self.claimed += r.claimed;
        self.published += r.published;
        self.retried += r.retried;
        self.dead_lettered += r.dead_lettered;
        self.lost_claims += r.lost_claims;
        self.held_back += r.held_back;
        self.next_retry_at = match (self.next_retry_at, r.next_retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Why a round did nothing useful.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] RepoError),
    #[error(transparent)]
    Broker(#[from] BrokerUnavailable),
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
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    settings: RelaySettings,
    wake: Arc<Notify>,
    interest: Arc<LaneInterest>,
    meter: Meter,
    held: Mutex<HeldLanes>,
    /// Each held lane's fast-path position.
    cursors: Mutex<HashMap<i16, LaneCursor>>,
    /// Where each round's success or failure is reported (the worker's readiness).
    progress: Option<Arc<LoopProgress>>,
}

/// The lanes this relay leases, as of its last renewal.
#[derive(Debug, Default)]
struct HeldLanes {
    lanes: Vec<HeldLane>,
    /// When the last renewal started (`None`: never renewed).
    renewed_at: Option<Instant>,
    /// Past this the lease may have lapsed: claim nothing until renewed.
    valid_until: Option<Instant>,
}

impl HeldLanes {
    /// Whether the lease surely still holds, by this process's clock.
    fn valid(&self) -> bool {
        self.valid_for(StdDuration::ZERO)
    }

    /// Whether the lease surely holds for `margin` more.
    fn valid_for(&self, margin: StdDuration) -> bool {
        self.valid_until.is_some_and(|until| Instant::now() + margin < until)
    }
}

/// How often a relay renews its lanes: often enough to rebalance within seconds as workers
/// come and go, and at least three times per lease.
fn renew_every(lease: Duration) -> StdDuration {
    (lease.to_std().unwrap_or_default() / 3).min(StdDuration::from_secs(5))
}

fn failure_label(code: FailureCode) -> &'static str {
    code.as_str()
}

impl OutboxRelay {
    pub fn new(
        store: Arc<dyn OutboxStore>,
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
            cursors: Mutex::default(),
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

    /// The lanes this relay holds, kept current for the wake-up listener.
    pub fn interest(&self) -> Arc<LaneInterest> {
        self.interest.clone()
    }

    /// The lanes this relay may claim from now, renewing the lease when due. A failed
    /// renewal keeps the lanes only while the previous lease surely holds.
    ///
    /// # Errors
    /// The renewal failed and the previous lease may have lapsed.
    pub async fn lanes(&self) -> Result<Vec<HeldLane>, RepoError> {
        let mut held = self.held.lock().await;
        let started = Instant::now();
        if held.renewed_at.is_none_or(|at| at.elapsed() >= renew_every(self.settings.lease)) {
            let now = self.clock.now();
            match self
                .store
                .lease_lanes(&self.settings.worker_id, self.settings.lanes, now, now + self.settings.lease)
                .await
            {
                Ok(lanes) => {
                    if lanes != held.lanes {
                        let ids: Vec<i16> = lanes.iter().map(|h| h.lane).collect();
                        tracing::info!(worker = %self.settings.worker_id, lanes = ?ids, "outbox lanes held");
                    }
                    // A tenth of the lease is the margin for clock drift and a slow statement.
                    let lease = self.settings.lease.to_std().unwrap_or_default();
                    self.interest.set(&lanes);
                    *held = HeldLanes {
                        lanes,
                        renewed_at: Some(started),
                        valid_until: Some(started + lease - lease / 10),
                    };
                }
                Err(err) if held.valid() => {
                    tracing::warn!(error = %Chain(&err), "cannot renew the outbox lanes; the lease still holds");
                }
                Err(err) => {
                    held.lanes.clear();
                    return Err(err);
                }
            }
        }
        if held.valid() { Ok(held.lanes.clone()) } else { Ok(Vec::new()) }
    }

    /// Whether the lanes' lease surely still holds (by this process's clock). Checked before
    /// each publish: a worker paused between claim and publish past its lease must not send
    /// what another worker may already be sending.
    async fn lease_holds(&self) -> bool {
        self.held.lock().await.valid()
    }

    /// Whether a wave may go out now: the lease holds for longer than a wave can take. The
    /// waves of a batch follow each other for as long as the broker takes to confirm them,
    /// so the check before the batch is not enough for its later waves.
    async fn wave_may_go(&self) -> bool {
        self.held.lock().await.valid_for(self.settings.wave_margin)
    }

    /// Gives the lanes back (graceful stop): other workers take them at their next renewal.
    pub async fn release(&self) {
        let mut held = self.held.lock().await;
        if let Err(err) = self.store.release_lanes(&self.settings.worker_id).await {
            tracing::warn!(error = %Chain(&err), "cannot give the outbox lanes back; they expire with their lease");
        }
        *held = HeldLanes::default();
    }

    /// Claims due slow-path rows in the lanes this relay holds.
    async fn claim(&self, held: &[HeldLane]) -> Result<Vec<OutboxRecord>, RepoError> {
        let lanes: Vec<i16> = held.iter().map(|h| h.lane).collect();
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        self.store
            .claim(
                &self.settings.worker_id,
                &LaneFilter::Held(lanes),
                self.settings.batch_size,
                now,
                now + self.settings.lease,
            )
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
        batch: &[OutboxRecord],
        outcomes: Vec<PublishOutcome>,
    ) -> Result<RelayReport, RepoError> {
        let now = self.clock.now();
        let mut published = Vec::with_capacity(batch.len());
        let mut failures = Vec::new();
        let mut report = RelayReport { claimed: batch.len(), ..Default::default() };
        let missing = PublishOutcome::Failed {
            code: FailureCode::ConfirmTimeout,
            reason: "no confirm reported".into(),
        };
        for (i, row) in batch.iter().enumerate() {
            // A publisher that returned too few outcomes: the missing ones are unconfirmed.
            match outcomes.get(i).unwrap_or(&missing) {
                PublishOutcome::Confirmed => {
                    published.push(row.id);
                    self.confirmed(row, now);
                }
                PublishOutcome::Failed { code, reason } => {
                    failures.push(self.failed(row, *code, reason, now, &mut report));
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

    /// Reads the next fast-path batch over the lanes held (docs/relay-design.md): each
    /// lane's next events past `in_flight` (a batch still on the wire), at most
    /// `batch_size` in all, cut before the first event of an aggregate `in_flight` carries
    /// (its outcome decides whether the next may go). `None` when there is nothing to send.
    async fn prepare(
        &self,
        held: &[HeldLane],
        in_flight: Option<&Round>,
    ) -> Result<Option<Round>, RelayError> {
        let mut cursors = self.cursors.lock().await;
        cursors.retain(|lane, c| held.iter().any(|h| h.lane == *lane && h.epoch == c.epoch));
        let missing: Vec<HeldLane> =
            held.iter().filter(|h| !cursors.contains_key(&h.lane)).copied().collect();
        if !missing.is_empty() {
            for c in self.store.lane_cursors(&missing).await? {
                cursors.insert(c.lane, c);
            }
        }
        let mut lanes: Vec<LaneCursor> = held.iter().filter_map(|h| cursors.remove(&h.lane)).collect();
        let skip: Vec<usize> = lanes
            .iter()
            .map(|c| in_flight.and_then(|r| r.pages.get(&c.lane)).map_or(0, |(ids, _)| ids.len()))
            .collect();
        // A batch carries at most `batch_size` events over all lanes: what a crash can make
        // the next owner send again.
        let per_lane = (self.settings.batch_size as usize / held.len().max(1)).max(1);
        let fetched = self.store.fast_batch(&mut lanes, &skip, per_lane as u32).await;
        let FastBatch { mut rows, waiting } = match fetched {
            Ok(batch) => batch,
            Err(err) => {
                cursors.extend(lanes.into_iter().map(|c| (c.lane, c)));
                return Err(err.into());
            }
        };
        let by_id: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        let mut pages: HashMap<i16, (Vec<i64>, LaneCursor)> = HashMap::new();
        for (c, skip) in lanes.iter().zip(&skip) {
            let mut page = Vec::new();
            for id in c.pending.iter().skip(*skip).take(per_lane) {
                let busy = by_id.get(id).is_some_and(|&i| {
                    in_flight.is_some_and(|r| r.aggregates.contains(&aggregate_of(&rows[i])))
                });
                if busy {
                    break;
                }
                page.push(*id);
            }
            let Some(&last) = page.last() else { continue };
            let mut next = LaneCursor { upto_id: last, ..c.clone_without_pending() };
            if next.current.is_some() && c.complete && skip + page.len() == c.pending.len() {
                // The whole difference is done: its snapshot is the lane's new floor.
                next.done = next.current.take();
                next.upto_id = 0;
            }
            pages.insert(c.lane, (page, next));
        }
        cursors.extend(lanes.into_iter().map(|c| (c.lane, c)));
        drop(cursors);
        if pages.is_empty() {
            return Ok(None);
        }
        let taken: HashSet<i64> = pages.values().flat_map(|(ids, _)| ids.iter().copied()).collect();
        rows.retain(|r| taken.contains(&r.id));
        let aggregates: HashSet<(String, String)> = rows.iter().map(aggregate_of).collect();
        let waiting = waiting.into_iter().collect();
        Ok(Some(Round { rows, pages, aggregates, waiting }))
    }

    /// Sends a batch in waves — the first event of each aggregate, then, once those are
    /// confirmed, the second, … — so that no event overtakes an earlier one of its aggregate
    /// that failed; an event whose aggregate waits on the slow path is held back behind it.
    ///
    /// Returns once the first wave is with the broker: awaiting what it returns waits for
    /// the confirms (and sends the later waves), so the next batch can go out meanwhile.
    async fn transmit(&self, round: Arc<Round>) -> InFlight<'_> {
        let now = self.clock.now();
        let mut sent = Sent { at: now, confirmed_at: now, ..Sent::default() };
        let mut remaining: Vec<usize> = Vec::with_capacity(round.rows.len());
        for (i, row) in round.rows.iter().enumerate() {
            if round.waiting.contains(&aggregate_of(row)) {
                sent.held_back.push(row.id);
            } else {
                remaining.push(i);
            }
        }
        let mut failed: HashSet<(String, String)> = HashSet::new();
        let (mut wave, mut later) = next_wave(&round.rows, remaining, &failed, &mut sent.held_back);
        // Every event held back: nothing to send (and no connection to open for it).
        let mut confirmation: PendingVerdicts = if wave.is_empty() {
            Box::pin(std::future::ready(Vec::new()))
        } else if !self.wave_may_go().await {
            sent.lapsed = true;
            wave.clear();
            Box::pin(std::future::ready(Vec::new()))
        } else {
            self.publisher.send(&wave).await
        };
        Box::pin(async move {
            let missing = PublishOutcome::Failed {
                code: FailureCode::ConfirmTimeout,
                reason: "no confirm reported".into(),
            };
            loop {
                let outcomes = confirmation.await;
                let confirmed_at = self.clock.now();
                sent.confirmed_at = confirmed_at;
                for (i, row) in wave.iter().enumerate() {
                    match outcomes.get(i).unwrap_or(&missing) {
                        PublishOutcome::Confirmed => {
                            sent.report.published += 1;
                            self.confirmed(row, confirmed_at);
                        }
                        PublishOutcome::Failed { code, reason } => {
                            failed.insert(aggregate_of(row));
                            let failure = self.failed(row, *code, reason, now, &mut sent.report);
                            sent.failures.push(failure);
                        }
                    }
                }
                if sent.lapsed {
                    break;
                }
                (wave, later) = next_wave(&round.rows, later, &failed, &mut sent.held_back);
                if wave.is_empty() {
                    break;
                }
                if !self.wave_may_go().await {
                    // Paused or starved past the lease mid-batch: this wave and the rest stay
                    // unsent; another worker may already be sending this lane.
                    sent.lapsed = true;
                    break;
                }
                confirmation = self.publisher.send(&wave).await;
            }
            sent.report.claimed = round.rows.len();
            sent.report.held_back = sent.held_back.len() as u64;
            sent
        })
    }

    /// Records a sent batch in one fenced transaction: the lanes' progress, failures and
    /// held-back events to the slow path. No row is updated for an event that went out.
    async fn record(&self, round: &Round, sent: Sent) -> Result<RelayReport, RelayError> {
        let mut report = sent.report;
        if sent.lapsed {
            // Not all of it went out: recording the lanes' progress would pass over the
            // unsent events. Nothing is recorded; the lanes are forgotten here and their next
            // owner (this worker again, once it renews) sends the batch from the start.
            let mut cursors = self.cursors.lock().await;
            for (lane, (page, _)) in &round.pages {
                cursors.remove(lane);
                report.lost_claims += page.len() as u64;
            }
            report.published = 0;
            tracing::warn!(
                lost = report.lost_claims,
                "outbox lane lease lapsed mid-batch; nothing more was sent and nothing recorded"
            );
            return Ok(report);
        }
        let progress = FastProgress {
            progress: round.pages.values().map(|(_, next)| next.clone()).collect(),
            failures: sent.failures,
            held_back: sent.held_back,
            attempted_at: sent.at,
        };
        // Dated by the broker's confirm, not by this write: `publishedAt` says when the
        // broker took the batch (commit -> confirm is what operators and the bench read).
        let recorded = self.store.record_fast(&self.settings.worker_id, &progress, sent.confirmed_at).await?;
        let mut cursors = self.cursors.lock().await;
        for (lane, (page, next)) in &round.pages {
            if recorded.contains(lane) {
                if let Some(c) = cursors.get_mut(lane) {
                    c.pending.drain(..page.len().min(c.pending.len()));
                    c.done = next.done.clone();
                    c.current = next.current.clone();
                    c.upto_id = next.upto_id;
                }
            } else {
                // Fenced: the lane changed hands; forget it (its next owner sends again).
                cursors.remove(lane);
                report.lost_claims += page.len() as u64;
            }
        }
        if report.lost_claims > 0 {
            tracing::warn!(lost = report.lost_claims, "outbox lanes lost before their progress was recorded");
        }
        let published = report.published;
        self.meter.record(|| metrics::counter!("outbox_published_total").increment(published));
        Ok(report)
    }

    /// Sends due slow-path rows of the lanes held (claimed, published, marked).
    async fn slow_round(&self, held: &[HeldLane]) -> Result<RelayReport, RelayError> {
        let batch = self.claim(held).await?;
        if batch.is_empty() || !self.lease_holds().await {
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
        let mut report = RelayReport::default();
        if let Some(round) = self.prepare(&held, None).await?
            && self.lease_holds().await
        {
            let round = Arc::new(round);
            let sent = self.transmit(round.clone()).await.await;
            report.add(self.record(&round, sent).await?);
        }
        report.add(self.slow_round(&held).await?);
        Ok(report)
    }

    /// Runs while there is work, pipelined: batch N goes out while batch N-1 still awaits
    /// its confirms (the publish window spans both, so the broker is never left idle for a
    /// batch's last confirm); meanwhile N-1 is recorded once confirmed and N+1 read, so the
    /// broker and the database work at the same time. N+1 is read after N-1 is recorded
    /// and leaves out N's aggregates: an event never overtakes an earlier one of its
    /// aggregate whose outcome is not recorded yet. Stops reading when `stop` is cancelled,
    /// but records what it sent.
    ///
    /// # Errors
    /// As [`Self::run_once`]; what earlier batches did stays recorded.
    pub async fn drain(&self, stop: &CancellationToken) -> Result<RelayReport, RelayError> {
        self.publisher.ready().await?;
        let mut total = RelayReport::default();
        loop {
            let held = self.lanes().await?;
            let mut current = self.prepare(&held, None).await?.map(Arc::new);
            let mut previous: Option<(Arc<Round>, InFlight<'_>)> = None;
            let mut worked = false;
            while let Some(round) = current.take() {
                if !self.lease_holds().await {
                    // Paused past the lease: nothing more goes out; the next owner sends it.
                    tracing::warn!("outbox lane lease lapsed before sending; batch left to the next owner");
                    break;
                }
                worked = true;
                let more = !stop.is_cancelled();
                // Overlap only under a backlog (a round of half a batch or more). A trickle's
                // round waits for the confirms of the one before it, as the events that
                // commit meanwhile make the next round fuller: overlapping tiny rounds costs
                // the database more statements per event (`bench latency` at 1 000
                // commits/s: the producers' own commits fell to 544–793/s, against 901–954/s
                // with this rule; docs/benchmarks.md).
                let mut confirmed = None;
                if round.rows.len() * 2 < self.settings.batch_size as usize
                    && let Some((r, confirming)) = previous.take()
                {
                    confirmed = Some((r, confirming.await));
                }
                let (in_flight, next) = tokio::join!(self.transmit(round.clone()), async {
                    if let Some((r, confirming)) = previous.take() {
                        confirmed = Some((r, confirming.await));
                    }
                    if let Some((r, sent)) = confirmed.take() {
                        total.add(self.record(&r, sent).await?);
                    }
                    if more { self.prepare(&held, Some(&round)).await } else { Ok(None) }
                });
                previous = Some((round, in_flight));
                // Nothing more is recorded after a failure: the batch on the wire goes out
                // again next time (duplicates). Recording it could pass over a failure of the
                // batch before it whose record is what failed.
                current = next?.map(Arc::new);
            }
            if let Some((r, confirming)) = previous.take() {
                let sent = confirming.await;
                total.add(self.record(&r, sent).await?);
            }
            let slow = self.slow_round(&held).await?;
            worked |= slow.claimed > 0;
            total.add(slow);
            if !worked || stop.is_cancelled() {
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
        while !stop.is_cancelled() {
            // A relay round as a span: its rounds show beside the events' publish spans (which
            // belong to the traces of the requests that wrote them).
            let round = tracing::info_span!("outbox.relay", otel.name = "outbox relay round");
            let idle = match self.drain(&stop).instrument(round).await {
                Ok(report) => {
                    failures = 0;
                    if let Some(p) = &self.progress {
                        p.ok(RELAY_LOOP);
                    }
                    if let Some(at) = report.next_retry_at {
                        next_retry = Some(next_retry.map_or(at, |t| t.min(at)));
                    }
                    report.claimed == 0
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    if let Some(p) = &self.progress {
                        p.failed(RELAY_LOOP, Chain(&err));
                    }
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::error!(error = %Chain(&err), failures, "outbox relay round failed");
                    }
                    true
                }
            };
            if !idle {
                continue;
            }
            let now = self.clock.now();
            if next_retry.is_some_and(|t| t <= now) {
                next_retry = None;
            }
            // Retries scheduled by any worker (or recovered from a dead one's lease), not only
            // this one's: the earliest due one bounds the idle sleep.
            match self.store.next_retry_at().await {
                Ok(Some(at)) => next_retry = Some(next_retry.map_or(at, |t| t.min(at))),
                Ok(None) => {}
                Err(err) => tracing::warn!(error = %Chain(&err), "cannot read the next retry; polling"),
            }
            let mut pause = self.settings.poll_interval;
            if let Some(at) = next_retry {
                let until = (at - now).to_std().unwrap_or_default();
                pause =
                    pause.min(until.max(StdDuration::from_millis(10))).min(self.settings.retry_poll_interval);
            }
            if failures > 0 {
                // Back off on a failing database or broker, up to the poll interval.
                pause = pause.min(StdDuration::from_millis(50) * 2u32.saturating_pow(failures.min(10)));
            }
            // Idle: sleep no longer than the next lane renewal, so that rebalancing and the
            // lease never wait on the poll interval.
            pause = pause.min(renew_every(self.settings.lease).max(StdDuration::from_millis(10)));
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.release().await;
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
