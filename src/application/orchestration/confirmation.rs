//! Unknown payment outcomes (docs/spec.md §4, §9): a provider callback or the worker's
//! reconciliation learns the final answer of a `CONFIRMATION_REQUIRED` payment, records it
//! under the order's saga lease, and resumes the saga. Whichever comes first applies it.

use chrono::{DateTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::orchestration::orchestrator::Orchestrator;
use crate::application::orchestration::payment::{ApprovalDecision, decide_approval};
use crate::application::ports::{ApprovePayment, Changes, LookupOutcome, OrderRecord, RepoError};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{FailureReason, FailureStage, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::retry::{NextAttempt, RetryPolicy};

/// What the provider says became of a payment whose outcome was unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    Approved { provider_transaction_id: String },
    Declined { code: String, provider_transaction_id: Option<String> },
}

/// How one reconciliation of an unknown payment ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// The outcome is known now and the saga went on.
    Resolved(Box<OrderRecord>),
    /// Still unknown; asked again later.
    StillUnknown,
    /// Still unknown and out of attempts: an operator must decide.
    Exhausted,
    /// Another runner holds the order (a callback, most likely): nothing done.
    Busy,
    /// Not waiting for confirmation (any more).
    NotPending,
}

impl Orchestrator {
    /// Records the final outcome of a payment that was `CONFIRMATION_REQUIRED` and resumes
    /// the saga (settlement ... or the failure branch). Whichever of a provider callback and
    /// reconciliation comes first applies it; for the other this is a no-op.
    ///
    /// `Ok(None)`: another runner holds the order right now (try again shortly).
    ///
    /// # Errors
    /// `NotFound`; `Unavailable` when the database fails.
    pub async fn confirm_payment(
        &self,
        actor: &Actor,
        order_id: OrderId,
        confirmation: Confirmation,
        source: &str,
    ) -> Result<Option<OrderRecord>, AppError> {
        let held = self.leases.holding(order_id, async move |_| {
            let record = self.load(order_id).await?;
            let pending =
                record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::ConfirmationRequired);
            if !pending {
                return Ok(record);
            }
            match self.apply_confirmation(record, confirmation, actor, source).await? {
                Some(record) => self.drive(record, actor).await,
                // The pushed answer cannot be stored: the provider retries its callback, and
                // reconciliation (bounded) asks meanwhile.
                None => Err(AppError::unavailable("the provider's answer cannot be stored")),
            }
        });
        held.await?.transpose()
    }

    /// Applies a final answer to a `CONFIRMATION_REQUIRED` payment. `Ok(None)`: the answer
    /// cannot be stored as it is (its transaction id belongs to another payment) and the
    /// payment stays unknown; a lost race returns the state that won.
    async fn apply_confirmation(
        &self,
        mut record: OrderRecord,
        confirmation: Confirmation,
        actor: &Actor,
        source: &str,
    ) -> Result<Option<OrderRecord>, AppError> {
        let now = self.clock.now();
        let mut payment = record.payment.clone().ok_or_else(|| broken_invariant("no payment to confirm"))?;
        let mut order = record.order.clone();
        let mut changes = Changes::default();
        let (payment_events, order_events, step_status, action, detail) = match confirmation {
            Confirmation::Approved { provider_transaction_id } => {
                let detail = format!("approved ({source}), provider transaction {provider_transaction_id}");
                let p = payment.approve(provider_transaction_id, now).map_err(broken_invariant)?;
                let o = order.approve_payment(now).map_err(broken_invariant)?;
                (p, o, StepStatus::Success, AuditAction::PaymentConfirmed, detail)
            }
            Confirmation::Declined { code, provider_transaction_id } => {
                let detail = format!("declined ({source}): {code}");
                let p = payment.decline(code, provider_transaction_id, now).map_err(broken_invariant)?;
                let o = order
                    .fail(FailureStage::Payment, FailureReason::PaymentDeclined, now)
                    .map_err(broken_invariant)?;
                (p, o, StepStatus::Failed, AuditAction::PaymentDeclined, detail)
            }
        };
        changes.step(order.id, SagaStep::Payment, step_status, Some(detail.clone()), now);
        changes.audit.push(audit::record(action, entity::ORDER, order.id, actor, Some(detail), now));
        changes.update_payment(&mut payment);
        changes.update_order(&mut order);
        let mut events = EventWriter::new(&order, &record, now);
        events.payment(&payment, &payment_events).order(&order_events);
        changes.outbox = events.finish();
        let steps = changes.steps.clone();
        if !commit(self.uow.as_ref(), changes).await? {
            let current = self.load(record.order.id).await?;
            let unchanged = current.order.version == record.order.version
                && current.payment.as_ref().map(|p| p.version) == record.payment.as_ref().map(|p| p.version);
            return Ok((!unchanged).then_some(current));
        }
        record.order = order;
        record.payment = Some(payment);
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(Some(record))
    }

    /// Asks the provider what became of an unknown payment (by `paymentRequestId`) and
    /// resumes the saga when it knows; a request the provider never took is approved again
    /// with the same key. Each inconclusive look-up counts, spaced by `lookups`; once its
    /// attempts are spent the payment is left to an operator.
    ///
    /// # Errors
    /// `NotFound`; `Unavailable` when the database fails.
    pub async fn reconcile_payment(
        &self,
        actor: &Actor,
        order_id: OrderId,
        lookups: RetryPolicy,
    ) -> Result<Reconciled, AppError> {
        let reconcile = async move |_: &_| self.reconcile_leased(actor, order_id, lookups).await;
        self.leases.holding(order_id, reconcile).await?.unwrap_or(Ok(Reconciled::Busy))
    }

    async fn reconcile_leased(
        &self,
        actor: &Actor,
        order_id: OrderId,
        lookups: RetryPolicy,
    ) -> Result<Reconciled, AppError> {
        let record = self.load(order_id).await?;
        let Some(payment) =
            record.payment.clone().filter(|p| p.status == PaymentStatus::ConfirmationRequired)
        else {
            return Ok(Reconciled::NotPending);
        };
        let confirmation = self.ask_provider(&record, &payment).await?;
        if let Some(confirmation) = confirmation {
            let answer = format!("{confirmation:?}");
            match self.apply_confirmation(record, confirmation, actor, "reconciliation").await? {
                Some(record) => {
                    let record = self.drive(record, actor).await?;
                    return Ok(Reconciled::Resolved(Box::new(record)));
                }
                // Not resolved: the answer cannot be stored. Count the attempt like an
                // inconclusive look-up, so the loop ends with an operator, not forever.
                None => tracing::error!(order = %order_id, %answer, "reconciled answer cannot be stored"),
            }
        }
        // Still unknown: count the attempt, back off, and hand over when out of attempts.
        let (changes, exhausted) = unknown_attempt(payment, &lookups, actor, self.clock.now())?;
        match self.uow.commit(changes).await {
            Ok(()) | Err(RepoError::Conflict) => {}
            Err(err) => return Err(err.into()),
        }
        Ok(if exhausted { Reconciled::Exhausted } else { Reconciled::StillUnknown })
    }

    /// What the provider says became of the payment, where it says: a look-up, and where
    /// it never took the request, the same request again (its key cannot charge twice).
    async fn ask_provider(
        &self,
        record: &OrderRecord,
        payment: &Payment,
    ) -> Result<Option<Confirmation>, AppError> {
        let scenario = record.context.scenario;
        Ok(match self.payments.lookup(&payment.payment_request_id, &scenario).await {
            Ok(LookupOutcome::Approved { provider_transaction_id }) => {
                Some(Confirmation::Approved { provider_transaction_id })
            }
            Ok(LookupOutcome::Declined { code, provider_transaction_id }) => {
                Some(Confirmation::Declined { code, provider_transaction_id })
            }
            // Charged, and part of it refunded since (at the provider): the charge stands.
            Ok(LookupOutcome::PartlyCancelled { provider_transaction_id, .. }) => {
                Some(Confirmation::Approved { provider_transaction_id })
            }
            Ok(LookupOutcome::Cancelled { provider_transaction_id, .. }) => Some(Confirmation::Declined {
                code: "CANCELLED_BY_PROVIDER".into(),
                provider_transaction_id: Some(provider_transaction_id),
            }),
            Ok(LookupOutcome::NotFound) => {
                let request = ApprovePayment {
                    order_id: record.order.id,
                    customer_id: record.order.customer_id.clone(),
                    payment_request_id: payment.payment_request_id.clone(),
                    amount: payment.amount,
                    order_name: record.order.name(),
                    authorization: self.authorization(record, payment).await?,
                    scenario,
                };
                match decide_approval(self.charge(&request).await) {
                    ApprovalDecision::Approved { provider_transaction_id } => {
                        Some(Confirmation::Approved { provider_transaction_id })
                    }
                    ApprovalDecision::Declined { code, provider_transaction_id, .. } => {
                        Some(Confirmation::Declined { code, provider_transaction_id })
                    }
                    ApprovalDecision::Unknown { .. } | ApprovalDecision::Unavailable { .. } => None,
                }
            }
            Err(_) => None,
        })
    }
}

/// A look-up that settled nothing: the attempt counted, the next one scheduled by `lookups`,
/// and once its attempts are spent the payment step handed to an operator (`READY`, audited). Returns the writes and whether the attempts are spent.
///
/// # Errors
/// `Internal` if the payment does not allow the attempt (a bug).
fn unknown_attempt(
    mut payment: Payment,
    lookups: &RetryPolicy,
    actor: &Actor,
    now: DateTime<Utc>,
) -> Result<(Changes, bool), AppError> {
    let order_id = payment.order_id;
    let next = payment.record_unsettled_lookup(lookups, now).map_err(broken_invariant)?;
    let exhausted = next == NextAttempt::Operator;
    let mut changes = Changes::default();
    changes.update_payment(&mut payment);
    if exhausted {
        let detail = format!(
            "outcome still unknown after {} look-ups; an operator must decide",
            payment.reconcile_attempts
        );
        changes.step(order_id, SagaStep::Payment, StepStatus::Ready, Some(detail.clone()), now);
        changes.audit.push(audit::record(
            AuditAction::ReconciliationExhausted,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            now,
        ));
    }
    Ok((changes, exhausted))
}
