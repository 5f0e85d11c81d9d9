//! The saga lease, in one place: one runner at a time calls an order's providers — the
//! saga itself, a refund, reconciliation, a provider callback, the worker's recoveries.
//! The lease is a row lease on the order (`saga.lease`); a crashed holder's lease simply
//! runs out, and the worker's recoveries take over after it. It is held in one scope
//! ([`SagaLeases::holding`], [`SagaLeases::holding_all`], and the saga's own
//! `Orchestrator::holding_run`), which gives it back whatever the work in it answered: no
//! use case takes or releases a lease by hand.

use std::sync::Arc;

use crate::application::AppError;
use crate::application::error::Chain;
use crate::application::ports::{Clock, SagaLease, SagaRuns};
use crate::domain::ids::OrderId;

/// How long giving a lease back may hold a run's answer. A run that a failing database cut
/// short has already waited out one pool timeout; its release, sent to the same database,
/// would make the caller wait out a second (`failover::the_database_server_crashes_and_returns_under_load`
/// saw 20 s). Past this the lease is left to run out (`saga.lease`): the worker's
/// stalled-saga query waits for that anyway.
pub const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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
    pub(super) async fn take(&self, order_id: OrderId) -> Result<Option<SagaLease>, AppError> {
        let lease = self.fresh();
        Ok(self.runs.lease_saga(order_id, &lease, self.clock.now()).await?.then_some(lease))
    }

    /// The one lease scope: runs `body` holding the order's lease, then gives the lease back
    /// whatever `body` returned — an error, an early answer, or a commit that released it
    /// already with its writes (`Changes::release_saga`: giving back a lease no longer ours
    /// changes nothing, as the release is conditional on the owner). `None`, and `body` not
    /// run, while another runner holds the order.
    ///
    /// # Errors
    /// `Unavailable` when the lease cannot be taken (the database).
    pub async fn holding<T>(
        &self,
        order_id: OrderId,
        body: impl AsyncFnOnce(&SagaLease) -> T,
    ) -> Result<Option<T>, AppError> {
        let Some(lease) = self.take(order_id).await? else { return Ok(None) };
        let out = body(&lease).await;
        self.release(order_id, &lease.owner).await;
        Ok(Some(out))
    }

    /// [`Self::holding`] over every order of `order_ids` at once: all their leases, or none
    /// (`None` while another runner holds any of them, the ones taken given back).
    ///
    /// # Errors
    /// `Unavailable` when a lease cannot be taken (the database); those taken are given back.
    pub async fn holding_all<T>(
        &self,
        order_ids: &[OrderId],
        body: impl AsyncFnOnce() -> T,
    ) -> Result<Option<T>, AppError> {
        let mut held = Vec::with_capacity(order_ids.len());
        let mut taken = Ok(true);
        for order_id in order_ids {
            match self.take(*order_id).await {
                Ok(Some(lease)) => held.push((*order_id, lease)),
                Ok(None) => {
                    taken = Ok(false);
                    break;
                }
                Err(err) => {
                    taken = Err(err);
                    break;
                }
            }
        }
        let out = match taken {
            Ok(true) => Ok(Some(body().await)),
            Ok(false) => Ok(None),
            Err(err) => Err(err),
        };
        for (order_id, lease) in &held {
            self.release(*order_id, &lease.owner).await;
        }
        out
    }

    /// Gives the lease back, waiting at most [`RELEASE_WAIT`]. Not fatal when it fails or
    /// takes longer: the lease runs out by itself.
    pub(super) async fn release(&self, order_id: OrderId, owner: &str) {
        match tokio::time::timeout(RELEASE_WAIT, self.runs.release_saga(order_id, owner)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(order = %order_id, error = %Chain(&err), "could not release the saga lease");
            }
            Err(_) => tracing::warn!(
                order = %order_id,
                "the saga lease was not given back within {RELEASE_WAIT:?}; it runs out by itself"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::application::ports::{MockClock, MockSagaRuns};

    fn leases(free: Vec<bool>, released: Arc<Mutex<Vec<(OrderId, String)>>>) -> SagaLeases {
        let mut runs = MockSagaRuns::new();
        let free = Mutex::new(free.into_iter());
        runs.expect_lease_saga().returning(move |_, _, _| Ok(free.lock().unwrap().next().unwrap_or(false)));
        runs.expect_release_saga().returning(move |id, owner| {
            released.lock().unwrap().push((id, owner.to_owned()));
            Ok(())
        });
        let mut clock = MockClock::new();
        clock.expect_now().returning(chrono::Utc::now);
        SagaLeases::new(Arc::new(runs), Arc::new(clock), chrono::Duration::seconds(30))
    }

    #[tokio::test]
    async fn the_lease_is_given_back_whatever_the_body_answers_and_nothing_runs_without_it() {
        let released = Arc::new(Mutex::new(Vec::new()));
        let scope = leases(vec![true, false], released.clone());
        let order = OrderId::new();
        let owner = Mutex::new(String::new());
        let failed: Option<Result<(), AppError>> = scope
            .holding(order, async |lease: &SagaLease| {
                *owner.lock().unwrap() = lease.owner.clone();
                Err(AppError::unavailable("the provider is down"))
            })
            .await
            .unwrap();
        assert!(matches!(failed, Some(Err(AppError::Unavailable(_)))));
        assert_eq!(
            *released.lock().unwrap(),
            [(order, owner.lock().unwrap().clone())],
            "given back after an error"
        );
        let ran = Mutex::new(false);
        let busy = scope.holding(order, async |_: &SagaLease| *ran.lock().unwrap() = true).await.unwrap();
        assert!(busy.is_none() && !*ran.lock().unwrap(), "another runner holds it: the body does not run");
        assert_eq!(released.lock().unwrap().len(), 1, "nothing to give back");
    }

    #[tokio::test]
    async fn all_or_none_and_every_one_taken_given_back() {
        let released = Arc::new(Mutex::new(Vec::new()));
        // The second of three is busy: the first is given back, the body never runs.
        let scope = leases(vec![true, false, true], released.clone());
        let orders = [OrderId::new(), OrderId::new(), OrderId::new()];
        let ran = Mutex::new(false);
        let held = scope.holding_all(&orders, async || *ran.lock().unwrap() = true).await.unwrap();
        assert!(held.is_none() && !*ran.lock().unwrap());
        let given_back: Vec<OrderId> = released.lock().unwrap().iter().map(|(id, _)| *id).collect();
        assert_eq!(given_back, [orders[0]]);
        // All free: the body runs once, then each is given back.
        let released = Arc::new(Mutex::new(Vec::new()));
        let scope = leases(vec![true, true, true], released.clone());
        assert_eq!(scope.holding_all(&orders, async || 7).await.unwrap(), Some(7));
        let given_back: Vec<OrderId> = released.lock().unwrap().iter().map(|(id, _)| *id).collect();
        assert_eq!(given_back, orders);
    }
}
