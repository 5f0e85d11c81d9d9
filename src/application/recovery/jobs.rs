//! Recovery's six jobs, each given only what its round needs and run on its own by the
//! worker ([`crate::application::jobs`]) every `reconciliation.interval`: unknown payment
//! outcomes looked up, stalled sagas resumed, orders unpaid past the payment window failed,
//! orders held past their hold failed, pending refunds finished, failed compensations
//! retried. One failing does not hold up, or mark unready, the others.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{CompensationRecovery, CompensationReport, ReconcileReport, Recovery, SagaRecovery};
use crate::application::AppError;
use crate::application::jobs::PeriodicJob;
use crate::application::money::refunds::{PendingRefundReport, Refunds};
use crate::application::orchestration::Orchestrator;

/// Every recovery job, each given only what its round needs: the reconciliation, stalled
/// sagas and compensation retries drive `recovery`'s own use cases; the unpaid and held
/// orders are the orchestrator's; pending refunds are the refunds'.
pub fn recovery_jobs(
    recovery: &Arc<Recovery>,
    orchestrator: &Arc<Orchestrator>,
    refunds: &Arc<Refunds>,
) -> Vec<Arc<dyn PeriodicJob>> {
    let every = recovery.settings.interval;
    vec![
        Arc::new(PaymentReconciliation(recovery.clone())),
        Arc::new(StalledSagas { sagas: recovery.sagas().clone(), every }),
        Arc::new(UnpaidOrders { orchestrator: orchestrator.clone(), every }),
        Arc::new(HeldOrders { orchestrator: orchestrator.clone(), every }),
        Arc::new(PendingRefunds { refunds: refunds.clone(), every }),
        Arc::new(CompensationRetries { compensations: recovery.compensations().clone(), every }),
    ]
}

/// Payments whose outcome is unknown, looked up at the provider.
pub struct PaymentReconciliation(pub Arc<Recovery>);
/// Sagas that stopped half-way, resumed, every `every`.
pub struct StalledSagas {
    pub sagas: Arc<SagaRecovery>,
    pub every: Duration,
}
/// Orders unpaid past the payment window, failed, every `every`.
pub struct UnpaidOrders {
    pub orchestrator: Arc<Orchestrator>,
    pub every: Duration,
}
/// Orders held past their hold (the commerce dialect's), failed, every `every`.
pub struct HeldOrders {
    pub orchestrator: Arc<Orchestrator>,
    pub every: Duration,
}
/// Refunds whose outcome is unknown, finished, every `every`.
pub struct PendingRefunds {
    pub refunds: Arc<Refunds>,
    pub every: Duration,
}
/// Compensations that failed, tried again, every `every`.
pub struct CompensationRetries {
    pub compensations: Arc<CompensationRecovery>,
    pub every: Duration,
}

#[async_trait]
impl PeriodicJob for PaymentReconciliation {
    fn name(&self) -> &'static str {
        "payment reconciliation"
    }
    fn interval(&self) -> Duration {
        self.0.settings.interval
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let r = self.0.reconcile_due().await?;
        Ok((r != ReconcileReport::default()).then(|| format!("payment reconciliation: {r:?}")))
    }
}

#[async_trait]
impl PeriodicJob for StalledSagas {
    fn name(&self) -> &'static str {
        "stalled sagas"
    }
    fn interval(&self) -> Duration {
        self.every
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        self.sagas.resume_stalled().await?;
        Ok(None)
    }
}

#[async_trait]
impl PeriodicJob for UnpaidOrders {
    fn name(&self) -> &'static str {
        "unpaid orders"
    }
    fn interval(&self) -> Duration {
        self.every
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let expired = self.orchestrator.expire_unpaid().await?;
        Ok((expired > 0).then(|| format!("{expired} orders unpaid past the payment window failed")))
    }
}

#[async_trait]
impl PeriodicJob for HeldOrders {
    fn name(&self) -> &'static str {
        "held orders"
    }
    fn interval(&self) -> Duration {
        self.every
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let expired = self.orchestrator.expire_held_orders().await?;
        Ok((expired > 0).then(|| format!("{expired} orders held past their hold failed")))
    }
}

#[async_trait]
impl PeriodicJob for PendingRefunds {
    fn name(&self) -> &'static str {
        "pending refunds"
    }
    fn interval(&self) -> Duration {
        self.every
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let r = self.refunds.resolve_pending().await?;
        Ok((r != PendingRefundReport::default()).then(|| format!("pending refunds: {r:?}")))
    }
}

#[async_trait]
impl PeriodicJob for CompensationRetries {
    fn name(&self) -> &'static str {
        "compensation retries"
    }
    fn interval(&self) -> Duration {
        self.every
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let r = self.compensations.retry_compensations().await?;
        Ok((r != CompensationReport::default()).then(|| format!("compensation retries: {r:?}")))
    }
}
