//! Notification retries and operator repair (docs/spec.md §3–§5).
//!
//! An attempt is two commits around the send: first a *claim* — the notification moves to
//! `PROCESSING` with a lease, conditional on the version loaded, so of any number of
//! concurrent claimers (scheduler ticks on many workers, an operator's `retry-due`) exactly
//! one wins and the others count it `skipped` — then the outcome, through the same rules as
//! the saga's first send ([`apply_send_result`]). A claim whose holder vanished is released
//! back to `RETRY_SCHEDULED` once its lease ends.

use std::sync::Arc;

use crate::application::commit::commit;
use crate::application::meter::Meter;
use crate::domain::audit::AuditAction;
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::jobs::PeriodicJob;
use crate::application::orchestration::notify::{apply_send_result, request_of};
use crate::application::ports::{
    Changes, Clock, NotificationRepository, Notifier, OrderRecord, OrderRepository, RepoError, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::ids::NotificationId;
use crate::domain::notification::{Notification, NotificationStatus};
use crate::domain::order::{FailureStage, Order, OrderStatus, SagaStep, StepStatus};
use crate::domain::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct NotificationRetrySettings {
    pub policy: RetryPolicy,
    /// How long a claimed attempt may take before another worker may take it over.
    pub lease: Duration,
    /// Notifications attempted per `retry-due` round.
    pub batch: u32,
    /// Scheduler interval (`notification.retry.interval`).
    pub interval: StdDuration,
}

/// What one `retry-due` round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetryReport {
    pub claimed: usize,
    pub succeeded: usize,
    pub failed: usize,
    /// Due when listed, but claimed by someone else first (or no longer due).
    pub skipped: usize,
    /// The notifications this round attempted.
    pub processed_ids: Vec<NotificationId>,
    /// Their orders' numbers, in the same order (the commerce dialect names a notification
    /// by its order's number).
    pub processed_orders: Vec<i64>,
}

/// One attempt's result.
enum Attempt {
    Lost,
    Sent(OrderRecord),
    Failed(OrderRecord),
}

enum Claim {
    /// The scheduler's: only a due `RETRY_SCHEDULED` notification.
    Due,
    /// An operator's: from `RETRY_SCHEDULED`, `MANUAL_INTERVENTION_REQUIRED` or `FAILED`,
    /// with their reason — audited in the same commit as the attempt's outcome, so the
    /// action and its audit row commit together or not at all.
    Reprocess(Option<String>),
}

pub struct NotificationRetry {
    orders: Arc<dyn OrderRepository>,
    notifications: Arc<dyn NotificationRepository>,
    uow: Arc<dyn UnitOfWork>,
    notifier: Arc<dyn Notifier>,
    clock: Arc<dyn Clock>,
    settings: NotificationRetrySettings,
    meter: Meter,
}

impl NotificationRetry {
    /// Records this service's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    pub fn new(
        orders: Arc<dyn OrderRepository>,
        notifications: Arc<dyn NotificationRepository>,
        uow: Arc<dyn UnitOfWork>,
        notifier: Arc<dyn Notifier>,
        clock: Arc<dyn Clock>,
        settings: NotificationRetrySettings,
    ) -> Self {
        NotificationRetry { orders, notifications, uow, notifier, clock, settings, meter: Meter::default() }
    }

    async fn record_of(&self, notification: &Notification) -> Result<OrderRecord, AppError> {
        let record = self.orders.get(notification.order_id).await?.ok_or(AppError::NotFound("order"))?;
        match &record.notification {
            Some(n) if n.id == notification.id => Ok(record),
            _ => Err(AppError::internal("notification does not belong to its order")),
        }
    }

    async fn attempt(&self, actor: &Actor, id: NotificationId, claim: Claim) -> Result<Attempt, AppError> {
        let stored = self.notifications.find(id).await?.ok_or(AppError::NotFound("notification event"))?;
        let mut record = self.record_of(&stored).await?;
        let Some(mut notification) = record.notification.clone() else {
            return Ok(Attempt::Lost);
        };
        let now = self.clock.now();
        let lease_until = now + self.settings.lease;
        let claimed = match claim {
            Claim::Due => {
                if notification.next_attempt_at.is_some_and(|at| at > now) {
                    return Ok(Attempt::Lost);
                }
                notification.claim(lease_until, now)
            }
            Claim::Reprocess(_) => notification.reprocess(lease_until, now),
        };
        if let Err(err) = claimed {
            return match claim {
                Claim::Due => Ok(Attempt::Lost),
                Claim::Reprocess(_) => Err(AppError::Conflict {
                    code: "NOTIFICATION_NOT_REPROCESSABLE",
                    message: err.to_string(),
                }),
            };
        }
        let mut changes = Changes::default();
        changes.update_notification(&mut notification);
        if !commit(self.uow.as_ref(), changes).await? {
            return match claim {
                Claim::Due => Ok(Attempt::Lost),
                Claim::Reprocess(_) => Err(AppError::Conflict {
                    code: "NOTIFICATION_BUSY",
                    message: "another attempt of this notification is in progress".into(),
                }),
            };
        }
        record.notification = Some(notification.clone());

        let request = request_of(&record, &notification);
        let result = self.notifier.send(&request).await;
        let now = self.clock.now();
        let mut outcome =
            apply_send_result(&record, notification, false, result, &self.settings.policy, actor, now)?;
        if let Claim::Reprocess(reason) = claim {
            let status = outcome.notification.status;
            outcome.changes.audit.push(reprocessed(&record, id, status, reason, actor, now));
        }
        let steps = outcome.changes.steps.clone();
        if !commit(self.uow.as_ref(), outcome.changes).await? {
            // Our lease was recovered by another worker meanwhile: its attempt decides.
            tracing::warn!(notification = %id, "notification outcome lost to a recovered claim");
            return Ok(Attempt::Lost);
        }
        record.order = outcome.order;
        record.notification = Some(outcome.notification);
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(if outcome.completed { Attempt::Sent(record) } else { Attempt::Failed(record) })
    }

    /// Attempts every due retry (up to the batch size) once.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails (attempts made
    /// so far stand).
    pub async fn retry_due(&self, actor: &Actor) -> Result<RetryReport, AppError> {
        actor.require_admin()?;
        let due = self.notifications.due(self.clock.now(), self.settings.batch).await?;
        let mut report = RetryReport::default();
        for notification in due {
            match self.attempt(actor, notification.id, Claim::Due).await? {
                Attempt::Lost => report.skipped += 1,
                Attempt::Sent(record) => {
                    report.claimed += 1;
                    report.succeeded += 1;
                    report.processed_ids.push(notification.id);
                    report.processed_orders.push(record.order.number);
                }
                Attempt::Failed(record) => {
                    report.claimed += 1;
                    report.failed += 1;
                    report.processed_ids.push(notification.id);
                    report.processed_orders.push(record.order.number);
                }
            }
        }
        self.meter.record(|| {
            metrics::counter!("notification_retries_total", "outcome" => "succeeded")
                .increment(report.succeeded as u64);
            metrics::counter!("notification_retries_total", "outcome" => "failed")
                .increment(report.failed as u64);
            metrics::counter!("notification_retries_total", "outcome" => "skipped")
                .increment(report.skipped as u64);
        });
        Ok(report)
    }

    /// An operator re-sends now.
    ///
    /// # Errors
    /// `Forbidden`; `NotFound`; `Conflict` `NOTIFICATION_NOT_REPROCESSABLE` unless the
    /// notification is `RETRY_SCHEDULED`, `MANUAL_INTERVENTION_REQUIRED` or `FAILED`.
    pub async fn reprocess(
        &self,
        actor: &Actor,
        id: NotificationId,
        reason: Option<String>,
    ) -> Result<OrderRecord, AppError> {
        self.may_repair(actor, id).await?;
        let reason = audit::reason(reason)?;
        match self.attempt(actor, id, Claim::Reprocess(reason)).await? {
            Attempt::Sent(record) | Attempt::Failed(record) => Ok(record),
            Attempt::Lost => Err(AppError::Conflict {
                code: "NOTIFICATION_BUSY",
                message: "another attempt of this notification is in progress".into(),
            }),
        }
    }

    /// An operator decides the customer need not be told: the notification is `IGNORED`
    /// and an order that failed only for it is `COMPLETED`.
    ///
    /// # Errors
    /// `Forbidden`; `NotFound`; `Conflict` `NOTIFICATION_NOT_IGNORABLE` unless the
    /// notification is `RETRY_SCHEDULED`, `MANUAL_INTERVENTION_REQUIRED` or `FAILED`.
    pub async fn ignore(
        &self,
        actor: &Actor,
        id: NotificationId,
        reason: Option<String>,
    ) -> Result<OrderRecord, AppError> {
        if actor.under.is_none() {
            // Anyone but an operator is refused before any read.
            actor.require_admin()?;
        }
        let reason = audit::reason(reason)?;
        let stored = self.notifications.find(id).await?.ok_or(AppError::NotFound("notification event"))?;
        let mut record = self.record_of(&stored).await?;
        actor.may_repair(&record.order, "notification event")?;
        let mut notification = record.notification.clone().ok_or(AppError::NotFound("notification event"))?;
        let now = self.clock.now();
        notification
            .ignore(now)
            .map_err(|e| AppError::Conflict { code: "NOTIFICATION_NOT_IGNORABLE", message: e.to_string() })?;
        let mut order: Order = record.order.clone();
        let order_events = if order.status == OrderStatus::Failed
            && order.failure_stage == Some(FailureStage::Notification)
        {
            order.complete(now).map_err(|e| AppError::internal(e.to_string()))?
        } else {
            Vec::new()
        };
        let mut changes = Changes::default();
        changes.update_notification(&mut notification);
        changes.update_order(&mut order);
        let detail = format!(
            "ignored by {}{}",
            actor.subject,
            reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default()
        );
        changes.step(order.id, SagaStep::Notification, StepStatus::Skipped, Some(detail), now);
        changes.audit.push(audit::record(
            AuditAction::NotificationIgnore,
            entity::ORDER,
            order.id,
            actor,
            reason,
            now,
        ));
        let mut events = EventWriter::new(&order, &record, now);
        events.order(&order_events);
        changes.outbox = events.finish();
        let steps = changes.steps.clone();
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(AppError::Conflict {
                code: "NOTIFICATION_BUSY",
                message: "the notification changed concurrently; retry".into(),
            });
        }
        record.order = order;
        record.notification = Some(notification);
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(record)
    }

    /// Notifications, optionally of one status: every merchant's to the operator, the
    /// merchant's to a caller let in under its path (docs/spec.md §15).
    ///
    /// # Errors
    /// `Forbidden`; `Validation` for a limit outside 1..=100.
    pub async fn list(
        &self,
        actor: &Actor,
        status: Option<NotificationStatus>,
        limit: u32,
    ) -> Result<Vec<Notification>, AppError> {
        let merchant = actor.repairs_in()?;
        if !(1..=100).contains(&limit) {
            return Err(AppError::validation("limit", "must be between 1 and 100"));
        }
        Ok(self.notifications.list(status, merchant, limit).await?)
    }

    /// `Forbidden` or `NotFound` unless `actor` may repair the notification's order.
    async fn may_repair(&self, actor: &Actor, id: NotificationId) -> Result<(), AppError> {
        if actor.under.is_none() {
            // The operator of every merchant (or no operator at all): asked before any read.
            actor.require_admin()?;
            if actor.merchant.is_none() {
                return Ok(());
            }
        }
        let stored = self.notifications.find(id).await?.ok_or(AppError::NotFound("notification event"))?;
        let record = self.record_of(&stored).await?;
        actor.may_repair(&record.order, "notification event")
    }

    /// Releases claims whose lease ended (their worker died mid-attempt).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn recover_stuck(&self) -> Result<usize, AppError> {
        let now = self.clock.now();
        let mut recovered = 0;
        for mut n in self.notifications.stuck(now, 100).await? {
            if n.release_claim(now).is_err() {
                continue;
            }
            let mut changes = Changes::default();
            changes.update_notification(&mut n);
            match self.uow.commit(changes).await {
                Ok(()) => recovered += 1,
                Err(RepoError::Conflict) => {}
                Err(err) => return Err(err.into()),
            }
        }
        if recovered > 0 {
            tracing::warn!(recovered, "released expired notification claims");
        }
        Ok(recovered)
    }
}

#[async_trait::async_trait]
impl PeriodicJob for NotificationRetry {
    fn name(&self) -> &'static str {
        "notification retries"
    }

    fn interval(&self) -> StdDuration {
        self.settings.interval
    }

    /// Claims whose holder vanished given back, then every due retry attempted once (the
    /// retries run even when the give-back failed; its failure is the round's).
    async fn round(&self) -> Result<Option<String>, AppError> {
        let recovered = self.recover_stuck().await;
        let r = self.retry_due(&Actor::system("notification-retry")).await?;
        recovered?;
        Ok((r.claimed > 0).then(|| {
            format!(
                "notification retries: claimed {} succeeded {} failed {} skipped {}",
                r.claimed, r.succeeded, r.failed, r.skipped
            )
        }))
    }
}

/// The audit row of an operator's reprocess, committed with its attempt's outcome.
fn reprocessed(
    record: &OrderRecord,
    id: NotificationId,
    status: crate::domain::notification::NotificationStatus,
    reason: Option<String>,
    actor: &Actor,
    now: chrono::DateTime<chrono::Utc>,
) -> crate::application::ports::AuditRecord {
    let detail = format!(
        "notification {id} -> {}{}",
        status.as_str(),
        reason.map(|r| format!("; reason: {r}")).unwrap_or_default()
    );
    audit::record(
        AuditAction::NotificationReprocess,
        entity::ORDER,
        record.order.id,
        actor,
        Some(detail),
        now,
    )
}

#[cfg(test)]
mod tests;
