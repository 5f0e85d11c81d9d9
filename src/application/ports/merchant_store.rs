//! The merchants, their stores, their people and their keys (docs/spec.md §15). Every change
//! is written with its audit row, in one transaction.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{AuditRecord, RepoError, Sealed};
use crate::domain::ids::{ApiKeyId, MerchantId, StoreId};
use crate::domain::merchant::{ApiKey, Membership, Merchant, Store};

/// Merchants and their stores.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MerchantDirectory: Send + Sync {
    /// Inserts `merchant` with `audit`.
    ///
    /// # Errors
    /// MUST return `Conflict` when another merchant holds its code (also when two inserts
    /// race), having written nothing.
    async fn insert_merchant(&self, merchant: &Merchant, audit: &AuditRecord) -> Result<(), RepoError>;

    /// Writes `merchant` with `audit` only if it is still at the version it was loaded at.
    ///
    /// # Errors
    /// MUST return `Conflict` when it was changed since, having written nothing.
    async fn update_merchant(&self, merchant: &Merchant, audit: &AuditRecord) -> Result<(), RepoError>;

    async fn merchant(&self, id: MerchantId) -> Result<Option<Merchant>, RepoError>;

    /// Every merchant, by code.
    async fn merchants(&self) -> Result<Vec<Merchant>, RepoError>;

    /// The merchants `subject` is a member of, by code.
    async fn merchants_of(&self, subject: &str) -> Result<Vec<Merchant>, RepoError>;

    /// Inserts `store` with `audit`.
    ///
    /// # Errors
    /// MUST return `Conflict` when another store of its merchant holds its code.
    async fn insert_store(&self, store: &Store, audit: &AuditRecord) -> Result<(), RepoError>;

    /// The merchant's stores, by code.
    async fn stores(&self, merchant: MerchantId) -> Result<Vec<Store>, RepoError>;

    /// One store, only if it is `merchant`'s.
    async fn store(&self, merchant: MerchantId, id: StoreId) -> Result<Option<Store>, RepoError>;
}

/// Who may act on a merchant: its members and its API keys.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MerchantAccessStore: Send + Sync {
    /// Inserts the membership, or changes the role of the subject's one in that merchant.
    async fn set_member(&self, member: &Membership, audit: &AuditRecord) -> Result<(), RepoError>;

    /// Removes the subject's membership; whether there was one (the audit row is written
    /// only then).
    async fn remove_member(
        &self,
        merchant: MerchantId,
        subject: &str,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError>;

    /// The subject's membership of `merchant`.
    async fn member(&self, merchant: MerchantId, subject: &str) -> Result<Option<Membership>, RepoError>;

    /// The merchant's members, by subject.
    async fn members(&self, merchant: MerchantId) -> Result<Vec<Membership>, RepoError>;

    /// Inserts `key` with the SHA-256 of its secret (never the key).
    async fn insert_key(
        &self,
        key: &ApiKey,
        secret_hash: &[u8; 32],
        audit: &AuditRecord,
    ) -> Result<(), RepoError>;

    /// The merchant's keys, newest first; `id` narrows to one.
    async fn keys(&self, merchant: MerchantId, id: Option<ApiKeyId>) -> Result<Vec<ApiKey>, RepoError>;

    /// The key whose prefix is `prefix`, with its secret's hash.
    async fn key_by_prefix(&self, prefix: &str) -> Result<Option<(ApiKey, [u8; 32])>, RepoError>;

    /// Records a change of `key`: its revocation (with its audit row), or — with no audit —
    /// its use at `used_at`, written only when it moves `lastUsedAt` forward.
    async fn update_key(
        &self,
        key: &ApiKey,
        used_at: Option<DateTime<Utc>>,
        audit: &[AuditRecord],
    ) -> Result<(), RepoError>;
}

/// One line of a merchant's daily report: its orders of one store (or of none) in one
/// currency, created within the day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportLine {
    pub store_id: Option<StoreId>,
    pub currency: String,
    pub orders: i64,
    /// What their captured payments took (minor units).
    pub gross: i64,
    /// What of it was refunded.
    pub refunds: i64,
    /// The provider's fees and payouts of those payments, where it has settled them.
    pub fees: Option<i64>,
    pub payouts: Option<i64>,
}

/// A merchant's figures.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MerchantReports: Send + Sync {
    /// The merchant's orders created in `[from, to)`, a line per store and currency.
    async fn daily(
        &self,
        merchant: MerchantId,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<ReportLine>, RepoError>;
}

/// A merchant's own channel settings, sealed (docs/spec.md §15): the store never sees them
/// open.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MerchantChannelStore: Send + Sync {
    /// Stores the merchant's sealed settings with `audit` (`None`: removes them).
    async fn set_channels(
        &self,
        merchant: MerchantId,
        sealed: Option<Sealed>,
        at: DateTime<Utc>,
        audit: &AuditRecord,
    ) -> Result<(), RepoError>;

    /// The merchant's sealed settings.
    async fn channels(&self, merchant: MerchantId) -> Result<Option<Sealed>, RepoError>;

    /// Every merchant's sealed settings not sealed under `key_id` (a rotation's work).
    async fn sealed_under_other_keys(&self, key_id: &str) -> Result<Vec<(MerchantId, Sealed)>, RepoError>;

    /// Replaces `was` with `now` (sealed again under another key) with `audit`, only if
    /// `was` is still what is stored; whether it was (nothing is written otherwise).
    async fn reseal(
        &self,
        merchant: MerchantId,
        was: &Sealed,
        now: &Sealed,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError>;
}
