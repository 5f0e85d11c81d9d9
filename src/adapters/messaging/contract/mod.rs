//! Wire contracts (docs/spec.md §12): how an outbox event goes on the wire, decided at the
//! broker adapters only. The outbox always stores the native envelope; a [`Contract`] turns
//! one stored record into the messages it is sent as, each with its destination, key,
//! properties or headers and body. The publishers send what the contract says and count a
//! record published once every one of its messages is confirmed; everything else — claims,
//! retries, dead letters, the admin API — is the same under every contract.
//!
//! A contract is one module here: its outbound routing, envelope, headers and inbound
//! reading together. A fourth contract is one new module, a variant of [`Contract`] and its
//! arm in each of `Contract`'s methods (the compiler lists them); the publishers and
//! consumers do not change.

mod cloudevents;
pub mod commerce;
mod envelope;
pub mod meeting;
pub mod momo;
pub mod topology;

use std::fmt;

pub use cloudevents::{CloudEvents, CloudEventsMode, CloudEventsSettings, Inbound};
pub use envelope::Envelope;

use crate::application::ports::{OutboxRecord, PublishOutcome};

/// A header's value: text, or a number where the other side reads a long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderValue {
    Text(String),
    Long(i64),
}

impl HeaderValue {
    /// As Kafka carries every header: bytes (a long as its decimal text).
    pub fn to_text(&self) -> String {
        match self {
            HeaderValue::Text(text) => text.clone(),
            HeaderValue::Long(n) => n.to_string(),
        }
    }
}

/// One message as a contract encodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireMessage {
    /// The exchange (RabbitMQ) or topic (Kafka); `None`: the publisher's own
    /// (`broker.exchange`, `broker.kafka.topic`).
    pub destination: Option<String>,
    /// The routing key (RabbitMQ) or the record's key (Kafka).
    pub key: String,
    pub body: Vec<u8>,
    /// RabbitMQ's `content_type` property; on Kafka the `content-type` header when
    /// [`WireMessage::kafka_content_type_header`] says so.
    pub content_type: Option<String>,
    /// RabbitMQ's `content_encoding` property.
    pub content_encoding: Option<String>,
    pub kafka_content_type_header: bool,
    /// RabbitMQ's `message_id` property.
    pub message_id: Option<String>,
    /// RabbitMQ's `type` property.
    pub amqp_type: Option<String>,
    /// RabbitMQ's `correlation_id` property.
    pub correlation_id: Option<String>,
    /// Names are the contract's own (static): no allocation per message.
    pub headers: Vec<(&'static str, HeaderValue)>,
}

/// Which contract, as `broker.contract` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContractName {
    Native,
    CloudEvents,
    Momo,
    Commerce,
}

impl ContractName {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "native" => Some(ContractName::Native),
            "cloudevents" => Some(ContractName::CloudEvents),
            "momo" => Some(ContractName::Momo),
            "commerce" => Some(ContractName::Commerce),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ContractName::Native => "native",
            ContractName::CloudEvents => "cloudevents",
            ContractName::Momo => "momo",
            ContractName::Commerce => "commerce",
        }
    }
}

impl fmt::Display for ContractName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a record goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded {
    /// As the native contract sends it (docs/messages.md): the publisher's own fast path.
    Native,
    /// These messages, in this order; the record is published once all are confirmed.
    Messages(Vec<WireMessage>),
}

/// A contract's encoder. Deterministic: a retried record is sent as the same bytes.
#[derive(Debug, Clone)]
pub enum Contract {
    Native,
    CloudEvents(CloudEvents),
    /// `Gseobi/commerce-orchestration-backend`'s records (Kafka).
    Commerce,
    /// The meetup platform's messages (RabbitMQ).
    Momo(momo::MomoOut),
}

impl Contract {
    /// The contract `broker.contract` names. `Err` names what is not available yet.
    ///
    /// # Errors
    /// A contract this build cannot speak on this broker.
    pub fn of(
        name: ContractName,
        cloudevents: CloudEventsSettings,
        timezone: chrono_tz::Tz,
    ) -> Result<Contract, String> {
        match name {
            ContractName::Native => Ok(Contract::Native),
            ContractName::CloudEvents => Ok(Contract::CloudEvents(CloudEvents::new(cloudevents))),
            ContractName::Commerce => Ok(Contract::Commerce),
            ContractName::Momo => Ok(Contract::Momo(momo::MomoOut { timezone })),
        }
    }

    pub fn name(&self) -> ContractName {
        match self {
            Contract::Native => ContractName::Native,
            Contract::CloudEvents(_) => ContractName::CloudEvents,
            Contract::Commerce => ContractName::Commerce,
            Contract::Momo(_) => ContractName::Momo,
        }
    }

    /// The messages `record` goes out as on `broker`; `traceparent` is the publish span's.
    ///
    /// # Errors
    /// Why the record cannot be sent under this contract (its envelope unreadable, a value
    /// the other side cannot take): the relay dead-letters it with that reason.
    pub fn encode(
        &self,
        record: &OutboxRecord,
        traceparent: Option<&str>,
        broker: Broker,
    ) -> Result<Encoded, String> {
        match self {
            Contract::Native => Ok(Encoded::Native),
            Contract::CloudEvents(ce) => {
                ce.encode(record, traceparent, broker).map(|m| Encoded::Messages(vec![m]))
            }
            Contract::Commerce => commerce::encode(record),
            Contract::Momo(momo) => momo.encode(record),
        }
    }

    /// Reads an inbound message of the meeting service under this contract: `None` when it
    /// is read natively (docs/spec.md §7, §11), else what it carries.
    ///
    /// # Errors
    /// What makes it no message of this contract (the DLQ's reason).
    pub fn read_inbound(
        &self,
        broker: Broker,
        content_type: Option<&str>,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Result<Option<Inbound>, String> {
        match self {
            Contract::CloudEvents(ce) => ce.decode(broker, content_type, header, body).map(Some),
            // momo's messages are read per queue (`momo::read`): no CloudEvent is one.
            Contract::Native | Contract::Commerce | Contract::Momo(_) => Ok(None),
        }
    }

    /// Whether a message this contract leaves native (on `broker.exchange`) that RabbitMQ
    /// returns unroutable counts as published (docs/decisions.md, "An event nobody binds").
    /// `momo`: the platform binds nothing on our exchange, so a native event there has no
    /// consumer by design and must never hold back the replies behind it. CloudEvents:
    /// subscribers subscribe by type (a trigger's filter is a binding), so a type nobody
    /// subscribes to is normal. Native: §6 as it is — the exchange is the team's own
    /// contract, and a return means a binding it relies on is missing.
    pub fn native_unroutable_ok(&self) -> bool {
        match self {
            Contract::Momo(_) | Contract::CloudEvents(_) => true,
            Contract::Native | Contract::Commerce => false,
        }
    }

    /// The RabbitMQ topology this contract's platform owns (`momo`: the meetup platform's
    /// payment topology), declared as that platform declares it by whichever of our sides
    /// connects first: the publisher (its replies' exchange must exist before the first is
    /// sent) and the consumers (whose queues are then its `inbound`). `None`: the contract
    /// reads our own queues (`broker.*`), and the publisher needs nothing beyond its exchange.
    pub fn own_topology(&self) -> Option<topology::Topology> {
        match self {
            Contract::Momo(_) => Some(momo::topology::topology()),
            Contract::Native | Contract::CloudEvents(_) | Contract::Commerce => None,
        }
    }

    /// Topics this contract sends to beside the broker's own (made when the publisher
    /// first connects).
    pub fn own_topics(&self) -> &'static [&'static str] {
        match self {
            Contract::Commerce => &[commerce::SETTLEMENT_TOPIC, commerce::NOTIFICATION_TOPIC],
            _ => &[],
        }
    }

    /// The producer's partitioner, when the contract needs a particular one.
    pub fn kafka_partitioner(&self) -> Option<&'static str> {
        match self {
            Contract::Commerce => Some(commerce::PARTITIONER),
            _ => None,
        }
    }

    /// Where `record` goes under this contract, for operators (`/flow`, the outbox views):
    /// (exchange or topic, routing key or key) of each message. Native and CloudEvents keep
    /// the native routing, so nothing is encoded for them; `commerce` and `momo` route by
    /// what the event is, so their messages are encoded (off the relay's path).
    pub fn destinations(&self, record: &OutboxRecord, broker: Broker, own: &str) -> Vec<(String, String)> {
        match self {
            // CloudEvents keep native keys and routing keys.
            Contract::Native | Contract::CloudEvents(_) => vec![(own.to_owned(), native_key(record, broker))],
            Contract::Commerce | Contract::Momo(_) => match self.encode(record, None, broker) {
                Ok(Encoded::Native) => vec![(own.to_owned(), native_key(record, broker))],
                Ok(Encoded::Messages(messages)) => messages
                    .into_iter()
                    .map(|m| (m.destination.unwrap_or_else(|| own.to_owned()), m.key))
                    .collect(),
                Err(_) => Vec::new(),
            },
        }
    }
}

/// Each record's outcome from its messages' (`groups[i]` of them, in order): confirmed when
/// every one is, else the first that is not. The publishers' verdicts are per message.
pub fn per_record(outcomes: Vec<PublishOutcome>, groups: &[usize]) -> Vec<PublishOutcome> {
    if groups.iter().all(|n| *n == 1) {
        return outcomes;
    }
    let mut outcomes = outcomes.into_iter();
    groups
        .iter()
        .map(|n| {
            let mut record = PublishOutcome::Confirmed;
            for outcome in outcomes.by_ref().take(*n) {
                if matches!(record, PublishOutcome::Confirmed) {
                    record = outcome;
                }
            }
            record
        })
        .collect()
}

/// The key a native message has: the routing key on RabbitMQ, the aggregate id on Kafka.
pub fn native_key(record: &OutboxRecord, broker: Broker) -> String {
    match broker {
        Broker::Amqp => record.routing_key.clone(),
        Broker::Kafka => record.aggregate_id.clone(),
    }
}

/// Where this deployment's contract sends an event, for operators: the contract, the broker
/// it speaks to (none with the `log` broker) and the broker's own exchange or topic.
#[derive(Debug, Clone)]
pub struct WireView {
    pub contract: Contract,
    pub broker: Option<Broker>,
    pub own: String,
}

impl WireView {
    /// (exchange or topic, routing key or key) of each message `record` goes out as; empty
    /// with the `log` broker or for a record the contract cannot encode.
    pub fn destinations(&self, record: &OutboxRecord) -> Vec<(String, String)> {
        match self.broker {
            Some(broker) => self.contract.destinations(record, broker, &self.own),
            None => Vec::new(),
        }
    }
}

/// The broker a message is encoded for (headers differ: `cloudEvents_` on RabbitMQ, `ce_`
/// on Kafka).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    Amqp,
    Kafka,
}

#[cfg(test)]
pub(super) mod tests {
    use serde_json::json;

    use crate::application::ports::{OutboxRecord, PublishOutcome};
    use crate::domain::outbox::FailureCode;

    #[test]
    fn a_record_is_published_when_every_one_of_its_messages_is() {
        let nack = || PublishOutcome::Failed { code: FailureCode::Nacked, reason: "nacked".into() };
        let lost = || PublishOutcome::Failed { code: FailureCode::ConnectionLost, reason: "lost".into() };
        let outcomes = vec![
            PublishOutcome::Confirmed,
            PublishOutcome::Confirmed,
            nack(),
            lost(),
            PublishOutcome::Confirmed,
        ];
        assert_eq!(
            super::per_record(outcomes, &[2, 2, 1]),
            [PublishOutcome::Confirmed, nack(), PublishOutcome::Confirmed],
            "the first failure of a record is its outcome"
        );
        assert_eq!(super::per_record(vec![lost()], &[1]), [lost()]);
    }

    /// An `order.completed` as the outbox stores it.
    pub(in crate::adapters::messaging::contract) fn record() -> OutboxRecord {
        let payload = json!({
            "eventId": "3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11", "eventType": "order.completed",
            "aggregateType": "order", "aggregateId": "8d7e6f50-1a2b-4c3d-9e8f-001122334455",
            "correlationId": "req-1", "occurredAt": "2026-12-04T10:00:00.123Z",
            "payload": { "orderId": "8d7e6f50-1a2b-4c3d-9e8f-001122334455", "totalAmount": 30000 }
        });
        OutboxRecord {
            id: 1,
            event_id: "3f1c0e52-7f0e-4b8e-9a52-0d4c5b1f2e11".parse().unwrap(),
            aggregate_type: "order".into(),
            aggregate_id: "8d7e6f50-1a2b-4c3d-9e8f-001122334455".into(),
            event_type: "order.completed".into(),
            routing_key: "order.completed".into(),
            payload: payload.to_string(),
            correlation_id: Some("req-1".into()),
            status: crate::domain::outbox::OutboxStatus::Ready,
            retry_count: 0,
            failure_code: None,
            failure_reason: None,
            next_attempt_at: None,
            last_attempt_at: None,
            claimed_by: None,
            claimed_until: None,
            created_at: chrono::Utc::now(),
            published_at: None,
            dead_lettered_at: None,
            version: 0,
            lane: 0,
            traceparent: None,
        }
    }
}
