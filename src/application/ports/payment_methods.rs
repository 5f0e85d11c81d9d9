//! Customers' saved cards (docs/spec.md §10): the billing key a provider issued for a card,
//! kept to charge the customer's meeting registrations.

use crate::application::ports::AuditRecord;
use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;
use super::payment_gateway::BillingKey;

/// A saved card. `Debug` never shows the billing key ([`BillingKey`] hides it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedCard {
    pub customer_id: String,
    /// The customer's key at the provider the billing key is bound to.
    pub customer_key: String,
    pub billing_key: BillingKey,
    pub card_company: Option<String>,
    /// Masked by the provider (`43301234****123*`).
    pub card_number: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentMethodRepository: Send + Sync {
    /// The customer's saved card, if any.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn saved_card(&self, customer_id: &str) -> Result<Option<SavedCard>, RepoError>;

    /// Saves `card` as its customer's card, replacing the one saved before, with `audit` in
    /// the same transaction (both or neither).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing written).
    async fn save_card(&self, card: &SavedCard, audit: &AuditRecord) -> Result<(), RepoError>;

    /// Forgets the customer's card, with `audit` in the same transaction; `false` when there
    /// was none (nothing written).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (nothing written).
    async fn forget_card(&self, customer_id: &str, audit: &AuditRecord) -> Result<bool, RepoError>;
}
