//! The audit trail: rows as use cases hand them to the unit of work or the outbox store,
//! and their retention.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;

use crate::domain::audit::AuditAction;

/// One `audit_log` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub action: AuditAction,
    pub entity_type: String,
    pub entity_id: String,
    pub actor: String,
    pub detail: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// The audit trail's retention (rows are written through
/// [`UnitOfWork`](super::UnitOfWork), in the transaction of what they record).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Deletes at most `limit` audit rows created before `before`; returns how many.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails (what was deleted stays deleted).
    async fn purge_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError>;
}
