//! `broker.*`: which broker (RabbitMQ, Kafka, or the log), its wire contract (docs/spec.md
//! §12), the meeting service's queues and the Kafka client's settings.

use std::time::Duration;

use serde::Deserialize;

use super::resolve::RawList;
use super::resolve::{duration, name, positive};
use super::{ConfigError, invalid};
use crate::adapters::Secret;
use crate::adapters::messaging::contract::topology::QueueType;
use crate::adapters::messaging::contract::{CloudEventsMode, CloudEventsSettings, ContractName};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    /// Unset: `amqp` when `url` or `urls` is set, else `log`.
    pub(super) kind: Option<String>,
    pub(super) url: Option<Secret>,
    /// A cluster's nodes: a list in a file, comma-separated in the environment.
    pub(super) urls: Option<RawList<Secret>>,
    pub(super) queue_type: String,
    pub(super) exchange: String,
    pub(super) confirm_timeout: String,
    pub(super) meeting_exchange: String,
    pub(super) dead_letter_exchange: String,
    pub(super) register_queue: String,
    pub(super) cancel_queue: String,
    pub(super) meeting_deleted_queue: String,
    pub(super) prefetch: u16,
    pub(super) consumer_retries: u32,
    pub(super) consumer_retry_backoff: String,
    pub(super) delivery_limit: u32,
    /// `native` | `cloudevents` | `momo` | `commerce` (docs/spec.md §12).
    pub(super) contract: String,
    pub(super) cloudevents: RawCloudEvents,
    pub(super) kafka: RawKafka,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCloudEvents {
    pub(super) mode: String,
    pub(super) source: String,
    pub(super) type_prefix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKafka {
    pub(super) brokers: Option<String>,
    pub(super) topic: String,
    pub(super) client_id: String,
    /// A list in a file, comma-separated in the environment.
    pub(super) inbound: RawList<String>,
    pub(super) group: String,
    pub(super) partitions: i32,
    pub(super) connect_timeout: String,
    #[serde(default)]
    pub(super) properties: std::collections::BTreeMap<String, Secret>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Events are written as JSON log lines (embedded default).
    Log,
    Amqp,
    /// Kafka (docs/spec.md §11).
    Kafka,
}

impl BrokerKind {
    /// As `broker.kind` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerKind::Log => "log",
            BrokerKind::Amqp => "amqp",
            BrokerKind::Kafka => "kafka",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BrokerSettings {
    pub kind: BrokerKind,
    /// How events go on the wire and inbound messages are read (docs/spec.md §12).
    pub contract: ContractName,
    /// `broker.cloudevents.*`: used when `contract` is `cloudevents`.
    pub cloudevents: CloudEventsSettings,
    /// Whether the broker was chosen (`broker.url`, `broker.urls` or `broker.kind` set).
    pub explicit: bool,
    /// The broker's nodes: `broker.urls`, or the one `broker.url`; empty with `log`.
    pub urls: Vec<Secret>,
    pub queue_type: QueueType,
    /// The exchange outbox events are published to.
    pub exchange: String,
    /// How long the relay waits for a batch's confirms.
    pub confirm_timeout: Duration,
    /// Inbound topology (docs/spec.md §7); names configurable, defaults as the spec gives them.
    pub meeting_exchange: String,
    pub dead_letter_exchange: String,
    pub register_queue: String,
    pub cancel_queue: String,
    pub meeting_deleted_queue: String,
    /// Unacknowledged deliveries per consumer.
    pub prefetch: u16,
    /// Retries of a system failure before a message is dead-lettered.
    pub consumer_retries: u32,
    /// First retry delay; doubled each time.
    pub consumer_retry_backoff: Duration,
    /// `x-delivery-limit` of quorum queues.
    pub delivery_limit: u32,
    /// `broker.kafka.*`: used when `kind` is `Kafka`.
    pub kafka: KafkaSettings,
}

/// Kafka (docs/spec.md §11, docs/configuration.md).
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// The bootstrap list, `host:port[,host:port...]` (`broker.kafka.brokers`).
    pub brokers: String,
    /// Where the outbox publishes, one record per event keyed by its aggregate id.
    pub topic: String,
    pub client_id: String,
    /// The meeting service's topics; each has its `<topic>.dlq`.
    pub inbound: Vec<String>,
    /// The consumer group of the meeting consumers.
    pub group: String,
    /// Partitions of the topics this service creates when they are missing.
    pub partitions: i32,
    /// How long connecting, a metadata request or creating a topic may take.
    pub connect_timeout: Duration,
    /// Security settings passed to the client as they are (`security.*`, `ssl.*`,
    /// `sasl.*`); their values may be secrets.
    pub properties: Vec<(String, Secret)>,
}

pub(super) fn resolve_broker(raw: RawBroker) -> Result<BrokerSettings, ConfigError> {
    // An empty value is no value: `APP__BROKER__URL=` on a command line unsets the URL a
    // shell exported (README's walk-throughs switch brokers so).
    let url = raw.url.filter(|u| !u.expose().trim().is_empty());
    let (urls, key) = match (url, raw.urls) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "broker.urls",
                "set broker.url (one node) or broker.urls (a cluster), not both",
            ));
        }
        (Some(url), None) => (vec![url], "broker.url"),
        (None, Some(urls)) => {
            let urls = urls.into_list();
            if urls.is_empty() {
                return Err(invalid("broker.urls", "lists no node"));
            }
            (urls, "broker.urls")
        }
        (None, None) => (Vec::new(), "broker.url"),
    };
    let kind = match raw.kind.as_deref() {
        None if !urls.is_empty() => BrokerKind::Amqp,
        None | Some("log") => BrokerKind::Log,
        Some("amqp") => BrokerKind::Amqp,
        Some("kafka") => BrokerKind::Kafka,
        Some(other) => return Err(invalid("broker.kind", format!("`{other}` is not log, amqp or kafka"))),
    };
    if kind == BrokerKind::Kafka && !urls.is_empty() {
        return Err(invalid(key, "is for RabbitMQ: with broker.kind = kafka set broker.kafka.brokers"));
    }
    if kind == BrokerKind::Amqp {
        if urls.is_empty() {
            return Err(invalid("broker.url", "is required when broker.kind = amqp"));
        }
        for (i, url) in urls.iter().enumerate() {
            if !(url.expose().starts_with("amqp://") || url.expose().starts_with("amqps://")) {
                let which = if urls.len() > 1 { format!("node {}: ", i + 1) } else { String::new() };
                return Err(invalid(key, format!("{which}expected amqp://...")));
            }
        }
    }
    let queue_type = match raw.queue_type.as_str() {
        "classic" => QueueType::Classic,
        "quorum" => QueueType::Quorum,
        other => return Err(invalid("broker.queue_type", format!("`{other}` is not classic or quorum"))),
    };
    if raw.prefetch == 0 {
        return Err(invalid("broker.prefetch", "must be at least 1"));
    }
    let contract = ContractName::parse(&raw.contract).ok_or_else(|| {
        invalid("broker.contract", format!("`{}` is not native, cloudevents, momo or commerce", raw.contract))
    })?;
    let defined = match contract {
        ContractName::Native => true,
        ContractName::CloudEvents => kind != BrokerKind::Log,
        ContractName::Momo => kind == BrokerKind::Amqp,
        ContractName::Commerce => kind == BrokerKind::Kafka,
    };
    if !defined {
        return Err(invalid(
            "broker.contract",
            format!("`{contract}` is not defined for broker.kind = {}", kind.as_str()),
        ));
    }
    let cloudevents = CloudEventsSettings {
        mode: CloudEventsMode::parse(&raw.cloudevents.mode).ok_or_else(|| {
            invalid(
                "broker.cloudevents.mode",
                format!("`{}` is not binary or structured", raw.cloudevents.mode),
            )
        })?,
        source: cloudevents_attribute("broker.cloudevents.source", raw.cloudevents.source)?,
        type_prefix: cloudevents_attribute("broker.cloudevents.type_prefix", raw.cloudevents.type_prefix)?,
    };
    Ok(BrokerSettings {
        contract,
        cloudevents,
        kind,
        explicit: raw.kind.is_some() || !urls.is_empty(),
        urls,
        queue_type,
        exchange: name("broker.exchange", raw.exchange)?,
        confirm_timeout: positive("broker.confirm_timeout", &raw.confirm_timeout)?,
        meeting_exchange: name("broker.meeting_exchange", raw.meeting_exchange)?,
        dead_letter_exchange: name("broker.dead_letter_exchange", raw.dead_letter_exchange)?,
        register_queue: name("broker.register_queue", raw.register_queue)?,
        cancel_queue: name("broker.cancel_queue", raw.cancel_queue)?,
        meeting_deleted_queue: name("broker.meeting_deleted_queue", raw.meeting_deleted_queue)?,
        prefetch: raw.prefetch,
        consumer_retries: raw.consumer_retries,
        consumer_retry_backoff: duration("broker.consumer_retry_backoff", &raw.consumer_retry_backoff)?,
        delivery_limit: raw.delivery_limit,
        kafka: resolve_kafka(raw.kafka, kind == BrokerKind::Kafka)?,
    })
}

/// A CloudEvents attribute we send: non-empty printable ASCII (it goes in headers).
pub(super) fn cloudevents_attribute(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 200 || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(invalid(key, "must be 1 to 200 printable ASCII characters"));
    }
    Ok(value)
}

/// Which client settings `broker.kafka.properties` may carry: how to reach and authenticate
/// to the cluster, nothing that would weaken delivery (`acks`, idempotence, timeouts are the
/// service's).
pub(super) const KAFKA_PASSED_THROUGH: [&str; 3] = ["security.", "ssl.", "sasl."];

pub(super) fn resolve_kafka(raw: RawKafka, chosen: bool) -> Result<KafkaSettings, ConfigError> {
    let brokers = raw.brokers.map(|b| b.trim().to_owned()).unwrap_or_default();
    if chosen && brokers.is_empty() {
        return Err(invalid("broker.kafka.brokers", "is required when broker.kind = kafka"));
    }
    let inbound = raw.inbound.into_list();
    if inbound.is_empty() {
        return Err(invalid("broker.kafka.inbound", "lists no topic"));
    }
    kafka_topic("broker.kafka.topic", &raw.topic)?;
    for topic in &inbound {
        kafka_topic("broker.kafka.inbound", topic)?;
    }
    if !(1..=10_000).contains(&raw.partitions) {
        return Err(invalid("broker.kafka.partitions", "must be between 1 and 10000"));
    }
    let mut properties = Vec::new();
    for (key, value) in raw.properties {
        // From the environment a key comes lower-cased with `_` for `.`
        // (`APP__BROKER__KAFKA__PROPERTIES__SASL_USERNAME`); librdkafka's names have no `_`.
        let key = key.replace('_', ".");
        if !KAFKA_PASSED_THROUGH.iter().any(|prefix| key.starts_with(prefix)) {
            return Err(invalid(
                &format!("broker.kafka.properties.{key}"),
                "only security.*, ssl.* and sasl.* settings are passed to the client",
            ));
        }
        properties.push((key, value));
    }
    Ok(KafkaSettings {
        brokers,
        topic: raw.topic,
        client_id: name("broker.kafka.client_id", raw.client_id)?,
        inbound,
        group: name("broker.kafka.group", raw.group)?,
        partitions: raw.partitions,
        connect_timeout: positive("broker.kafka.connect_timeout", &raw.connect_timeout)?,
        properties,
    })
}

/// A Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`.
pub(super) fn kafka_topic(key: &str, topic: &str) -> Result<(), ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) || topic == "." || topic == ".." {
        return Err(invalid(key, format!("`{topic}` is not a Kafka topic name")));
    }
    Ok(())
}
