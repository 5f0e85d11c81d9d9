//! The outbox's Kafka publisher (docs/spec.md §11): each event one record on the events
//! topic, keyed by its aggregate id (one aggregate, one partition), the envelope as value
//! and `message_id`, `event_type`, `correlation_id`, `traceparent`, `content_type` headers.
//!
//! An idempotent producer with `acks=all`: the delivery report with an offset is the
//! confirm, an error is a nack — the relay applies every rule of §6 to the verdicts as it
//! does to RabbitMQ's. As with RabbitMQ, a window bounds the records awaiting their report;
//! a report arrives through the producer's delivery callback (its own polling thread), which
//! frees the record's place in the window and hands the verdict to the waiting batch.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::adapters::messaging::contract::{Broker, Contract, WireMessage, per_record};
use async_trait::async_trait;
use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use super::client::{KafkaConnection, KafkaFailure, Observed, millis};
use crate::adapters::messaging::publishing::{
    EncodedBatch, Message, Outgoing, encode_batch, failed, read_flow,
};
use crate::application::health::HealthProbe;
use crate::application::ports::{
    BrokerUnavailable, Cause, EventPublisher, OutboxRecord, PendingVerdicts, PublishOutcome,
};
use crate::domain::outbox::FailureCode;

#[derive(Debug, Clone)]
pub struct KafkaPublisherSettings {
    pub connection: KafkaConnection,
    /// `broker.kafka.topic`.
    pub topic: String,
    /// Partitions of the topic when this service creates it.
    pub partitions: i32,
    /// Records awaiting their delivery report at most (`outbox.publish_window`).
    pub window: usize,
    /// How long a record may wait for its delivery report (the producer's
    /// `message.timeout.ms`: it retries within it, then reports the record failed).
    pub confirm_timeout: Duration,
    /// How each record goes on the wire (docs/spec.md §12).
    pub contract: Contract,
}

/// The headers of a record a contract encoded.
fn contract_headers(message: &WireMessage) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(message.headers.len() + 1);
    if message.kafka_content_type_header
        && let Some(content_type) = &message.content_type
    {
        headers = headers.insert(Header { key: "content-type", value: Some(content_type.as_str()) });
    }
    for (name, value) in &message.headers {
        let text = value.to_text();
        headers = headers.insert(Header { key: name, value: Some(text.as_str()) });
    }
    headers
}

/// A record's place in the window and where its verdict goes.
pub struct Pending {
    done: oneshot::Sender<Result<(), KafkaError>>,
    _permit: OwnedSemaphorePermit,
}

/// The producer's callbacks: the client's (`Observed`) and the delivery reports.
pub struct Deliveries(Arc<Observed>);

impl ClientContext for Deliveries {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        self.0.log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.0.error(error, reason);
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<Pending>;

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Box<Pending>) {
        let verdict = match result {
            Ok(_) => {
                self.0.up();
                Ok(())
            }
            Err((error, _)) => Err(error.clone()),
        };
        // The batch may have stopped waiting (its deadline passed): nothing to tell then.
        let _ = pending.done.send(verdict);
    }
}

type Client = ThreadedProducer<Deliveries>;

/// Publishes outbox rows to Kafka. One producer per instance: give each relay its own.
pub struct KafkaEventPublisher {
    settings: KafkaPublisherSettings,
    observed: Arc<Observed>,
    window: Arc<Semaphore>,
    /// Replaced when the client reports a fatal error (an idempotent producer that lost
    /// its sequence cannot go on).
    producer: std::sync::Mutex<Arc<Client>>,
    /// Whether the topic is known to exist (made once, when first ready).
    topic_ready: tokio::sync::Mutex<bool>,
}

/// The headers of an event's record (docs/messages.md). Public so that the bench's bare
/// producer sends the very same records.
pub fn record_headers(
    event_id: &str,
    event_type: &str,
    correlation_id: Option<&str>,
    traceparent: Option<&str>,
) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new_with_capacity(5)
        .insert(Header { key: "message_id", value: Some(event_id) })
        .insert(Header { key: "event_type", value: Some(event_type) })
        .insert(Header { key: "content_type", value: Some("application/json") });
    if let Some(correlation) = correlation_id {
        headers = headers.insert(Header { key: "correlation_id", value: Some(correlation) });
    }
    if let Some(traceparent) = traceparent {
        headers = headers.insert(Header { key: "traceparent", value: Some(traceparent) });
    }
    headers
}

/// The producer settings every record of the outbox needs: idempotent, `acks=all`, at most
/// five requests in flight per partition (what idempotence keeps in order across retries),
/// `message.timeout.ms` the confirm timeout. Public for the bench's bare producer.
pub fn producer_config(
    connection: &KafkaConnection,
    window: usize,
    confirm_timeout: Duration,
) -> rdkafka::ClientConfig {
    let mut config = connection.config();
    config
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("message.timeout.ms", millis(confirm_timeout))
        .set("linger.ms", "2")
        // Room for the window and then some: a full local queue is never what stops a send.
        .set("queue.buffering.max.messages", (window.max(1) * 2 + 1024).to_string());
    config
}

/// A delivery error as the outbox records it.
fn outcome_of(error: &KafkaError) -> PublishOutcome {
    use RDKafkaErrorCode as E;
    let code = match error.rdkafka_error_code() {
        Some(E::MessageTimedOut) | Some(E::RequestTimedOut) => FailureCode::ConfirmTimeout,
        Some(E::UnknownTopicOrPartition) | Some(E::UnknownTopic) | Some(E::UnknownPartition) => {
            FailureCode::Unroutable
        }
        Some(E::AllBrokersDown) | Some(E::BrokerTransportFailure) | Some(E::NetworkException) => {
            FailureCode::ConnectionLost
        }
        _ => FailureCode::Nacked,
    };
    failed(code, format!("kafka: {error}"))
}

impl KafkaEventPublisher {
    /// # Errors
    /// The client refused its configuration (a security setting it does not know, say).
    pub fn new(settings: KafkaPublisherSettings) -> Result<Self, KafkaError> {
        let observed = Arc::new(Observed::default());
        let producer = Arc::new(Self::client(&settings, &observed)?);
        Ok(KafkaEventPublisher {
            window: Arc::new(Semaphore::new(settings.window.max(1))),
            settings,
            observed,
            producer: std::sync::Mutex::new(producer),
            topic_ready: tokio::sync::Mutex::new(false),
        })
    }

    fn client(settings: &KafkaPublisherSettings, observed: &Arc<Observed>) -> Result<Client, KafkaError> {
        let mut config = producer_config(&settings.connection, settings.window, settings.confirm_timeout);
        if let Some(partitioner) = settings.contract.kafka_partitioner() {
            config.set("partitioner", partitioner);
        }
        config.create_with_context(Deliveries(observed.clone()))
    }

    /// The producer, made anew if the current one reported a fatal error (its unreported
    /// records were reported failed by then).
    fn producer(&self) -> Result<Arc<Client>, KafkaError> {
        let mut current = self.producer.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fatal) = current.client().fatal_error() {
            tracing::warn!(error = ?fatal, "kafka producer failed fatally; making a new one");
            *current = Arc::new(Self::client(&self.settings, &self.observed)?);
        }
        Ok(current.clone())
    }

    async fn check(&self) -> Result<(), Cause> {
        let mut topic_ready = self.topic_ready.lock().await;
        if !*topic_ready {
            let topic = &self.settings.topic;
            let mut topics = vec![topic.as_str()];
            topics.extend_from_slice(self.settings.contract.own_topics());
            self.settings
                .connection
                .ensure_topics(&topics, self.settings.partitions)
                .await
                .map_err(KafkaFailure::of(format!("cannot make sure topics {topics:?} exist")))
                .map_err(Cause::new)?;
            *topic_ready = true;
            self.observed.up();
            return Ok(());
        }
        if self.observed.down().is_some() {
            // Ask the cluster: the client says "all brokers down" only on a change.
            let producer =
                self.producer().map_err(KafkaFailure::of("cannot make a producer")).map_err(Cause::new)?;
            let topic = self.settings.topic.clone();
            let timeout = self.settings.connection.connect_timeout;
            tokio::task::spawn_blocking(move || producer.client().fetch_metadata(Some(&topic), timeout))
                .await
                .map_err(Cause::new)?
                .map_err(KafkaFailure::of("kafka unreachable"))
                .map_err(Cause::new)?;
            self.observed.up();
        }
        Ok(())
    }
}

#[async_trait]
impl EventPublisher for KafkaEventPublisher {
    async fn ready(&self) -> Result<(), BrokerUnavailable> {
        self.check().await.map_err(BrokerUnavailable)
    }

    async fn publish(&self, batch: &[Arc<OutboxRecord>]) -> Vec<PublishOutcome> {
        let verdicts = self.send(batch).await;
        verdicts.await
    }

    async fn send(&self, batch: &[Arc<OutboxRecord>]) -> PendingVerdicts {
        let producer = match self.producer() {
            Ok(p) => p,
            Err(e) => {
                let reason = format!("kafka producer: {e}");
                let outcomes =
                    batch.iter().map(|_| failed(FailureCode::BrokerUnavailable, reason.clone())).collect();
                return Box::pin(std::future::ready(outcomes));
            }
        };
        // The producer reports every record within `message.timeout.ms`; a little more
        // for its callback to run.
        let deadline = tokio::time::Instant::now() + self.settings.confirm_timeout + Duration::from_secs(5);
        let mut waiting: Vec<Result<oneshot::Receiver<Result<(), KafkaError>>, PublishOutcome>> =
            Vec::with_capacity(batch.len());
        let EncodedBatch { messages, groups } =
            encode_batch(&self.settings.contract, Broker::Kafka, batch, Some(&self.settings.topic));
        for Outgoing { record, message } in messages {
            // The message on the wire: (topic, key, value, headers).
            let (topic, key, value, headers): (Cow<'_, str>, Cow<'_, str>, Cow<'_, [u8]>, OwnedHeaders) =
                match message {
                    Err(outcome) => {
                        waiting.push(Err(outcome));
                        continue;
                    }
                    Ok(Message::Native { traceparent }) => {
                        let event_id = record.event_id.to_string();
                        let headers = record_headers(
                            &event_id,
                            &record.event_type,
                            record.correlation_id.as_deref(),
                            traceparent.as_deref(),
                        );
                        (
                            Cow::Borrowed(self.settings.topic.as_str()),
                            Cow::Borrowed(record.aggregate_id.as_str()),
                            Cow::Borrowed(record.payload.as_bytes()),
                            headers,
                        )
                    }
                    Ok(Message::Contract(message)) => {
                        let headers = contract_headers(&message);
                        let topic = message
                            .destination
                            .map_or(Cow::Borrowed(self.settings.topic.as_str()), Cow::Owned);
                        (topic, Cow::Owned(message.key), Cow::Owned(message.body), headers)
                    }
                };
            let permit = match tokio::time::timeout_at(deadline, self.window.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                _ => {
                    waiting.push(Err(failed(FailureCode::ConfirmTimeout, "no room in the window in time")));
                    continue;
                }
            };
            let (done, verdict) = oneshot::channel();
            let sent = producer.send(
                BaseRecord::with_opaque_to(topic.as_ref(), Box::new(Pending { done, _permit: permit }))
                    .key(key.as_ref())
                    .payload(value.as_ref())
                    .headers(headers),
            );
            match sent {
                Ok(()) => waiting.push(Ok(verdict)),
                Err((error, _)) => waiting.push(Err(outcome_of(&error))),
            }
        }
        Box::pin(async move {
            let mut outcomes = Vec::with_capacity(waiting.len());
            for entry in waiting {
                outcomes.push(match entry {
                    Err(outcome) => outcome,
                    Ok(verdict) => match tokio::time::timeout_at(deadline, verdict).await {
                        Ok(Ok(Ok(()))) => PublishOutcome::Confirmed,
                        Ok(Ok(Err(error))) => outcome_of(&error),
                        Ok(Err(_)) => {
                            failed(FailureCode::ConnectionLost, "the producer went away before the report")
                        }
                        Err(_) => {
                            failed(FailureCode::ConfirmTimeout, "no delivery report within the timeout")
                        }
                    },
                });
            }
            per_record(unreachable_or_flowing(outcomes), &groups)
        })
    }
}

/// A batch of which no record was delivered and every one timed out was not refused by
/// the cluster: it could not be reached (or took nothing) — `BROKER_UNAVAILABLE`, which
/// spends no retry (docs/spec.md §6), as on RabbitMQ.
fn unreachable_or_flowing(mut outcomes: Vec<PublishOutcome>) -> Vec<PublishOutcome> {
    let timed_out =
        |code: &FailureCode| matches!(code, FailureCode::ConfirmTimeout | FailureCode::ConnectionLost);
    read_flow(&mut outcomes, timed_out, None);
    outcomes
}

#[async_trait]
impl HealthProbe for KafkaEventPublisher {
    fn name(&self) -> &'static str {
        "broker"
    }

    async fn is_healthy(&self) -> bool {
        self.ready().await.is_ok()
    }

    fn detail(&self) -> Option<String> {
        self.observed.down().map(|why| format!("UNREACHABLE: {why}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_of_which_nothing_was_delivered_in_time_spends_no_retry() {
        let timeout = || failed(FailureCode::ConfirmTimeout, "late");
        let all = unreachable_or_flowing(vec![timeout(), timeout()]);
        assert!(
            all.iter()
                .all(|o| matches!(o, PublishOutcome::Failed { code: FailureCode::BrokerUnavailable, .. }))
        );
        let some = unreachable_or_flowing(vec![PublishOutcome::Confirmed, timeout()]);
        assert!(matches!(some[1], PublishOutcome::Failed { code: FailureCode::ConfirmTimeout, .. }));
        let refused = unreachable_or_flowing(vec![outcome_of(&KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageSizeTooLarge,
        ))]);
        assert!(matches!(refused[0], PublishOutcome::Failed { code: FailureCode::Nacked, .. }));
    }
}
