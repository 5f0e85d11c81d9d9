//! Outbox housekeeping: expired leases back to `RETRY_WAIT`, old rows deleted by retention
//! (outbox rows, idempotency keys, audit rows).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use chrono::{DateTime, Duration, NaiveTime, Utc};

use crate::application::audit::{self, entity};
use crate::application::jobs::PeriodicJob;
use crate::application::ports::{AuditLog, Clock, IdempotencyStore, OutboxUpkeep, RepoError, RestoredRebase};
use crate::application::{Actor, AppError};
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
}

/// Housekeeping as the worker's jobs ([`crate::application::jobs`]): lease recovery every
/// `outbox.recovery_interval`, and the daily clean-up — each reported to readiness like any
/// other job.
pub fn housekeeping_jobs(housekeeping: &Arc<Housekeeping>) -> Vec<Arc<dyn PeriodicJob>> {
    vec![
        Arc::new(LeaseRecovery(housekeeping.clone())),
        Arc::new(DailyCleanUp { housekeeping: housekeeping.clone(), next: std::sync::Mutex::new(None) }),
    ]
}

/// Expired claims given back, every `outbox.recovery_interval`.
pub struct LeaseRecovery(pub Arc<Housekeeping>);

/// Old rows deleted, once a day at `outbox.cleanup_at` (UTC).
pub struct DailyCleanUp {
    housekeeping: Arc<Housekeeping>,
    /// When the clean-up is due next (`None`: not worked out yet, at the first round).
    next: std::sync::Mutex<Option<DateTime<Utc>>>,
}

#[async_trait]
impl PeriodicJob for LeaseRecovery {
    fn name(&self) -> &'static str {
        "outbox lease recovery"
    }
    fn interval(&self) -> StdDuration {
        self.0.settings.recovery_interval
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let recovered = self.0.recover_leases().await?;
        Ok((recovered > 0).then(|| format!("{recovered} expired claims given back")))
    }
}

#[async_trait]
impl PeriodicJob for DailyCleanUp {
    fn name(&self) -> &'static str {
        "outbox clean-up"
    }
    /// How often it looks whether the day's clean-up is due.
    fn interval(&self) -> StdDuration {
        StdDuration::from_secs(30)
    }
    /// Deleting a day's old rows in batches may take a while.
    fn longest_round(&self) -> StdDuration {
        StdDuration::from_secs(3600)
    }
    async fn round(&self) -> Result<Option<String>, AppError> {
        let h = &self.housekeeping;
        let now = h.clock.now();
        let due = {
            let mut next = self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = *next.get_or_insert_with(|| next_daily(now, h.settings.cleanup_at));
            at <= now
        };
        if !due {
            return Ok(None);
        }
        let deleted = h.clean_up().await?;
        // Only a clean-up that ran moves the day on: a failed one is tried at the next round.
        *self.next.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some(next_daily(now, h.settings.cleanup_at));
        Ok(Some(format!("outbox clean-up: {deleted} rows deleted")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts its clean-ups (one audit purge each).
    struct CountingAudit(std::sync::atomic::AtomicUsize);

    #[async_trait]
    impl AuditLog for CountingAudit {
        async fn purge_audit(&self, _: DateTime<Utc>, _: u32) -> Result<u64, RepoError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(0)
        }
    }

    #[tokio::test]
    async fn the_daily_clean_up_runs_once_a_day_at_its_time() {
        use crate::application::ports::{MockClock, MockIdempotencyStore, MockOutboxUpkeep};
        let at = |text: &str| text.parse::<DateTime<Utc>>().unwrap();
        let now = Arc::new(std::sync::Mutex::new(at("2026-11-29T02:00:00Z")));
        let mut clock = MockClock::new();
        let read = now.clone();
        clock.expect_now().returning(move || *read.lock().unwrap());
        let mut outbox = MockOutboxUpkeep::new();
        outbox.expect_purge().returning(|_, _, _| Ok(0));
        let mut idempotency = MockIdempotencyStore::new();
        idempotency.expect_purge().returning(|_| Ok(0));
        let audit = Arc::new(CountingAudit(std::sync::atomic::AtomicUsize::new(0)));
        let settings = HousekeepingSettings {
            recovery_interval: StdDuration::from_secs(60),
            cleanup_at: NaiveTime::from_hms_opt(3, 0, 0).unwrap(),
            retention_published: Duration::days(30),
            retention_dead_letter: Duration::days(90),
            retention_idempotency: Duration::days(1),
            retention_audit: Duration::days(365),
            cleanup_batch: 100,
        };
        let h = Arc::new(Housekeeping::new(
            Arc::new(outbox),
            Arc::new(idempotency),
            audit.clone(),
            Arc::new(clock),
            settings,
        ));
        let jobs = housekeeping_jobs(&h);
        let daily = jobs.iter().find(|j| j.name() == "outbox clean-up").unwrap();
        let ran = || audit.0.load(std::sync::atomic::Ordering::SeqCst);
        daily.round().await.unwrap();
        assert_eq!(ran(), 0, "02:00: not yet");
        *now.lock().unwrap() = at("2026-11-29T03:00:30Z");
        daily.round().await.unwrap();
        assert_eq!(ran(), 1, "03:00:30: the day's clean-up");
        *now.lock().unwrap() = at("2026-11-29T09:00:00Z");
        daily.round().await.unwrap();
        assert_eq!(ran(), 1, "once a day");
        *now.lock().unwrap() = at("2026-11-30T03:00:01Z");
        daily.round().await.unwrap();
        assert_eq!(ran(), 2, "the next day's");
        assert!(jobs.iter().any(|j| j.name() == "outbox lease recovery"));
    }

    #[test]
    fn next_daily_is_today_if_still_ahead_else_tomorrow() {
        let at = NaiveTime::from_hms_opt(3, 0, 0).unwrap();
        let before = "2026-11-29T02:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(next_daily(before, at), "2026-11-29T03:00:00Z".parse::<DateTime<Utc>>().unwrap());
        let after = "2026-11-29T03:00:00Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(next_daily(after, at), "2026-11-30T03:00:00Z".parse::<DateTime<Utc>>().unwrap());
    }
}
