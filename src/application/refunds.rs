//! Refunds (SPEC §5, §7): a completed order's approved payment is cancelled at the
//! provider; the payment becomes `REFUNDED` and the order `CANCELLED`, with
//! `payment.refunded` and `order.cancelled`. A refusal by the provider is recorded
//! (`refundFailureReason`, `payment.refund_failed`) and the payment stays `APPROVED`.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::orchestration::events::EventWriter;
use crate::application::ports::{
    CancelPayment, Changes, Clock, GatewayError, InboxEntry, OrderRecord, OrderRepository, PaymentGateway,
    RepoError, SagaLease, Scenario, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::ids::OrderId;
use crate::domain::order::{OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::PaymentStatus;

/// What to refund with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundRequest {
    /// Recorded in the audit log and sent to the provider.
    pub reason: Option<String>,
    /// The inbound message asking for it, recorded in the same transaction as the outcome.
    pub inbox: Option<InboxEntry>,
    /// Overrides the order's mock refund behaviour if it names one.
    pub scenario: Scenario,
    /// Whether to ask the provider again for a payment whose refund it refused before
    /// (an operator or customer asking: yes; a redelivered bulk deletion: no).
    pub retry_refused: bool,
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
    uow: Arc<dyn UnitOfWork>,
    payments: Arc<dyn PaymentGateway>,
    clock: Arc<dyn Clock>,
    /// A refund holds the order's saga lease: one refund at a time per order.
    lease: chrono::Duration,
}

/// The order is being changed by another runner right now (try again shortly).
pub const ORDER_BUSY: &str = "ORDER_BUSY";

fn invariant(err: impl std::fmt::Display) -> AppError {
    AppError::Internal(format!("refund invariant broken: {err}"))
}

impl Refunds {
    pub fn new(
        orders: Arc<dyn OrderRepository>,
        uow: Arc<dyn UnitOfWork>,
        payments: Arc<dyn PaymentGateway>,
        clock: Arc<dyn Clock>,
        lease: chrono::Duration,
    ) -> Self {
        Refunds { orders, uow, payments, clock, lease }
    }

    /// Whether an order can be refunded now.
    pub fn refundable(record: &OrderRecord) -> bool {
        record.order.status == OrderStatus::Completed
            && record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::Approved)
    }

    /// Refunds `order_id`. `inbox` (an inbound message) is recorded in the same transaction
    /// as the outcome; `scenario` overrides the order's mock refund behaviour if it has one.
    ///
    /// # Errors
    /// `NotFound`; `Forbidden` `UNAUTHORIZED_REFUND` unless the caller is the order's
    /// customer or an admin; `Conflict` `REFUND_NOT_ALLOWED` unless the order is `COMPLETED`
    /// with an `APPROVED` payment; `Unavailable` when the provider or database is down
    /// (nothing recorded — retry).
    pub async fn refund_order(
        &self,
        actor: &Actor,
        order_id: OrderId,
        request: RefundRequest,
    ) -> Result<RefundOutcome, AppError> {
        let now = self.clock.now();
        let lease = SagaLease { owner: uuid::Uuid::new_v4().to_string(), until: now + self.lease };
        if !self.orders.lease_saga(order_id, &lease, now).await? {
            if self.orders.get(order_id).await?.is_none() {
                return Err(AppError::NotFound("order"));
            }
            return Err(AppError::Conflict {
                code: ORDER_BUSY,
                message: "the order is being changed right now; retry shortly".into(),
            });
        }
        let result = self.refund_leased(actor, order_id, request).await;
        if let Err(err) = self.orders.release_saga(order_id, &lease.owner).await {
            tracing::warn!(order = %order_id, error = %err, "could not release the saga lease");
        }
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
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                audit::REFUND_REJECTED,
                entity::ORDER,
                order_id,
                actor,
                Some("not the order's customer".into()),
                self.clock.now(),
            ));
            self.uow.commit(changes).await?;
            return Err(AppError::Forbidden {
                code: "UNAUTHORIZED_REFUND",
                message: "only the order's customer or an admin may refund it".into(),
            });
        }
        if !Self::refundable(&record) {
            let now = self.clock.now();
            let mut changes = Changes::default();
            let detail = format!("order {} is {}", order_id, record.order.status);
            changes.audit.push(audit::record(
                audit::REFUND_REJECTED,
                entity::ORDER,
                order_id,
                actor,
                Some(detail),
                now,
            ));
            self.uow.commit(changes).await?;
            return Err(AppError::Conflict {
                code: "REFUND_NOT_ALLOWED",
                message: format!(
                    "only a COMPLETED order with an APPROVED payment can be refunded; this one is {}",
                    record.order.status
                ),
            });
        }
        let mut payment = record.payment.clone().ok_or_else(|| invariant("no payment"))?;
        if let (false, Some(refused)) = (retry_refused, payment.refund_failure_reason.clone()) {
            // Checked under the lease: a concurrent duplicate cannot ask the provider again.
            return Ok(RefundOutcome::Rejected { record, reason: format!("refused before: {refused}") });
        }
        let mut effective = record.context.scenario;
        if scenario.refund.is_some() {
            effective.refund = scenario.refund;
        }
        let reason_text = reason.clone().unwrap_or_else(|| "refund requested".into());
        let request = CancelPayment {
            payment_id: payment.id,
            payment_request_id: payment.payment_request_id.clone(),
            provider_transaction_id: payment
                .provider_transaction_id
                .clone()
                .ok_or_else(|| invariant("approved payment without a provider transaction"))?,
            amount: payment.amount,
            reason: reason_text.clone(),
            scenario: effective,
        };
        let result = self.payments.cancel(&request).await;
        let now = self.clock.now();
        let mut order = record.order.clone();
        let mut changes = Changes::default();
        let rejected = match result {
            Ok(()) => {
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
                    audit::REFUNDED,
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
            Err(GatewayError::Rejected { code, message }) => {
                let why = format!("{code}: {message}");
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
                    audit::REFUND_FAILED,
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
            Err(GatewayError::Unavailable(cause)) => {
                return Err(AppError::Unavailable(format!("payment provider: {cause}")));
            }
        };
        changes.inbox.extend(inbox);
        let steps = changes.steps.clone();
        match self.uow.commit(changes).await {
            Ok(()) => {}
            Err(RepoError::Conflict) => {
                // Refunded concurrently (the provider deduplicated the cancel by its key):
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
            Err(err) => return Err(err.into()),
        }
        record.order = order;
        record.payment = Some(payment);
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(match rejected {
            None => RefundOutcome::Refunded(record),
            Some(reason) => RefundOutcome::Rejected { record, reason },
        })
    }
}
