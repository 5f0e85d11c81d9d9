//! The outbox relay: claims due rows, publishes them, records the broker's verdict.
//!
//! Claim and mark are two short transactions; no transaction is open while waiting for
//! the broker. A claim is a lease: if this worker dies, another recovers the rows when the
//! lease ends, and the mark here is conditional on still holding the claim, so a worker
//! whose lease was recovered can never overwrite the new owner's result.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::application::ports::{
    Clock, DeliveryFailure, EventPublisher, OutboxStore, PublishOutcome, RepoError,
};
use crate::domain::outbox::{FailureOutcome, RetrySchedule};

#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// Stored in `claimed_by`; unique per relay.
    pub worker_id: String,
    pub batch_size: u32,
    /// How long a claim holds (`outbox.processing_timeout`).
    pub lease: Duration,
    /// Idle polling interval: the safety net behind wake-ups, never a cap on throughput.
    pub poll_interval: StdDuration,
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
}

pub struct OutboxRelay {
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn EventPublisher>,
    clock: Arc<dyn Clock>,
    settings: RelaySettings,
    wake: Arc<Notify>,
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
        }
    }

    /// Claims one batch, publishes it and marks every row by the broker's verdict.
    ///
    /// # Errors
    /// `Unavailable` when the database fails; claimed rows then stay `PROCESSING` until
    /// their lease is recovered — never lost.
    pub async fn run_once(&self) -> Result<RelayReport, RepoError> {
        let now = self.clock.now();
        let batch = self
            .store
            .claim(
                &self.settings.worker_id,
                self.settings.batch_size,
                now,
                now + self.settings.lease,
            )
            .await?;
        if batch.is_empty() {
            return Ok(RelayReport::default());
        }
        let outcomes = self.publisher.publish(&batch).await;
        let now = self.clock.now();
        let mut published = Vec::with_capacity(batch.len());
        let mut failures = Vec::new();
        let mut report = RelayReport {
            claimed: batch.len(),
            ..Default::default()
        };
        for (row, outcome) in batch
            .iter()
            .zip(outcomes.into_iter().chain(std::iter::repeat(
                // A publisher that returned too few outcomes: the missing ones are unconfirmed.
                PublishOutcome::Failed {
                    code: crate::domain::outbox::FailureCode::ConfirmTimeout,
                    reason: "no confirm reported".into(),
                },
            )))
        {
            match outcome {
                PublishOutcome::Confirmed => published.push(row.id),
                PublishOutcome::Failed { code, reason } => {
                    let outcome =
                        self.settings
                            .schedule
                            .after_failure(row.retry_count, fastrand::f64(), now);
                    match outcome {
                        FailureOutcome::Retry { .. } => report.retried += 1,
                        FailureOutcome::DeadLetter { .. } => report.dead_lettered += 1,
                    }
                    failures.push(DeliveryFailure {
                        id: row.id,
                        outcome,
                        code,
                        reason,
                    });
                }
            }
        }
        let worker = &self.settings.worker_id;
        if !published.is_empty() {
            report.published = self.store.mark_published(&published, worker, now).await?;
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

    /// Runs rounds until `stop` is cancelled: back to back while rows are due, otherwise
    /// waiting for a wake-up (a commit) or the poll interval. A round in progress finishes
    /// (its confirms are awaited and marked) before this returns.
    pub async fn run_until_stopped(&self, stop: CancellationToken) {
        let mut failures: u32 = 0;
        while !stop.is_cancelled() {
            let idle = match self.run_once().await {
                Ok(report) => {
                    failures = 0;
                    report.claimed == 0
                }
                Err(err) => {
                    failures = failures.saturating_add(1);
                    tracing::error!(error = %err, "outbox relay round failed");
                    true
                }
            };
            if !idle {
                continue;
            }
            let pause = if failures > 0 {
                // Back off on a failing database, up to the poll interval.
                (StdDuration::from_millis(100) * 2u32.saturating_pow(failures.min(10)))
                    .min(self.settings.poll_interval)
            } else {
                self.settings.poll_interval
            };
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }
}
