//! A provider's answer to a refund, recorded: a stale balance restated once, the answer decided
//! by [`super::decide`] and committed.

use super::decide::{self, Verdict, pending_refund};
use super::{RefundAnswer, RefundOutcome, RefundRequest, Refunds, Restate, changed_concurrently};
use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::error::{Chain, broken_invariant};
use crate::application::ports::{
    CancelError, CancelPayment, Changes, GatewayError, InboxEntry, OrderRecord, RepoError, Scenario,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{OrderId, RefundId};
use crate::domain::payment::{Payment, Refund, RefundStatus};

impl Refunds {
    /// The call and the outcome commit of the skeleton for the pending refund `refund_id`.
    pub(super) async fn finish(
        &self,
        record: OrderRecord,
        refund_id: RefundId,
        actor: &Actor,
        inbox: Option<InboxEntry>,
        scenario: Scenario,
        restate: Restate,
    ) -> Result<RefundOutcome, AppError> {
        let mut effective = record.context.scenario;
        if scenario.refund.is_some() {
            effective.refund = scenario.refund;
        }
        let answer = self.ask_provider(&record, refund_id, effective).await?;
        if let RefundAnswer::StaleBalance(why) = answer {
            return self.restate(record, refund_id, why, actor, (inbox, scenario), restate).await;
        }
        self.record_outcome(record, refund_id, answer, actor, inbox).await
    }

    /// The provider refused the pending refund because the balance it was sent with is not
    /// the provider's: a cancel was made outside the service (Toss's dashboard) that we have
    /// not recorded yet — its webhook late or lost. Nothing moved, and the same request
    /// would be refused again. So the refund is superseded: recorded `FAILED` (no event:
    /// nothing was refused to anyone; its request key is handed on), the provider's cancels
    /// are recorded as its refunds, and the request is asked again, once, against the new
    /// balance — the rest, for a refund of the whole balance; the same amount, where the
    /// balance still holds it; else refused, with the new balance in the reason.
    pub(super) async fn restate(
        &self,
        record: OrderRecord,
        refund_id: RefundId,
        why: String,
        actor: &Actor,
        (inbox, scenario): (Option<InboxEntry>, Scenario),
        restate: Restate,
    ) -> Result<RefundOutcome, AppError> {
        let order_id = record.order.id;
        let (mut refund, whole) = self.supersede(&record, refund_id, &why, actor).await?;
        self.sync_leased(order_id).await?;
        let current = self.load(order_id).await?;
        let balance = current.payment.as_ref().map_or(0, |p| p.balance());
        let amount = (!whole).then_some(refund.amount.minor());
        let fits = Self::refundable(&current) && amount.is_none_or(|a| a <= balance);
        if restate == Restate::No || !fits {
            let reason = format!("STALE_BALANCE: {why}; the balance at the provider is now {balance}");
            let mut changes = Changes::default();
            let detail = format!("refund {} of {}: {reason}", refund.id, refund.amount.minor());
            let now = self.clock.now();
            changes.audit.push(audit::record(
                AuditAction::RefundRejected,
                entity::ORDER,
                order_id,
                actor,
                Some(detail),
                now,
            ));
            changes.inbox.extend(inbox);
            self.uow.commit(changes).await?;
            return Ok(RefundOutcome::Rejected { record: current, reason });
        }
        let again = RefundRequest {
            reason: Some(refund.reason),
            amount,
            request_key: refund.request_key.take(),
            inbox,
            causation_id: refund.causation_id,
            scenario,
        };
        Box::pin(self.refund_leased(actor, order_id, again, Restate::No)).await
    }

    /// The pending refund superseded: recorded `FAILED` with no event (the request goes on
    /// as another refund) and audited. Answers the refund as it was, its request key kept
    /// to hand on, and whether it asked for the whole balance.
    async fn supersede(
        &self,
        record: &OrderRecord,
        refund_id: RefundId,
        why: &str,
        actor: &Actor,
    ) -> Result<(Refund, bool), AppError> {
        let now = self.clock.now();
        let mut payment = record.payment.clone().ok_or_else(|| broken_invariant("no payment"))?;
        let mut refund = pending_refund(record, refund_id)?.clone();
        let whole = refund.amount.minor() == payment.balance();
        let request_key = refund.request_key.take();
        payment
            .record_refund_failure(&mut refund, format!("STALE_BALANCE: {why}"), now)
            .map_err(broken_invariant)?;
        let mut changes = Changes::default();
        changes.update_payment(&mut payment);
        changes.update_refund(&mut refund);
        let detail = format!(
            "refund {} of {} superseded: {why}; the provider's cancels are recorded and the request is decided against its balance",
            refund.id,
            refund.amount.minor()
        );
        let order_id = record.order.id;
        changes.audit.push(audit::record(
            AuditAction::RefundBalanceMismatch,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            now,
        ));
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(changed_concurrently());
        }
        refund.request_key = request_key;
        Ok((refund, whole))
    }

    /// The call of the skeleton: the provider's cancel of the refund's amount with the
    /// refund's own key, so asking again never refunds twice.
    pub(super) async fn ask_provider(
        &self,
        record: &OrderRecord,
        refund_id: RefundId,
        scenario: Scenario,
    ) -> Result<RefundAnswer, AppError> {
        let payment = record.payment.as_ref().ok_or_else(|| broken_invariant("no payment"))?;
        let refund = pending_refund(record, refund_id)?;
        let request = CancelPayment {
            payment_id: payment.id,
            payment_request_id: payment.payment_request_id.clone(),
            provider_transaction_id: payment
                .provider_transaction_id
                .clone()
                .ok_or_else(|| broken_invariant("approved payment without a provider transaction"))?,
            idempotency_key: refund.idempotency_key.clone(),
            amount: refund.amount,
            balance: crate::domain::money::Money::new(payment.balance(), payment.amount.currency())
                .map_err(broken_invariant)?,
            reason: refund.reason.clone(),
            scenario,
        };
        Ok(match self.payments.cancel(&request).await {
            Ok(receipt) => RefundAnswer::Refunded(receipt),
            Err(CancelError::Gateway(GatewayError::Rejected { code, message })) => {
                RefundAnswer::Refused { code, message, already_cancelled: false }
            }
            Err(CancelError::AlreadyCancelled { code, message }) => {
                RefundAnswer::Refused { code, message, already_cancelled: true }
            }
            Err(CancelError::StaleBalance { message }) => RefundAnswer::StaleBalance(message),
            Err(CancelError::Gateway(GatewayError::Unavailable(cause))) => {
                RefundAnswer::Unknown(Chain(&cause).to_string())
            }
        })
    }

    /// The outcome commit of the skeleton. `Unknown` keeps the refund pending (one more
    /// attempt counted, the next due after a backoff) and answers `Unavailable`: the refund
    /// is not lost, the worker or the same request again finishes it.
    pub(super) async fn record_outcome(
        &self,
        record: OrderRecord,
        refund_id: RefundId,
        answer: RefundAnswer,
        actor: &Actor,
        inbox: Option<InboxEntry>,
    ) -> Result<RefundOutcome, AppError> {
        self.record_outcome_with(record, refund_id, answer, actor, inbox, Changes::default()).await
    }

    /// [`Self::record_outcome`], committed together with `changes` (an operator's audit).
    pub(super) async fn record_outcome_with(
        &self,
        mut record: OrderRecord,
        refund_id: RefundId,
        answer: RefundAnswer,
        actor: &Actor,
        inbox: Option<InboxEntry>,
        changes: Changes,
    ) -> Result<RefundOutcome, AppError> {
        let now = self.clock.now();
        let order_id = record.order.id;
        let decided = decide::decide(&record, refund_id, answer, actor, &self.settings, now, changes)?;
        let (mut changes, order, payment, refund) =
            (decided.changes, decided.order, decided.payment, decided.refund);
        let (rejected, already_cancelled) = match decided.verdict {
            Verdict::Refunded => (None, false),
            Verdict::Rejected { reason, already_cancelled } => (Some(reason), already_cancelled),
            Verdict::Pending { reason } => return self.still_pending(record, payment, changes, reason).await,
        };
        changes.inbox.extend(inbox);
        let steps = changes.steps.clone();
        let committed = match commit(self.uow.as_ref(), changes).await {
            Ok(committed) => committed,
            Err(err) if err.is_transient() => {
                // The provider answered, the intent is committed, its outcome is not: the
                // refund is pending (the worker asks again with its key and records it), and
                // the client is told so — an error here would invite a second refund
                // (issue 43 item 8).
                tracing::warn!(order = %order_id, error = %Chain(&err), "a refund's outcome could not be recorded");
                let reason = "the provider answered but its answer could not be recorded; the refund is pending and will be completed".to_owned();
                return Ok(RefundOutcome::Pending { record, reason });
            }
            Err(err) => return Err(err),
        };
        if !committed {
            return self.finished_concurrently(order_id, refund_id).await;
        }
        record.order = order;
        record.payment = Some(payment);
        if let Some(slot) = record.refunds.iter_mut().find(|r| r.id == refund_id) {
            *slot = refund;
        }
        record.steps.extend(steps.into_iter().map(|s| s.record));
        let Some(reason) = rejected else { return Ok(RefundOutcome::Refunded(record)) };
        if already_cancelled {
            // Toss cancelled the payment some other way (its dashboard): what it did is
            // recorded now, as the provider's refunds.
            self.sync_leased(order_id).await?;
            record = self.load(order_id).await?;
        }
        Ok(RefundOutcome::Rejected { record, reason })
    }

    /// No answer to act on: the attempt is recorded (a lost race reloads; a failure to
    /// record it leaves the refund pending all the same, its intent committed).
    async fn still_pending(
        &self,
        mut record: OrderRecord,
        payment: Payment,
        changes: Changes,
        reason: String,
    ) -> Result<RefundOutcome, AppError> {
        let order_id = record.order.id;
        match self.uow.commit(changes).await {
            Ok(()) => record.payment = Some(payment),
            Err(RepoError::Conflict) => record = self.load(order_id).await?,
            Err(err) => {
                tracing::warn!(order = %order_id, error = %Chain(&err), "a refund attempt could not be recorded")
            }
        }
        Ok(RefundOutcome::Pending { record, reason })
    }

    /// The outcome lost its race: the refund was finished concurrently (the provider
    /// deduplicated the cancel by its key); the state that won.
    async fn finished_concurrently(
        &self,
        order_id: OrderId,
        refund_id: RefundId,
    ) -> Result<RefundOutcome, AppError> {
        let current = self.load(order_id).await?;
        match current.refunds.iter().find(|r| r.id == refund_id).map(|r| r.status) {
            Some(RefundStatus::Succeeded) => Ok(RefundOutcome::Refunded(current)),
            Some(RefundStatus::Failed) => {
                Ok(RefundOutcome::Rejected { record: current, reason: "refused".into() })
            }
            _ => Err(changed_concurrently()),
        }
    }
}
