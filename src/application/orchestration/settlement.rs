//! The settlement step's decision: a pure function of (record, the settlement service's
//! answer, now). Only a refusal fails the settlement (and compensates the payment); a
//! settlement service that cannot be reached is tried again with backoff and then waits for
//! an operator — an accounting system being down never refunds a customer (docs/spec.md
//! §13).

use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use super::outcome::{Progress, StepOutcome};
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{Changes, GatewayError, OrderRecord, SettlementOutcome};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::order::{FailureReason, FailureStage, SagaStep, StepStatus};
use crate::domain::retry::RetryPolicy;
use crate::domain::settlement::{Settlement, SettlementEvent, SettlementStatus};

/// What `answer` means for `settlement` (stored, `REQUESTED`) and the order.
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub(super) fn decide(
    record: &OrderRecord,
    mut settlement: Settlement,
    answer: Result<SettlementOutcome, GatewayError>,
    retry: &RetryPolicy,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<StepOutcome, AppError> {
    let mut order = record.order.clone();
    let mut changes = Changes::default();
    let answer = match answer {
        Ok(answer) => answer,
        Err(err) => SettlementOutcome::Retry { reason: err.to_string(), retry_after: None },
    };
    let (settlement_events, order_events, step, detail, progress, audited) = match answer {
        SettlementOutcome::Succeeded => (
            settlement.succeed(now).map_err(broken_invariant)?,
            order.request_settlement(now).map_err(broken_invariant)?,
            StepStatus::Success,
            "settled".to_string(),
            Progress::Continue,
            None,
        ),
        SettlementOutcome::Failed { reason } => {
            let detail = format!("settlement failed: {reason}");
            let failed = order.fail(FailureStage::Settlement, FailureReason::SettlementFailed, now);
            let events = settlement.fail(reason, now).map_err(broken_invariant)?;
            let failed = failed.map_err(broken_invariant)?;
            (
                events,
                failed,
                StepStatus::Failed,
                detail,
                Progress::Continue,
                Some(AuditAction::SettlementFailed),
            )
        }
        SettlementOutcome::Retry { reason, retry_after } => {
            let (events, action, detail) = defer(&mut settlement, reason, retry_after, retry, now)?;
            // The order stays PAYMENT_APPROVED: nothing is compensated for an outage.
            (events, Vec::new(), StepStatus::Ready, detail, Progress::Stop, Some(action))
        }
    };
    if let Some(action) = audited {
        changes.audit.push(audit::record(action, entity::ORDER, order.id, actor, Some(detail.clone()), now));
    }
    // Unchanged by a deferral, but written all the same: the write fences the step's commit
    // and carries the saga lease's release.
    changes.update_order(&mut order);
    changes.update_settlement(&mut settlement);
    changes.step(order.id, SagaStep::Settlement, step, Some(detail), now);
    let mut events = EventWriter::new(&order, record, now);
    events.settlement(&settlement, &settlement_events).order(&order_events);
    changes.outbox = events.finish();
    let mut outcome = StepOutcome::new(changes, order, progress);
    outcome.settlement = Some(settlement);
    Ok(outcome)
}

/// A settlement not delivered: deferred by the retry policy (not before the other side's
/// `Retry-After`), or, its attempts spent, left for an operator; the audit action and detail
/// that say which.
fn defer(
    settlement: &mut Settlement,
    reason: String,
    retry_after: Option<std::time::Duration>,
    retry: &RetryPolicy,
    now: DateTime<Utc>,
) -> Result<(Vec<SettlementEvent>, AuditAction, String), AppError> {
    let not_before = retry_after.and_then(|d| chrono::Duration::from_std(d).ok());
    let events = settlement.defer(reason.clone(), retry, not_before, now).map_err(broken_invariant)?;
    let (action, next) = match settlement.next_attempt_at {
        Some(at) => (AuditAction::SettlementDeferred, format!("tried again at {}", at.to_rfc3339())),
        None => (AuditAction::SettlementAwaitingOperator, "waiting for an operator".to_owned()),
    };
    let detail = format!("settlement not delivered (attempt {}): {reason}; {next}", settlement.attempts);
    Ok((events, action, detail))
}

/// Once committed: a settlement whose attempts ran out is logged at WARN, the line an
/// operator's log alerting matches (docs/operations.md, "Settlements"), with what a repair
/// needs: the order's number and id, the settlement's id, its attempts and its last error.
pub(super) fn warn_if_awaiting_operator(record: &OrderRecord) {
    let Some(s) = record.settlement.as_ref().filter(|s| s.status == SettlementStatus::AwaitingOperator)
    else {
        return;
    };
    tracing::warn!(
        order = %record.order.id,
        order_number = record.order.number,
        settlement = %s.id,
        attempts = s.attempts,
        last_error = s.last_error.as_deref().unwrap_or(""),
        "settlement waiting for an operator: its attempts ran out; retry it or mark it settled \
         (console Settlements, or POST /api/admin/settlements/{{id}}/retry | mark-settled)"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::orchestration::outcome::record_in;
    use crate::domain::order::OrderStatus;
    use crate::domain::payment::PaymentStatus;

    /// (answer, settlement after, order after, step, audit rows)
    type Case = (Result<SettlementOutcome, GatewayError>, SettlementStatus, OrderStatus, StepStatus, usize);

    const RETRY: RetryPolicy = RetryPolicy::new(3, chrono::Duration::seconds(60));

    #[test]
    fn every_answer_decides_the_settlement_and_the_order() {
        let failed = || Ok(SettlementOutcome::Failed { reason: "bank closed".into() });
        let down = || Err(GatewayError::unavailable("503"));
        let busy = || Ok(SettlementOutcome::Retry { reason: "429".into(), retry_after: None });
        let cases: [Case; 4] = [
            (
                Ok(SettlementOutcome::Succeeded),
                SettlementStatus::Succeeded,
                OrderStatus::SettlementRequested,
                StepStatus::Success,
                0,
            ),
            (failed(), SettlementStatus::Failed, OrderStatus::Failed, StepStatus::Failed, 1),
            // docs/spec.md §13: an outage is tried again, the order left as it is (nothing
            // compensated).
            (down(), SettlementStatus::RetryScheduled, OrderStatus::PaymentApproved, StepStatus::Ready, 1),
            (busy(), SettlementStatus::RetryScheduled, OrderStatus::PaymentApproved, StepStatus::Ready, 1),
        ];
        for (answer, settlement_status, order_status, step, audits) in cases {
            let record = record_in(OrderStatus::PaymentApproved, Some(PaymentStatus::Approved));
            let payment = record.payment.clone().unwrap();
            let now = Utc::now();
            let settlement = Settlement::request(record.order.id, payment.id, payment.amount, now);
            let outcome = decide(&record, settlement, answer, &RETRY, &Actor::system("t"), now).unwrap();
            assert_eq!(outcome.settlement.unwrap().status, settlement_status);
            assert_eq!(outcome.order.status, order_status);
            assert_eq!(outcome.changes.steps[0].record.status, step);
            assert_eq!(outcome.changes.audit.len(), audits);
            if settlement_status == SettlementStatus::RetryScheduled {
                assert!(matches!(outcome.progress, Progress::Stop), "the retry processor goes on");
                assert!(outcome.changes.outbox.is_empty(), "no event: nothing happened to the order");
            } else {
                assert!(
                    matches!(outcome.progress, Progress::Continue),
                    "compensation or notification is next"
                );
            }
        }
    }
}
