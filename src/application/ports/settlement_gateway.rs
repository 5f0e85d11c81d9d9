//! The settlement service.

use async_trait::async_trait;

use super::gateway_error::GatewayError;
use super::scenario::Scenario;
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::money::Money;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRequest {
    pub order_id: OrderId,
    pub payment_id: PaymentId,
    pub amount: Money,
    pub scenario: Scenario,
}

impl SettlementRequest {
    /// The key a settlement provider deduplicates by: one settlement per payment, however
    /// often a resumed saga asks.
    pub fn idempotency_key(&self) -> String {
        format!("settle-{}", self.payment_id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlementOutcome {
    Succeeded,
    Failed { reason: String },
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait SettlementGateway: Send + Sync {
    /// Requests settlement of an approved payment; idempotent by `payment_id`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the settlement service cannot be reached. A refusal is
    /// [`SettlementOutcome::Failed`].
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError>;
}
