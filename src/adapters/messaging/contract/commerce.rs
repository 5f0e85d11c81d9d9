//! `commerce` (Kafka; docs/spec.md §12): the publisher of
//! `Gseobi/commerce-orchestration-backend`, whose consumers read
//! `commerce.settlement.requested` and `commerce.notification.requested`. Its
//! `KafkaOutboxEventPublisher` sends `kafkaTemplate.send(topic, String.valueOf(orderId),
//! payload)` with String serializers and no headers; the payloads are exactly
//! `{"orderId":<long>,"eventType":"SETTLEMENT_REQUESTED"}` and `…"NOTIFICATION_REQUESTED"}`.
//! So each order that completes goes out as those two records, in that order, keyed by the
//! order's number; the producer partitions them with `murmur2_random`, the Java client's
//! default, so a key lands where that backend's producer put it. Every other event is sent
//! native on `broker.kafka.topic`.

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
    if record.event_type != "order.completed" {
        return Ok(Encoded::Native);
    }
    #[derive(serde::Deserialize)]
    struct Numbered {
        #[serde(rename = "orderNumber")]
        order_number: Option<i64>,
    }
    let envelope = Envelope::read(&record.payload)?;
    let number = serde_json::from_str::<Numbered>(envelope.payload.get())
        .ok()
        .and_then(|p| p.order_number)
        .filter(|n| *n > 0)
        .ok_or("order.completed has no orderNumber: the commerce contract keys by it")?;
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
    Ok(Encoded::Messages(vec![
        message(SETTLEMENT_TOPIC, "SETTLEMENT_REQUESTED"),
        message(NOTIFICATION_TOPIC, "NOTIFICATION_REQUESTED"),
    ]))
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

    #[test]
    fn other_events_are_native_and_a_completion_without_a_number_cannot_be_sent() {
        assert_eq!(encode(&record("payment.approved", 42.into())).unwrap(), Encoded::Native);
        assert!(encode(&record("order.completed", serde_json::Value::Null)).is_err());
    }
}
