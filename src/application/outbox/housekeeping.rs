//! Outbox housekeeping: expired leases back to `RETRY_WAIT`, old rows deleted by retention
//! (outbox rows, idempotency keys, audit rows).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, NaiveTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::application::Actor;
use crate::application::audit::{self, entity};
use crate::application::error::Chain;
use crate::application::ports::{AuditLog, Clock, IdempotencyStore, OutboxUpkeep, RepoError, RestoredRebase};
use crate::domain::audit::AuditAction;

#[derive(Debug, Clone)]
pub struct HousekeepingSettings {
    pub recovery_interval: StdDuration,
    /// Daily clean-up time (UTC).
    pub cleanup_at: NaiveTime,
    pub retention_published: Duration,
    pub retention_dead_letter: Duration,
    /// Idempotency keys are kept at least this long.
    pub retention_idempotency: Duration,
    /// Audit rows are kept this long (`audit.retention`).
    pub retention_audit: Duration,
    /// Rows deleted per statement, so clean-up never holds long locks.
    pub cleanup_batch: u32,
}

pub struct Housekeeping {
    outbox: Arc<dyn OutboxUpkeep>,
    idempotency: Arc<dyn IdempotencyStore>,
    audit: Arc<dyn AuditLog>,
    clock: Arc<dyn Clock>,
    settings: HousekeepingSettings,
}

/// The next instant at `at` (UTC) strictly after `now`.
pub fn next_daily(now: DateTime<Utc>, at: NaiveTime) -> DateTime<Utc> {
    let today = now.date_naive().and_time(at).and_utc();
    if today > now { today } else { today + Duration::days(1) }
}

impl Housekeeping {
    pub fn new(
        outbox: Arc<dyn OutboxUpkeep>,
        idempotency: Arc<dyn IdempotencyStore>,
        audit: Arc<dyn AuditLog>,
        clock: Arc<dyn Clock>,
        settings: HousekeepingSettings,
    ) -> Self {
        Housekeeping { outbox, idempotency, audit, clock, settings }
    }

    /// Whether the outbox holds another server's history (restored from a logical dump):
    /// the service must not start on it until [`Self::rebase_restored`] ran.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn restored_history(&self) -> Result<bool, RepoError> {
        self.outbox.restored_history().await
    }

    /// Makes a restored outbox history this server's own (`app outbox rebase`): what the
    /// old server sent is kept as sent, the rest goes out; audited as `actor`'s.
    ///
    /// # Errors
    /// `Unavailable` when the database fails (nothing changed).
    pub async fn rebase_restored(&self, actor: &Actor) -> Result<RestoredRebase, RepoError> {
        let record =
            audit::record(AuditAction::OutboxRebase, entity::OUTBOX, "", actor, None, self.clock.now());
        self.outbox.rebase_restored(record).await
    }

    /// Returns expired claims to `RETRY_WAIT`; returns how many.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn recover_leases(&self) -> Result<u64, RepoError> {
        let recovered = self.outbox.recover_expired(self.clock.now()).await?;
        if recovered > 0 {
            tracing::warn!(recovered, "recovered expired outbox claims");
        }
        Ok(recovered)
    }

    /// Deletes rows past retention in bounded batches until none are left; returns how many.
    ///
    /// # Errors
    /// `Unavailable` when the database fails (what was deleted stays deleted).
    pub async fn clean_up(&self) -> Result<u64, RepoError> {
        let now = self.clock.now();
        let s = &self.settings;
        let mut total = 0;
        loop {
            let n = self
                .outbox
                .purge(now - s.retention_published, now - s.retention_dead_letter, s.cleanup_batch)
                .await?;
            total += n;
            if n < u64::from(s.cleanup_batch) {
                break;
            }
        }
        total += self.idempotency.purge(now - s.retention_idempotency).await?;
        loop {
            let n = self.audit.purge_audit(now - s.retention_audit, s.cleanup_batch).await?;
            total += n;
            if n < u64::from(s.cleanup_batch) {
                break;
            }
        }
        tracing::info!(deleted = total, "outbox clean-up done");
        Ok(total)
    }

    /// Runs lease recovery every `recovery_interval` and clean-up daily at `cleanup_at`.
    pub async fn run_until_stopped(&self, stop: CancellationToken) {
        let mut recovery = tokio::time::interval(self.settings.recovery_interval);
        recovery.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let until_cleanup = (next_daily(self.clock.now(), self.settings.cleanup_at) - self.clock.now())
                .to_std()
                .unwrap_or(StdDuration::from_secs(1));
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = recovery.tick() => {
                    if let Err(err) = self.recover_leases().await {
                        tracing::error!(error = %Chain(&err), "lease recovery failed");
                    }
                }
                _ = tokio::time::sleep(until_cleanup) => {
                    if let Err(err) = self.clean_up().await {
                        tracing::error!(error = %Chain(&err), "outbox clean-up failed");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_daily_is_today_if_still_ahead_else_tomorrow() {
        let at = NaiveTime::from_hms_opt(3, 0, 0).unwrap();
        let before = "2026-11-29T02:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(next_daily(before, at), "2026-11-29T03:00:00Z".parse::<DateTime<Utc>>().unwrap());
        let after = "2026-11-29T03:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(next_daily(after, at), "2026-11-30T03:00:00Z".parse::<DateTime<Utc>>().unwrap());
    }
}
