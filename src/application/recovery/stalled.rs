//! Sagas that stopped half-way (a crash, a dependency down), resumed with backoff, bounded.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::error::Chain;
use crate::application::orchestration::Orchestrator;
use crate::application::ports::{Changes, Clock, OrderRepository, SagaRuns, UnitOfWork};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::order::Order;
use crate::domain::retry::RetryPolicy;

/// Stalled sagas resumed: what that job and its operator's list need, and no more.
pub struct SagaRecovery {
    pub(super) orchestrator: Arc<Orchestrator>,
    pub(super) orders: Arc<dyn OrderRepository>,
    pub(super) runs: Arc<dyn SagaRuns>,
    pub(super) uow: Arc<dyn UnitOfWork>,
    pub(super) clock: Arc<dyn Clock>,
    /// `reconciliation`'s stalled-saga policy: resumes before an operator must look.
    pub(super) policy: RetryPolicy,
}

impl SagaRecovery {
    /// Resumes sagas a dead run left half-way (crash between steps, or a killed consumer
    /// whose redelivery found the lease still held). Returns how many were resumed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    ///
    /// Each resume is counted and audited (`SAGA_RESUMED`); the next one waits twice as
    /// long. A saga still half-way after `stalled.max_attempts` resumes (a provider that keeps
    /// answering what cannot be stored, a bug) is left alone, audited
    /// `SAGA_RECOVERY_EXHAUSTED` and listed by [`Self::stalled_for_operator`].
    pub async fn resume_stalled(&self) -> Result<usize, AppError> {
        let actor = Actor::system("saga-recovery");
        let now = self.clock.now();
        let policy = self.policy;
        let max = policy.max_attempts;
        let stalled = self.runs.stalled(now - policy.backoff_base, now, max, 100).await?;
        for (order_id, resumes) in &stalled {
            let resumes = *resumes + 1;
            // The next resume after the one rule's backoff (at most a day: its cap); the
            // operator's hand-off after `max` resumes is the `stalled` query's.
            let backoff = policy.delay_after(resumes.saturating_add(1));
            self.runs.note_resume(*order_id, now + backoff).await?;
            let before = self.orders.get(*order_id).await?.map(|r| r.order.status);
            // One order that fails again must not hold up the others.
            let (after, why) = match self.orchestrator.orchestrate(&actor, *order_id).await {
                Ok(record) => (Some(record.order.status), String::new()),
                Err(err) => {
                    tracing::warn!(order = %order_id, error = %Chain(&err), "resuming a stalled saga failed");
                    (before, format!(" ({})", Chain(&err)))
                }
            };
            let after = after.map_or("-", |s| s.as_str());
            let still_stalled = before.map(|s| s.as_str()) == Some(after);
            let (action, detail) = if still_stalled && resumes >= max {
                (
                    AuditAction::SagaRecoveryExhausted,
                    format!(
                        "still {after} after {resumes} resumes{why}; left for an operator (GET /api/admin/orders/stalled)"
                    ),
                )
            } else {
                (
                    AuditAction::SagaResumed,
                    format!(
                        "resume {resumes} of {max}: {} -> {after}{why}",
                        before.map_or("-", |s| s.as_str())
                    ),
                )
            };
            let mut changes = Changes::default();
            changes.audit.push(audit::record(action, entity::ORDER, order_id, &actor, Some(detail), now));
            self.uow.commit(changes).await?;
        }
        if !stalled.is_empty() {
            tracing::warn!(resumed = stalled.len(), "resumed sagas a dead run had left half-way");
        }
        Ok(stalled.len())
    }

    /// Orders whose stalled-saga recovery ran out of resumes, for operators.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn stalled_for_operator(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        actor.require_admin()?;
        Ok(self.runs.stalled_for_operator(self.policy.max_attempts, 100).await?)
    }

    /// How many sagas wait for an operator, up to `limit`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn waiting_for_operator(&self, limit: u32) -> Result<usize, AppError> {
        Ok(self.runs.stalled_for_operator(self.policy.max_attempts, limit).await?.len())
    }
}
