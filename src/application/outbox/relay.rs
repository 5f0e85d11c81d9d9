//! The outbox relay: claims due rows, publishes them, records the broker's verdict.
//!
//! The relay claims only from the lanes it leases (SPEC §6): it renews them every
//! `renew_every`, holds its fair share as workers come and go, claims nothing in a lane once
//! its local view of the lease has run out (a paused worker stops before another may
//! start), and gives its lanes back when it stops.
//!
//! Claim and mark are two short transactions; no transaction is open while waiting for
//! the broker. A claim is a lease: if this worker dies, another recovers the rows when the
//! lease ends, and the mark here is conditional on still holding the claim, so a worker
//! whose lease was recovered can never overwrite the new owner's result. Nothing is
//! claimed while the broker is unreachable, so an outage spends no retry budget.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, Utc};
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

use crate::application::meter::Meter;
use crate::application::ports::{
    Clock, DeliveryFailure, EventPublisher, LaneFilter, OutboxRecord, OutboxStore, PublishOutcome, RepoError,
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
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayReport {
    pub claimed: usize,
    pub published: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    /// Rows whose claim was lost before marking (lease recovered elsewhere).
    pub lost_claims: u64,
    /// The earliest retry this round scheduled.
    pub next_retry_at: Option<DateTime<Utc>>,
}

/// Why a round did nothing useful.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] RepoError),
    #[error("broker unavailable: {0}")]
    Broker(String),
}

pub struct OutboxRelay {
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    settings: RelaySettings,
    wake: Arc<Notify>,
    meter: Meter,
    held: Mutex<HeldLanes>,
}

/// The lanes this relay leases, as of its last renewal.
#[derive(Debug, Default)]
struct HeldLanes {
    lanes: Vec<i16>,
    /// When the last renewal started (`None`: never renewed).
    renewed_at: Option<Instant>,
    /// Past this the lease may have lapsed: claim nothing until renewed.
    valid_until: Option<Instant>,
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
            meter: Meter::default(),
            held: Mutex::default(),
        }
    }

    /// Records this relay's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    pub fn worker_id(&self) -> &str {
        &self.settings.worker_id
    }

    /// The lanes this relay may claim from now, renewing the lease when due. A failed
    /// renewal keeps the lanes only while the previous lease surely holds.
    ///
    /// # Errors
    /// The renewal failed and the previous lease may have lapsed.
    pub async fn lanes(&self) -> Result<Vec<i16>, RepoError> {
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
                        tracing::info!(worker = %self.settings.worker_id, ?lanes, "outbox lanes held");
                    }
                    // A tenth of the lease is the margin for clock drift and a slow statement.
                    let lease = self.settings.lease.to_std().unwrap_or_default();
                    *held = HeldLanes {
                        lanes,
                        renewed_at: Some(started),
                        valid_until: Some(started + lease - lease / 10),
                    };
                }
                Err(err) if held.valid_until.is_some_and(|until| Instant::now() < until) => {
                    tracing::warn!(error = %err, "cannot renew the outbox lanes; the lease still holds");
                }
                Err(err) => {
                    held.lanes.clear();
                    return Err(err);
                }
            }
        }
        if held.valid_until.is_some_and(|until| Instant::now() >= until) {
            return Ok(Vec::new());
        }
        Ok(held.lanes.clone())
    }

    /// Whether the lanes' lease surely still holds (by this process's clock). Checked before
    /// each publish: a worker paused between claim and publish past its lease must not send
    /// what another worker may already be sending.
    async fn lease_holds(&self) -> bool {
        self.held.lock().await.valid_until.is_some_and(|until| Instant::now() < until)
    }

    /// Gives the lanes back (graceful stop): other workers take them at their next renewal.
    pub async fn release(&self) {
        let mut held = self.held.lock().await;
        if let Err(err) = self.store.release_lanes(&self.settings.worker_id).await {
            tracing::warn!(error = %err, "cannot give the outbox lanes back; they expire with their lease");
        }
        *held = HeldLanes::default();
    }

    async fn claim(&self) -> Result<Vec<OutboxRecord>, RepoError> {
        let lanes = self.lanes().await?;
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

    /// Records the broker's verdict on every row of a published batch.
    async fn settle(
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
            let outcome = outcomes.get(i).unwrap_or(&missing);
            match outcome {
                PublishOutcome::Confirmed => {
                    published.push(row.id);
                    let latency = (now - row.created_at).to_std().unwrap_or_default();
                    self.meter.record(|| {
                        metrics::histogram!("outbox_commit_to_confirm_seconds").record(latency.as_secs_f64());
                        metrics::counter!("outbox_confirms_total", "outcome" => "ack").increment(1);
                    });
                }
                PublishOutcome::Failed { code, reason } => {
                    self.meter.record(|| {
                        metrics::counter!("outbox_confirms_total", "outcome" => failure_label(*code))
                            .increment(1)
                    });
                    let outcome = self.settings.schedule.after_failure(row.retry_count, fastrand::f64(), now);
                    match outcome {
                        FailureOutcome::Retry { next_attempt_at, .. } => {
                            report.retried += 1;
                            report.next_retry_at = Some(
                                report.next_retry_at.map_or(next_attempt_at, |t| t.min(next_attempt_at)),
                            );
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
                    failures.push(DeliveryFailure {
                        id: row.id,
                        outcome,
                        code: *code,
                        reason: reason.clone(),
                    });
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

    /// Claims one batch, publishes it and marks every row by the broker's verdict.
    ///
    /// # Errors
    /// `Broker` when the broker cannot be reached (nothing was claimed); `Store` when the
    /// database fails — claimed rows then stay `PROCESSING` until their lease is
    /// recovered, never lost.
    pub async fn run_once(&self) -> Result<RelayReport, RelayError> {
        self.publisher.ready().await.map_err(RelayError::Broker)?;
        let batch = self.claim().await?;
        if batch.is_empty() || !self.lease_holds().await {
            return Ok(RelayReport::default());
        }
        let outcomes = self.publisher.publish(&batch).await;
        Ok(self.settle(&batch, outcomes).await?)
    }

    /// Drains while rows are due, pipelined: while batch N is on the wire, batch N+1 is
    /// claimed and batch N-1 marked, so the broker and the database work at the same time.
    /// Stops claiming when `stop` is cancelled but publishes and marks what it claimed.
    ///
    /// # Errors
    /// As [`Self::run_once`]; a batch published before the error is still marked.
    pub async fn drain(&self, stop: &CancellationToken) -> Result<RelayReport, RelayError> {
        self.publisher.ready().await.map_err(RelayError::Broker)?;
        let mut total = RelayReport::default();
        let add = |total: &mut RelayReport, r: RelayReport| {
            total.claimed += r.claimed;
            total.published += r.published;
            total.retried += r.retried;
            total.dead_lettered += r.dead_lettered;
            total.lost_claims += r.lost_claims;
            total.next_retry_at = match (total.next_retry_at, r.next_retry_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        };
        let mut batch = self.claim().await?;
        let mut previous: Option<(Vec<OutboxRecord>, Vec<PublishOutcome>)> = None;
        while !batch.is_empty() {
            if !self.lease_holds().await {
                // Paused past the lease: the claimed rows come back through lease recovery.
                tracing::warn!(
                    rows = batch.len(),
                    "outbox lane lease lapsed before publishing; batch left to recovery"
                );
                break;
            }
            let more = !stop.is_cancelled();
            let to_settle = previous.take();
            let (outcomes, next, settled) = tokio::join!(
                self.publisher.publish(&batch),
                async { if more { self.claim().await } else { Ok(Vec::new()) } },
                async {
                    match &to_settle {
                        Some((rows, outcomes)) => self.settle(rows, outcomes.clone()).await.map(Some),
                        None => Ok(None),
                    }
                },
            );
            let published = (std::mem::take(&mut batch), outcomes);
            match (next, settled) {
                (Ok(next), Ok(settled)) => {
                    if let Some(r) = settled {
                        add(&mut total, r);
                    }
                    previous = Some(published);
                    batch = next;
                }
                (next, settled) => {
                    // Mark what was published before giving up; the rest waits for its lease.
                    if let Ok(Some(r)) = settled {
                        add(&mut total, r);
                    }
                    if let Ok(r) = self.settle(&published.0, published.1).await {
                        add(&mut total, r);
                    }
                    next?;
                    settled?;
                }
            }
        }
        if let Some((rows, outcomes)) = previous {
            add(&mut total, self.settle(&rows, outcomes).await?);
        }
        Ok(total)
    }

    /// Runs rounds until `stop` is cancelled: back to back while rows are due, otherwise
    /// waiting for a wake-up (a commit), the next scheduled retry, or the poll interval.
    /// A round in progress finishes — its confirms are awaited and marked — before this
    /// returns, so a graceful stop leaves nothing to the lease timeout.
    pub async fn run_until_stopped(&self, stop: CancellationToken) {
        let mut failures: u32 = 0;
        let mut next_retry: Option<DateTime<Utc>> = None;
        while !stop.is_cancelled() {
            let idle = match self.drain(&stop).await {
                Ok(report) => {
                    failures = 0;
                    if let Some(at) = report.next_retry_at {
                        next_retry = Some(next_retry.map_or(at, |t| t.min(at)));
                    }
                    report.claimed == 0
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::error!(error = %err, failures, "outbox relay round failed");
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
                Err(err) => tracing::warn!(error = %err, "cannot read the next retry; polling"),
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
