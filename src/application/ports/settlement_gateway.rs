//! The settlement service.

use async_trait::async_trait;

use chrono::{DateTime, Utc};

use super::gateway_error::GatewayError;
use super::scenario::Scenario;
use crate::domain::ids::{MerchantId, OrderId, PaymentId, SettlementId};
use crate::domain::money::Money;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRequest {
    /// The settlement's id: the same on every attempt (a webhook's `webhook-id`).
    pub settlement_id: SettlementId,
    pub order_id: OrderId,
    pub order_number: i64,
    /// The order's merchant: its own channel, when it set one (docs/spec.md §15).
    pub merchant_id: MerchantId,
    pub payment_id: PaymentId,
    pub amount: Money,
    /// The provider's key of the approved payment (Toss's `paymentKey`).
    pub payment_key: Option<String>,
    pub approved_at: Option<DateTime<Utc>>,
    pub scenario: Scenario,
}

impl SettlementRequest {
    /// The key a settlement provider deduplicates by: the settlement's (one per payment),
    /// the same on every attempt however often a resumed saga or the retries ask — a
    /// webhook's `webhook-id` is the same id.
    pub fn idempotency_key(&self) -> String {
        format!("settle-{}", self.settlement_id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlementOutcome {
    Succeeded,
    /// Refused: the payment is compensated.
    Failed {
        reason: String,
    },
    /// No answer to act on (the service down, a timeout, 408/429/5xx): the same settlement
    /// again later, no sooner than `retry_after` when the service asked for that.
    Retry {
        reason: String,
        retry_after: Option<std::time::Duration>,
    },
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait SettlementGateway: Send + Sync {
    /// Requests settlement of an approved payment; idempotent by `payment_id`.
    ///
    /// # Errors
    /// MAY return `Unavailable` when the settlement service cannot be reached (the same as
    /// [`SettlementOutcome::Retry`]). A refusal is [`SettlementOutcome::Failed`].
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError>;
}
