//! What an attempt makes of its endpoint and our own events about delivery
//! (`webhook.endpoint.disabled`, `webhook.message.exhausted`), enveloped as every event is
//! (docs/spec.md §6), and the attempt log's cut of an answer.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::application::Actor;
use crate::application::audit::{self, entity};
use crate::application::envelopes::timestamp;
use crate::application::ports::{EndpointChange, NewOutboxEvent};
use crate::domain::audit::AuditAction;
use crate::domain::ids::EventId;
use crate::domain::webhook::{DisabledReason, Endpoint};
use crate::domain::webhook_message::Attempted;

/// The aggregate our delivery events are ordered under.
pub const ENDPOINT_AGGREGATE: &str = "webhook_endpoint";

/// An event of ours about delivery, as every event is enveloped (docs/spec.md §6).
pub fn delivery_event(
    event_type: &str,
    endpoint: &Endpoint,
    extra: Value,
    now: DateTime<Utc>,
) -> NewOutboxEvent {
    let event_id = EventId::new();
    let mut payload = json!({
        "merchantId": endpoint.merchant_id.to_string(),
        "endpointId": endpoint.id.to_string(),
    });
    if let (Some(p), Value::Object(extra)) = (payload.as_object_mut(), extra) {
        p.extend(extra);
    }
    let envelope = json!({
        "eventId": event_id.to_string(),
        "eventType": event_type,
        "aggregateType": ENDPOINT_AGGREGATE,
        "aggregateId": endpoint.id.to_string(),
        "correlationId": null,
        "occurredAt": timestamp(now),
        "payload": payload,
    });
    NewOutboxEvent {
        event_id,
        aggregate_type: ENDPOINT_AGGREGATE.into(),
        aggregate_id: endpoint.id.to_string(),
        event_type: event_type.into(),
        routing_key: event_type.into(),
        payload: envelope.to_string(),
        correlation_id: None,
        created_at: now,
    }
}

/// The endpoint's change after `outcome`, with the disabling's event and audit row.
pub(super) fn endpoint_change(
    endpoint: &mut Endpoint,
    outcome: Attempted,
    at: DateTime<Utc>,
    disable_after: Duration,
) -> EndpointChange {
    if outcome == Attempted::Delivered {
        endpoint.record_success(at);
        return EndpointChange::Succeeded;
    }
    let Some(reason) = endpoint.record_failure(at, outcome == Attempted::Gone, disable_after) else {
        return EndpointChange::Failed;
    };
    let extra = json!({ "reason": reason.as_str(), "failingSince": endpoint.failing_since.map(timestamp) });
    let event = delivery_event("webhook.endpoint.disabled", endpoint, extra, at);
    let detail = match reason {
        DisabledReason::Gone => "its receiver answered 410 Gone".to_owned(),
        DisabledReason::Failing => format!("failing with no success for {}", humantime(disable_after)),
    };
    let audit = audit::record(
        AuditAction::WebhookEndpointDisabled,
        entity::WEBHOOK_ENDPOINT,
        endpoint.id,
        &Actor::system("webhooks"),
        Some(detail),
        at,
    );
    EndpointChange::Disabled { reason, event: Box::new(event), audit: Box::new(audit) }
}

fn humantime(d: Duration) -> String {
    let s = d.as_secs();
    if s.is_multiple_of(86_400) {
        format!("{}d", s / 86_400)
    } else if s.is_multiple_of(3600) {
        format!("{}h", s / 3600)
    } else {
        format!("{s}s")
    }
}

/// The first 4 KiB of `text`, cut on a character boundary.
pub fn first_4k(text: &str) -> String {
    let mut end = text.len().min(4096);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}
