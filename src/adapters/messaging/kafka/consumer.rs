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
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::client::{KafkaConnection, KafkaFailure, Watch};
use super::dead_letter::{Keep, Original, dead_letter};
use super::publisher::producer_config;
use crate::adapters::messaging::contract::{Broker, Contract};
use crate::adapters::messaging::meeting::{Delivery, MeetingHandler, Received, Verdict, read, reconnecting};
use crate::application::health::LoopProgress;
use crate::application::inbound::MeetingEvents;
use crate::application::meter::Meter;
use crate::domain::backoff::doubled_pause;

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
    /// How the meeting service's records are read (docs/spec.md §12).
    pub contract: Contract,
    /// The currency of the platform's fees (`meetings.currency`), as the AMQP consumer's.
    pub meetings_currency: String,
}

/// Consumes the meeting service's topics until stopped, reconnecting after failures.
pub struct KafkaMeetingConsumer {
    settings: KafkaConsumerSettings,
    handler: MeetingHandler,
    progress: Option<Arc<LoopProgress>>,
}

/// The consumer's name in the worker's readiness.
const CONSUMER_LOOP: &str = "meeting consumer (Kafka)";

/// A header's text: absent is `None`, present but not UTF-8 is malformed.
fn header(message: &BorrowedMessage<'_>, key: &str) -> Result<Option<String>, String> {
    let Some(headers) = message.headers() else { return Ok(None) };
    let mut named = headers.iter().filter(|h| h.key == key);
    let first = named.next();
    if named.next().is_some() {
        // Never first-one-wins: two values of one header are two stories.
        return Err(format!("{key}: given more than once"));
    }
    match first {
        None | Some(Header { value: None, .. }) => Ok(None),
        Some(Header { value: Some(bytes), .. }) => std::str::from_utf8(bytes)
            .map(|text| Some(text.to_owned()))
            .map_err(|_| format!("{key}: must be a text header")),
    }
}

impl KafkaMeetingConsumer {
    pub fn new(settings: KafkaConsumerSettings, events: Arc<MeetingEvents>) -> Self {
        let handler = MeetingHandler::new(
            events,
            settings.retries,
            settings.retry_backoff,
            settings.honour_mock_scenario,
        );
        KafkaMeetingConsumer { settings, handler, progress: None }
    }

    /// Records the consumer's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.handler.meter = meter;
        self
    }

    /// Reports a consumer held up by a dead letter it cannot write to the worker's readiness.
    pub fn with_progress(mut self, progress: Arc<LoopProgress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Consumes until `stop`; the record in progress finishes first.
    pub async fn run_until_stopped(self: Arc<Self>, stop: CancellationToken) {
        reconnecting(CONSUMER_LOOP, &stop, || self.session(&stop)).await;
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
        self.stalled(false, None);
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
        let body = message.payload().unwrap_or_default();
        let delivery = read(
            &self.settings.contract,
            Broker::Kafka,
            &self.settings.meetings_currency,
            &Received {
                queue: None,
                content_type: header(message, "content-type").ok().flatten().as_deref(),
                header: &|name: &str| header(message, name),
                body,
            },
        );
        let label = delivery.label();
        let span = tracing::info_span!(
            "kafka.consume",
            otel.name = %format!("{} process", message.topic()),
            consumer = label,
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        let traceparent = header(message, "traceparent").ok().flatten();
        crate::telemetry::continue_trace(&span, traceparent.as_deref());
        let verdict = match delivery {
            Delivery::Malformed(_, why) => Verdict::Reject("malformed", why),
            Delivery::Dropped(_) => Verdict::Ack("dropped"),
            Delivery::Decoded { kind, inbound, correlation_id: carried } => {
                let scenario = header(message, "x-mock-scenario");
                let correlation_id = carried.or_else(|| header(message, "correlation_id").ok().flatten());
                // A panic in processing must not stop the partition: the record is
                // dead-lettered instead.
                let processing = std::panic::AssertUnwindSafe(
                    self.handler.handle(kind, inbound, scenario, correlation_id).instrument(span),
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

    /// Writes the record to `<topic>.dlq` (`super::dead_letter`: cut to what always fits),
    /// retrying until the cluster acknowledges it; `false` if stopped first. A cluster that
    /// refuses even the cut copy as too large gets the reason and the coordinates alone; a
    /// write that keeps failing holds every partition (records are handled in order), so
    /// it shows in readiness (the worker's loops) and in `consumer_stalled`.
    async fn dead_letter(
        &self,
        message: &BorrowedMessage<'_>,
        outcome: &str,
        why: &str,
        producer: &FutureProducer<Watch>,
        stop: &CancellationToken,
    ) -> bool {
        let topic = format!("{}.dlq", message.topic());
        let original = Original {
            topic: message.topic(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key(),
            value: message.payload(),
            headers: message
                .headers()
                .map_or_else(Vec::new, |h| h.iter().map(|h| (h.key, h.value)).collect()),
        };
        let mut keep = Keep::WhatFits;
        // Between two tries: 200 ms doubling, at most 10 s.
        let mut tries = 0;
        let mut failing = false;
        loop {
            let letter = dead_letter(&original, outcome, why, keep);
            let mut headers = OwnedHeaders::new_with_capacity(letter.headers.len());
            for (key, value) in &letter.headers {
                headers = headers.insert(Header { key, value: value.as_deref() });
            }
            let mut record = FutureRecord::to(&topic).headers(headers);
            if let Some(key) = &letter.key {
                record = record.key(key);
            }
            if let Some(value) = &letter.value {
                record = record.payload(value);
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                sent = producer.send(record, Duration::from_secs(5)) => match sent {
                    Ok(_) => {
                        if failing {
                            self.stalled(false, None);
                        }
                        return true;
                    }
                    Err((e, _)) if too_large(&e) && keep == Keep::WhatFits => {
                        tracing::warn!(error = %e, %topic, "dead letter refused as too large; writing its coordinates alone");
                        keep = Keep::Coordinates;
                        continue;
                    }
                    Err((e, _)) => {
                        failing = true;
                        self.stalled(true, Some(&format!("cannot write a dead letter to {topic}: {e}")));
                        tracing::warn!(error = %e, %topic, "could not write a dead letter; retrying");
                    }
                },
            }
            tokio::select! {
                _ = stop.cancelled() => return false,
                _ = tokio::time::sleep(doubled_pause(Duration::from_millis(200), tries, Duration::from_secs(10))) => {}
            }
            tries += 1;
        }
    }

    /// Whether the consumer is held up by a dead letter it cannot write (every partition
    /// waits behind it): readiness, after `worker.stuck_after`, and `consumer_stalled`.
    fn stalled(&self, stalled: bool, why: Option<&str>) {
        if let Some(progress) = &self.progress {
            match why {
                Some(why) if stalled => progress.failed(CONSUMER_LOOP, why),
                _ => progress.ok(CONSUMER_LOOP),
            }
        }
        self.handler.meter.record(|| {
            metrics::gauge!("consumer_stalled", "consumer" => "kafka").set(if stalled { 1.0 } else { 0.0 })
        });
        if stalled {
            self.handler.meter.record(|| {
                metrics::counter!("consumer_dead_letter_failures_total", "consumer" => "kafka").increment(1)
            });
        }
    }
}

/// Whether the cluster refused a record for its size: no retry of the same bytes can succeed.
fn too_large(error: &KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as E;
    matches!(
        error.rdkafka_error_code(),
        Some(E::MessageSizeTooLarge | E::InvalidMessageSize | E::InvalidRecord)
    )
}
