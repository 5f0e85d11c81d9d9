//! Reads of payments: reconciliation, provider callbacks, compensations, operators.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::ledger::Books;
use crate::domain::payment::{Payment, PaymentStatus};

/// What a member's payments may be ordered by (the momo dialect's `sort`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentSortKey {
    Number,
    Amount,
    CreatedAt,
    Status,
}

/// One page of a customer's meeting-order payments (the momo dialect's `/payments/me`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CustomerPayments {
    pub customer_id: String,
    /// Only this meeting's.
    pub meeting_id: Option<String>,
    /// Only these statuses; `None`: every status but `hidden`.
    pub statuses: Option<Vec<PaymentStatus>>,
    /// Never listed.
    pub hidden: Vec<PaymentStatus>,
    /// Declined keyed-in attempts are never listed (a keyed-in card's refusal: the member was
    /// answered it, and no payment stands, docs/spec.md §14).
    pub declined_keyed_in_hidden: bool,
    /// Keys with `true` for descending; after them, by number ascending.
    pub sort: Vec<(PaymentSortKey, bool)>,
    pub offset: u64,
    pub limit: u64,
}

/// A payment with its order's meeting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeetingPayment {
    pub payment: Payment,
    pub customer_id: String,
    pub meeting_id: Option<String>,
}

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

    /// Every payment (with its refunds) one day of the provider's ledger may concern:
    /// approved in the `day` `[start, end]` (when given), with a refund that succeeded in
    /// it, or whose provider transaction id is one of `provider_keys`.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn books(
        &self,
        day: Option<(DateTime<Utc>, DateTime<Utc>)>,
        provider_keys: &[String],
    ) -> Result<Vec<Books>, RepoError>;

    /// Orders whose settlement failed and whose payment still waits to be compensated.
    ///
    /// # Errors
    /// MUST return what [`PaymentRepository::awaiting_confirmation`] returns, in the same cases.
    async fn awaiting_compensation(&self, limit: u32) -> Result<Vec<OrderId>, RepoError>;
}

/// A member's meeting payments (the momo dialect's `/payments` and key-in), each with its
/// order's customer and meeting.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MeetingPayments: Send + Sync {
    /// A payment by its number (docs/spec.md §3), with its order's customer and meeting.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn by_number(&self, number: i64) -> Result<Option<MeetingPayment>, RepoError>;

    /// One page of the payments of a customer's meeting orders (`MEETING` and `MOMO`), and
    /// how many there are in all.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn of_customer(&self, query: &CustomerPayments) -> Result<(Vec<MeetingPayment>, u64), RepoError>;
}
