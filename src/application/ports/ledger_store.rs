//! The provider's ledger reconciled, per day: the run and its findings (docs/spec.md §10).

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use super::audit_log::AuditRecord;
use super::error::RepoError;
use crate::domain::ledger::{Finding, FindingKind};

/// One day's reconciliation run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRun {
    pub day: NaiveDate,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// How many provider transactions the day had.
    pub transactions: i64,
    pub findings: i64,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait LedgerStore: Send + Sync {
    /// Records `run` with its `findings` and `audit` rows in one transaction, replacing
    /// whatever an earlier run of the same day stored; two runs of one day at once are
    /// serialised (the last one wins whole).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing is written).
    async fn replace_day(
        &self,
        run: LedgerRun,
        findings: Vec<Finding>,
        audit: Vec<AuditRecord>,
    ) -> Result<(), RepoError>;

    /// The run of `day` and its findings, or `None` if the day was never run.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn day(&self, day: NaiveDate) -> Result<Option<(LedgerRun, Vec<Finding>)>, RepoError>;

    /// The findings of the latest day run, by kind (every kind listed, zero included).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn latest_counts(&self) -> Result<Vec<(FindingKind, i64)>, RepoError>;
}
