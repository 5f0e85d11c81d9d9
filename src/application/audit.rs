//! The audit trail's vocabulary: every replay, rejection, failure branch and admin action
//! writes one `audit_log` row (SPEC §4) with one of these actions.

use chrono::{DateTime, Utc};

use crate::application::Actor;
use crate::application::ports::AuditRecord;

pub const ORDER_PLACED: &str = "ORDER_PLACED";
pub const ORDER_REJECTED: &str = "ORDER_REJECTED";
pub const REPLAY: &str = "REPLAY";
pub const IDEMPOTENCY_KEY_REUSED: &str = "IDEMPOTENCY_KEY_REUSED";
pub const PAYMENT_DECLINED: &str = "PAYMENT_DECLINED";
pub const PAYMENT_OUTCOME_UNKNOWN: &str = "PAYMENT_OUTCOME_UNKNOWN";
pub const PAYMENT_PROVIDER_UNAVAILABLE: &str = "PAYMENT_PROVIDER_UNAVAILABLE";
pub const PAYMENT_CONFIRMED: &str = "PAYMENT_CONFIRMED";
/// The provider answered, but the answer could not be stored as it is (a transaction id
/// another payment already has): the outcome is treated as unknown and reconciled.
pub const PAYMENT_OUTCOME_UNSTORABLE: &str = "PAYMENT_OUTCOME_UNSTORABLE";
/// The worker resumed a saga a dead run had left half-way.
pub const SAGA_RESUMED: &str = "SAGA_RESUMED";
/// Stalled-saga recovery gave up on an order: an operator must look.
pub const SAGA_RECOVERY_EXHAUSTED: &str = "SAGA_RECOVERY_EXHAUSTED";
/// `POST /orchestrate` on an order with nothing left to run.
pub const ORCHESTRATE_NOOP: &str = "ORCHESTRATE_NOOP";
/// A notification retry (scheduler, `retry-due` or reprocess) went through.
pub const NOTIFICATION_SENT: &str = "NOTIFICATION_SENT";
/// A refund's intent, committed before the provider is asked.
pub const REFUND_REQUESTED: &str = "REFUND_REQUESTED";
/// A refund whose outcome stayed unknown after every attempt: an operator must decide.
pub const REFUND_UNRESOLVED: &str = "REFUND_UNRESOLVED";
/// A registration refused because the (meeting, user) pair already has a live order.
pub const REGISTRATION_REJECTED: &str = "REGISTRATION_REJECTED";
pub const RECONCILIATION_EXHAUSTED: &str = "RECONCILIATION_EXHAUSTED";
pub const COMPENSATION_EXHAUSTED: &str = "COMPENSATION_EXHAUSTED";
pub const CALLBACK_REJECTED: &str = "CALLBACK_REJECTED";
pub const CALLBACK_DUPLICATE: &str = "CALLBACK_DUPLICATE";
pub const SETTLEMENT_FAILED: &str = "SETTLEMENT_FAILED";
pub const COMPENSATED: &str = "COMPENSATED";
pub const COMPENSATION_FAILED: &str = "COMPENSATION_FAILED";
pub const NOTIFICATION_FAILED: &str = "NOTIFICATION_FAILED";
pub const NOTIFICATION_IGNORED: &str = "NOTIFICATION_IGNORED";
pub const NOTIFICATION_REPROCESS: &str = "NOTIFICATION_REPROCESS";
pub const NOTIFICATION_IGNORE: &str = "NOTIFICATION_IGNORE";
pub const REFUNDED: &str = "REFUNDED";
pub const REFUND_FAILED: &str = "REFUND_FAILED";
pub const REFUND_REJECTED: &str = "REFUND_REJECTED";
pub const INBOUND_REJECTED: &str = "INBOUND_REJECTED";
pub const INBOUND_DUPLICATE: &str = "INBOUND_DUPLICATE";
pub const NOTHING_TO_REFUND: &str = "NOTHING_TO_REFUND";
pub const MEETING_DELETED: &str = "MEETING_DELETED";
pub const OUTBOX_REPUBLISH: &str = "OUTBOX_REPUBLISH";
pub const OUTBOX_DISCARD: &str = "OUTBOX_DISCARD";
pub const OUTBOX_REDRIVE: &str = "OUTBOX_REDRIVE";

/// Entity types named in `audit_log.entity_type`.
pub mod entity {
    pub const ORDER: &str = "order";
    pub const CUSTOMER: &str = "customer";
    pub const MEETING: &str = "meeting";
    pub const PAYMENT_CALLBACK: &str = "payment_callback";
    pub const INBOUND_MESSAGE: &str = "inbound_message";
    pub const OUTBOX_EVENT: &str = "outbox_event";
    pub const IDEMPOTENCY_KEY: &str = "idempotency_key";
}

pub fn record(
    action: &str,
    entity_type: &str,
    entity_id: impl ToString,
    actor: &Actor,
    detail: Option<String>,
    now: DateTime<Utc>,
) -> AuditRecord {
    AuditRecord {
        action: action.to_owned(),
        entity_type: entity_type.to_owned(),
        entity_id: entity_id.to_string(),
        actor: actor.subject.clone(),
        detail,
        created_at: now,
    }
}
