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

use serde_json::Value;

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

/// The attributes we send, and their header names on each broker (binary mode).
const ATTRIBUTES: [&str; 8] =
    ["specversion", "id", "source", "type", "subject", "time", "correlationid", "traceparent"];
const AMQP_HEADERS: [&str; 8] = [
    "cloudEvents_specversion",
    "cloudEvents_id",
    "cloudEvents_source",
    "cloudEvents_type",
    "cloudEvents_subject",
    "cloudEvents_time",
    "cloudEvents_correlationid",
    "cloudEvents_traceparent",
];
const KAFKA_HEADERS: [&str; 8] = [
    "ce_specversion",
    "ce_id",
    "ce_source",
    "ce_type",
    "ce_subject",
    "ce_time",
    "ce_correlationid",
    "ce_traceparent",
];

/// The header `attribute` goes in, from `names` (one of the tables above).
fn header_name(names: &[&'static str; 8], attribute: &str) -> &'static str {
    ATTRIBUTES.iter().position(|a| *a == attribute).map_or("", |i| names[i])
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
    fn attributes(&self, envelope: &Envelope<'_>, traceparent: Option<&str>) -> Vec<(&'static str, String)> {
        let mut attributes = vec![
            ("specversion", "1.0".to_owned()),
            ("id", envelope.event_id.clone().into_owned()),
            ("source", self.settings.source.clone()),
            ("type", format!("{}{}", self.settings.type_prefix, envelope.event_type)),
            ("subject", envelope.aggregate_id.clone().into_owned()),
            ("time", envelope.occurred_at.clone().into_owned()),
        ];
        if let Some(correlation) = envelope.correlation_id.as_deref().filter(|c| !c.is_empty()) {
            attributes.push(("correlationid", correlation.to_owned()));
        }
        if let Some(traceparent) = traceparent {
            attributes.push(("traceparent", traceparent.to_owned()));
        }
        attributes
    }

    /// The message `record` goes out as. The data is the payload exactly as stored.
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
        let data = envelope.payload.get();
        let message = match self.settings.mode {
            CloudEventsMode::Binary => {
                let names = match broker {
                    Broker::Amqp => &AMQP_HEADERS,
                    Broker::Kafka => &KAFKA_HEADERS,
                };
                WireMessage {
                    destination: None,
                    key,
                    body: data.as_bytes().to_vec(),
                    content_type: Some("application/json".into()),
                    content_encoding: None,
                    kafka_content_type_header: true,
                    message_id: Some(envelope.event_id.into_owned()),
                    amqp_type: None,
                    correlation_id: None,
                    headers: attributes
                        .into_iter()
                        .map(|(name, value)| (header_name(names, name), HeaderValue::Text(value)))
                        .collect(),
                }
            }
            CloudEventsMode::Structured => {
                // The JSON event format, written out: the attributes as JSON strings, then
                // the data as stored.
                let mut event = String::with_capacity(data.len() + 400);
                event.push('{');
                for (name, value) in &attributes {
                    event.push('"');
                    event.push_str(name);
                    event.push_str("\":");
                    event.push_str(&serde_json::to_string(value).map_err(|e| e.to_string())?);
                    event.push(',');
                }
                event.push_str("\"datacontenttype\":\"application/json\",\"data\":");
                event.push_str(data);
                event.push('}');
                WireMessage {
                    destination: None,
                    key,
                    body: event.into_bytes(),
                    content_type: Some(STRUCTURED.into()),
                    content_encoding: None,
                    kafka_content_type_header: true,
                    message_id: Some(envelope.event_id.into_owned()),
                    amqp_type: None,
                    correlation_id: None,
                    headers: Vec::new(),
                }
            }
        };
        Ok(message)
    }
}

/// How a decoder finds an attribute by name.
type Attributes<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// An inbound message as a contract reads it: the meeting kind's event type, the §7 body
/// it carries, and its correlation id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inbound {
    pub event_type: String,
    pub body: Vec<u8>,
    pub correlation_id: Option<String>,
}

impl CloudEvents {
    /// Reads a meeting-service message sent as a CloudEvent: structured when its content
    /// type is the JSON event format, else binary (attributes in `header(name)`, with the
    /// broker's prefix). The data is the §7 body; the CloudEvent's `id` is the inbox key (the
    /// body's `eventId`).
    ///
    /// # Errors
    /// What makes it no CloudEvent of ours (the DLQ's reason).
    pub fn decode(
        &self,
        broker: Broker,
        content_type: Option<&str>,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Result<Inbound, String> {
        let structured =
            content_type.is_some_and(|c| c.trim_start().starts_with("application/cloudevents+json"));
        let (attribute, data): (Attributes<'_>, Value) = if structured {
            let Value::Object(mut event) = serde_json::from_slice::<Value>(body)
                .map_err(|e| format!("not the JSON event format: {e}"))?
            else {
                return Err("not the JSON event format: not an object".into());
            };
            let data = event.remove("data").ok_or("the event has no data")?;
            (Box::new(move |name: &str| event.get(name).and_then(Value::as_str).map(str::to_owned)), data)
        } else {
            let prefix = match broker {
                Broker::Amqp => "cloudEvents_",
                Broker::Kafka => "ce_",
            };
            let data = serde_json::from_slice::<Value>(body).map_err(|e| format!("data: not JSON: {e}"))?;
            (Box::new(move |name: &str| header(&format!("{prefix}{name}"))), data)
        };
        let required = |name: &str| {
            attribute(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("CloudEvent attribute {name} is missing"))
        };
        let version = required("specversion")?;
        if version != "1.0" {
            return Err(format!("specversion {version} is not 1.0"));
        }
        let id = required("id")?;
        required("source")?;
        let kind = required("type")?;
        let event_type = kind
            .strip_prefix(self.settings.type_prefix.as_str())
            .ok_or_else(|| format!("type {kind} does not start with {}", self.settings.type_prefix))?
            .to_owned();
        let Value::Object(mut data) = data else {
            return Err("data: not a JSON object".into());
        };
        match data.get("eventId") {
            Some(Value::String(own)) if *own != id => {
                return Err(format!("data.eventId {own} disagrees with the CloudEvent's id {id}"));
            }
            _ => {
                data.insert("eventId".into(), Value::String(id));
            }
        }
        Ok(Inbound {
            event_type,
            body: serde_json::to_vec(&Value::Object(data)).map_err(|e| e.to_string())?,
            correlation_id: attribute("correlationid"),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    use super::super::tests::record;

    #[test]
    fn binary_puts_the_attributes_in_headers_and_the_data_in_the_body() {
        let ce = CloudEvents::new(CloudEventsSettings::default());
        let m = ce.encode(&record(), None, Broker::Kafka).unwrap();
        let header = |n: &str| m.headers.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_text());
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
        assert!(amqp.headers.iter().any(|(k, _)| *k == "cloudEvents_traceparent"));
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
    fn a_registration_as_a_cloudevent_is_read_in_both_modes() {
        let ce = CloudEvents::new(CloudEventsSettings::default());
        let data = br#"{"meetingId":"m-1","userId":"u-1","amount":15000,"currency":"KRW"}"#;
        let headers = |name: &str| match name {
            "ce_specversion" => Some("1.0".to_owned()),
            "ce_id" => Some("reg-1".to_owned()),
            "ce_source" => Some("/meetings".to_owned()),
            "ce_type" => Some("io.commerce.meeting.participant.registered".to_owned()),
            _ => None,
        };
        let binary = ce.decode(Broker::Kafka, Some("application/json"), &headers, data).unwrap();
        assert_eq!(binary.event_type, "meeting.participant.registered");
        let body: Value = serde_json::from_slice(&binary.body).unwrap();
        assert_eq!((body["eventId"].as_str(), body["amount"].as_i64()), (Some("reg-1"), Some(15000)));
        let event = json!({ "specversion": "1.0", "id": "reg-1", "source": "/meetings",
            "type": "io.commerce.meeting.participant.registered", "correlationid": "c-9",
            "data": serde_json::from_slice::<Value>(data).unwrap() });
        let structured =
            ce.decode(Broker::Amqp, Some(STRUCTURED), &|_| None, event.to_string().as_bytes()).unwrap();
        assert_eq!(structured.body, binary.body);
        assert_eq!(structured.correlation_id.as_deref(), Some("c-9"));
    }

    #[test]
    fn what_is_no_cloudevent_of_ours_is_refused_with_its_reason() {
        let ce = CloudEvents::new(CloudEventsSettings::default());
        let event = |patch: Value| {
            let mut e = json!({ "specversion": "1.0", "id": "reg-1", "source": "/m",
                "type": "io.commerce.meeting.deleted", "data": { "meetingId": "m-1" } });
            for (k, v) in patch.as_object().unwrap() {
                e[k] = v.clone();
            }
            ce.decode(Broker::Kafka, Some(STRUCTURED), &|_| None, e.to_string().as_bytes())
        };
        assert!(event(json!({})).is_ok());
        for (patch, why) in [
            (json!({ "specversion": "0.3" }), "specversion"),
            (json!({ "id": "" }), "id"),
            (json!({ "type": "com.other.meeting.deleted" }), "type"),
            (json!({ "data": [1] }), "data"),
            (json!({ "data": { "eventId": "other" } }), "disagrees"),
        ] {
            let refused = event(patch.clone()).unwrap_err();
            assert!(refused.contains(why), "{patch}: {refused}");
        }
        assert!(ce.decode(Broker::Kafka, None, &|_| None, b"{}").unwrap_err().contains("specversion"));
    }

    #[test]
    fn an_unreadable_envelope_is_said() {
        let mut bad = record();
        bad.payload = "{".into();
        assert!(CloudEvents::new(CloudEventsSettings::default()).encode(&bad, None, Broker::Kafka).is_err());
    }
}
