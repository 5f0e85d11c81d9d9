//! The settlement retry processor (docs/spec.md §13): every `settlement.retry.interval` the
//! worker takes the due `RETRY_SCHEDULED` settlements and runs each one's next attempt under
//! its order's saga lease ([`Orchestrator::retry_settlement`]); and the operator's view and
//! repairs of the settlements that wait.

use std::sync::Arc;
use std::time::Duration;

use crate::application::error::Chain;
use crate::application::jobs::PeriodicJob;
use crate::application::orchestration::{Orchestrator, SettlementRetryBy};
use crate::application::ports::{Clock, ListedSettlement, OrderRecord, SettlementRepository};
use crate::application::{Actor, AppError};
use crate::domain::ids::SettlementId;
use crate::domain::settlement::SettlementStatus;

#[derive(Debug, Clone, Copy)]
pub struct SettlementRetrySettings {
    pub interval: Duration,
    pub batch: u32,
}

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettlementRound {
    /// Due settlements taken.
    pub claimed: usize,
    /// Of them, settled now.
    pub settled: usize,
    /// Of them, still not delivered (scheduled again, or now waiting for an operator).
    pub deferred: usize,
    /// Of them, refused (compensated).
    pub refused: usize,
    /// Found busy or no longer due (another worker has them).
    pub skipped: usize,
}

pub struct SettlementRetries {
    orchestrator: Arc<Orchestrator>,
    settlements: Arc<dyn SettlementRepository>,
    clock: Arc<dyn Clock>,
    settings: SettlementRetrySettings,
}

impl SettlementRetries {
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        settlements: Arc<dyn SettlementRepository>,
        clock: Arc<dyn Clock>,
        settings: SettlementRetrySettings,
    ) -> Self {
        SettlementRetries { orchestrator, settlements, clock, settings }
    }

    /// One round: every due settlement's next attempt.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn retry_due(&self, actor: &Actor) -> Result<SettlementRound, AppError> {
        let due = self.settlements.due_settlements(self.clock.now(), self.settings.batch).await?;
        let mut round = SettlementRound::default();
        for settlement in due {
            match self
                .orchestrator
                .retry_settlement(actor, settlement.order_id, SettlementRetryBy::Schedule)
                .await
            {
                Ok(Some(record)) => {
                    round.claimed += 1;
                    match record.settlement.map(|s| s.status) {
                        Some(SettlementStatus::Succeeded) => round.settled += 1,
                        Some(SettlementStatus::Failed) => round.refused += 1,
                        _ => round.deferred += 1,
                    }
                }
                Ok(None) => round.skipped += 1,
                Err(err) => {
                    tracing::warn!(settlement = %settlement.id, error = %Chain(&err), "settlement retry failed");
                    round.skipped += 1;
                }
            }
        }
        Ok(round)
    }

    /// Settlements in `status` (all when `None`), the most recently changed first.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn list(
        &self,
        actor: &Actor,
        status: Option<SettlementStatus>,
        limit: u32,
    ) -> Result<Vec<ListedSettlement>, AppError> {
        let merchant = actor.repairs_in()?;
        Ok(self.settlements.settlements(status, merchant, limit).await?)
    }

    /// One settlement, with its order's number.
    ///
    /// # Errors
    /// `NotFound`; `Unavailable` when the database fails.
    pub async fn get(&self, id: SettlementId) -> Result<ListedSettlement, AppError> {
        self.settlements.settlement(id).await?.ok_or(AppError::NotFound("settlement"))
    }

    /// The settlement's order, once `actor` may repair it: another merchant's, under a
    /// merchant's path, is not there.
    async fn order_of(
        &self,
        actor: &Actor,
        id: SettlementId,
    ) -> Result<crate::domain::ids::OrderId, AppError> {
        if actor.under.is_none() {
            actor.require_admin()?;
        }
        let listed = self.get(id).await?;
        let ours = actor.merchant.is_none_or(|m| m == listed.merchant_id);
        let operates = actor.is_admin || actor.under.is_some_and(|p| p.operator);
        match (ours, operates) {
            (false, _) => Err(AppError::NotFound("settlement")),
            (true, false) => Err(AppError::Forbidden {
                code: "FORBIDDEN",
                message: "an operator of the merchant may repair it".into(),
            }),
            (true, true) => Ok(listed.settlement.order_id),
        }
    }

    /// An operator's retry of a waiting settlement, now.
    ///
    /// # Errors
    /// `NotFound`; `Conflict` (`SETTLEMENT_NOT_WAITING`, `ORDER_BUSY`); `Unavailable`.
    pub async fn retry(
        &self,
        actor: &Actor,
        id: SettlementId,
        reason: String,
    ) -> Result<OrderRecord, AppError> {
        let order_id = self.order_of(actor, id).await?;
        let record =
            self.orchestrator.retry_settlement(actor, order_id, SettlementRetryBy::Operator(reason)).await?;
        record.ok_or_else(|| AppError::unavailable("the retry did not run"))
    }

    /// An operator marks a waiting settlement settled.
    ///
    /// # Errors
    /// As [`SettlementRetries::retry`].
    pub async fn mark_settled(
        &self,
        actor: &Actor,
        id: SettlementId,
        reason: &str,
    ) -> Result<OrderRecord, AppError> {
        let order_id = self.order_of(actor, id).await?;
        self.orchestrator.mark_settled(actor, order_id, reason).await
    }
}

#[async_trait::async_trait]
impl PeriodicJob for SettlementRetries {
    fn name(&self) -> &'static str {
        "settlement retries"
    }

    fn interval(&self) -> Duration {
        self.settings.interval
    }

    /// Every due settlement tried again.
    async fn round(&self) -> Result<Option<String>, AppError> {
        let r = self.retry_due(&Actor::system("settlement-retry")).await?;
        Ok((r.claimed > 0).then(|| {
            format!(
                "settlement retries: claimed {} settled {} deferred {} refused {}",
                r.claimed, r.settled, r.deferred, r.refused
            )
        }))
    }
}
