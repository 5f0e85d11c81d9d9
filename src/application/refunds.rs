//! Refunds (docs/spec.md §3–§5, §7): a completed order's approved payment is cancelled at the
//! provider; the payment becomes `REFUNDED` and the order `CANCELLED`, with
//! `payment.refunded` and `order.cancelled`. A refusal by the provider is recorded
//! (`refundFailureReason`, `payment.refund_failed`) and the payment is `APPROVED` again.
//!
//! Money never moves unrecorded: the refund's intent (`REFUND_PENDING`, audited with the
//! idempotency key the call uses) is committed before the provider is asked, and its
//! outcome after. A refund left pending — the process died, the database refused the
//! outcome, the provider could not be reached — is finished by [`Refunds::resolve_pending`]
//! in the worker, through a look-up at the provider and, if needed, the same call with the
//! same key; bounded, then left to an operator.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::commit::commit;
use crate::application::envelopes::EventWriter;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::ports::{
    CancelPayment, Changes, Clock, GatewayError, InboxEntry, LookupOutcome, OrderRecord, OrderRepository,
    PaymentGateway, PaymentRepository, RepoError, Scenario, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};

/// What to refund with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundRequest {
    /// Recorded in the audit log and sent to the provider.
    pub reason: Option<String>,
    /// The inbound message asking for it, recorded in the same transaction as the outcome.
    pub inbox: Option<InboxEntry>,
    /// Overrides the order's mock refund behaviour if it names one.
    pub scenario: Scenario,
    /// Whether to ask the provider again for a payment whose refund it refused before.
    pub retry_refused: RetryRefused,
}

/// Whether a refund refused before is asked for again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RetryRefused {
    /// A customer, an operator or a participant's cancellation asking: yes.
    #[default]
    Yes,
    /// A meeting deletion: unless the refusal was recorded for this same request (its
    /// reason, which names the deletion's event), so that concurrent deliveries of one
    /// deletion — the inbox settles them only at the end — ask the provider once per
    /// payment, not once per delivery.
    UnlessRefusedFor(String),
}

/// How a refusal names the request it answered, in `refundFailureReason`.
fn refused_for(why: &str, reason: &str) -> String {
    format!("{why} (refund for: {reason})")
}

/// How a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    Refunded(OrderRecord),
    /// The provider refused; recorded on the payment, which stays `APPROVED`.
    Rejected {
        record: OrderRecord,
        reason: String,
    },
}

pub struct Refunds {
    orders: Arc<dyn OrderRepository>,
    pending: Arc<dyn PaymentRepository>,
    uow: Arc<dyn UnitOfWork>,
    payments: Arc<dyn PaymentGateway>,
    clock: Arc<dyn Clock>,
    /// A refund holds the order's saga lease: one refund at a time per order.
    leases: SagaLeases,
    /// Attempts at a refund whose outcome is unknown before an operator must decide.
    max_attempts: i32,
    /// Delay before the second attempt; doubled after each.
    retry_after: chrono::Duration,
}

/// The order is being changed by another runner right now (try again shortly).
pub const ORDER_BUSY: &str = "ORDER_BUSY";

fn invariant(err: impl std::fmt::Display) -> AppError {
    AppError::internal(format!("refund invariant broken: {err}"))
}

impl Refunds {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        orders: Arc<dyn OrderRepository>,
        pending: Arc<dyn PaymentRepository>,
        uow: Arc<dyn UnitOfWork>,
        payments: Arc<dyn PaymentGateway>,
        clock: Arc<dyn Clock>,
        lease: chrono::Duration,
        max_attempts: i32,
        retry_after: chrono::Duration,
    ) -> Self {
        let leases = SagaLeases::new(orders.clone(), clock.clone(), lease);
        Refunds { orders, pending, uow, payments, clock, leases, max_attempts, retry_after }
    }

    /// Whether an order can be refunded now: `COMPLETED` with an `APPROVED` payment, or
    /// with a refund already pending (asking again resumes it with the same key).
    pub fn refundable(record: &OrderRecord) -> bool {
        record.order.status == OrderStatus::Completed
            && record
                .payment
                .as_ref()
                .is_some_and(|p| matches!(p.status, PaymentStatus::Approved | PaymentStatus::RefundPending))
    }

    /// Refunds `order_id`. `inbox` (an inbound message) is recorded in the same transaction
    /// as the outcome; `scenario` overrides the order's mock refund behaviour if it has one.
    ///
    /// # Errors
    /// `NotFound`; `Forbidden` `UNAUTHORIZED_REFUND` unless the caller is the order's
    /// customer or an admin; `Conflict` `REFUND_NOT_ALLOWED` unless the order is `COMPLETED`
    /// with an `APPROVED` (or `REFUND_PENDING`) payment; `Unavailable` when the provider or
    /// the database is down: the refund's intent is recorded (`REFUND_PENDING`) before the
    /// provider is called, so a retry, or the worker, finishes it with the same key.
    pub async fn refund_order(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
    ) -> Result<RefundOutcome, AppError> {
        let Some(lease) = self.leases.take(order_id).await? else {
            if self.orders.get(order_id).await?.is_none() {
                return Err(AppError::NotFound("order"));
            }
            return Err(AppError::Conflict {
                code: ORDER_BUSY,
                message: "the order is being changed right now; retry shortly".into(),
            });
        };
        let result = self.refund_leased(actor, order_id, request).await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    async fn refund_leased(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
    ) -> Result<RefundOutcome, AppError> {
        let RefundRequest { reason, inbox, scenario, retry_refused } = request;
        let mut record = self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))?;
        if !actor.may_access(&record.order.customer_id) {
            self.audit_rejection(actor, order_id, "not the order's customer".into()).await?;
            return Err(AppError::Forbidden {
                code: "UNAUTHORIZED_REFUND",
                message: "only the order's customer or an admin may refund it".into(),
            });
        }
        if !Self::refundable(&record) {
            self.audit_rejection(actor, order_id, format!("order {} is {}", order_id, record.order.status))
                .await?;
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: format!(
                    "only a COMPLETED order with an APPROVED payment can be refunded; this one is {}",
                    record.order.status
                ),
            });
        }
        let mut payment = record.payment.clone().ok_or_else(|| invariant("no payment"))?;
        if payment.status == PaymentStatus::Approved {
            let ask_again = match &retry_refused {
                RetryRefused::Yes => true,
                RetryRefused::UnlessRefusedFor(reason) => !payment
                    .refund_failure_reason
                    .as_deref()
                    .is_some_and(|refused| refused.ends_with(&refused_for("", reason))),
            };
            if let (false, Some(refused)) = (ask_again, payment.refund_failure_reason.clone()) {
                // Checked under the lease: a concurrent duplicate cannot ask the provider again.
                return Ok(RefundOutcome::Rejected { record, reason: format!("refused before: {refused}") });
            }
            // The intent, committed before the provider is asked: whatever happens to the
            // answer, the worker finds this refund and finishes it (docs/spec.md §4).
            let now = self.clock.now();
            payment.begin_refund(now).map_err(invariant)?;
            let mut changes = Changes::default();
            changes.update_payment(&mut payment);
            changes.audit.push(audit::record(
                AuditAction::RefundRequested,
                entity::ORDER,
                order_id,
                actor,
                Some(format!(
                    "Idempotency-Key cancel-{}: {}",
                    payment.payment_request_id,
                    reason.as_deref().unwrap_or("refund requested")
                )),
                now,
            ));
            if !commit(self.uow.as_ref(), changes).await? {
                return Err(AppError::Conflict {
                    code: "REFUND_NOT_ALLOWED",
                    message: "the order changed concurrently".into(),
                });
            }
            record.payment = Some(payment.clone());
        }
        let mut effective = record.context.scenario;
        if scenario.refund.is_some() {
            effective.refund = scenario.refund;
        }
        let reason_text = reason.clone().unwrap_or_else(|| "refund requested".into());
        let answer = self.ask_provider(&payment, effective, reason_text).await?;
        self.record_outcome(record, answer, actor, reason, inbox).await
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

    /// The call of the skeleton: the provider's cancel with the payment's refund key
    /// (`cancel-{paymentRequestId}`), so asking again never refunds twice.
    async fn ask_provider(
        &self,
        payment: &Payment,
        scenario: Scenario,
        reason: String,
    ) -> Result<RefundAnswer, AppError> {
        let request = CancelPayment {
            payment_id: payment.id,
            payment_request_id: payment.payment_request_id.clone(),
            provider_transaction_id: payment
                .provider_transaction_id
                .clone()
                .ok_or_else(|| invariant("approved payment without a provider transaction"))?,
            idempotency_key: format!("cancel-{}", payment.payment_request_id),
            amount: payment.amount,
            balance: payment.amount,
            reason,
            scenario,
        };
        Ok(match self.payments.cancel(&request).await {
            Ok(_) => RefundAnswer::Refunded,
            Err(GatewayError::Rejected { code, message }) => {
                RefundAnswer::Refused(format!("{code}: {message}"))
            }
            Err(GatewayError::Unavailable(cause)) => RefundAnswer::Unknown(cause),
        })
    }

    /// The outcome commit of the skeleton. `Unknown` keeps the payment `REFUND_PENDING`
    /// (one more attempt counted, the next due after a backoff) and answers `Unavailable`:
    /// the refund is not lost, the worker or a retry of the request finishes it.
    async fn record_outcome(
        &self,
        mut record: OrderRecord,
        answer: RefundAnswer,
        actor: &Actor,
        reason: Option<String>,
        inbox: Option<InboxEntry>,
    ) -> Result<RefundOutcome, AppError> {
        let now = self.clock.now();
        let order_id = record.order.id;
        let mut payment = record.payment.clone().ok_or_else(|| invariant("no payment"))?;
        let mut order = record.order.clone();
        let mut changes = Changes::default();
        let reason_text = reason.clone().unwrap_or_else(|| "refund requested".into());
        let rejected = match answer {
            RefundAnswer::Refunded => {
                let payment_events = payment.refund(now).map_err(invariant)?;
                let order_events = order.refund(now).map_err(invariant)?;
                changes.update_payment(&mut payment);
                changes.update_order(&mut order);
                changes.step(
                    order.id,
                    SagaStep::Compensation,
                    StepStatus::Success,
                    Some(format!("refunded: {reason_text}")),
                    now,
                );
                changes.audit.push(audit::record(
                    AuditAction::Refunded,
                    entity::ORDER,
                    order.id,
                    actor,
                    reason,
                    now,
                ));
                let mut events = EventWriter::new(&order, record.context.correlation_id.as_deref(), now);
                events.payment(&payment, &payment_events).order(&order_events);
                changes.outbox = events.finish();
                None
            }
            RefundAnswer::Refused(why) => {
                let why = refused_for(&why, &reason_text);
                let payment_events = payment.record_refund_failure(why.clone(), now).map_err(invariant)?;
                changes.update_payment(&mut payment);
                changes.step(
                    order.id,
                    SagaStep::Compensation,
                    StepStatus::Failed,
                    Some(format!("refund refused: {why}")),
                    now,
                );
                changes.audit.push(audit::record(
                    AuditAction::RefundFailed,
                    entity::ORDER,
                    order.id,
                    actor,
                    Some(why.clone()),
                    now,
                ));
                let mut events = EventWriter::new(&order, record.context.correlation_id.as_deref(), now);
                events.payment(&payment, &payment_events);
                changes.outbox = events.finish();
                Some(why)
            }
            RefundAnswer::Unknown(cause) => {
                let exp = payment.reconcile_attempts.clamp(0, 16) as u32;
                let next = now + self.retry_after.checked_mul(1 << exp).unwrap_or(self.retry_after);
                payment.record_reconcile_attempt(next, now).map_err(invariant)?;
                changes.update_payment(&mut payment);
                if payment.reconcile_attempts >= self.max_attempts {
                    changes.audit.push(audit::record(
                        AuditAction::RefundUnresolved,
                        entity::ORDER,
                        order_id,
                        actor,
                        Some(format!(
                            "refund outcome still unknown after {} attempts ({cause}); an operator must decide",
                            payment.reconcile_attempts
                        )),
                        now,
                    ));
                }
                match self.uow.commit(changes).await {
                    Ok(()) | Err(RepoError::Conflict) => {}
                    Err(err) => return Err(err.into()),
                }
                return Err(AppError::unavailable(format!(
                    "payment provider: {cause}; the refund is pending and will be completed"
                )));
            }
        };
        changes.inbox.extend(inbox);
        let steps = changes.steps.clone();
        if !commit(self.uow.as_ref(), changes).await? {
            // Finished concurrently (the provider deduplicated the cancel by its key):
            // report the state that won.
            let current = self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))?;
            return match current.payment.as_ref().map(|p| p.status) {
                Some(PaymentStatus::Refunded) => Ok(RefundOutcome::Refunded(current)),
                _ => Err(AppError::Conflict {
                    code: "REFUND_NOT_ALLOWED",
                    message: "the order changed concurrently".into(),
                }),
            };
        }
        record.order = order;
        record.payment = Some(payment);
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(match rejected {
            None => RefundOutcome::Refunded(record),
            Some(reason) => RefundOutcome::Rejected { record, reason },
        })
    }

    /// The worker's half of the skeleton: refunds whose intent was committed but whose
    /// outcome was not (a crash, a database failure after the provider answered, a provider
    /// that could not be reached). Each is looked up at the provider by `paymentRequestId`:
    /// cancelled there means refunded; still approved means the cancel never took effect,
    /// so it is asked again with the same key. Bounded: past `max_attempts` the refund is
    /// audited `REFUND_UNRESOLVED`, listed at `GET /api/admin/payments/unconfirmed` and
    /// counted in `/metrics`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn resolve_pending(&self) -> Result<PendingRefundReport, AppError> {
        let actor = Actor::system("refund-recovery");
        let now = self.clock.now();
        let due = self
            .pending
            .awaiting_confirmation(PaymentStatus::RefundPending, now, self.max_attempts, 100)
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
                Err(AppError::Unavailable(_)) => report.still_unknown += 1,
                Err(AppError::Conflict { .. }) => report.busy += 1,
                Err(err) => return Err(err),
            }
        }
        Ok(report)
    }

    async fn resolve_leased(&self, actor: &Actor, order_id: OrderId) -> Result<RefundOutcome, AppError> {
        let record = self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))?;
        let Some(payment) = record.payment.clone().filter(|p| p.status == PaymentStatus::RefundPending)
        else {
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: "no refund pending".into(),
            });
        };
        let scenario = record.context.scenario;
        let answer = match self.payments.lookup(&payment.payment_request_id, &scenario).await {
            Ok(LookupOutcome::Cancelled { .. }) => RefundAnswer::Refunded,
            Ok(LookupOutcome::Approved { .. }) => {
                self.ask_provider(&payment, scenario, "refund (resumed by the worker)".into()).await?
            }
            Ok(other) => RefundAnswer::Unknown(format!("look-up answered {other:?}")),
            Err(err) => RefundAnswer::Unknown(err.to_string()),
        };
        self.record_outcome(record, answer, actor, Some("refund resumed by the worker".into()), None).await
    }
}

/// What a look-up at the provider showed of a payment we hold as approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderCancel {
    /// Cancelled whole at the provider (its dashboard): recorded here as a refund by `provider`.
    Recorded(Box<OrderRecord>),
    /// Cancelled in part at the provider: not recorded (partial refunds are not kept yet);
    /// audited for an operator.
    Partial { balance: i64 },
    /// Not cancelled there, or our payment is not approved: nothing to record.
    Nothing,
}

impl Refunds {
    /// A payment may have been cancelled outside the service (Toss's dashboard, learnt from a
    /// webhook): asks the provider and, if it cancelled the whole payment, records the refund
    /// by actor `provider` (payment `REFUNDED`, order `CANCELLED`, `payment.refunded`,
    /// `order.cancelled`), under the order's saga lease.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// provider or the database fails.
    pub async fn record_provider_cancel(&self, order_id: OrderId) -> Result<ProviderCancel, AppError> {
        let Some(lease) = self.leases.take(order_id).await? else {
            return Err(AppError::Conflict {
                code: ORDER_BUSY,
                message: "the order is being changed right now".into(),
            });
        };
        let result = self.record_provider_cancel_leased(order_id).await;
        self.leases.release(order_id, &lease.owner).await;
        result
    }

    async fn record_provider_cancel_leased(&self, order_id: OrderId) -> Result<ProviderCancel, AppError> {
        let record = self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))?;
        let Some(mut payment) = record.payment.clone().filter(|p| p.status == PaymentStatus::Approved) else {
            return Ok(ProviderCancel::Nothing);
        };
        if record.order.status != OrderStatus::Completed {
            return Ok(ProviderCancel::Nothing);
        }
        let outcome = self
            .payments
            .lookup(&payment.payment_request_id, &record.context.scenario)
            .await
            .map_err(|e| AppError::unavailable(format!("payment provider: {e}")))?;
        match outcome {
            LookupOutcome::Cancelled { .. } => {}
            LookupOutcome::PartlyCancelled { balance, .. } => {
                let mut changes = Changes::default();
                changes.audit.push(audit::record(
                    AuditAction::ProviderPartialCancel,
                    entity::ORDER,
                    order_id,
                    &Actor::system("provider"),
                    Some(format!(
                        "cancelled in part at the provider (balance {balance} of {}); partial refunds are not recorded yet: reconcile by hand",
                        payment.amount.minor()
                    )),
                    self.clock.now(),
                ));
                self.uow.commit(changes).await?;
                return Ok(ProviderCancel::Partial { balance });
            }
            _ => return Ok(ProviderCancel::Nothing),
        }
        let now = self.clock.now();
        let actor = Actor::system("provider");
        let mut order = record.order.clone();
        payment.begin_refund(now).map_err(invariant)?;
        let payment_events = payment.refund(now).map_err(invariant)?;
        let order_events = order.refund(now).map_err(invariant)?;
        let mut changes = Changes::default();
        changes.update_payment(&mut payment);
        changes.update_order(&mut order);
        changes.step(
            order_id,
            SagaStep::Compensation,
            StepStatus::Success,
            Some("refunded at the provider (its dashboard), learnt from its webhook".into()),
            now,
        );
        changes.audit.push(audit::record(
            AuditAction::Refunded,
            entity::ORDER,
            order_id,
            &actor,
            Some("cancelled at the provider, outside the service".into()),
            now,
        ));
        let mut events = EventWriter::new(&order, record.context.correlation_id.as_deref(), now);
        events.payment(&payment, &payment_events).order(&order_events);
        changes.outbox = events.finish();
        if !commit(self.uow.as_ref(), changes).await? {
            return Err(AppError::Conflict {
                code: ORDER_BUSY,
                message: "the order changed concurrently".into(),
            });
        }
        let mut record = record;
        record.order = order;
        record.payment = Some(payment);
        Ok(ProviderCancel::Recorded(Box::new(record)))
    }
}

/// What the provider said to a refund.
enum RefundAnswer {
    Refunded,
    Refused(String),
    /// No answer we can act on (unreachable, timed out, broke the protocol).
    Unknown(String),
}

/// How one round of [`Refunds::resolve_pending`] went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingRefundReport {
    pub refunded: usize,
    pub refused: usize,
    pub still_unknown: usize,
    pub busy: usize,
}
