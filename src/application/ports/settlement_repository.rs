//! Reads of settlements for their retries and their operators (docs/spec.md §13).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::RepoError;
use crate::domain::ids::{MerchantId, SettlementId};
use crate::domain::settlement::{Settlement, SettlementStatus};

/// A settlement as an operator reads it: with its order's number (docs/spec.md §3), the
/// number people quote.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedSettlement {
    pub settlement: Settlement,
    pub order_number: i64,
    /// Its order's merchant (docs/spec.md §15).
    pub merchant_id: MerchantId,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait SettlementRepository: Send + Sync {
    /// `RETRY_SCHEDULED` settlements whose next attempt is due at `now`, the longest due
    /// first, at most `limit`.
    async fn due_settlements(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Settlement>, RepoError>;

    /// Settlements in `status` (every one when `None`), of `merchant`'s orders (every
    /// merchant's when `None`), the most recently changed first, each with its order's
    /// number.
    async fn settlements(
        &self,
        status: Option<SettlementStatus>,
        merchant: Option<MerchantId>,
        limit: u32,
    ) -> Result<Vec<ListedSettlement>, RepoError>;

    /// One settlement, with its order's number.
    async fn settlement(&self, id: SettlementId) -> Result<Option<ListedSettlement>, RepoError>;
}
