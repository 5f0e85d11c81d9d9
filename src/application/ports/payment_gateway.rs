//! The payment provider: approve, look up, cancel or refund.

use async_trait::async_trait;

use super::gateway_error::GatewayError;
use super::scenario::Scenario;
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::money::Money;

/// Ask the provider to take the money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovePayment {
    pub order_id: OrderId,
    pub customer_id: String,
    /// Sent as `Idempotency-Key`: asking twice never charges twice.
    pub payment_request_id: String,
    pub amount: Money,
    pub scenario: Scenario,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        code: String,
        provider_transaction_id: Option<String>,
    },
    /// The call timed out: the provider may or may not have charged. Reconcile, never
    /// compensate or retry blindly.
    Unknown {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        provider_transaction_id: Option<String>,
        code: String,
    },
    Cancelled {
        provider_transaction_id: String,
    },
    /// The provider never took this request: it is safe to approve again with the same key.
    NotFound,
}

/// Cancel (compensation) or refund an approved payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelPayment {
    pub payment_id: PaymentId,
    pub payment_request_id: String,
    pub provider_transaction_id: String,
    pub amount: Money,
    pub reason: String,
    pub scenario: Scenario,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentGateway: Send + Sync {
    /// Asks the provider to approve; idempotent by `payment_request_id`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the provider cannot be reached after bounded retries (nothing
    /// was charged, or the same key makes a later attempt safe). A decline is an outcome.
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError>;

    /// Asks the provider what became of a request (reconciliation).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the provider cannot be reached.
    async fn lookup(
        &self,
        payment_request_id: &str,
        scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError>;

    /// Cancels or refunds an approved payment; idempotent by `payment_request_id`.
    ///
    /// # Errors
    /// MUST return `Rejected` when the provider refuses (recorded, not retried); `Unavailable` when it
    /// cannot be reached (retried later).
    async fn cancel(&self, request: &CancelPayment) -> Result<(), GatewayError>;
}
