//! The meeting service's events over Kafka (docs/spec.md §11): the topics of
//! `broker.kafka.inbound` read in consumer group `broker.kafka.group`, each record's kind
//! from its `event_type` header or, without one, its body's `type`; the same decoding and
//! failure policy as over AMQP (`super::super::meeting`).
//!
//! A record's offset is stored only after its effects (inbox row included) are committed,
//! or after it was written to `<topic>.dlq` and that write acknowledged; the client commits
//! stored offsets every second and when partitions are revoked. A crash in between
//! redelivers what was not committed, and the inbox makes the second delivery change
//! nothing. Records are handled one after another, so a partition's are in order.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::client::{KafkaConnection, KafkaFailure, Watch};
use super::publisher::producer_config;
use crate::adapters::messaging::meeting::{Kind, MeetingHandler, Verdict, reconnecting};
use crate::application::inbound::MeetingEvents;
use crate::application::meter::Meter;

#[derive(Debug, Clone)]
pub struct KafkaConsumerSettings {
    pub connection: KafkaConnection,
    /// `broker.kafka.inbound`.
    pub topics: Vec<String>,
    /// `broker.kafka.group`.
    pub group: String,
    /// Partitions of the topics (and their `.dlq`) when this service creates them.
    pub partitions: i32,
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Honour the `x-mock-scenario` header (mock providers only).
    pub honour_mock_scenario: bool,
}

/// Consumes the meeting service's topics until stopped, reconnecting after failures.
pub struct KafkaMeetingConsumer {
    settings: KafkaConsumerSettings,
    handler: MeetingHandler,
}

/// A header's text: absent is `None`, present but not UTF-8 is malformed.
fn header(message: &BorrowedMessage<'_>, key: &str) -> Result<Option<String>, String> {
    let Some(headers) = message.headers() else { return Ok(None) };
    match headers.iter().find(|h| h.key == key) {
        None | Some(Header { value: None, .. }) => Ok(None),
        Some(Header { value: Some(bytes), .. }) => std::str::from_utf8(bytes)
            .map(|text| Some(text.to_owned()))
            .map_err(|_| format!("{key}: must be a text header")),
    }
}

/// The record's kind: its `event_type` header, else its body's `type`.
fn kind_of(message: &BorrowedMessage<'_>) -> Result<Kind, String> {
    let event_type = match header(message, "event_type")? {
        Some(t) => t,
        None => {
            #[derive(serde::Deserialize)]
            struct Typed {
                #[serde(rename = "type")]
                event_type: String,
            }
            let body = message.payload().unwrap_or_default();
            serde_json::from_slice::<Typed>(body)
                .map_err(|_| "no event_type header and no `type` in the body".to_owned())?
                .event_type
        }
    };
    Kind::of_type(&event_type)
        .ok_or_else(|| format!("event_type: `{event_type}` is not a meeting-service event"))
}

impl KafkaMeetingConsumer {
    pub fn new(settings: KafkaConsumerSettings, events: Arc<MeetingEvents>) -> Self {
        let handler = MeetingHandler::new(
            events,
            settings.retries,
            settings.retry_backoff,
            settings.honour_mock_scenario,
        );
        KafkaMeetingConsumer { settings, handler }
    }

    /// Records the consumer's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.handler.meter = meter;
        self
    }

    /// Consumes until `stop`; the record in progress finishes first.
    pub async fn run_until_stopped(self: Arc<Self>, stop: CancellationToken) {
        reconnecting("meeting consumer (Kafka)", &stop, || self.session(&stop)).await;
    }

    async fn session(&self, stop: &CancellationToken) -> Result<(), KafkaFailure> {
        let s = &self.settings;
        let mut topics: Vec<String> = s.topics.clone();
        topics.extend(s.topics.iter().map(|t| format!("{t}.dlq")));
        let names: Vec<&str> = topics.iter().map(String::as_str).collect();
        s.connection
            .ensure_topics(&names, s.partitions)
            .await
            .map_err(KafkaFailure::of("cannot make sure the inbound topics exist"))?;
        let watch = Watch::default();
        let consumer: StreamConsumer<Watch> = s
            .connection
            .config()
            .set("group.id", &s.group)
            .set("enable.auto.commit", "true")
            .set("auto.commit.interval.ms", "1000")
            // Offsets are stored by hand, once a record's effects are committed.
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            .create_with_context(watch.clone())
            .map_err(KafkaFailure::of("cannot create the consumer"))?;
        let dead_letters: FutureProducer<Watch> = producer_config(&s.connection, 16, Duration::from_secs(30))
            .create_with_context(watch)
            .map_err(KafkaFailure::of("cannot create the dead-letter producer"))?;
        let subscribed: Vec<&str> = s.topics.iter().map(String::as_str).collect();
        consumer.subscribe(&subscribed).map_err(KafkaFailure::of("cannot subscribe"))?;
        tracing::info!(topics = ?s.topics, group = %s.group, "meeting consumer (kafka) started");
        let result = loop {
            let message = tokio::select! {
                _ = stop.cancelled() => break Ok(()),
                message = consumer.recv() => message,
            };
            match message {
                Ok(message) => {
                    if !self.handle(&message, &dead_letters, stop).await {
                        // Stopped before its dead letter was written: not stored, read again.
                        break Ok(());
                    }
                    if let Err(e) = consumer.store_offset_from_message(&message) {
                        // Lost the partition meanwhile: its new owner reads it again.
                        tracing::warn!(error = %e, "could not store a record's offset");
                    }
                }
                Err(e) => {
                    // The client retries by itself (a broker away, a rebalance): no hot loop.
                    tracing::warn!(error = %e, "meeting consumer (kafka): read failed");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        // What was handled is committed before the group is left.
        let _ = consumer.commit_consumer_state(CommitMode::Sync);
        consumer.unsubscribe();
        result
    }

    /// Handles one record; `false` when stopped before its dead letter was written.
    async fn handle(
        &self,
        message: &BorrowedMessage<'_>,
        dead_letters: &FutureProducer<Watch>,
        stop: &CancellationToken,
    ) -> bool {
        let started = std::time::Instant::now();
        let kind = kind_of(message);
        let label = kind.as_ref().map_or("unknown", Kind::label);
        let span = tracing::info_span!(
            "kafka.consume",
            otel.name = %format!("{} process", message.topic()),
            consumer = label,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        let traceparent = header(message, "traceparent").ok().flatten();
        crate::telemetry::continue_trace(&span, traceparent.as_deref());
        let verdict = match kind {
            Err(why) => Verdict::Reject("malformed", why),
            Ok(kind) => {
                let scenario = header(message, "x-mock-scenario");
                let correlation_id = header(message, "correlation_id").ok().flatten();
                let body = message.payload().unwrap_or_default();
                // A panic in processing must not stop the partition: the record is
                // dead-lettered instead.
                let processing = std::panic::AssertUnwindSafe(
                    self.handler.process(kind, scenario, correlation_id, body).instrument(span),
                );
                match futures_util::FutureExt::catch_unwind(processing).await {
                    Ok(verdict) => verdict,
                    Err(_) => Verdict::Reject("panicked", "processing panicked".to_owned()),
                }
            }
        };
        let elapsed = started.elapsed().as_secs_f64();
        self.handler.meter.record(|| {
            metrics::histogram!("consumer_handling_duration_seconds", "consumer" => label).record(elapsed)
        });
        let outcome = match &verdict {
            Verdict::Ack(outcome) => outcome,
            Verdict::Reject(outcome, why) => {
                tracing::warn!(consumer = label, %why, topic = message.topic(), "record dead-lettered");
                if !self.dead_letter(message, outcome, why, dead_letters, stop).await {
                    return false;
                }
                outcome
            }
        };
        self.handler.meter.record(|| {
            metrics::counter!("consumer_messages_total", "consumer" => label, "outcome" => *outcome)
                .increment(1)
        });
        true
    }

    /// Writes the record to `<topic>.dlq` with its key, value and headers, and why, retrying
    /// until the cluster acknowledges it; `false` if stopped first.
    async fn dead_letter(
        &self,
        message: &BorrowedMessage<'_>,
        outcome: &str,
        why: &str,
        producer: &FutureProducer<Watch>,
        stop: &CancellationToken,
    ) -> bool {
        let topic = format!("{}.dlq", message.topic());
        let mut headers = OwnedHeaders::new();
        if let Some(original) = message.headers() {
            for h in original.iter().filter(|h| !h.key.starts_with("x-dlq-")) {
                headers = headers.insert(Header { key: h.key, value: h.value });
            }
        }
        let partition = message.partition().to_string();
        let offset = message.offset().to_string();
        for (key, value) in [
            ("x-dlq-reason", why),
            ("x-dlq-outcome", outcome),
            ("x-dlq-topic", message.topic()),
            ("x-dlq-partition", &partition),
            ("x-dlq-offset", &offset),
        ] {
            headers = headers.insert(Header { key, value: Some(value) });
        }
        let mut pause = Duration::from_millis(200);
        loop {
            let mut record = FutureRecord::to(&topic).headers(headers.clone());
            if let Some(key) = message.key() {
                record = record.key(key);
            }
            if let Some(payload) = message.payload() {
                record = record.payload(payload);
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                sent = producer.send(record, Duration::from_secs(5)) => match sent {
                    Ok(_) => return true,
                    Err((e, _)) => tracing::warn!(error = %e, %topic, "could not write a dead letter; retrying"),
                },
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(10));
        }
    }
}
