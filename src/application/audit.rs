//! Audit rows (docs/spec.md §4): every replay, rejection, failure branch and admin action writes
//! one `audit_log` row. The actions are the domain's [`AuditAction`]; this module names
//! the entity types and builds the rows.

use chrono::{DateTime, Utc};

use crate::application::ports::AuditRecord;
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::text;

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
    pub const MERCHANT: &str = "merchant";
    pub const STORE: &str = "store";
    /// A membership: `<merchantId>:<subject>`.
    pub const MEMBER: &str = "merchant_member";
    pub const API_KEY: &str = "api_key";
    pub const WEBHOOK_ENDPOINT: &str = "webhook_endpoint";
}

/// An actor's free-text reason, as its audit row will keep it — checked before the action it
/// explains runs (docs/spec.md §5): a reason that could not be stored (a control character,
/// over [`text::limits::REASON`]) is the caller's `Validation` error, never an action done
/// and then a failure to audit it.
///
/// # Errors
/// `Validation` naming `reason`.
pub fn reason(reason: Option<String>) -> Result<Option<String>, AppError> {
    if let Some(r) = &reason {
        text::check("reason", r, text::limits::REASON)?;
    }
    Ok(reason)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reason_that_could_not_be_stored_is_refused_before_the_action() {
        assert_eq!(reason(None).unwrap(), None);
        assert_eq!(
            reason(Some("customer asked again".into())).unwrap().as_deref(),
            Some("customer asked again")
        );
        for bad in ["a\u{0}b".to_owned(), "tab\there".to_owned(), "x".repeat(text::limits::REASON + 1)] {
            let refused = reason(Some(bad.clone())).unwrap_err();
            assert!(
                matches!(&refused, AppError::Validation { field, .. } if field == "reason"),
                "{bad:?}: {refused:?}"
            );
        }
    }
}
