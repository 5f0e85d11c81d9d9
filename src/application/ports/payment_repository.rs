//! Reads of payments: reconciliation, provider callbacks, compensations, operators.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::payment::{Payment, PaymentStatus};

/// Reads of payments for reconciliation, provider callbacks and operators.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentRepository: Send + Sync {
    /// Payments in `status` — an outcome the provider has not told us yet:
    /// `CONFIRMATION_REQUIRED` (an approval) or `REFUND_PENDING` (a refund) — with fewer
    /// than `max_attempts` look-ups whose next look-up is due, oldest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn awaiting_confirmation(
        &self,
        status: PaymentStatus,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> Result<Vec<Payment>, RepoError>;

    /// Payments of one status, most recently changed first.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn with_status(&self, status: PaymentStatus, limit: u32) -> Result<Vec<Payment>, RepoError>;

    /// A payment by its id.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn by_id(&self, id: PaymentId) -> Result<Option<Payment>, RepoError>;

    /// The payment of a request id.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn by_request_id(&self, payment_request_id: &str) -> Result<Option<Payment>, RepoError>;

    /// The payment of a provider transaction id.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn by_provider_transaction(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<Payment>, RepoError>;

    /// Orders whose settlement failed and whose payment still waits to be compensated.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn awaiting_compensation(&self, limit: u32) -> Result<Vec<OrderId>, RepoError>;
}
