//! The compensation step's decision: a pure function of (record, the provider's answer
//! to the cancel, now). A cancel that failed leaves the order `FAILED` with the payment
//! `APPROVED`; the worker retries it with the same key (`cancel-{paymentRequestId}`) and,
//! when attempts run out, leaves it to an operator.

use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use super::outcome::{Progress, StepOutcome};
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{CancelError, Changes, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::order::{SagaStep, StepStatus};
use crate::domain::payment::Payment;

/// What the cancel's `answer` means for `payment` (`APPROVED`) and the order.
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub(super) fn decide(
    record: &OrderRecord,
    mut payment: Payment,
    answer: Result<(), CancelError>,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<StepOutcome, AppError> {
    let mut order = record.order.clone();
    let mut changes = Changes::default();
    let progress = match answer {
        Ok(()) => {
            let payment_events = payment.cancel("settlement failed", now).map_err(broken_invariant)?;
            let order_events = order.compensate(now).map_err(broken_invariant)?;
            changes.update_payment(&mut payment);
            changes.update_order(&mut order);
            changes.step(
                order.id,
                SagaStep::Compensation,
                StepStatus::Success,
                Some("payment cancelled".into()),
                now,
            );
            changes.audit.push(audit::record(
                AuditAction::Compensated,
                entity::ORDER,
                order.id,
                actor,
                Some("payment cancelled after settlement failure".into()),
                now,
            ));
            let mut events = EventWriter::new(&order, record, now);
            events.payment(&payment, &payment_events).order(&order_events);
            changes.outbox = events.finish();
            Progress::Continue
        }
        Err(err) => {
            // The order stays FAILED with the payment APPROVED; the worker retries the
            // compensation and, when attempts run out, leaves it to an operator.
            let detail = format!("cancel failed: {err}");
            changes.step(order.id, SagaStep::Compensation, StepStatus::Failed, Some(detail.clone()), now);
            changes.audit.push(audit::record(
                AuditAction::CompensationFailed,
                entity::ORDER,
                order.id,
                actor,
                Some(detail),
                now,
            ));
            // Touch the order so a concurrent run of this compensation conflicts.
            changes.update_order(&mut order);
            Progress::Stop
        }
    };
    let mut outcome = StepOutcome::new(changes, order, progress);
    outcome.payment = Some(payment);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::orchestration::outcome::record_in;
    use crate::application::ports::GatewayError;
    use crate::domain::order::{FailureReason, FailureStage, OrderStatus};
    use crate::domain::payment::PaymentStatus;

    /// (answer, payment after, order after, step, audit action)
    type Case = (Result<(), CancelError>, PaymentStatus, OrderStatus, StepStatus, AuditAction);

    #[test]
    fn a_cancel_compensates_and_a_failed_one_waits_for_the_worker() {
        let cases: [Case; 2] = [
            (
                Ok(()),
                PaymentStatus::Cancelled,
                OrderStatus::Cancelled,
                StepStatus::Success,
                AuditAction::Compensated,
            ),
            (
                Err(GatewayError::unavailable("503").into()),
                PaymentStatus::Approved,
                OrderStatus::Failed,
                StepStatus::Failed,
                AuditAction::CompensationFailed,
            ),
        ];
        for (answer, payment_status, order_status, step, action) in cases {
            let mut record = record_in(OrderStatus::PaymentApproved, Some(PaymentStatus::Approved));
            record.order.fail(FailureStage::Settlement, FailureReason::SettlementFailed, Utc::now()).unwrap();
            let payment = record.payment.clone().unwrap();
            let outcome = decide(&record, payment, answer, &Actor::system("t"), Utc::now()).unwrap();
            assert_eq!(outcome.payment.unwrap().status, payment_status);
            assert_eq!(outcome.order.status, order_status);
            assert_eq!(outcome.changes.steps[0].record.status, step);
            assert_eq!(outcome.changes.audit[0].action, action);
        }
    }
}
