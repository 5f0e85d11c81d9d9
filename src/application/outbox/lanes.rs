//! The relay's lanes (docs/spec.md §6): leased, renewed every `renew_every` (more often
//! while lanes change hands), trusted only while the local view of the lease holds, and
//! given back when the relay stops.

use std::time::{Duration as StdDuration, Instant};

use super::lane_timing::{HeldLanes, joining, renew_interval};
use super::relay::OutboxRelay;
use crate::application::error::Chain;
use crate::application::ports::{HeldLane, RepoError};

impl OutboxRelay {
    /// The lanes this relay may claim from now, renewing the lease when due: between
    /// drains, when nothing read is unrecorded (every [`SETTLING_RENEW_EVERY`] while lanes
    /// change hands). A failed renewal keeps the lanes only while the previous lease surely
    /// holds.
    ///
    /// # Errors
    /// The renewal failed and the previous lease may have lapsed.
    pub async fn lanes(&self) -> Result<Vec<HeldLane>, RepoError> {
        self.renew_when_due(true).await
    }

    /// The lanes, renewed when due; `between_drains`: nothing read is unrecorded, so lanes
    /// may change hands at the settling pace.
    pub(super) async fn renew_when_due(&self, between_drains: bool) -> Result<Vec<HeldLane>, RepoError> {
        let mut held = self.held.lock().await;
        let started = Instant::now();
        let at = tokio::time::Instant::now();
        let every = renew_interval(self.settings.lease, between_drains && held.settling);
        if held.renewed_at.is_none_or(|renewed| at >= renewed + every) {
            let now = self.clock.now();
            match self
                .store
                .lease_lanes(&self.settings.worker_id, self.settings.lanes, now, now + self.settings.lease)
                .await
            {
                Ok(lanes) => {
                    let changed = lanes != held.lanes;
                    if changed {
                        let ids: Vec<i16> = lanes.iter().map(|h| h.lane).collect();
                        tracing::info!(worker = %self.settings.worker_id, lanes = ?ids, "outbox lanes held");
                    }
                    let joined = held.joined.unwrap_or(at);
                    let settling = changed || at.duration_since(joined) < joining(self.settings.lease);
                    let next = renew_interval(self.settings.lease, settling);
                    // A tenth of the lease is the margin for clock drift and a slow statement.
                    let lease = self.settings.lease.to_std().unwrap_or_default();
                    self.interest.set(&lanes);
                    *held = HeldLanes { lanes, renewed_at: Some(at), settling, joined: Some(joined) };
                    self.set_renew_due(Some(at + next));
                    self.set_lease_end(Some(started + lease - lease / 10));
                }
                Err(err) if self.lease_holds() => {
                    tracing::warn!(error = %Chain(&err), "cannot renew the outbox lanes; the lease still holds");
                }
                Err(err) => {
                    held.lanes.clear();
                    self.set_lease_end(None);
                    return Err(err);
                }
            }
        }
        if self.lease_holds() { Ok(held.lanes.clone()) } else { Ok(Vec::new()) }
    }

    pub(super) fn set_renew_due(&self, due: Option<tokio::time::Instant>) {
        // A poisoned lock holds a plain instant: keep using it.
        *self.renew_due.lock().unwrap_or_else(|e| e.into_inner()) = due;
    }

    /// How long until the lanes' next renewal between drains is due (zero: now).
    pub(super) fn until_renewal(&self) -> StdDuration {
        let due = *self.renew_due.lock().unwrap_or_else(|e| e.into_inner());
        due.map_or(StdDuration::ZERO, |due| due.saturating_duration_since(tokio::time::Instant::now()))
    }

    pub(super) fn set_lease_end(&self, end: Option<Instant>) {
        // A poisoned lock holds a plain instant: keep using it.
        *self.lease_end.lock().unwrap_or_else(|e| e.into_inner()) = end;
    }

    /// Whether the lanes' lease surely holds for `margin` more (by this process's clock).
    pub(super) fn lease_holds_for(&self, margin: StdDuration) -> bool {
        self.lease_end
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() + margin < until)
    }

    /// Whether the lanes' lease surely still holds. Checked before each publish: a worker
    /// paused between claim and publish past its lease must not send what another worker
    /// may already be sending.
    pub(super) fn lease_holds(&self) -> bool {
        self.lease_holds_for(StdDuration::ZERO)
    }

    /// Gives the lanes back (graceful stop): other workers take them at their next renewal.
    pub async fn release(&self) {
        let mut held = self.held.lock().await;
        if let Err(err) = self.store.release_lanes(&self.settings.worker_id).await {
            tracing::warn!(error = %Chain(&err), "cannot give the outbox lanes back; they expire with their lease");
        }
        *held = HeldLanes::default();
        self.set_renew_due(None);
        self.set_lease_end(None);
    }
}
