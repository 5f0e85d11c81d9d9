//! One refund of (part of) a payment (docs/spec.md §3): its own record, its own amount and
//! its own idempotency key at the provider, `PENDING -> SUCCEEDED | FAILED`.
//!
//! A refund is only ever created or settled through the payment's transitions
//! ([`Payment::begin_refund`](super::Payment::begin_refund),
//! [`Payment::refund`](super::Payment::refund), …), which keep the payment's
//! `refunded_amount` and the refunds' amounts in step.

use chrono::{DateTime, Utc};

use super::error::PaymentError;
use super::status::RefundStatus;
use crate::domain::ids::{OrderId, PaymentId, RefundId};
use crate::domain::money::Money;

/// Who asked for a refund, as its record shows it (`actor`).
pub const PROVIDER_ACTOR: &str = "provider";

/// The idempotency key a refund is asked for with: one per refund, since a provider that
/// scopes keys by URL (Toss) would answer a second partial cancel under the first one's key
/// with the first cancel.
pub fn refund_key(id: RefundId) -> String {
    format!("refund-{id}")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refund {
    pub id: RefundId,
    pub payment_id: PaymentId,
    pub order_id: OrderId,
    pub amount: Money,
    pub reason: String,
    pub status: RefundStatus,
    /// Sent to the provider as `Idempotency-Key`: asking again never refunds twice.
    pub idempotency_key: String,
    /// The caller's key for the request that asked for it (an HTTP `Idempotency-Key`, an
    /// inbound event's id): the same request again is this refund, never a second one.
    pub request_key: Option<String>,
    /// The id of the inbound message that asked for it (a cancellation, a meeting's
    /// deletion), carried by its events as `causationId`.
    pub causation_id: Option<String>,
    /// The provider's key of the cancel (Toss's `transactionKey`), once it made it.
    pub provider_transaction_key: Option<String>,
    pub failure_reason: Option<String>,
    /// Who asked: a customer, an operator, a consumer, or `provider` for a refund made
    /// outside the service (the provider's dashboard).
    pub actor: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

impl Refund {
    pub(super) fn succeed(
        &mut self,
        transaction_key: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<(), PaymentError> {
        self.conclude(RefundStatus::Succeeded, now)?;
        if transaction_key.is_some() {
            self.provider_transaction_key = transaction_key;
        }
        Ok(())
    }

    pub(super) fn fail(&mut self, reason: String, now: DateTime<Utc>) -> Result<(), PaymentError> {
        self.conclude(RefundStatus::Failed, now)?;
        self.failure_reason = Some(reason);
        Ok(())
    }

    fn conclude(&mut self, to: RefundStatus, now: DateTime<Utc>) -> Result<(), PaymentError> {
        if self.status != RefundStatus::Pending {
            return Err(PaymentError::RefundSettled { refund: self.id, status: self.status });
        }
        self.status = to;
        self.updated_at = now;
        Ok(())
    }
}
