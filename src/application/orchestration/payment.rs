//! The payment step's decision: what a provider's answer to an approval means, as a pure
//! function of the answer — the saga's first approval and reconciliation's approve-again
//! read an answer the same way.

use crate::application::error::Chain;
use crate::application::error::broken_invariant;
use chrono::{DateTime, Utc};

use super::outcome::{Progress, StepOutcome};
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::ports::{ApprovalOutcome, Changes, GatewayError, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::order::{FailureReason, FailureStage, Order, OrderEvent, SagaStep, StepStatus};
use crate::domain::payment::{AUTHORIZATION_MISMATCH, Payment, PaymentEvent, PaymentStatus};

/// What an approval answer means for the saga.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalDecision {
    Approved {
        provider_transaction_id: String,
    },
    /// A business decline (`200 DECLINED` or a `4xx`).
    Declined {
        code: String,
        provider_transaction_id: Option<String>,
        detail: String,
    },
    /// Sent, but no answer we can act on: reconcile, never guess.
    Unknown {
        reason: String,
    },
    /// Never reached the provider (after its bounded retries): nothing was charged.
    Unavailable {
        reason: String,
    },
}

pub fn decide_approval(answer: Result<ApprovalOutcome, GatewayError>) -> ApprovalDecision {
    match answer {
        Ok(ApprovalOutcome::Approved { provider_transaction_id }) => {
            ApprovalDecision::Approved { provider_transaction_id }
        }
        Ok(ApprovalOutcome::Declined { code, provider_transaction_id }) => {
            let detail = format!("declined: {code}");
            ApprovalDecision::Declined { code, provider_transaction_id, detail }
        }
        Err(GatewayError::Rejected { code, message }) => {
            let detail = format!("declined: {code}: {message}");
            ApprovalDecision::Declined { code, provider_transaction_id: None, detail }
        }
        Ok(ApprovalOutcome::Unknown { reason }) => ApprovalDecision::Unknown { reason },
        Err(GatewayError::Unavailable(cause)) => {
            ApprovalDecision::Unavailable { reason: Chain(&cause).to_string() }
        }
    }
}

/// What an approval decision moves: the payment and the order, by their transitions.
struct Moves {
    payment_events: Vec<PaymentEvent>,
    order_events: Vec<OrderEvent>,
    step: StepStatus,
    detail: String,
    progress: Progress,
    audit_action: Option<AuditAction>,
    /// Whether the payment row is written (not when the provider could not be asked).
    write_payment: bool,
}

fn moves(
    order: &mut Order,
    payment: &mut Payment,
    decision: ApprovalDecision,
    now: DateTime<Utc>,
) -> Result<Moves, AppError> {
    let (payment_events, order_events, step, detail, progress, audit_action, write_payment);
    match decision {
        ApprovalDecision::Approved { provider_transaction_id } => {
            detail = format!("approved, provider transaction {provider_transaction_id}");
            payment_events = payment.approve(provider_transaction_id, now).map_err(broken_invariant)?;
            order_events = order.approve_payment(now).map_err(broken_invariant)?;
            (step, progress, audit_action, write_payment) =
                (StepStatus::Success, Progress::Continue, None, true);
        }
        ApprovalDecision::Declined { code, provider_transaction_id, detail: why } => {
            detail = why;
            payment_events = if code == AUTHORIZATION_MISMATCH {
                payment.refuse_authorization(now)
            } else {
                payment.decline(code, provider_transaction_id, now)
            }
            .map_err(broken_invariant)?;
            order_events = order
                .fail(FailureStage::Payment, FailureReason::PaymentDeclined, now)
                .map_err(broken_invariant)?;
            (step, progress, audit_action, write_payment) =
                (StepStatus::Failed, Progress::Stop, Some(AuditAction::PaymentDeclined), true);
        }
        ApprovalDecision::Unknown { reason } => {
            detail = format!("outcome unknown ({reason}); awaiting reconciliation");
            payment_events = payment.require_confirmation(now).map_err(broken_invariant)?;
            order_events = order.await_confirmation(now).map_err(broken_invariant)?;
            (step, progress, audit_action, write_payment) =
                (StepStatus::Ready, Progress::Stop, Some(AuditAction::PaymentOutcomeUnknown), true);
        }
        ApprovalDecision::Unavailable { reason } => {
            // Nothing was charged (or the same key makes a later attempt safe): the
            // payment row is not written, the order fails with a stable reason.
            detail = format!("provider unavailable: {reason}");
            payment_events = Vec::new();
            order_events = order
                .fail(FailureStage::Payment, FailureReason::ProviderUnavailable, now)
                .map_err(broken_invariant)?;
            (step, progress, audit_action, write_payment) =
                (StepStatus::Failed, Progress::Stop, Some(AuditAction::PaymentProviderUnavailable), false);
        }
    }
    Ok(Moves { payment_events, order_events, step, detail, progress, audit_action, write_payment })
}

/// What `decision` means for `payment` (the attempt's, `REQUESTED`; `stored` when its row
/// exists) and the order: the step's outcome, and its detail (kept for an outcome that
/// cannot be stored).
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub(super) fn decide(
    record: &OrderRecord,
    mut payment: Payment,
    stored: bool,
    decision: ApprovalDecision,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<(StepOutcome, String), AppError> {
    let mut order = record.order.clone();
    let mut changes = Changes::default();
    let Moves { payment_events, order_events, step, detail, progress, audit_action, write_payment } =
        moves(&mut order, &mut payment, decision, now)?;
    if write_payment {
        if stored {
            changes.update_payment(&mut payment);
        } else {
            changes.insert_payment(&mut payment);
        }
    }
    changes.update_order(&mut order);
    changes.step(order.id, SagaStep::Payment, step, Some(detail.clone()), now);
    if let Some(action) = audit_action {
        changes.audit.push(audit::record(action, entity::ORDER, order.id, actor, Some(detail.clone()), now));
    }
    let mut events = EventWriter::new(&order, record, now);
    events.payment(&payment, &payment_events).order(&order_events);
    changes.outbox = events.finish();
    let mut outcome = StepOutcome::new(changes, order, progress);
    outcome.payment = write_payment.then_some(payment);
    Ok((outcome, detail))
}

/// The outcome of an approval whose answer the store refused (a `providerTransactionId`
/// another payment already has): the provider has acted, so the payment becomes
/// `CONFIRMATION_REQUIRED` — never `CREATED` again, to be approved again and again — and
/// reconciliation (bounded) or an operator settles it. `number`: the payment's, when it is
/// not stored yet.
///
/// # Errors
/// `Internal` if the stored state does not allow the transition (a bug).
pub(super) fn unstorable(
    current: &OrderRecord,
    attempt: i32,
    number: i64,
    answer: &str,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<StepOutcome, AppError> {
    let mut payment = match &current.payment {
        Some(p) if p.status == PaymentStatus::Requested && p.attempt == attempt => p.clone(),
        _ => Payment { number, ..Payment::request(current.order.id, attempt, current.order.total, now) },
    };
    let stored = current.payment.as_ref().is_some_and(|p| p.id == payment.id);
    let mut order = current.order.clone();
    payment.require_confirmation(now).map_err(broken_invariant)?;
    order.await_confirmation(now).map_err(broken_invariant)?;
    let detail = format!("the provider's answer cannot be stored ({answer}); awaiting reconciliation");
    let mut changes = Changes::default();
    if stored {
        changes.update_payment(&mut payment);
    } else {
        changes.insert_payment(&mut payment);
    }
    changes.update_order(&mut order);
    changes.step(order.id, SagaStep::Payment, StepStatus::Ready, Some(detail.clone()), now);
    changes.audit.push(audit::record(
        AuditAction::PaymentOutcomeUnstorable,
        entity::ORDER,
        order.id,
        actor,
        Some(detail),
        now,
    ));
    let mut outcome = StepOutcome::new(changes, order, Progress::Stop);
    outcome.payment = Some(payment);
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_answer_has_one_meaning() {
        let cases = [
            (
                Ok(ApprovalOutcome::Approved { provider_transaction_id: "tx".into() }),
                ApprovalDecision::Approved { provider_transaction_id: "tx".into() },
            ),
            (
                Ok(ApprovalOutcome::Declined {
                    code: "CARD".into(),
                    provider_transaction_id: Some("tx".into()),
                }),
                ApprovalDecision::Declined {
                    code: "CARD".into(),
                    provider_transaction_id: Some("tx".into()),
                    detail: "declined: CARD".into(),
                },
            ),
            (
                Err(GatewayError::Rejected { code: "NO_FUNDS".into(), message: "no".into() }),
                ApprovalDecision::Declined {
                    code: "NO_FUNDS".into(),
                    provider_transaction_id: None,
                    detail: "declined: NO_FUNDS: no".into(),
                },
            ),
            (
                Ok(ApprovalOutcome::Unknown { reason: "timed out".into() }),
                ApprovalDecision::Unknown { reason: "timed out".into() },
            ),
            (Err(GatewayError::unavailable("503")), ApprovalDecision::Unavailable { reason: "503".into() }),
        ];
        for (answer, expected) in cases {
            assert_eq!(decide_approval(answer.clone()), expected, "{answer:?}");
        }
    }
}
