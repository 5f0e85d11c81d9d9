//! Refunds, full or partial (docs/spec.md §3–§5, §7, §10): each refund is a record of its
//! own with its own amount and its own idempotency key at the provider (`refund-{refundId}`).
//! The payment keeps the sum of its succeeded refunds: `PARTIALLY_REFUNDED` while a balance
//! is left, `REFUNDED` (and the order `CANCELLED`) at 0; `payment.refunded` per refund. A
//! refusal by the provider is recorded on the refund (`FAILED`) and the payment
//! (`refundFailureReason`, `payment.refund_failed`); the balance is unchanged.
//!
//! Never more than the amount, under any concurrency: a refund's intent is the payment's
//! transition to `REFUND_PENDING` (one refund pending at a time) committed with a
//! conditional update on the version it was checked against, and a refund succeeds only
//! through the payment's transition, which refuses an amount past the balance.
//!
//! Money never moves unrecorded: the refund's intent is committed before the provider is
//! asked, and its outcome after. A refund left pending — the process died, the database
//! refused the outcome, the provider could not be reached — is finished by
//! [`Refunds::resolve_pending`] in the worker, by asking again with the same key (the
//! provider answers a key it carried out with its first answer); bounded, then left to an
//! operator. A request asked again with the same request key (an HTTP `Idempotency-Key`, an
//! inbound event's id) is the same refund, never a second one.

mod decide;

use decide::{RefundAnswer, Verdict, pending_refund};
use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes::EventWriter;
use crate::application::error::Chain;
use crate::application::error::broken_invariant;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::ports::{
    CancelPayment, CancelReceipt, Changes, Clock, GatewayError, InboxEntry, LookupOutcome, OrderRecord,
    OrderRepository, PaymentGateway, PaymentRepository, ProviderCancel, RepoError, SagaLease, Scenario,
    UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{OrderId, RefundId};
use crate::domain::order::{OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::{PaymentError, PaymentStatus, RefundStatus};

/// What to refund.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundRequest {
    /// Recorded on the refund, in the audit log, and sent to the provider.
    pub reason: Option<String>,
    /// How much, in minor units; `None`: the whole remaining balance.
    pub amount: Option<i64>,
    /// The caller's key for this request: asked again with it, the request is the same
    /// refund (answered as it stands, or finished with the same provider key), never a
    /// second one. An HTTP `Idempotency-Key` scoped to the caller, or an inbound event's id.
    pub request_key: Option<String>,
    /// The inbound message asking for it, recorded in the same transaction as the outcome.
    pub inbox: Option<InboxEntry>,
    /// The inbound message asking for it (its id), carried by the refund's events as
    /// `causationId` (docs/spec.md §12).
    pub causation_id: Option<String>,
    /// Overrides the order's mock refund behaviour if it names one.
    pub scenario: Scenario,
}

/// How a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The refund succeeded (now, or before, for a request asked again).
    Refunded(OrderRecord),
    /// The provider refused; recorded on the refund and the payment.
    Rejected { record: OrderRecord, reason: String },
    /// The provider's answer is not known (unreachable, timed out): the refund is recorded
    /// and pending, the worker finishes it with the same key — the request is accepted,
    /// and asking again would not make it sooner.
    Pending { record: OrderRecord, reason: String },
}

pub struct Refunds {
    orders: Arc<dyn OrderRepository>,
    pending: Arc<dyn PaymentRepository>,
    uow: Arc<dyn UnitOfWork>,
    payments: Arc<dyn PaymentGateway>,
    clock: Arc<dyn Clock>,
    /// A refund holds the order's saga lease: one runner at a time per order.
    leases: SagaLeases,
    settings: RefundSettings,
}

/// How refunds whose outcome is unknown are followed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundSettings {
    /// The order's saga lease while a refund runs.
    pub lease: chrono::Duration,
    /// Attempts at a refund whose outcome is unknown before an operator must decide.
    pub max_attempts: i32,
    /// Delay before the second attempt; doubled after each.
    pub retry_after: chrono::Duration,
}

/// The reason a refund is recorded with when its request gave none.
const DEFAULT_REASON: &str = "refund requested";

fn changed_concurrently() -> AppError {
    AppError::Conflict { code: "REFUND_NOT_ALLOWED", message: "the order changed concurrently".into() }
}

impl Refunds {
    pub fn new(
        orders: Arc<dyn OrderRepository>,
        pending: Arc<dyn PaymentRepository>,
        uow: Arc<dyn UnitOfWork>,
        payments: Arc<dyn PaymentGateway>,
        clock: Arc<dyn Clock>,
        settings: RefundSettings,
    ) -> Self {
        let leases = SagaLeases::new(orders.clone(), clock.clone(), settings.lease);
        Refunds { orders, pending, uow, payments, clock, leases, settings }
    }

    /// Whether an order can be refunded now: `COMPLETED` with a balance left on an
    /// `APPROVED` or `PARTIALLY_REFUNDED` payment, or with a refund pending (asking again
    /// finishes it first).
    pub fn refundable(record: &OrderRecord) -> bool {
        record.order.status == OrderStatus::Completed
            && record.payment.as_ref().is_some_and(|p| {
                matches!(
                    p.status,
                    PaymentStatus::Approved | PaymentStatus::PartiallyRefunded | PaymentStatus::RefundPending
                )
            })
    }

    /// Refunds `request.amount` (or the whole balance) of `order_id`'s payment. `inbox` (an
    /// inbound message) is recorded in the same transaction as the outcome; `scenario`
    /// overrides the order's mock refund behaviour if it has one.
    ///
    /// # Errors
    /// `NotFound`; `Forbidden` `UNAUTHORIZED_REFUND` unless the caller is the order's
    /// customer or an admin; `Conflict` `REFUND_NOT_ALLOWED` unless the order is `COMPLETED`
    /// with a balance left, `ORDER_BUSY` while another runner changes it; `Unprocessable`
    /// `REFUND_AMOUNT_INVALID` unless `0 < amount <= balance` (nothing called);
    /// `Unavailable` when the provider or the database is down: the refund's intent is
    /// recorded before the provider is called, so a retry with the same request key, or
    /// the worker, finishes it with the same provider key.
    pub async fn refund_order(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
    ) -> Result<RefundOutcome, AppError> {
        let lease = self.lease(order_id).await?;
        let result = self.refund_leased(actor, order_id, request, Restate::Once).await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    /// The order's saga lease, for one runner at a time.
    ///
    /// # Errors
    /// `NotFound` without such an order; `Conflict` `ORDER_BUSY` while another runner holds it.
    async fn lease(&self, order_id: OrderId) -> Result<SagaLease, AppError> {
        match self.leases.take(order_id).await? {
            Some(lease) => Ok(lease),
            None if self.orders.get(order_id).await?.is_none() => Err(AppError::NotFound("order")),
            None => Err(AppError::order_busy()),
        }
    }

    async fn load(&self, order_id: OrderId) -> Result<OrderRecord, AppError> {
        self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))
    }

    async fn refund_leased(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
        restate: Restate,
    ) -> Result<RefundOutcome, AppError> {
        let RefundRequest { reason, amount, request_key, inbox, causation_id, scenario } = request;
        let mut record = self.load(order_id).await?;
        if !actor.may_access(&record.order.customer_id) {
            self.audit_rejection(actor, order_id, "not the order's customer".into()).await?;
            return Err(AppError::Forbidden {
                code: "UNAUTHORIZED_REFUND",
                message: "only the order's customer or an admin may refund it".into(),
            });
        }
        // The same request again: its refund, as it stands or finished now.
        if let Some(key) = &request_key
            && let Some(known) = record.refunds.iter().find(|r| r.request_key.as_ref() == Some(key)).cloned()
        {
            return match known.status {
                RefundStatus::Succeeded => Ok(RefundOutcome::Refunded(record)),
                RefundStatus::Failed => {
                    let reason = known.failure_reason.unwrap_or_else(|| "refused".into());
                    Ok(RefundOutcome::Rejected { record, reason: format!("refused before: {reason}") })
                }
                RefundStatus::Pending => self.finish(record, known.id, actor, inbox, scenario, restate).await,
            };
        }
        if !Self::refundable(&record) {
            let status = record.payment.as_ref().map_or("none", |p| p.status.as_str());
            self.audit_rejection(actor, order_id, format!("order {} is {}", record.order.status, status))
                .await?;
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: format!(
                    "only a COMPLETED order with a balance left on its payment can be refunded; this one is {} (payment {status})",
                    record.order.status
                ),
            });
        }
        // Another refund is pending (its answer was lost): finished first, with its key.
        if let Some(pending) = record.refunds.iter().find(|r| r.status == RefundStatus::Pending).map(|r| r.id)
        {
            if let RefundOutcome::Pending { reason, .. } =
                self.finish(record, pending, actor, None, scenario, Restate::No).await?
            {
                return Err(AppError::unavailable(format!(
                    "another refund of this order is pending ({reason}); it is finished first"
                )));
            }
            record = self.load(order_id).await?;
            if !Self::refundable(&record) {
                return Err(AppError::Conflict {
                    code: "REFUND_NOT_ALLOWED",
                    message: "the payment has no balance left".into(),
                });
            }
        }
        let mut payment = record.payment.clone().ok_or_else(|| broken_invariant("no payment"))?;
        let now = self.clock.now();
        // Sent to the provider: within what it takes (a consumer's reason names its event).
        let reason: String = reason
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_REASON.into())
            .chars()
            .take(crate::domain::text::limits::REFUND_REASON)
            .collect();
        let balance = payment.balance();
        let mut refund = match payment.begin_refund(
            amount,
            reason.clone(),
            actor.subject.clone(),
            request_key,
            now,
        ) {
            Ok(refund) => refund,
            Err(PaymentError::RefundAmountInvalid { requested, balance }) => {
                self.audit_rejection(
                    actor,
                    order_id,
                    format!("refund of {requested} asked, balance {balance}"),
                )
                .await?;
                return Err(AppError::Unprocessable {
                    code: "REFUND_AMOUNT_INVALID",
                    message: format!(
                        "a refund must be more than 0 and at most the balance {balance}; asked for {requested}"
                    ),
                });
            }
            Err(err) => return Err(broken_invariant(err)),
        };
        refund.causation_id = causation_id;
        // The intent, committed before the provider is asked: whatever happens to the
        // answer, the worker finds this refund and finishes it (docs/spec.md §4).
        let mut changes = Changes::default();
        changes.update_payment(&mut payment);
        changes.insert_refund(&mut refund);
        changes.audit.push(audit::record(
            AuditAction::RefundRequested,
            entity::ORDER,
            order_id,
            actor,
            Some(format!(
                "refund {} of {} (balance {balance}), Idempotency-Key {}: {reason}",
                refund.id,
                refund.amount.minor(),
                refund.idempotency_key
            )),
            now,
        ));
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(changed_concurrently());
        }
        let refund_id = refund.id;
        record.payment = Some(payment);
        record.refunds.push(refund);
        self.finish(record, refund_id, actor, inbox, scenario, restate).await
    }

    async fn audit_rejection(
        &self,
        actor: &Actor,
        order_id: OrderId,
        detail: String,
    ) -> Result<(), AppError> {
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::RefundRejected,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            self.clock.now(),
        ));
        Ok(self.uow.commit(changes).await?)
    }

    /// The call and the outcome commit of the skeleton for the pending refund `refund_id`.
    async fn finish(
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

    /// An operator ends a pending refund whose outcome the worker could not learn (audited
    /// `REFUND_UNRESOLVED`, or any refund still pending), after looking at the provider's
    /// own books: made (with the provider's key of the cancel, if known) or not made. The
    /// outcome is recorded as a provider's answer would be — through the payment's
    /// transitions, audited with the operator and `reason`.
    ///
    /// # Errors
    /// `NotFound` (order or refund); `Conflict` `REFUND_NOT_PENDING` unless the refund is
    /// pending, `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// database fails.
    pub async fn resolve_by_operator(
        &self,
        actor: &Actor,
        order_id: OrderId,
        refund_id: RefundId,
        decision: OperatorDecision,
        reason: String,
    ) -> Result<OrderRecord, AppError> {
        let lease = self.lease(order_id).await?;
        let result = async {
            let record = self.load(order_id).await?;
            let refund =
                record.refunds.iter().find(|r| r.id == refund_id).ok_or(AppError::NotFound("refund"))?;
            if refund.status != RefundStatus::Pending {
                return Err(AppError::Conflict {
                    code: "REFUND_NOT_PENDING",
                    message: format!("refund {refund_id} is {}, not pending", refund.status.as_str()),
                });
            }
            let note = format!("resolved by an operator: {reason}");
            let answer = match decision {
                OperatorDecision::Made { transaction_key } => {
                    RefundAnswer::Refunded(CancelReceipt { transaction_key, balance_after: None })
                }
                OperatorDecision::NotMade => RefundAnswer::Refused {
                    code: "OPERATOR".into(),
                    message: note.clone(),
                    already_cancelled: false,
                },
            };
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::RefundResolvedByOperator,
                entity::ORDER,
                order_id,
                actor,
                Some(format!("refund {refund_id}: {note}")),
                self.clock.now(),
            ));
            match self.record_outcome_with(record, refund_id, answer, actor, None, changes).await? {
                RefundOutcome::Refunded(record)
                | RefundOutcome::Rejected { record, .. }
                | RefundOutcome::Pending { record, .. } => Ok(record),
            }
        }
        .await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    /// The provider refused the pending refund because the balance it was sent with is not
    /// the provider's: a cancel was made outside the service (Toss's dashboard) that we have
    /// not recorded yet — its webhook late or lost. Nothing moved, and the same request
    /// would be refused again. So the refund is superseded: recorded `FAILED` (no event:
    /// nothing was refused to anyone; its request key is handed on), the provider's cancels
    /// are recorded as its refunds, and the request is asked again, once, against the new
    /// balance — the rest, for a refund of the whole balance; the same amount, where the
    /// balance still holds it; else refused, with the new balance in the reason.
    async fn restate(
        &self,
        record: OrderRecord,
        refund_id: RefundId,
        why: String,
        actor: &Actor,
        (inbox, scenario): (Option<InboxEntry>, Scenario),
        restate: Restate,
    ) -> Result<RefundOutcome, AppError> {
        let now = self.clock.now();
        let order_id = record.order.id;
        let mut payment = record.payment.clone().ok_or_else(|| broken_invariant("no payment"))?;
        let mut refund = pending_refund(&record, refund_id)?.clone();
        let whole = refund.amount.minor() == payment.balance();
        let request_key = refund.request_key.take();
        let reason = format!("STALE_BALANCE: {why}");
        // The refund's failure event is not written: the request goes on as another refund.
        payment.record_refund_failure(&mut refund, reason.clone(), now).map_err(broken_invariant)?;
        let mut changes = Changes::default();
        changes.update_payment(&mut payment);
        changes.update_refund(&mut refund);
        changes.audit.push(audit::record(
            AuditAction::RefundBalanceMismatch,
            entity::ORDER,
            order_id,
            actor,
            Some(format!(
                "refund {} of {} superseded: {why}; the provider's cancels are recorded and the request is decided against its balance",
                refund.id,
                refund.amount.minor()
            )),
            now,
        ));
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(changed_concurrently());
        }
        self.sync_leased(order_id).await?;
        let current = self.load(order_id).await?;
        let balance = current.payment.as_ref().map_or(0, |p| p.balance());
        let amount = (!whole).then_some(refund.amount.minor());
        let fits = Self::refundable(&current) && amount.is_none_or(|a| a <= balance);
        if restate == Restate::No || !fits {
            let reason = format!("{reason}; the balance at the provider is now {balance}");
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::RefundRejected,
                entity::ORDER,
                order_id,
                actor,
                Some(format!("refund {} of {}: {reason}", refund.id, refund.amount.minor())),
                now,
            ));
            changes.inbox.extend(inbox);
            self.uow.commit(changes).await?;
            return Ok(RefundOutcome::Rejected { record: current, reason });
        }
        let again = RefundRequest {
            reason: Some(refund.reason),
            amount,
            request_key,
            inbox,
            causation_id: refund.causation_id,
            scenario,
        };
        Box::pin(self.refund_leased(actor, order_id, again, Restate::No)).await
    }

    /// The call of the skeleton: the provider's cancel of the refund's amount with the
    /// refund's own key, so asking again never refunds twice.
    async fn ask_provider(
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
            Err(GatewayError::Rejected { code, message }) => {
                RefundAnswer::Refused { code, message, already_cancelled: false }
            }
            Err(GatewayError::AlreadyCancelled { code, message }) => {
                RefundAnswer::Refused { code, message, already_cancelled: true }
            }
            Err(GatewayError::StaleBalance { message }) => RefundAnswer::StaleBalance(message),
            Err(GatewayError::Unavailable(cause)) => RefundAnswer::Unknown(Chain(&cause).to_string()),
        })
    }

    /// The outcome commit of the skeleton. `Unknown` keeps the refund pending (one more
    /// attempt counted, the next due after a backoff) and answers `Unavailable`: the refund
    /// is not lost, the worker or the same request again finishes it.
    async fn record_outcome(
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
    async fn record_outcome_with(
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
            Verdict::Pending { reason } => {
                match self.uow.commit(changes).await {
                    Ok(()) => record.payment = Some(payment),
                    Err(RepoError::Conflict) => record = self.load(order_id).await?,
                    // The intent is committed: the refund is pending all the same.
                    Err(err) => {
                        tracing::warn!(order = %order_id, error = %Chain(&err), "a refund attempt could not be recorded")
                    }
                }
                return Ok(RefundOutcome::Pending { record, reason });
            }
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
            // Finished concurrently (the provider deduplicated the cancel by its key):
            // report the state that won.
            let current = self.load(order_id).await?;
            return match current.refunds.iter().find(|r| r.id == refund_id).map(|r| r.status) {
                Some(RefundStatus::Succeeded) => Ok(RefundOutcome::Refunded(current)),
                Some(RefundStatus::Failed) => {
                    Ok(RefundOutcome::Rejected { record: current, reason: "refused".into() })
                }
                _ => Err(changed_concurrently()),
            };
        }
        record.order = order;
        record.payment = Some(payment);
        if let Some(slot) = record.refunds.iter_mut().find(|r| r.id == refund_id) {
            *slot = refund;
        }
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(match rejected {
            None => RefundOutcome::Refunded(record),
            Some(reason) => {
                if already_cancelled {
                    // Toss cancelled the payment some other way (its dashboard): what it did
                    // is recorded now, as the provider's refunds.
                    self.sync_leased(order_id).await?;
                    record = self.load(order_id).await?;
                }
                RefundOutcome::Rejected { record, reason }
            }
        })
    }

    /// The worker's half of the skeleton: refunds whose intent was committed but whose
    /// outcome was not (a crash, a database failure after the provider answered, a provider
    /// that could not be reached). Each is asked again with its own key: a provider that
    /// carried it out answers with that (Toss replays a key's first answer), one that did
    /// not carries it out now, once. Bounded: past `max_attempts` the refund is audited
    /// `REFUND_UNRESOLVED`, listed at `GET /api/admin/payments/unconfirmed` and counted in
    /// `/metrics`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn resolve_pending(&self) -> Result<PendingRefundReport, AppError> {
        let actor = Actor::system("refund-recovery");
        let now = self.clock.now();
        let due = self
            .pending
            .awaiting_confirmation(PaymentStatus::RefundPending, now, self.settings.max_attempts, 100)
            .await?;
        let mut report = PendingRefundReport::default();
        for payment in due {
            let order_id = payment.order_id;
            let Some(lease) = self.leases.take(order_id).await? else {
                report.busy += 1;
                continue;
            };
            let result = self.resolve_leased(&actor, order_id).await;
            self.leases.release(order_id, &lease.owner).await;
            match result {
                Ok(RefundOutcome::Refunded(_)) => report.refunded += 1,
                Ok(RefundOutcome::Rejected { .. }) => report.refused += 1,
                Ok(RefundOutcome::Pending { .. }) | Err(AppError::Unavailable(_)) => {
                    report.still_unknown += 1
                }
                Err(AppError::Conflict { .. }) => report.busy += 1,
                Err(err) => return Err(err),
            }
        }
        Ok(report)
    }

    async fn resolve_leased(&self, actor: &Actor, order_id: OrderId) -> Result<RefundOutcome, AppError> {
        let record = self.load(order_id).await?;
        let pending = record
            .payment
            .as_ref()
            .filter(|p| p.status == PaymentStatus::RefundPending)
            .and_then(|_| record.refunds.iter().find(|r| r.status == RefundStatus::Pending))
            .map(|r| r.id);
        let Some(refund_id) = pending else {
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: "no refund pending".into(),
            });
        };
        // A provider that lists no cancels but says the payment is cancelled whole has made
        // a refund of the whole balance: ours, if that is what we asked (nothing is asked
        // twice). Otherwise the same key again tells.
        let whole = pending_refund(&record, refund_id)?.amount.minor()
            == record.payment.as_ref().map_or(0, |p| p.balance());
        if whole {
            let payment = record.payment.as_ref().ok_or_else(|| broken_invariant("no payment"))?;
            let scenario = record.context.scenario;
            if let Ok(LookupOutcome::Cancelled { cancels, .. }) =
                self.payments.lookup(&payment.payment_request_id, &scenario).await
                && cancels.is_empty()
            {
                let answer = RefundAnswer::Refunded(CancelReceipt::default());
                return self.record_outcome(record, refund_id, answer, actor, None).await;
            }
        }
        self.finish(record, refund_id, actor, None, Scenario::default(), Restate::Once).await
    }
}

/// What a look-up at the provider showed of a payment we hold as approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderRefunds {
    /// Cancels made at the provider that we did not know of, now recorded as refunds by
    /// `provider` (how many).
    Recorded(usize),
    /// Nothing new at the provider, or nothing we can record now (a refund of ours is
    /// pending: it is finished first).
    Nothing,
}

impl Refunds {
    /// A payment may have been cancelled outside the service (Toss's dashboard, learnt from
    /// a webhook or the ledger): asks the provider and records every cancel it made that we
    /// do not have as a refund by actor `provider` (`payment.refunded` each; the order
    /// `CANCELLED` once nothing is left), under the order's saga lease.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// provider or the database fails.
    pub async fn record_provider_refunds(&self, order_id: OrderId) -> Result<ProviderRefunds, AppError> {
        let Some(lease) = self.leases.take(order_id).await? else {
            return Err(AppError::order_busy());
        };
        let result = self.sync_leased(order_id).await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    async fn sync_leased(&self, order_id: OrderId) -> Result<ProviderRefunds, AppError> {
        let record = self.load(order_id).await?;
        let Some(mut payment) = record
            .payment
            .clone()
            .filter(|p| matches!(p.status, PaymentStatus::Approved | PaymentStatus::PartiallyRefunded))
        else {
            return Ok(ProviderRefunds::Nothing);
        };
        if record.order.status != OrderStatus::Completed {
            return Ok(ProviderRefunds::Nothing);
        }
        let outcome = self
            .payments
            .lookup(&payment.payment_request_id, &record.context.scenario)
            .await
            .map_err(|e| AppError::unavailable(format!("payment provider: {e}")))?;
        let known =
            |key: &str| record.refunds.iter().any(|r| r.provider_transaction_key.as_deref() == Some(key));
        let new: Vec<(i64, Option<String>)> = match outcome {
            LookupOutcome::Cancelled { cancels, .. } | LookupOutcome::PartlyCancelled { cancels, .. }
                if !cancels.is_empty() =>
            {
                cancels
                    .into_iter()
                    .filter(|c: &ProviderCancel| !known(&c.transaction_key))
                    .map(|c| (c.amount, Some(c.transaction_key)))
                    .collect()
            }
            // A provider that lists no cancels: what it has cancelled beyond our refunds.
            LookupOutcome::Cancelled { .. } => vec![(payment.balance(), None)],
            LookupOutcome::PartlyCancelled { balance, .. } if payment.balance() > balance => {
                vec![(payment.balance() - balance, None)]
            }
            _ => vec![],
        };
        if new.is_empty() {
            return Ok(ProviderRefunds::Nothing);
        }
        let now = self.clock.now();
        let actor = Actor::system("provider");
        let mut order = record.order.clone();
        let mut changes = Changes::default();
        let mut events = Vec::new();
        let mut recorded = 0;
        for (amount, key) in new {
            match payment.record_provider_refund(
                amount,
                key.clone(),
                "refunded at the provider, outside the service",
                now,
            ) {
                Ok((mut refund, payment_events)) => {
                    changes.insert_refund(&mut refund);
                    changes.audit.push(audit::record(
                        AuditAction::Refunded,
                        entity::ORDER,
                        order_id,
                        &actor,
                        Some(format!(
                            "refund {} of {} made at the provider (its key {}), outside the service",
                            refund.id,
                            amount,
                            key.as_deref().unwrap_or("none")
                        )),
                        now,
                    ));
                    events.extend(payment_events);
                    recorded += 1;
                }
                Err(err) => {
                    // More than our balance: the books disagree; an operator decides.
                    changes.audit.push(audit::record(
                        AuditAction::RefundBalanceMismatch,
                        entity::ORDER,
                        order_id,
                        &actor,
                        Some(format!(
                            "the provider cancelled {amount} (its key {}), which we cannot record: {err}",
                            key.as_deref().unwrap_or("none")
                        )),
                        now,
                    ));
                }
            }
        }
        let order_events = if payment.status == PaymentStatus::Refunded {
            order.refund(now).map_err(broken_invariant)?
        } else {
            vec![]
        };
        if recorded > 0 {
            changes.update_payment(&mut payment);
            changes.step(
                order_id,
                SagaStep::Compensation,
                StepStatus::Success,
                Some(format!(
                    "refunded at the provider: {} of {} refunded",
                    payment.refunded_amount,
                    payment.amount.minor()
                )),
                now,
            );
        }
        if !order_events.is_empty() {
            changes.update_order(&mut order);
        }
        let mut writer = EventWriter::new(&order, &record, now);
        writer.payment(&payment, &events).order(&order_events);
        changes.outbox = writer.finish();
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(AppError::order_busy());
        }
        Ok(if recorded > 0 { ProviderRefunds::Recorded(recorded) } else { ProviderRefunds::Nothing })
    }
}

/// What an operator found a pending refund to be, in the provider's own books.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorDecision {
    /// The provider made it (its key of the cancel, if the operator has it).
    Made { transaction_key: Option<String> },
    /// The provider never made it: the refund fails, the balance is unchanged.
    NotMade,
}

/// Whether a refund refused for a stale balance may be asked again against the new one
/// (once per request: a provider whose books still disagree after its cancels are recorded
/// is an operator's matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restate {
    Once,
    No,
}

/// How one round of [`Refunds::resolve_pending`] went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingRefundReport {
    pub refunded: usize,
    pub refused: usize,
    pub still_unknown: usize,
    pub busy: usize,
}
