//! Consumers of the meeting service's events (docs/spec.md §7): topology, decoding, and the
//! failure policy — malformed or mistyped messages go to the queue's DLQ at once
//! (`basic.nack`, no requeue, through `x-dead-letter-exchange`); business outcomes are
//! acknowledged; system failures are retried with backoff, then dead-lettered. Every
//! delivery is acknowledged only after its effects are committed, with manual acks and a
//! bounded prefetch. The connection is re-opened after any failure.

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicNackArguments, BasicQosArguments, Channel,
    ConsumerMessage, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
};
use amqprs::connection::Connection;
use amqprs::{FieldTable, FieldValue};
use serde::Deserialize;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::connection::AmqpNodes;
use tracing::Instrument;

use crate::application::AppError;
use crate::application::error::Chain;
use crate::application::inbound::{
    Handled, MeetingDeleted, MeetingEvents, ParticipantCancelled, ParticipantRegistered,
};
use crate::application::input::{JsonError, check_json_text, parse_json};
use crate::application::meter::Meter;
use crate::application::ports::Scenario;
use crate::domain::text;

/// Largest message body accepted; larger ones are dead-lettered unread.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// The kind of queue the consumers declare (`broker.queue_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    Classic,
    /// Replicated (RabbitMQ quorum queues), with a delivery limit.
    Quorum,
}

/// Names and kinds of the inbound topology.
#[derive(Debug, Clone)]
pub struct MeetingTopology {
    pub exchange: String,
    pub dead_letter_exchange: String,
    pub register_queue: String,
    pub cancel_queue: String,
    pub deleted_queue: String,
    pub queue_type: QueueType,
    pub delivery_limit: u32,
}

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub topology: MeetingTopology,
    pub prefetch: u16,
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Honour the `x-mock-scenario` header (mock providers only).
    pub honour_mock_scenario: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Register,
    Cancel,
    Deleted,
}

impl Kind {
    fn label(&self) -> &'static str {
        match self {
            Kind::Register => "participant-register",
            Kind::Cancel => "participant-cancel",
            Kind::Deleted => "meeting-deleted",
        }
    }
}

fn name(text: &str) -> Result<amqprs::FieldName, String> {
    text.try_into().map_err(|_| format!("invalid field name {text}"))
}

fn long_str(text: &str) -> Result<FieldValue, String> {
    Ok(FieldValue::S(text.try_into().map_err(|_| format!("invalid value {text}"))?))
}

/// Declares (idempotently) the meeting exchange, the dead-letter exchange, and each
/// queue with its binding and its `<queue>.dlq`.
///
/// # Errors
/// The broker refused a declaration (e.g. an existing queue with other arguments).
pub async fn declare_topology(channel: &Channel, t: &MeetingTopology) -> Result<(), String> {
    let declare_exchange = |name: &str| ExchangeDeclareArguments::new(name, "topic").durable(true).finish();
    channel.exchange_declare(declare_exchange(&t.exchange)).await.map_err(|e| e.to_string())?;
    channel.exchange_declare(declare_exchange(&t.dead_letter_exchange)).await.map_err(|e| e.to_string())?;
    for (queue, routing_key) in [
        (&t.register_queue, "meeting.participant.registered"),
        (&t.cancel_queue, "meeting.participant.cancelled"),
        (&t.deleted_queue, "meeting.deleted"),
    ] {
        let dlq = format!("{queue}.dlq");
        let mut dlq_args = FieldTable::new();
        let mut args = FieldTable::new();
        args.insert(name("x-dead-letter-exchange")?, long_str(&t.dead_letter_exchange)?);
        args.insert(name("x-dead-letter-routing-key")?, long_str(queue)?);
        if t.queue_type == QueueType::Quorum {
            args.insert(name("x-queue-type")?, long_str("quorum")?);
            args.insert(name("x-delivery-limit")?, FieldValue::l(i64::from(t.delivery_limit)));
            dlq_args.insert(name("x-queue-type")?, long_str("quorum")?);
        }
        channel
            .queue_declare(QueueDeclareArguments::new(&dlq).durable(true).arguments(dlq_args).finish())
            .await
            .map_err(|e| format!("declare {dlq}: {e}"))?;
        channel
            .queue_bind(QueueBindArguments::new(&dlq, &t.dead_letter_exchange, queue))
            .await
            .map_err(|e| format!("bind {dlq}: {e}"))?;
        channel
            .queue_declare(QueueDeclareArguments::new(queue).durable(true).arguments(args).finish())
            .await
            .map_err(|e| format!("declare {queue}: {e}"))?;
        channel
            .queue_bind(QueueBindArguments::new(queue, &t.exchange, routing_key))
            .await
            .map_err(|e| format!("bind {queue}: {e}"))?;
    }
    Ok(())
}

// ---- wire formats ------------------------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RegisteredWire {
    event_id: String,
    meeting_id: String,
    user_id: String,
    amount: i64,
    currency: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelledWire {
    event_id: String,
    meeting_id: String,
    user_id: String,
    refund_required: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeletedWire {
    event_id: String,
    meeting_id: String,
}

/// A decoded, validated message.
#[derive(Debug, Clone)]
enum Inbound {
    Register(ParticipantRegistered),
    Cancel(ParticipantCancelled),
    Deleted(MeetingDeleted),
}

fn field(name: &str, value: &str, max: usize) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{name}: must not be empty"));
    }
    text::check(name, value, max).map_err(|e| e.to_string())
}

fn decode(kind: Kind, body: &[u8]) -> Result<Inbound, String> {
    if body.len() > MAX_MESSAGE {
        return Err(format!("body of {} bytes exceeds {MAX_MESSAGE}", body.len()));
    }
    let json = |e: serde_json::Error| format!("not a valid {} message: {e}", kind.label());
    // docs/spec.md §5: no string anywhere in a message may carry a control character.
    let raw = parse_json(body).map_err(|e| match e {
        JsonError::Malformed(e) => json(e),
        // Never act on either of two values given for one key (issue 27).
        JsonError::DuplicateKey(key) => format!("{key}: given more than once"),
    })?;
    check_json_text(&raw).map_err(|e| e.to_string())?;
    // What the message says, whatever its whitespace or key order (a map's keys serialise
    // sorted): the inbox keeps it to tell a conflicting redelivery from a duplicate.
    let digest = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(raw.to_string().as_bytes());
        hash.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let body = raw;
    Ok(match kind {
        Kind::Register => {
            let w: RegisteredWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            field("userId", &w.user_id, text::limits::ID)?;
            if w.amount <= 0 {
                // docs/spec.md §7: free meetings never reach payment.
                return Err("amount: must be greater than 0".into());
            }
            Inbound::Register(ParticipantRegistered {
                event_id: w.event_id,
                meeting_id: w.meeting_id,
                user_id: w.user_id,
                amount: w.amount,
                currency: w.currency,
                digest,
            })
        }
        Kind::Cancel => {
            let w: CancelledWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            field("userId", &w.user_id, text::limits::ID)?;
            Inbound::Cancel(ParticipantCancelled {
                event_id: w.event_id,
                meeting_id: w.meeting_id,
                user_id: w.user_id,
                refund_required: w.refund_required,
                digest,
            })
        }
        Kind::Deleted => {
            let w: DeletedWire = serde_json::from_value(body).map_err(json)?;
            field("eventId", &w.event_id, text::limits::EVENT_ID)?;
            field("meetingId", &w.meeting_id, text::limits::ID)?;
            Inbound::Deleted(MeetingDeleted { event_id: w.event_id, meeting_id: w.meeting_id, digest })
        }
    })
}

/// A text header used as data: absent is `None`; present but not text (an integer
/// `x-mock-scenario`) is malformed, never silently ignored.
fn header(props: &amqprs::BasicProperties, key: &str) -> Result<Option<String>, String> {
    let Some(table) = props.headers() else { return Ok(None) };
    let Ok(field) = name(key) else { return Ok(None) };
    match table.get(&field) {
        None => Ok(None),
        Some(FieldValue::S(value)) => Ok(Some(value.as_ref().clone())),
        Some(FieldValue::V) => Ok(None),
        Some(_) => Err(format!("{key}: must be a text header")),
    }
}

/// Lets the broker cancel a consumer (its queue deleted, or the queue's node gone): amqprs
/// then drops the consumer, its delivery stream ends and the session with it, and the next
/// session declares the topology again. Without a callback amqprs ignores the cancel and
/// the consumer would wait forever on a queue that no longer exists.
struct ConsumerChannelCallback;

#[async_trait::async_trait]
impl amqprs::callbacks::ChannelCallback for ConsumerChannelCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: amqprs::CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(reason = %close, "broker closed a consumer's channel");
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &Channel,
        cancel: amqprs::Cancel,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(consumer = %cancel.consumer_tag(), "broker cancelled a consumer; reconnecting");
        Ok(())
    }

    async fn flow(&mut self, _channel: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, _ack: amqprs::Ack) {}

    async fn publish_nack(&mut self, _channel: &Channel, _nack: amqprs::Nack) {}

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        _ret: amqprs::Return,
        _properties: amqprs::BasicProperties,
        _content: Vec<u8>,
    ) {
    }
}

/// Runs the three consumers until stopped, reconnecting after failures.
pub struct MeetingConsumers {
    nodes: AmqpNodes,
    settings: ConsumerSettings,
    events: Arc<MeetingEvents>,
    meter: Meter,
}

enum Verdict {
    Ack(&'static str),
    Reject(&'static str, String),
}

impl MeetingConsumers {
    pub fn new(nodes: AmqpNodes, settings: ConsumerSettings, events: Arc<MeetingEvents>) -> Self {
        MeetingConsumers { nodes, settings, events, meter: Meter::default() }
    }

    /// Records the consumers' metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    /// Consumes until `stop`; deliveries in progress finish (bounded) before it returns.
    pub async fn run_until_stopped(self: Arc<Self>, stop: CancellationToken) {
        let mut failures = 0u32;
        while !stop.is_cancelled() {
            let began = tokio::time::Instant::now();
            match self.session(&stop).await {
                Ok(()) => break,
                Err(err) => {
                    // A session that ran a while was healthy: start backing off afresh.
                    if began.elapsed() > Duration::from_secs(60) {
                        failures = 0;
                    }
                    failures = failures.saturating_add(1);
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::error!(error = %err, failures, "meeting consumers disconnected; reconnecting");
                    }
                    let pause = Duration::from_millis(200 * 2u64.saturating_pow(failures.min(7)));
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tokio::time::sleep(pause.min(Duration::from_secs(30))) => {}
                    }
                }
            }
        }
    }

    /// One connection's life: `Ok` when stopped, `Err` when it failed (the next session
    /// starts at the next node of a cluster).
    async fn session(self: &Arc<Self>, stop: &CancellationToken) -> Result<(), String> {
        let (connection, node) = self.nodes.connect("orchestrator-consumers").await?;
        let result = self.consume(&connection, stop).await;
        if result.is_err() {
            self.nodes.lost(node);
        }
        let _ = connection.close().await;
        result
    }

    async fn consume(
        self: &Arc<Self>,
        connection: &Connection,
        stop: &CancellationToken,
    ) -> Result<(), String> {
        let setup = connection.open_channel(None).await.map_err(|e| e.to_string())?;
        declare_topology(&setup, &self.settings.topology).await?;
        let _ = setup.close().await;
        let t = &self.settings.topology;
        let mut loops = Vec::new();
        let in_flight = Arc::new(Semaphore::new(3 * self.settings.prefetch as usize));
        // A channel the broker closes (its queue's node gone, say) ends the session too.
        let ended = CancellationToken::new();
        for (kind, queue) in [
            (Kind::Register, &t.register_queue),
            (Kind::Cancel, &t.cancel_queue),
            (Kind::Deleted, &t.deleted_queue),
        ] {
            let channel = connection.open_channel(None).await.map_err(|e| e.to_string())?;
            channel.register_callback(ConsumerChannelCallback).await.map_err(|e| e.to_string())?;
            channel
                .basic_qos(BasicQosArguments::new(0, self.settings.prefetch, false))
                .await
                .map_err(|e| e.to_string())?;
            let (_, mut rx) = channel
                .basic_consume_rx(BasicConsumeArguments::new(queue, kind.label()).manual_ack(true).finish())
                .await
                .map_err(|e| format!("consume {queue}: {e}"))?;
            let this = self.clone();
            let in_flight = in_flight.clone();
            let ended = ended.clone();
            loops.push(tokio::spawn(async move {
                while let Some(message) = rx.recv().await {
                    let Ok(permit) = in_flight.clone().acquire_owned().await else {
                        break;
                    };
                    let (this, channel) = (this.clone(), channel.clone());
                    tokio::spawn(async move {
                        this.deliver(kind, channel, message).await;
                        drop(permit);
                    });
                }
                ended.cancel();
            }));
        }
        tracing::info!("meeting consumers started");
        let lost = async {
            connection.listen_network_io_failure().await;
        };
        let result = tokio::select! {
            _ = stop.cancelled() => Ok(()),
            _ = lost => Err("connection lost".to_owned()),
            _ = ended.cancelled() => Err("the broker closed a consumer's channel".to_owned()),
        };
        for l in &loops {
            l.abort();
        }
        // Let deliveries in progress finish and ack before the connection goes.
        let all = 3 * u32::from(self.settings.prefetch);
        let _ = tokio::time::timeout(Duration::from_secs(30), in_flight.acquire_many(all)).await;
        result
    }

    async fn deliver(self: &Arc<Self>, kind: Kind, channel: Channel, message: ConsumerMessage) {
        let (Some(deliver), Some(props), Some(content)) =
            (message.deliver, message.basic_properties, message.content)
        else {
            return;
        };
        let tag = deliver.delivery_tag();
        // A panic in processing must not leave the delivery hanging (redelivered forever):
        // run it in its own task and dead-letter the message if it panics.
        let this = self.clone();
        let started = std::time::Instant::now();
        // A message carrying a W3C `traceparent` header continues that trace.
        let span = tracing::info_span!(
            "amqp.consume",
            otel.name = %format!("{} process", kind.label()),
            consumer = kind.label(),
            trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
        );
        let traceparent = props.headers().and_then(|h| {
            h.as_ref().iter().find_map(|(k, v)| match v {
                amqprs::FieldValue::S(s) if k.as_ref() == "traceparent" => Some(s.as_ref().to_owned()),
                _ => None,
            })
        });
        crate::telemetry::continue_trace(&span, traceparent.as_deref());
        let outcome =
            tokio::spawn(async move { this.process(kind, &props, &content).await }.instrument(span)).await;
        let elapsed = started.elapsed().as_secs_f64();
        self.meter.record(|| {
            metrics::histogram!("consumer_handling_duration_seconds", "consumer" => kind.label())
                .record(elapsed)
        });
        let verdict = outcome
            .unwrap_or_else(|panic| Verdict::Reject("panicked", format!("processing panicked: {panic}")));
        let queue = kind.label();
        let result = match verdict {
            Verdict::Ack(outcome) => {
                self.meter.record(|| {
                    metrics::counter!("consumer_messages_total", "consumer" => queue, "outcome" => outcome)
                        .increment(1)
                });
                channel.basic_ack(BasicAckArguments::new(tag, false)).await
            }
            Verdict::Reject(outcome, why) => {
                tracing::warn!(consumer = queue, %why, "message dead-lettered");
                self.meter.record(|| {
                    metrics::counter!("consumer_messages_total", "consumer" => queue, "outcome" => outcome)
                        .increment(1)
                });
                channel.basic_nack(BasicNackArguments::new(tag, false, false)).await
            }
        };
        if let Err(e) = result {
            // The channel is gone: the broker redelivers the message, and the inbox makes
            // the second delivery change nothing.
            tracing::warn!(consumer = queue, error = %e, "could not settle a delivery");
        }
    }

    async fn process(&self, kind: Kind, props: &amqprs::BasicProperties, content: &[u8]) -> Verdict {
        let inbound = match decode(kind, content) {
            Ok(m) => m,
            Err(why) => return Verdict::Reject("malformed", why),
        };
        let scenario = match (self.settings.honour_mock_scenario, header(props, "x-mock-scenario")) {
            (true, Err(why)) => return Verdict::Reject("malformed", why),
            (true, Ok(Some(text))) => match Scenario::parse(&text) {
                Ok(s) => s,
                Err(e) => return Verdict::Reject("malformed", format!("x-mock-scenario: {e}")),
            },
            _ => Scenario::default(),
        };
        let correlation_id = props.correlation_id().cloned();
        let mut attempt = 0;
        loop {
            let result = match inbound.clone() {
                Inbound::Register(m) => {
                    self.events.participant_registered(m, scenario, correlation_id.clone()).await
                }
                Inbound::Cancel(m) => self.events.participant_cancelled(m, scenario).await,
                Inbound::Deleted(m) => self.events.meeting_deleted(m, scenario).await,
            };
            match result {
                Ok(Handled::Processed) => return Verdict::Ack("processed"),
                Ok(Handled::Duplicate) => return Verdict::Ack("duplicate"),
                Ok(Handled::ConflictingDuplicate) => return Verdict::Ack("conflicting_duplicate"),
                Ok(Handled::BusinessFailure(why)) => {
                    tracing::info!(consumer = kind.label(), %why, "business failure acknowledged");
                    return Verdict::Ack("business_failure");
                }
                Err(AppError::Validation { field, message }) => {
                    return Verdict::Reject("malformed", format!("{field}: {message}"));
                }
                Err(err) if attempt < self.settings.retries => {
                    let pause = self.settings.retry_backoff * 2u32.saturating_pow(attempt);
                    tracing::warn!(consumer = kind.label(), error = %Chain(&err), attempt, "system failure; retrying");
                    self.meter.record(|| {
                        metrics::counter!("consumer_messages_total", "consumer" => kind.label(), "outcome" => "retried")
                            .increment(1)
                    });
                    attempt += 1;
                    tokio::time::sleep(pause).await;
                }
                Err(err) => {
                    return Verdict::Reject(
                        "dead_lettered",
                        format!("system failure after {attempt} retries: {}", Chain(&err)),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_decode_or_name_what_is_wrong() {
        let ok =
            br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":5000,"currency":"KRW","extra":true}"#;
        assert!(matches!(decode(Kind::Register, ok), Ok(Inbound::Register(_))));
        for (kind, bad) in [
            (
                Kind::Register,
                &br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":"5000","currency":"KRW"}"#[..],
            ),
            (Kind::Register, br#"{"eventId":"e1","meetingId":"m1","userId":"u1","currency":"KRW"}"#),
            (Kind::Register, br#"{"eventId":"","meetingId":"m1","userId":"u1","amount":1,"currency":"KRW"}"#),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":-1,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":0,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u\u0000","amount":1,"currency":"KRW"}"#,
            ),
            (
                Kind::Register,
                br#"{"eventId":"e","meetingId":"m1","userId":"u1","amount":1,"currency":"KR\u007f"}"#,
            ),
            (Kind::Cancel, br#"{"eventId":"e1","meetingId":"m1","userId":"u1","refundRequired":"yes"}"#),
            (Kind::Deleted, b"not json"),
            (Kind::Deleted, br#"[]"#),
        ] {
            assert!(decode(kind, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert!(decode(Kind::Deleted, &vec![b' '; MAX_MESSAGE + 1]).is_err());
    }

    #[test]
    fn a_text_header_of_another_type_is_malformed_not_ignored() {
        let mut table = amqprs::FieldTable::new();
        table.insert(name("x-mock-scenario").unwrap(), FieldValue::I(7));
        let mut props = amqprs::BasicProperties::default();
        props.with_headers(table);
        let props = props.finish();
        assert!(header(&props, "x-mock-scenario").unwrap_err().contains("x-mock-scenario"));
        assert_eq!(header(&props, "traceparent"), Ok(None));
        assert_eq!(header(&amqprs::BasicProperties::default(), "x-mock-scenario"), Ok(None));
    }

    #[test]
    fn a_key_given_twice_is_malformed_not_last_one_wins() {
        // Issue 27 item 5: `amount` twice charged the second.
        let twice =
            br#"{"eventId":"e1","meetingId":"m1","userId":"u1","amount":15000,"amount":1,"currency":"KRW"}"#;
        let err = decode(Kind::Register, twice).unwrap_err();
        assert!(err.contains("amount"), "{err}");
    }
}
