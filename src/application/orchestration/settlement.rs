//! The settlement step's decision: a pure function of (record, the settlement service's
//! answer, now). A settlement service that cannot be reached is a failed settlement: the
//! payment is compensated rather than left approved with no settlement in sight.

use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use super::outcome::{Progress, StepOutcome};
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{Changes, GatewayError, OrderRecord, SettlementOutcome};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::order::{FailureReason, FailureStage, SagaStep, StepStatus};
use crate::domain::settlement::Settlement;

/// What `answer` means for `settlement` (new, `REQUESTED`) and the order.
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub(super) fn decide(
    record: &OrderRecord,
    mut settlement: Settlement,
    answer: Result<SettlementOutcome, GatewayError>,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<StepOutcome, AppError> {
    let mut order = record.order.clone();
    let mut changes = Changes::default();
    let failure = match answer {
        Ok(SettlementOutcome::Succeeded) => None,
        Ok(SettlementOutcome::Failed { reason }) => Some(reason),
        // The settlement service being down is a failed settlement: the payment is
        // compensated rather than left approved with no settlement in sight.
        Err(err) => Some(err.to_string()),
    };
    let (settlement_events, order_events, step, detail) = match failure {
        None => (
            settlement.succeed(now).map_err(broken_invariant)?,
            order.request_settlement(now).map_err(broken_invariant)?,
            StepStatus::Success,
            "settled".to_string(),
        ),
        Some(reason) => {
            let detail = format!("settlement failed: {reason}");
            changes.audit.push(audit::record(
                AuditAction::SettlementFailed,
                entity::ORDER,
                order.id,
                actor,
                Some(detail.clone()),
                now,
            ));
            (
                settlement.fail(reason, now).map_err(broken_invariant)?,
                order
                    .fail(FailureStage::Settlement, FailureReason::SettlementFailed, now)
                    .map_err(broken_invariant)?,
                StepStatus::Failed,
                detail,
            )
        }
    };
    changes.insert_settlement(&mut settlement);
    changes.update_order(&mut order);
    changes.step(order.id, SagaStep::Settlement, step, Some(detail), now);
    let mut events = EventWriter::new(&order, record, now);
    events.settlement(&settlement, &settlement_events).order(&order_events);
    changes.outbox = events.finish();
    let mut outcome = StepOutcome::new(changes, order, Progress::Continue);
    outcome.settlement = Some(settlement);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::orchestration::outcome::record_in;
    use crate::domain::order::OrderStatus;
    use crate::domain::payment::PaymentStatus;
    use crate::domain::settlement::SettlementStatus;

    /// (answer, settlement after, order after, step, audit rows)
    type Case = (Result<SettlementOutcome, GatewayError>, SettlementStatus, OrderStatus, StepStatus, usize);

    #[test]
    fn every_answer_decides_the_settlement_and_the_order() {
        let failed = || Ok(SettlementOutcome::Failed { reason: "bank closed".into() });
        let down = || Err(GatewayError::unavailable("503"));
        let cases: [Case; 3] = [
            (
                Ok(SettlementOutcome::Succeeded),
                SettlementStatus::Succeeded,
                OrderStatus::SettlementRequested,
                StepStatus::Success,
                0,
            ),
            (failed(), SettlementStatus::Failed, OrderStatus::Failed, StepStatus::Failed, 1),
            (down(), SettlementStatus::Failed, OrderStatus::Failed, StepStatus::Failed, 1),
        ];
        for (answer, settlement_status, order_status, step, audits) in cases {
            let record = record_in(OrderStatus::PaymentApproved, Some(PaymentStatus::Approved));
            let payment = record.payment.clone().unwrap();
            let now = Utc::now();
            let settlement = Settlement::request(record.order.id, payment.id, payment.amount, now);
            let outcome = decide(&record, settlement, answer, &Actor::system("t"), now).unwrap();
            assert_eq!(outcome.settlement.unwrap().status, settlement_status);
            assert_eq!(outcome.order.status, order_status);
            assert_eq!(outcome.changes.steps[0].record.status, step);
            assert_eq!(outcome.changes.audit.len(), audits);
            assert!(matches!(outcome.progress, Progress::Continue), "compensation or notification is next");
        }
    }
}
