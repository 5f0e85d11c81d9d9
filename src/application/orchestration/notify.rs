//! What a notification send's result does to the order, shared by the saga's first send
//! and by every later attempt (retry processor, operator reprocess).

use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{Changes, NotificationRequest, NotifyFailure, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::notification::{FailurePolicy, Notification, NotificationEvent};
use crate::domain::order::{
    FailureReason, FailureStage, Order, OrderEvent, OrderStatus, SagaStep, StepFact, StepStatus,
};
use crate::domain::retry::RetryPolicy;

/// What the notifier is asked to send for `record`'s `notification`: the completed order,
/// as this attempt (the first is 1).
pub fn request_of(record: &OrderRecord, notification: &Notification) -> NotificationRequest {
    NotificationRequest {
        notification_id: notification.id,
        order_id: record.order.id,
        order_number: record.order.number,
        merchant_id: record.order.merchant_id,
        event_type: OrderEvent::Completed.event_type(),
        order_status: OrderStatus::Completed.as_str(),
        amount: record.order.total,
        customer_id: record.order.customer_id.clone(),
        recipient: record.context.customer_email.clone(),
        attempt: notification.attempts + 1,
        scenario: record.context.scenario,
    }
}

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
    let mut send = Send {
        order: record.order.clone(),
        changes: Changes::default(),
        attempt: notification.attempts + 1,
        actor,
        now,
    };
    let (notification_events, order_events, completed) = match result {
        Ok(()) => send.sent(&mut notification, first_send)?,
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
            let detail = format!("{} (attempt {}): {}", failure.policy, send.attempt, failure.reason);
            if failure.policy == FailurePolicy::Ignore {
                (n, send.ignored(detail)?, true)
            } else {
                (n, send.failed(detail, &notification)?, false)
            }
        }
    };
    let Send { mut changes, mut order, .. } = send;
    changes.update_notification(&mut notification);
    changes.update_order(&mut order);
    let mut events = EventWriter::new(&order, record, now);
    events.notification(&notification, &notification_events).order(&order_events);
    changes.outbox = events.finish();
    Ok(SendOutcome { changes, order, notification, completed })
}

/// One send's outcome being written: the order as it becomes, and the writes so far.
struct Send<'a> {
    order: Order,
    changes: Changes,
    /// The attempt this send was (1 for the first).
    attempt: i32,
    actor: &'a Actor,
    now: DateTime<Utc>,
}

impl Send<'_> {
    fn audit(&mut self, action: AuditAction, detail: String) {
        let row = audit::record(action, entity::ORDER, self.order.id, self.actor, Some(detail), self.now);
        self.changes.audit.push(row);
    }

    fn step(&mut self, step: SagaStep, status: StepStatus, detail: String) {
        self.changes.step(self.order.id, step, status, Some(detail), self.now);
    }

    /// The order completed (an order completed already stays so: a later attempt's).
    fn complete(&mut self) -> Result<Vec<OrderEvent>, AppError> {
        if self.order.status == OrderStatus::Completed {
            return Ok(Vec::new());
        }
        self.order.complete(self.now).map_err(broken_invariant)
    }

    /// Sent: the notification's success, the order completed.
    fn sent(
        &mut self,
        notification: &mut Notification,
        first_send: bool,
    ) -> Result<(Vec<NotificationEvent>, Vec<OrderEvent>, bool), AppError> {
        let events = notification.mark_sent(self.now).map_err(broken_invariant)?;
        let detail = format!("sent (attempt {})", self.attempt);
        if !first_send {
            // A retry that went through is audited like the failures before it.
            self.audit(AuditAction::NotificationSent, detail.clone());
        }
        self.step(SagaStep::Notification, StepStatus::Success, detail);
        Ok((events, self.complete()?, true))
    }

    /// Failed under the `IGNORE` policy: skipped, and the order completes all the same.
    fn ignored(&mut self, detail: String) -> Result<Vec<OrderEvent>, AppError> {
        self.step(SagaStep::Notification, StepStatus::Skipped, detail.clone());
        self.audit(AuditAction::NotificationIgnored, detail);
        self.complete()
    }

    /// Failed: the order fails at its notification (unless it had already), payment and
    /// settlement standing; the notification waits for a retry or an operator
    /// (docs/spec.md §4: COMPENSATION READY).
    fn failed(&mut self, detail: String, notification: &Notification) -> Result<Vec<OrderEvent>, AppError> {
        let policy =
            StepFact::NotificationFailed(notification.policy.unwrap_or(FailurePolicy::ManualIntervention));
        let step = (SagaStep::Notification, StepStatus::Failed);
        self.changes.step_with_fact(self.order.id, step, detail.clone(), policy, self.now);
        self.audit(AuditAction::NotificationFailed, format!("{detail}; now {}", notification.status));
        if self.order.status == OrderStatus::Failed {
            return Ok(Vec::new());
        }
        let waiting = StepFact::AwaitingNotification(notification.status);
        let step = (SagaStep::Compensation, StepStatus::Ready);
        self.changes.step_with_fact(
            self.order.id,
            step,
            format!("notification {}", notification.status),
            waiting,
            self.now,
        );
        self.order
            .fail(FailureStage::Notification, FailureReason::NotificationFailed, self.now)
            .map_err(broken_invariant)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::orchestration::testing::{now, placed};
    use crate::domain::notification::NotificationStatus;

    /// [`placed`], its payment approved and settled: the notification is what is left.
    fn settled() -> OrderRecord {
        let mut record = placed();
        record.order.approve_payment(now()).unwrap();
        record.order.request_settlement(now()).unwrap();
        record
    }

    fn failure(policy: FailurePolicy) -> Result<(), NotifyFailure> {
        Err(NotifyFailure { policy, reason: "smtp down".into(), retry_after: None })
    }

    #[test]
    fn what_each_send_result_does_to_the_order() {
        use AuditAction as A;
        use StepStatus as S;
        let retry = RetryPolicy::new(3, chrono::Duration::minutes(1));
        let actor = Actor::system("saga");
        // A later attempt: the first failed (the order with it), the retry processor claimed it.
        let mut failed = settled();
        failed.order.fail(FailureStage::Notification, FailureReason::NotificationFailed, now()).unwrap();
        let mut claimed = Notification::new(failed.order.id, now());
        claimed.record_failure(FailurePolicy::AutoRetry, "x", &retry, now()).unwrap();
        claimed.claim(now(), now()).unwrap();
        let first = || (settled(), Notification::new(settled().order.id, now()));
        // (record, notification, first send, result, order after, notification after,
        //  steps written, audit rows, completed, order events)
        type Case = (
            (OrderRecord, Notification),
            bool,
            Result<(), NotifyFailure>,
            OrderStatus,
            NotificationStatus,
            Vec<(SagaStep, StepStatus)>,
            Vec<AuditAction>,
            bool,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            (
                first(),
                true,
                Ok(()),
                OrderStatus::Completed,
                NotificationStatus::Sent,
                vec![(SagaStep::Notification, S::Success)],
                vec![],
                true,
                vec!["order.completed"],
            ),
            (
                first(),
                true,
                failure(FailurePolicy::Ignore),
                OrderStatus::Completed,
                NotificationStatus::Ignored,
                vec![(SagaStep::Notification, S::Skipped)],
                vec![A::NotificationIgnored],
                true,
                vec!["order.completed"],
            ),
            (
                first(),
                true,
                failure(FailurePolicy::AutoRetry),
                OrderStatus::Failed,
                NotificationStatus::RetryScheduled,
                vec![(SagaStep::Notification, S::Failed), (SagaStep::Compensation, S::Ready)],
                vec![A::NotificationFailed],
                false,
                vec!["order.failed"],
            ),
            (
                first(),
                true,
                failure(FailurePolicy::ManualIntervention),
                OrderStatus::Failed,
                NotificationStatus::ManualInterventionRequired,
                vec![(SagaStep::Notification, S::Failed), (SagaStep::Compensation, S::Ready)],
                vec![A::NotificationFailed],
                false,
                vec!["order.failed"],
            ),
            (
                (failed.clone(), claimed.clone()),
                false,
                Ok(()),
                OrderStatus::Completed,
                NotificationStatus::Sent,
                vec![(SagaStep::Notification, S::Success)],
                vec![A::NotificationSent],
                true,
                vec!["order.completed"],
            ),
            (
                (failed.clone(), claimed.clone()),
                false,
                failure(FailurePolicy::AutoRetry),
                OrderStatus::Failed,
                NotificationStatus::RetryScheduled,
                vec![(SagaStep::Notification, S::Failed)],
                vec![A::NotificationFailed],
                false,
                vec![],
            ),
        ];
        for (
            i,
            ((record, notification), first_send, result, order, status, steps, audit, completed, events),
        ) in cases.into_iter().enumerate()
        {
            let out =
                apply_send_result(&record, notification, first_send, result, &retry, &actor, now()).unwrap();
            assert_eq!(
                (out.order.status, out.notification.status, out.completed),
                (order, status, completed),
                "case {i}"
            );
            let written: Vec<(SagaStep, StepStatus)> =
                out.changes.steps.iter().map(|s| (s.record.step, s.record.status)).collect();
            assert_eq!(written, steps, "case {i}");
            let audited: Vec<AuditAction> = out.changes.audit.iter().map(|a| a.action).collect();
            assert_eq!(audited, audit, "case {i}");
            let order_events: Vec<&str> = out
                .changes
                .outbox
                .iter()
                .map(|e| e.event_type.as_str())
                .filter(|t| t.starts_with("order."))
                .collect();
            assert_eq!(order_events, events, "case {i}");
            assert_eq!((out.changes.orders.len(), out.changes.notifications.len()), (1, 1), "case {i}");
        }
    }
}
