//! Settlements that could not be delivered (docs/spec.md §13): the retry processor's next
//! attempt, and an operator's retry or "mark settled". Each runs under the order's saga
//! lease; the settlement's transition is committed first (conditionally), then the saga
//! goes on from the committed state — the settlement step itself, under the same settlement
//! id, or the notification after a settlement marked settled.

use super::orchestrator::Orchestrator;
use super::outcome::Moved;
use super::run::Run;
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{Changes, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{SagaStep, StepStatus};

/// Who asks for a settlement's next attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlementRetryBy {
    /// The retry processor, for a due `RETRY_SCHEDULED` one.
    Schedule,
    /// An operator, with their reason (a waiting one, due or not).
    Operator(String),
}

fn not_waiting(err: impl std::fmt::Display) -> AppError {
    AppError::Conflict { code: "SETTLEMENT_NOT_WAITING", message: err.to_string() }
}

impl Orchestrator {
    /// The next attempt of the order's settlement, then the saga from there. `Ok(None)`:
    /// the processor found the order busy or no longer due (another worker has it).
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` for an operator while another runner holds the order,
    /// `SETTLEMENT_NOT_WAITING` when the settlement is not waiting; `Unavailable` when the
    /// database fails.
    pub async fn retry_settlement(
        &self,
        actor: &Actor,
        order_id: OrderId,
        by: SettlementRetryBy,
    ) -> Result<Option<OrderRecord>, AppError> {
        if let SettlementRetryBy::Operator(reason) = &by {
            audit::reason(Some(reason.clone()))?;
        }
        let held =
            self.holding_run(order_id, async |run| self.retry_held(actor, order_id, &by, run).await).await?;
        match (held, by) {
            (Some(result), _) => result,
            (None, SettlementRetryBy::Schedule) => Ok(None),
            (None, SettlementRetryBy::Operator(_)) => Err(AppError::order_busy()),
        }
    }

    /// [`Self::retry_settlement`] under the order's lease.
    async fn retry_held(
        &self,
        actor: &Actor,
        order_id: OrderId,
        by: &SettlementRetryBy,
        run: &Run<'_>,
    ) -> Result<Option<OrderRecord>, AppError> {
        let record = self.load(order_id).await?;
        let now = self.clock.now();
        let mut changes = Changes::default();
        let moved = match (by, record.settlement.clone()) {
            (_, None) => Err(not_waiting("the order has no settlement")),
            (SettlementRetryBy::Schedule, Some(mut s)) => s.claim_retry(now).map(|_| s).map_err(not_waiting),
            (SettlementRetryBy::Operator(reason), Some(mut s)) => s
                .operator_retry(now)
                .map(|_| {
                    changes.audit.push(audit::record(
                        AuditAction::SettlementRetry,
                        entity::ORDER,
                        order_id,
                        actor,
                        Some(format!("settlement {} tried again: {reason}", s.id)),
                        now,
                    ));
                    s
                })
                .map_err(not_waiting),
        };
        let scheduled = matches!(by, SettlementRetryBy::Schedule);
        let mut settlement = match moved {
            Ok(settlement) => settlement,
            Err(_) if scheduled => return Ok(None),
            Err(err) => return Err(err),
        };
        changes.update_settlement(&mut settlement);
        if !self.commit(changes).await? {
            return if scheduled { Ok(None) } else { Err(AppError::order_busy()) };
        }
        let fresh = self.load(order_id).await?;
        self.drive_run(fresh, actor, run, Moved::Already).await.map(Some)
    }

    /// An operator confirms the order's waiting settlement was settled (the accounting
    /// system has it): `SUCCEEDED`, the order `SETTLEMENT_REQUESTED`, audited with the
    /// reason; then the saga goes on (the notification).
    ///
    /// # Errors
    /// As [`Orchestrator::retry_settlement`].
    pub async fn mark_settled(
        &self,
        actor: &Actor,
        order_id: OrderId,
        reason: &str,
    ) -> Result<OrderRecord, AppError> {
        audit::reason(Some(reason.to_owned()))?;
        let held = self.holding_run(order_id, async move |run| {
            let record = self.load(order_id).await?;
            let now = self.clock.now();
            let mut settlement =
                record.settlement.clone().ok_or_else(|| not_waiting("the order has no settlement"))?;
            let settlement_events = settlement.mark_settled(now).map_err(not_waiting)?;
            let mut order = record.order.clone();
            let order_events = order.request_settlement(now).map_err(broken_invariant)?;
            let detail = format!("settlement {} marked settled by an operator: {reason}", settlement.id);
            let mut changes = Changes::default();
            changes.update_settlement(&mut settlement);
            changes.update_order(&mut order);
            changes.step(order_id, SagaStep::Settlement, StepStatus::Success, Some(detail.clone()), now);
            changes.audit.push(audit::record(
                AuditAction::SettlementMarkedSettled,
                entity::ORDER,
                order_id,
                actor,
                Some(detail),
                now,
            ));
            let mut events = EventWriter::new(&order, &record, now);
            events.settlement(&settlement, &settlement_events).order(&order_events);
            changes.outbox = events.finish();
            if !self.commit(changes).await? {
                return Err(AppError::order_busy());
            }
            let fresh = self.load(order_id).await?;
            self.drive_run(fresh, actor, run, Moved::Already).await
        });
        held.await?.unwrap_or_else(|| Err(AppError::order_busy()))
    }
}
