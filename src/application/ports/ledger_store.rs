//! The provider's ledger reconciled, per day: the run and its findings (docs/spec.md §10),
//! and what the provider pays out (§13): the payouts its settlements recorded.

use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, Utc};

use super::audit_log::AuditRecord;
use super::error::RepoError;
use crate::domain::ids::PaymentId;
use crate::domain::ledger::{Finding, FindingKind};
use crate::domain::payout::Payout;

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
    /// Records `run` with its `findings`, the `payouts` of the transactions sold that day
    /// and `audit` rows in one transaction, replacing whatever an earlier run of the same
    /// day stored (its payouts: those with that `sold_date`); two runs of one day at once are
    /// serialised (the last one wins whole).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing is written).
    async fn replace_day(
        &self,
        run: LedgerRun,
        findings: Vec<Finding>,
        payouts: Vec<Payout>,
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

/// The payouts recorded, as the order detail and the operators' payouts read them.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PayoutStore: Send + Sync {
    /// Every payout recorded for `payments`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn payouts_of(&self, payments: &[PaymentId]) -> Result<Vec<Payout>, RepoError>;

    /// Every payout the provider pays out on `day` (`paid_out_date`), oldest sold first.
    ///
    /// # Errors
    /// As [`PayoutStore::payouts_of`].
    async fn paid_out_on(&self, day: NaiveDate) -> Result<Vec<Payout>, RepoError>;
}
