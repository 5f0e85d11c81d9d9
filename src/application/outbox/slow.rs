//! The relay's slow path: failed events, and those held back behind them, as rows with a
//! status — claimed (a lease per row), published, and recorded (published, retried with
//! backoff and jitter, or dead-lettered past `max_retries`).

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::pipeline::verdicts_for;
use super::relay::{OutboxRelay, failure_label};
use super::report::{RelayError, RelayReport, Resend};
use crate::application::ports::{DeliveryFailure, HeldLane, OutboxRecord, PublishOutcome, RepoError};
use crate::domain::outbox::{FailureCode, FailureOutcome};

impl OutboxRelay {
    /// Claims due slow-path rows in the lanes this relay holds.
    pub(super) async fn claim(&self, held: &[HeldLane]) -> Result<Vec<OutboxRecord>, RepoError> {
        let lanes: Vec<i16> = held.iter().map(|h| h.lane).collect();
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        self.store
            .claim(&self.settings.worker_id, &lanes, self.settings.batch_size, now, now + self.settings.lease)
            .await
    }

    /// Counts `events` that reached the broker, or may have, and will be sent again: each
    /// may reach consumers twice, under the same `message_id` (docs/reliability.md, "When a
    /// message is delivered twice").
    pub(super) fn resending(&self, cause: Resend, events: usize) {
        if events == 0 {
            return;
        }
        self.meter.record(|| {
            metrics::counter!("outbox_resent_total", "cause" => cause.as_str()).increment(events as u64)
        });
        tracing::warn!(
            events,
            cause = cause.as_str(),
            "outbox events will be sent again (duplicates possible)"
        );
    }

    /// Counts a confirmed row's delivery.
    pub(super) fn confirmed(&self, row: &OutboxRecord, now: DateTime<Utc>) {
        let latency = (now - row.created_at).to_std().unwrap_or_default();
        self.meter.record(|| {
            metrics::histogram!("outbox_commit_to_confirm_seconds").record(latency.as_secs_f64());
            metrics::counter!("outbox_confirms_total", "outcome" => "ack").increment(1);
        });
    }

    /// What becomes of a row the broker did not take: a retry with backoff and jitter, or a
    /// dead letter past `max_retries`.
    pub(super) fn failed(
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
                if matches!(code, FailureCode::ConfirmTimeout | FailureCode::ConnectionLost) {
                    // Sent, and no verdict: the broker may have the first copy.
                    self.resending(Resend::ConfirmUnknown, 1);
                    report.resent += 1;
                }
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
    pub(super) async fn record_slow(
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
            report.published = match self.store.mark_published(&published, worker, now).await {
                Ok(marked) => marked,
                Err(err) => {
                    // Left claimed: recovered once the claim's lease ends, and sent again.
                    self.resending(Resend::RecordFailed, published.len());
                    return Err(err);
                }
            };
            let published = report.published;
            self.meter.record(|| metrics::counter!("outbox_published_total").increment(published));
        }
        if !failures.is_empty() {
            let marked = self.store.mark_failed(&failures, worker, now).await?;
            report.lost_claims += failures.len() as u64 - marked;
        }
        // Confirmed, but the claim was recovered elsewhere first: sent again there (or
        // already).
        let unmarked = published.len() - report.published as usize;
        report.lost_claims += unmarked as u64;
        self.resending(Resend::ClaimLost, unmarked);
        report.resent += unmarked as u64;
        if report.lost_claims > 0 {
            tracing::warn!(
                lost = report.lost_claims,
                "outbox claims lost before marking (lease recovered elsewhere)"
            );
        }
        Ok(report)
    }

    /// Sends due slow-path rows of the lanes held (claimed, published, marked).
    pub(super) async fn slow_round(&self, held: &[HeldLane]) -> Result<RelayReport, RelayError> {
        let batch: Vec<Arc<OutboxRecord>> = self.claim(held).await?.into_iter().map(Arc::new).collect();
        if batch.is_empty() || !self.lease_holds() {
            return Ok(RelayReport::default());
        }
        let outcomes = self.publisher.publish(&batch).await;
        Ok(self.record_slow(&batch, outcomes).await?)
    }
}
