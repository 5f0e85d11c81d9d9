//! What a notification send's result does to the order, shared by the saga's first send
//! and by every later attempt (retry processor, operator reprocess).

use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{Changes, NotifyFailure, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::notification::{FailurePolicy, Notification, RetryPolicy};
use crate::domain::order::{FailureReason, FailureStage, Order, OrderStatus, SagaStep, StepStatus};

/// The writes of one send's outcome, and the aggregates as they will be once committed.
pub struct SendOutcome {
    pub changes: Changes,
    pub order: Order,
    pub notification: Notification,
    /// The order is done (sent or ignored).
    pub completed: bool,
}

/// Applies `result` to `notification` (stored, `PENDING` on the first send — its intent was
/// committed before the call — and `PROCESSING` on a later attempt) and to the order: sent
/// or ignored completes the order; a failure fails it (first send) or leaves it `FAILED`
/// (later attempts), with the retry policy deciding the notification's next status.
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub fn apply_send_result(
    record: &OrderRecord,
    mut notification: Notification,
    first_send: bool,
    result: Result<(), NotifyFailure>,
    retry: &RetryPolicy,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<SendOutcome, AppError> {
    let mut order = record.order.clone();
    let mut changes = Changes::default();
    let attempt = notification.attempts + 1;
    let completes = |order: &mut Order| -> Result<_, AppError> {
        if order.status == OrderStatus::Completed {
            Ok(Vec::new())
        } else {
            order.complete(now).map_err(broken_invariant)
        }
    };
    let (notification_events, order_events, completed) = match result {
        Ok(()) => {
            let n = notification.mark_sent(now).map_err(broken_invariant)?;
            let detail = format!("sent (attempt {attempt})");
            if !first_send {
                // A retry that went through is audited like the failures before it.
                changes.audit.push(audit::record(
                    AuditAction::NotificationSent,
                    entity::ORDER,
                    order.id,
                    actor,
                    Some(detail.clone()),
                    now,
                ));
            }
            changes.step(order.id, SagaStep::Notification, StepStatus::Success, Some(detail), now);
            (n, completes(&mut order)?, true)
        }
        Err(failure) => {
            let n = notification
                .record_failure_not_before(
                    failure.policy,
                    failure.reason.clone(),
                    retry,
                    failure.retry_after.and_then(|d| chrono::Duration::from_std(d).ok()),
                    now,
                )
                .map_err(broken_invariant)?;
            let detail = format!("{} (attempt {attempt}): {}", failure.policy, failure.reason);
            if failure.policy == FailurePolicy::Ignore {
                changes.step(
                    order.id,
                    SagaStep::Notification,
                    StepStatus::Skipped,
                    Some(detail.clone()),
                    now,
                );
                changes.audit.push(audit::record(
                    AuditAction::NotificationIgnored,
                    entity::ORDER,
                    order.id,
                    actor,
                    Some(detail),
                    now,
                ));
                (n, completes(&mut order)?, true)
            } else {
                changes.step(order.id, SagaStep::Notification, StepStatus::Failed, Some(detail.clone()), now);
                changes.audit.push(audit::record(
                    AuditAction::NotificationFailed,
                    entity::ORDER,
                    order.id,
                    actor,
                    Some(format!("{detail}; now {}", notification.status)),
                    now,
                ));
                let order_events = if order.status == OrderStatus::Failed {
                    Vec::new()
                } else {
                    // Payment and settlement stand; the notification waits for a retry or
                    // an operator (docs/spec.md §4: COMPENSATION READY).
                    changes.step(
                        order.id,
                        SagaStep::Compensation,
                        StepStatus::Ready,
                        Some(format!("notification {}", notification.status)),
                        now,
                    );
                    order
                        .fail(FailureStage::Notification, FailureReason::NotificationFailed, now)
                        .map_err(broken_invariant)?
                };
                (n, order_events, false)
            }
        }
    };
    changes.update_notification(&mut notification);
    changes.update_order(&mut order);
    let mut events = EventWriter::new(&order, record, now);
    events.notification(&notification, &notification_events).order(&order_events);
    changes.outbox = events.finish();
    Ok(SendOutcome { changes, order, notification, completed })
}
