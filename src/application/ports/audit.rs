//! An audit row, as use cases hand it to the unit of work or the outbox store.

use chrono::{DateTime, Utc};

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
