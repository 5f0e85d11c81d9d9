//! `commerce` (Kafka; docs/spec.md §12): the publisher of
//! `Gseobi/commerce-orchestration-backend`, whose consumers read
//! `commerce.settlement.requested` and `commerce.notification.requested`. Its
//! `KafkaOutboxEventPublisher` sends `kafkaTemplate.send(topic, String.valueOf(orderId),
//! payload)` with String serializers and no headers; the payloads are exactly
//! `{"orderId":<long>,"eventType":"SETTLEMENT_REQUESTED"}` and `…"NOTIFICATION_REQUESTED"}`.
//! So each order that completes goes out as those two records, in that order, keyed by the
//! order's number — except one whose notification failed first: as the backend wrote its
//! settlement record before the notification was tried, its settlement record goes out when
//! the order fails at the notification (`order.failed`, stage `NOTIFICATION`), and its
//! completion later (retried, reprocessed, ignored) sends the notification record alone. The
//! producer partitions them with `murmur2_random`, the Java client's default, so a key lands
//! where that backend's producer put it. Every other event is sent native on
//! `broker.kafka.topic`.

use super::envelope::Envelope;
use super::{Encoded, WireMessage};
use crate::application::ports::OutboxRecord;

/// The topics the backend's consumers read.
pub const SETTLEMENT_TOPIC: &str = "commerce.settlement.requested";
pub const NOTIFICATION_TOPIC: &str = "commerce.notification.requested";

/// The librdkafka partitioner that places a key as the Java client's default does.
pub const PARTITIONER: &str = "murmur2_random";

/// The records `record` goes out as.
///
/// # Errors
/// An `order.completed` whose envelope has no order number to key by.
pub fn encode(record: &OutboxRecord) -> Result<Encoded, String> {
    let kind = record.event_type.as_str();
    if kind != "order.completed" && kind != "order.failed" {
        return Ok(Encoded::Native);
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Numbered {
        order_number: Option<i64>,
        failure_stage: Option<String>,
        #[serde(default)]
        after_notification_failure: bool,
    }
    let envelope = Envelope::read(&record.payload)?;
    let read = serde_json::from_str::<Numbered>(envelope.payload.get()).ok();
    let (settlement, notification) = match (kind, &read) {
        ("order.failed", Some(Numbered { failure_stage, .. }))
            if failure_stage.as_deref() == Some("NOTIFICATION") =>
        {
            (true, false)
        }
        ("order.failed", _) => return Ok(Encoded::Native),
        (_, Some(Numbered { after_notification_failure: true, .. })) => (false, true),
        _ => (true, true),
    };
    let number = read
        .and_then(|p| p.order_number)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{kind} has no orderNumber: the commerce contract keys by it"))?;
    let message = |topic: &str, event_type: &str| WireMessage {
        destination: Some(topic.to_owned()),
        key: number.to_string(),
        // Byte for byte what Jackson writes for the backend's payload: no spaces, these two
        // fields in this order.
        body: format!(r#"{{"orderId":{number},"eventType":"{event_type}"}}"#).into_bytes(),
        content_type: None,
        content_encoding: None,
        kafka_content_type_header: false,
        message_id: None,
        amqp_type: None,
        correlation_id: None,
        headers: Vec::new(),
    };
    let mut messages = Vec::with_capacity(2);
    if settlement {
        messages.push(message(SETTLEMENT_TOPIC, "SETTLEMENT_REQUESTED"));
    }
    if notification {
        messages.push(message(NOTIFICATION_TOPIC, "NOTIFICATION_REQUESTED"));
    }
    Ok(Encoded::Messages(messages))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(event_type: &str, number: serde_json::Value) -> OutboxRecord {
        let payload = serde_json::json!({
            "eventId": "3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11", "eventType": event_type,
            "aggregateType": "order", "aggregateId": "8d7e6f50-1a2b-4c3d-9e8f-001122334455",
            "occurredAt": "2026-12-04T10:00:00Z", "payload": { "orderNumber": number }
        });
        OutboxRecord {
            event_type: event_type.into(),
            payload: payload.to_string(),
            ..super::super::tests::record()
        }
    }

    #[test]
    fn a_completed_order_is_two_records_keyed_by_its_number() {
        let Encoded::Messages(messages) = encode(&record("order.completed", 42.into())).unwrap() else {
            panic!("two records")
        };
        let sent: Vec<(Option<&str>, &str, &[u8])> =
            messages.iter().map(|m| (m.destination.as_deref(), m.key.as_str(), m.body.as_slice())).collect();
        assert_eq!(
            sent,
            [
                (Some(SETTLEMENT_TOPIC), "42", &br#"{"orderId":42,"eventType":"SETTLEMENT_REQUESTED"}"#[..]),
                (
                    Some(NOTIFICATION_TOPIC),
                    "42",
                    &br#"{"orderId":42,"eventType":"NOTIFICATION_REQUESTED"}"#[..]
                ),
            ]
        );
        assert!(messages.iter().all(|m| m.headers.is_empty() && !m.kafka_content_type_header));
    }

    /// What each records of its own: (the record's payload beside `orderNumber`, topics).
    #[test]
    fn a_notification_that_failed_first_announces_the_settlement_then_the_notification() {
        let with = |event_type: &str, extra: serde_json::Value| {
            let mut r = record(event_type, 7.into());
            let mut payload: serde_json::Value = serde_json::from_str(&r.payload).unwrap();
            payload["payload"].as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            r.payload = payload.to_string();
            r
        };
        let topics = |r: &OutboxRecord| match encode(r).unwrap() {
            Encoded::Messages(m) => m.iter().map(|m| m.destination.clone().unwrap()).collect::<Vec<_>>(),
            Encoded::Native => vec!["native".to_owned()],
        };
        let failed_at = |stage: &str| with("order.failed", serde_json::json!({ "failureStage": stage }));
        assert_eq!(topics(&failed_at("NOTIFICATION")), [SETTLEMENT_TOPIC]);
        assert_eq!(topics(&failed_at("PAYMENT")), ["native"]);
        assert_eq!(topics(&failed_at("SETTLEMENT")), ["native"]);
        let recovered = with("order.completed", serde_json::json!({ "afterNotificationFailure": true }));
        assert_eq!(topics(&recovered), [NOTIFICATION_TOPIC]);
        assert_eq!(topics(&record("order.completed", 7.into())), [SETTLEMENT_TOPIC, NOTIFICATION_TOPIC]);
    }

    #[test]
    fn other_events_are_native_and_a_completion_without_a_number_cannot_be_sent() {
        assert_eq!(encode(&record("payment.approved", 42.into())).unwrap(), Encoded::Native);
        assert!(encode(&record("order.completed", serde_json::Value::Null)).is_err());
    }
}
