//! Audit rows (docs/spec.md §4): every replay, rejection, failure branch and admin action writes
//! one `audit_log` row. The actions are the domain's [`AuditAction`]; this module names
//! the entity types and builds the rows.

use chrono::{DateTime, Utc};

use crate::application::Actor;
use crate::application::ports::AuditRecord;
use crate::domain::audit::AuditAction;

/// Entity types named in `audit_log.entity_type`.
pub mod entity {
    pub const ORDER: &str = "order";
    pub const CUSTOMER: &str = "customer";
    pub const MEETING: &str = "meeting";
    pub const PAYMENT_CALLBACK: &str = "payment_callback";
    pub const INBOUND_MESSAGE: &str = "inbound_message";
    pub const OUTBOX_EVENT: &str = "outbox_event";
    /// The outbox as a whole (`app outbox rebase`).
    pub const OUTBOX: &str = "outbox";
    pub const IDEMPOTENCY_KEY: &str = "idempotency_key";
    pub const LEDGER: &str = "ledger";
}

pub fn record(
    action: AuditAction,
    entity_type: &str,
    entity_id: impl ToString,
    actor: &Actor,
    detail: Option<String>,
    now: DateTime<Utc>,
) -> AuditRecord {
    AuditRecord {
        action,
        entity_type: entity_type.to_owned(),
        entity_id: entity_id.to_string(),
        actor: actor.subject.clone(),
        detail,
        created_at: now,
    }
}
