//! A merchant's webhook endpoints (docs/spec.md §16), their secrets sealed as §15's: every
//! change written with its audit row.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{AuditRecord, RepoError, Sealed};
use crate::domain::ids::{MerchantId, WebhookEndpointId};
use crate::domain::webhook::Endpoint;

/// An endpoint's signing secrets, sealed: the current one, and during a rotation's overlap
/// the one it replaced with when it stops signing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointSecrets {
    pub current: Sealed,
    pub previous: Option<(Sealed, DateTime<Utc>)>,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait WebhookEndpointStore: Send + Sync {
    /// Inserts `endpoint` with its sealed secret and `audit`.
    async fn insert_endpoint(
        &self,
        endpoint: &Endpoint,
        secrets: &EndpointSecrets,
        audit: &AuditRecord,
    ) -> Result<(), RepoError>;

    /// Writes what an operator changes of `endpoint` — its URL, description and filter — and
    /// nothing else, with `audit` when there is one: what deliveries record on the row
    /// (disabled, its success and failure times) stands, however old the caller's copy.
    async fn update_endpoint(&self, endpoint: &Endpoint, audit: Option<AuditRecord>)
    -> Result<(), RepoError>;

    /// Turns the endpoint on and forgets its failures (no longer disabled, not failing since),
    /// with `audit`; its other fields stand.
    async fn enable_endpoint(&self, id: WebhookEndpointId, audit: AuditRecord) -> Result<(), RepoError>;

    /// Removes it with its messages; whether it was `merchant`'s and there.
    async fn delete_endpoint(
        &self,
        merchant: MerchantId,
        id: WebhookEndpointId,
        audit: &AuditRecord,
    ) -> Result<bool, RepoError>;

    /// One endpoint, only if it is `merchant`'s, with its sealed secrets.
    async fn endpoint(
        &self,
        merchant: MerchantId,
        id: WebhookEndpointId,
    ) -> Result<Option<(Endpoint, EndpointSecrets)>, RepoError>;

    /// The merchant's endpoints, oldest first.
    async fn endpoints(&self, merchant: MerchantId) -> Result<Vec<Endpoint>, RepoError>;

    /// Replaces the endpoint's secrets with `audit`.
    async fn set_secrets(
        &self,
        id: WebhookEndpointId,
        secrets: &EndpointSecrets,
        audit: &AuditRecord,
    ) -> Result<(), RepoError>;
}
