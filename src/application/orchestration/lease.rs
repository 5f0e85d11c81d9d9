//! The saga lease, in one place: one runner at a time calls an order's providers — the
//! saga itself, a refund, reconciliation, a provider callback, the worker's recoveries.
//! The lease is a row lease on the order (`saga.lease`); a crashed holder's lease simply
//! runs out, and the worker's recoveries take over after it.

use std::sync::Arc;

use crate::application::AppError;
use crate::application::error::Chain;
use crate::application::ports::{Clock, SagaLease, SagaRuns};
use crate::domain::ids::OrderId;

#[derive(Clone)]
pub struct SagaLeases {
    runs: Arc<dyn SagaRuns>,
    clock: Arc<dyn Clock>,
    duration: chrono::Duration,
}

impl SagaLeases {
    pub fn new(runs: Arc<dyn SagaRuns>, clock: Arc<dyn Clock>, duration: chrono::Duration) -> Self {
        SagaLeases { runs, clock, duration }
    }

    /// A fresh lease for a new owner, from now.
    pub fn fresh(&self) -> SagaLease {
        SagaLease { owner: uuid::Uuid::new_v4().to_string(), until: self.clock.now() + self.duration }
    }

    /// Takes the order's lease, or `None` while another runner holds it.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn take(&self, order_id: OrderId) -> Result<Option<SagaLease>, AppError> {
        let lease = self.fresh();
        Ok(self.runs.lease_saga(order_id, &lease, self.clock.now()).await?.then_some(lease))
    }

    /// Gives the lease back. Not fatal when it fails: the lease runs out by itself.
    pub async fn release(&self, order_id: OrderId, owner: &str) {
        if let Err(err) = self.runs.release_saga(order_id, owner).await {
            tracing::warn!(order = %order_id, error = %Chain(&err), "could not release the saga lease");
        }
    }
}
