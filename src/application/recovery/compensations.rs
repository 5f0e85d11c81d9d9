//! Compensations that failed, retried with backoff until their attempts run out, then left
//! for an operator.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{CompensationReport, compensation_failures};
use crate::application::audit::{self, entity};
use crate::application::meter::Meter;
use crate::application::orchestration::Orchestrator;
use crate::application::ports::{Changes, Clock, OrderRepository, PaymentRepository, UnitOfWork};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{Order, OrderStatus};
use crate::domain::payment::PaymentStatus;
use crate::domain::retry::NextAttempt;
use crate::domain::retry::RetryPolicy;

/// Failed compensations retried: what that job and its operator's list need, and no more.
#[derive(Clone)]
pub struct CompensationRecovery {
    pub(super) orchestrator: Arc<Orchestrator>,
    pub(super) orders: Arc<dyn OrderRepository>,
    pub(super) payments: Arc<dyn PaymentRepository>,
    pub(super) uow: Arc<dyn UnitOfWork>,
    pub(super) clock: Arc<dyn Clock>,
    /// `reconciliation`'s compensation policy: cancel attempts before an operator decides.
    pub(super) policy: RetryPolicy,
    pub(super) meter: Meter,
}

impl CompensationRecovery {
    /// Retries the compensations whose cancel failed, with backoff; past the attempts,
    /// leaves them (once audited) to an operator.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn retry_compensations(&self) -> Result<CompensationReport, AppError> {
        let actor = Actor::system("compensation-retry");
        let mut report = CompensationReport::default();
        for order_id in self.payments.awaiting_compensation(100).await? {
            let Some(record) = self.orders.get(order_id).await? else {
                continue;
            };
            if !record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::Approved) {
                continue;
            }
            let failures = compensation_failures(&record);
            let Some(last) = failures.last() else {
                // Never attempted (a crash between the settlement failure and compensation).
                report.retried += 1;
                if self.orchestrator.orchestrate(&actor, order_id).await?.order.status
                    == OrderStatus::Cancelled
                {
                    report.compensated += 1;
                }
                continue;
            };
            let now = self.clock.now();
            let attempts = i32::try_from(failures.len()).unwrap_or(i32::MAX);
            // The one rule, at most a day between two attempts (its cap).
            let NextAttempt::At(due) = self.policy.after(attempts, None, last.created_at) else {
                if self.hand_over(&actor, order_id, failures.len(), now).await? {
                    report.exhausted += 1;
                }
                continue;
            };
            if due > now {
                continue;
            }
            report.retried += 1;
            let after = self.orchestrator.orchestrate(&actor, order_id).await?;
            if after.order.status == OrderStatus::Cancelled {
                report.compensated += 1;
            }
        }
        Ok(report)
    }

    /// A compensation whose attempts are spent, handed to an operator: audited once
    /// (`COMPENSATION_EXHAUSTED`, counted); `false` when it was already.
    async fn hand_over(
        &self,
        actor: &Actor,
        order_id: OrderId,
        failures: usize,
        now: DateTime<Utc>,
    ) -> Result<bool, AppError> {
        let audited = self.orders.audit_for(entity::ORDER, &order_id.to_string()).await?;
        if audited.iter().any(|a| a.action == AuditAction::CompensationExhausted) {
            return Ok(false);
        }
        let detail = format!(
            "payment cancel failed {failures} times; the order stays FAILED with its payment APPROVED until an operator acts"
        );
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::CompensationExhausted,
            entity::ORDER,
            order_id,
            actor,
            Some(detail),
            now,
        ));
        self.uow.commit(changes).await?;
        self.meter.record(|| metrics::counter!("compensations_exhausted_total").increment(1));
        Ok(true)
    }

    /// Orders whose compensation failed on every retry: the payment is still `APPROVED` for
    /// a `FAILED` order (money taken for nothing) and only an operator can settle it.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn compensations_exhausted(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        actor.require_admin()?;
        let mut exhausted = Vec::new();
        for order_id in self.payments.awaiting_compensation(1000).await? {
            let Some(record) = self.orders.get(order_id).await? else {
                continue;
            };
            let approved = record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::Approved);
            if approved
                && i32::try_from(compensation_failures(&record).len()).unwrap_or(i32::MAX)
                    >= self.policy.max_attempts
            {
                exhausted.push(record.order);
            }
        }
        Ok(exhausted)
    }
}
