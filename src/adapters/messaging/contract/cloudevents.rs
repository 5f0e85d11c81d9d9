//! CloudEvents 1.0 (docs/spec.md §12, docs/messages.md "CloudEvents"): each event as a
//! CloudEvent, binary (attributes in headers, the body is the data) or structured (the
//! body is the JSON event format). Kafka's protocol binding puts attributes in `ce_<name>`
//! headers; AMQP 0-9-1 has no official binding, so RabbitMQ messages use the AMQP binding's
//! names with the `cloudEvents_` prefix its JMS-style mapping uses.
//!
//! Attributes: `specversion` `1.0`, `id` = the event id, `source`, `type` = prefix + event
//! type, `subject` = the aggregate id, `time` = the envelope's `occurredAt`,
//! `datacontenttype` `application/json`; extensions `correlationid` and `traceparent` when
//! there are. Keys and routing keys as native.

use serde_json::{Map, Value, json};

use super::envelope::Envelope;
use super::{Broker, HeaderValue, WireMessage, native_key};
use crate::application::ports::OutboxRecord;

/// `broker.cloudevents.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloudEventsMode {
    Binary,
    Structured,
}

impl CloudEventsMode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "binary" => Some(CloudEventsMode::Binary),
            "structured" => Some(CloudEventsMode::Structured),
            _ => None,
        }
    }
}

/// `broker.cloudevents.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEventsSettings {
    pub mode: CloudEventsMode,
    /// `source` [`/commerce-orchestrator`].
    pub source: String,
    /// Prefixed to the event type for `type` [`io.commerce.`].
    pub type_prefix: String,
}

impl Default for CloudEventsSettings {
    fn default() -> Self {
        CloudEventsSettings {
            mode: CloudEventsMode::Binary,
            source: "/commerce-orchestrator".into(),
            type_prefix: "io.commerce.".into(),
        }
    }
}

/// The content type of the JSON event format (structured mode).
pub const STRUCTURED: &str = "application/cloudevents+json; charset=UTF-8";

#[derive(Debug, Clone)]
pub struct CloudEvents {
    settings: CloudEventsSettings,
}

impl CloudEvents {
    pub fn new(settings: CloudEventsSettings) -> Self {
        CloudEvents { settings }
    }

    /// The CloudEvent's attributes of `envelope`, in the spec's order, as text.
    fn attributes(&self, envelope: &Envelope, traceparent: Option<&str>) -> Vec<(&'static str, String)> {
        let mut attributes = vec![
            ("specversion", "1.0".to_owned()),
            ("id", envelope.event_id.clone()),
            ("source", self.settings.source.clone()),
            ("type", format!("{}{}", self.settings.type_prefix, envelope.event_type)),
            ("subject", envelope.aggregate_id.clone()),
            ("time", envelope.occurred_at.clone()),
        ];
        if let Some(correlation) = envelope.correlation_id.as_deref().filter(|c| !c.is_empty()) {
            attributes.push(("correlationid", correlation.to_owned()));
        }
        if let Some(traceparent) = traceparent {
            attributes.push(("traceparent", traceparent.to_owned()));
        }
        attributes
    }

    /// The message `record` goes out as.
    ///
    /// # Errors
    /// Its envelope cannot be read.
    pub fn encode(
        &self,
        record: &OutboxRecord,
        traceparent: Option<&str>,
        broker: Broker,
    ) -> Result<WireMessage, String> {
        let envelope = Envelope::read(&record.payload)?;
        let attributes = self.attributes(&envelope, traceparent);
        let key = native_key(record, broker);
        let data = serde_json::to_vec(&envelope.payload).map_err(|e| e.to_string())?;
        let message = match self.settings.mode {
            CloudEventsMode::Binary => {
                let prefix = match broker {
                    Broker::Amqp => "cloudEvents_",
                    Broker::Kafka => "ce_",
                };
                WireMessage {
                    destination: None,
                    key,
                    body: data,
                    content_type: Some("application/json".into()),
                    kafka_content_type_header: true,
                    message_id: Some(envelope.event_id.clone()),
                    amqp_type: None,
                    correlation_id: None,
                    headers: attributes
                        .into_iter()
                        .map(|(name, value)| (format!("{prefix}{name}"), HeaderValue::Text(value)))
                        .collect(),
                }
            }
            CloudEventsMode::Structured => {
                let mut event = Map::new();
                for (name, value) in attributes {
                    event.insert(name.to_owned(), Value::String(value));
                }
                event.insert("datacontenttype".into(), json!("application/json"));
                event.insert("data".into(), envelope.payload);
                WireMessage {
                    destination: None,
                    key,
                    body: serde_json::to_vec(&Value::Object(event)).map_err(|e| e.to_string())?,
                    content_type: Some(STRUCTURED.into()),
                    kafka_content_type_header: true,
                    message_id: Some(envelope.event_id),
                    amqp_type: None,
                    correlation_id: None,
                    headers: Vec::new(),
                }
            }
        };
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::tests::record;

    #[test]
    fn binary_puts_the_attributes_in_headers_and_the_data_in_the_body() {
        let ce = CloudEvents::new(CloudEventsSettings::default());
        let m = ce.encode(&record(), None, Broker::Kafka).unwrap();
        let header = |n: &str| m.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.to_text());
        assert_eq!(header("ce_specversion").as_deref(), Some("1.0"));
        assert_eq!(header("ce_type").as_deref(), Some("io.commerce.order.completed"));
        assert_eq!(header("ce_subject").as_deref(), Some("8d7e6f50-1a2b-4c3d-9e8f-001122334455"));
        assert_eq!(header("ce_correlationid").as_deref(), Some("req-1"));
        assert_eq!(m.key, "8d7e6f50-1a2b-4c3d-9e8f-001122334455");
        let data: Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(data["totalAmount"], 30000);
        let amqp = ce
            .encode(&record(), Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"), Broker::Amqp)
            .unwrap();
        assert!(amqp.headers.iter().any(|(k, _)| k == "cloudEvents_traceparent"));
        assert_eq!(amqp.key, "order.completed");
        assert_eq!(
            ce.encode(&record(), None, Broker::Amqp).unwrap(),
            ce.encode(&record(), None, Broker::Amqp).unwrap(),
            "deterministic"
        );
    }

    #[test]
    fn structured_is_the_json_event_format() {
        let ce =
            CloudEvents::new(CloudEventsSettings { mode: CloudEventsMode::Structured, ..Default::default() });
        let m = ce.encode(&record(), None, Broker::Amqp).unwrap();
        assert_eq!(m.content_type.as_deref(), Some(STRUCTURED));
        let event: Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(event["specversion"], "1.0");
        assert_eq!(event["id"], "3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11");
        assert_eq!(event["time"], "2026-12-04T10:00:00.123Z");
        assert_eq!(event["datacontenttype"], "application/json");
        assert_eq!(event["data"]["totalAmount"], 30000);
        assert!(m.headers.is_empty());
    }

    #[test]
    fn an_unreadable_envelope_is_said() {
        let mut bad = record();
        bad.payload = "{".into();
        assert!(CloudEvents::new(CloudEventsSettings::default()).encode(&bad, None, Broker::Kafka).is_err());
    }
}
