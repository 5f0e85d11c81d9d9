//! Storage of idempotency keys (docs/spec.md §5): the first response to a key is kept and replayed.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;
use crate::domain::ids::OrderId;

/// A response as it was first given, to replay byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: String,
}

/// The answer to "may I run this request?".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyBegin {
    /// Run it. `order_id` is the id to create — or, when a previous holder of the key
    /// crashed or gave up, the id it may already have created, to resume.
    Started { order_id: OrderId },
    /// Another request with this key is running now (checked before the fingerprint).
    InProgress,
    /// This key already finished with the same request: replay its response.
    Completed(StoredResponse),
    /// This key was used with a different request.
    Mismatch,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Reserves `(scope, key)` for a request whose canonical form hashes to `fingerprint`.
    /// A new reservation records `order_id` and holds a lease until `lease_until`; a
    /// reservation whose lease ended (its holder died or released it) is taken over.
    ///
    /// MUST return `InProgress` while an unfinished reservation holds a live lease (whatever
    /// its fingerprint); otherwise `Mismatch` when the key was used with another fingerprint,
    /// `Completed` with the stored response when it was completed with this one, and
    /// `Started` with the reservation's order id (the one recorded first, on a take-over)
    /// for a new or abandoned reservation. Two concurrent calls MUST NOT both get `Started`
    /// for one key.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn begin(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
        order_id: OrderId,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<IdempotencyBegin, RepoError>;

    /// Stores the response for replay and ends the lease.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn complete(
        &self,
        scope: &str,
        key: &str,
        response: &StoredResponse,
        now: DateTime<Utc>,
    ) -> Result<(), RepoError>;

    /// Ends the lease without a response, so a retry with the same key may take over
    /// (and resume the same order). With `forget`, removes the key entirely (nothing was
    /// created, e.g. validation failed).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn release(&self, scope: &str, key: &str, forget: bool) -> Result<(), RepoError>;

    /// Deletes keys created before `before`; returns how many.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn purge(&self, before: DateTime<Utc>) -> Result<u64, RepoError>;
}
