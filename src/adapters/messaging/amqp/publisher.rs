//! The confirming publisher (docs/spec.md §6): many messages in flight on one channel in confirm
//! mode, each `mandatory` and persistent, `message_id = event_id`; every broker verdict —
//! single or `multiple` ack, nack, return — is matched to its outbox row.
//!
//! amqprs gives no delivery tag on publish: tags are the channel's counter from 1 after
//! `confirm.select`, assigned here under the same lock as the send. A return carries no
//! tag: it is matched by `message_id`, and because the broker sends it *before* the ack,
//! the ack that follows resolves the message as returned, not published.
//!
//! The connection is opened lazily and re-opened after any failure, on the next node of
//! `broker.urls` when the broker is a cluster; whatever was unconfirmed on a dead channel is
//! reported unconfirmed (`CONNECTION_LOST`) and sent again later with the same `message_id`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::BasicProperties;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments, ExchangeDeclareArguments};
use amqprs::connection::Connection;
use async_trait::async_trait;
use tokio::sync::{Semaphore, oneshot};

use super::confirms::{ConfirmCallback, Confirms, Pending, Verdict};
use super::connection::{AmqpError, AmqpNodes};
use crate::adapters::messaging::contract::{Broker, Contract, HeaderValue, WireMessage, per_record};
use crate::adapters::messaging::publishing::{
    EncodedBatch, Flow, Message, Outgoing, encode_batch, failed, read_flow,
};
use crate::application::error::Chain;
use crate::application::health::HealthProbe;
use crate::application::meter::Meter;
use crate::application::ports::{
    BrokerUnavailable, Cause, EventPublisher, OutboxRecord, PendingVerdicts, PublishOutcome,
};
use crate::domain::outbox::FailureCode;

#[derive(Debug, Clone)]
pub struct AmqpPublisherSettings {
    /// `commerce.events`: declared topic and durable at connect.
    pub exchange: String,
    /// Unconfirmed messages in flight at most (`outbox.publish_window`).
    pub window: usize,
    /// How long a batch waits for its confirms.
    pub confirm_timeout: Duration,
    /// Event types for which "returned unroutable" counts as published.
    pub unroutable_ok: Vec<String>,
    /// Shown in the broker's connection list.
    pub connection_name: String,
    /// How each record goes on the wire (docs/spec.md §12).
    pub contract: Contract,
    /// Where a return that counts as published is counted (`outbox_unroutable_total`).
    pub meter: Meter,
}

/// One message of a record, ready to send.
struct AmqpMessage {
    exchange: String,
    routing_key: String,
    properties: BasicProperties,
    body: Vec<u8>,
    message_id: String,
    /// Its record, when a return counts as published (counted under its event type).
    returned_ok: Option<Arc<OutboxRecord>>,
}

/// The AMQP properties of a message a contract encoded: persistent, `timestamp` the
/// record's, and what the contract says.
fn contract_properties(
    message: &mut WireMessage,
    created_at: chrono::DateTime<chrono::Utc>,
) -> BasicProperties {
    let mut props = BasicProperties::default();
    props.with_persistence(true).with_timestamp(created_at.timestamp().max(0) as u64);
    if let Some(id) = &message.message_id {
        props.with_message_id(id);
    }
    if let Some(kind) = &message.amqp_type {
        props.with_message_type(kind);
    }
    if let Some(content_type) = &message.content_type {
        props.with_content_type(content_type);
    }
    if let Some(encoding) = &message.content_encoding {
        props.with_content_encoding(encoding);
    }
    if let Some(correlation) = &message.correlation_id {
        props.with_correlation_id(correlation);
    }
    if !message.headers.is_empty() {
        let mut headers = amqprs::FieldTable::new();
        for (name, value) in message.headers.drain(..) {
            let value = match value {
                HeaderValue::Text(text) => text.try_into().ok().map(amqprs::FieldValue::S),
                HeaderValue::Long(n) => Some(amqprs::FieldValue::l(n)),
            };
            if let (Ok(key), Some(value)) = (name.try_into(), value) {
                headers.insert(key, value);
            }
        }
        props.with_headers(headers);
    }
    props.finish()
}

struct Link {
    /// The node it is connected to (`AmqpNodes::lost`).
    node: usize,
    connection: Connection,
    channel: Channel,
    confirms: Arc<Confirms>,
    window: Arc<Semaphore>,
    next_tag: u64,
    /// Set by a batch's confirmation after a nack or a confirm timeout: the next send
    /// starts a fresh channel.
    spoiled: Arc<AtomicBool>,
}

impl Link {
    fn is_usable(&self) -> bool {
        self.connection.is_open() && self.channel.is_open() && !self.spoiled.load(Ordering::SeqCst)
    }
}

/// Publishes outbox rows to RabbitMQ with confirms. One connection and channel per
/// instance: give each relay its own.
pub struct AmqpEventPublisher {
    nodes: AmqpNodes,
    settings: AmqpPublisherSettings,
    link: tokio::sync::Mutex<Option<Link>>,
    /// When [`AmqpEventPublisher::probe_flow`] last looked.
    probed: Mutex<Option<std::time::Instant>>,
}

/// The properties of an event's message (docs/messages.md): `message_id`, `type`,
/// `content_type`, persistent, `timestamp`, `correlation_id` and, with traces on, a
/// `traceparent` header. Public so that the bench's bare publisher sends the very same
/// messages (the broker's cost per message depends on them: docs/benchmarks.md).
pub fn message_properties(
    event_id: &str,
    event_type: &str,
    correlation_id: Option<&str>,
    created_at: chrono::DateTime<chrono::Utc>,
    traceparent: Option<&str>,
) -> BasicProperties {
    let mut props = BasicProperties::default();
    props
        .with_message_id(event_id)
        .with_message_type(event_type)
        .with_content_type("application/json")
        .with_persistence(true)
        .with_timestamp(created_at.timestamp().max(0) as u64);
    if let Some(correlation) = correlation_id {
        props.with_correlation_id(correlation);
    }
    if let Some(value) = traceparent.and_then(|v| amqprs::FieldValue::S(v.try_into().ok()?).into()) {
        let mut headers = amqprs::FieldTable::new();
        if let Ok(key) = "traceparent".try_into() {
            headers.insert(key, value);
        }
        props.with_headers(headers);
    }
    props.finish()
}

/// The queue a flow probe is addressed to: declared by no one, so the default exchange drops
/// the message (it is not `mandatory`) and the broker confirms it at once — unless it is
/// blocking publishers.
const FLOW_PROBE_QUEUE: &str = "orchestrator.flow-probe.nobody";

/// A flow probe is sent at most this often (readiness may be asked every second).
const FLOW_PROBE_EVERY: Duration = Duration::from_secs(5);

/// How long a flow probe waits for its confirm: inside readiness's 3 s per dependency.
const FLOW_PROBE_WAIT: Duration = Duration::from_secs(2);

impl AmqpEventPublisher {
    pub fn new(nodes: AmqpNodes, settings: AmqpPublisherSettings) -> Self {
        AmqpEventPublisher { nodes, settings, link: tokio::sync::Mutex::new(None), probed: Mutex::new(None) }
    }

    /// Whether the broker takes messages now, for readiness in a process that publishes
    /// nothing itself (`serve`): one empty message to a queue no one declares, on this
    /// publisher's own connection. Confirmed: the broker flows. Not within
    /// [`FLOW_PROBE_WAIT`]: it is blocking publishers (RabbitMQ under a memory or disk
    /// alarm reads nothing a publishing connection sends) — marked stalled, as the relay
    /// marks it, until a message is confirmed again; the connection is let go (the broker
    /// may never read it again) and the next probe opens another. At most every
    /// [`FLOW_PROBE_EVERY`]; a broker that cannot be reached is `ready`'s to report.
    async fn probe_flow(&self) {
        {
            let mut probed = self.probed.lock().unwrap_or_else(|e| e.into_inner());
            if probed.is_some_and(|at| at.elapsed() < FLOW_PROBE_EVERY) {
                return;
            }
            *probed = Some(std::time::Instant::now());
        }
        let mut guard = self.link.lock().await;
        let Ok(link) = self.ensure(&mut guard).await else { return };
        let Ok(permit) = link.window.clone().try_acquire_owned() else { return };
        link.next_tag += 1;
        let tag = link.next_tag;
        let (done, verdict) = oneshot::channel();
        let message_id = format!("flow-probe-{tag}");
        link.confirms
            .table()
            .pending
            .insert(tag, Pending { message_id: message_id.clone(), done, _permit: permit });
        let mut props = BasicProperties::default();
        props.with_message_id(&message_id).with_delivery_mode(1);
        let args = BasicPublishArguments::new("", FLOW_PROBE_QUEUE).finish();
        let sent = link.channel.basic_publish(props.finish(), Vec::new(), args).await;
        // `None`: no answer in time; `Some(None)`: the link failed under it.
        let confirmed = match sent {
            Ok(()) => tokio::time::timeout(FLOW_PROBE_WAIT, verdict).await.ok().map(Result::ok),
            Err(_) => {
                link.confirms.table().pending.remove(&tag);
                Some(None)
            }
        };
        match confirmed {
            Some(Some(Verdict::Acked | Verdict::Returned(_))) => self.nodes.flowing(),
            Some(_) => {
                // Nacked or lost: not a blocked broker; the next look opens a fresh link.
                link.spoiled.store(true, Ordering::SeqCst);
            }
            None => {
                self.nodes.stalled(BLOCKED);
                if let Some(old) = guard.take() {
                    old.confirms.fail_all();
                    let _ = old.connection.close().await;
                }
            }
        }
    }

    async fn open(&self) -> Result<Link, AmqpError> {
        let (connection, node) = self.nodes.connect(&self.settings.connection_name).await?;
        let channel =
            connection.open_channel(None).await.map_err(AmqpError::broker("cannot open a channel"))?;
        let confirms = Arc::new(Confirms::default());
        channel
            .register_callback(ConfirmCallback(confirms.clone()))
            .await
            .map_err(AmqpError::broker("cannot register the confirm callback"))?;
        channel
            .exchange_declare(
                ExchangeDeclareArguments::new(&self.settings.exchange, "topic").durable(true).finish(),
            )
            .await
            .map_err(AmqpError::broker(format!("cannot declare exchange {}", self.settings.exchange)))?;
        // A platform's own exchanges, queues and bindings, as it declares them: its replies'
        // exchange must exist before the first is sent (docs/spec.md §12).
        if let Some(topology) = self.settings.contract.own_topology() {
            super::topology::declare(&channel, &topology).await?;
        }
        channel
            .confirm_select(ConfirmSelectArguments::default())
            .await
            .map_err(AmqpError::broker("cannot enable publisher confirms"))?;
        // A dead socket does not always close the channel: fail the waiters ourselves.
        let watcher = connection.clone();
        let on_failure = confirms.clone();
        tokio::spawn(async move {
            if watcher.listen_network_io_failure().await {
                tracing::warn!("broker connection lost");
                on_failure.fail_all();
            }
        });
        tracing::info!(endpoint = ?self.nodes.endpoints().get(node), "publisher connected");
        Ok(Link {
            node,
            connection,
            channel,
            confirms,
            window: Arc::new(Semaphore::new(self.settings.window.max(1))),
            next_tag: 0,
            spoiled: Arc::default(),
        })
    }

    /// Ensures a usable link, opening one if needed.
    async fn ensure<'a>(&self, guard: &'a mut Option<Link>) -> Result<&'a mut Link, AmqpError> {
        if !guard.as_ref().is_some_and(Link::is_usable) {
            if let Some(old) = guard.take() {
                self.nodes.lost(old.node);
                // A batch still waiting on the old channel learns now that its confirms
                // will not come.
                old.confirms.fail_all();
                let _ = old.connection.close().await;
            }
            *guard = Some(self.open().await?);
        }
        guard.as_mut().ok_or(AmqpError::Lost("no link"))
    }

    fn properties(record: &OutboxRecord, traceparent: Option<&str>) -> BasicProperties {
        message_properties(
            &record.event_id.to_string(),
            &record.event_type,
            record.correlation_id.as_deref(),
            record.created_at,
            traceparent,
        )
    }

    /// Closes the connection (graceful shutdown).
    pub async fn close(&self) {
        if let Some(link) = self.link.lock().await.take() {
            let _ = link.channel.close().await;
            let _ = link.connection.close().await;
        }
    }
}

#[async_trait]
impl EventPublisher for AmqpEventPublisher {
    async fn ready(&self) -> Result<(), BrokerUnavailable> {
        let mut guard = self.link.lock().await;
        self.ensure(&mut guard).await.map(|_| ()).map_err(|e| BrokerUnavailable(Cause::new(e)))
    }

    async fn publish(&self, batch: &[Arc<OutboxRecord>]) -> Vec<PublishOutcome> {
        // Sent, then the verdicts awaited: one batch, no overlap with another.
        let verdicts = self.send(batch).await;
        verdicts.await
    }

    async fn send(&self, batch: &[Arc<OutboxRecord>]) -> PendingVerdicts {
        let mut guard = self.link.lock().await;
        let link = match self.ensure(&mut guard).await {
            Ok(link) => link,
            Err(error) => {
                let reason = Chain(&error).to_string();
                let outcomes =
                    batch.iter().map(|_| failed(FailureCode::BrokerUnavailable, reason.clone())).collect();
                return Box::pin(std::future::ready(outcomes));
            }
        };
        let deadline = tokio::time::Instant::now() + self.settings.confirm_timeout;
        let EncodedBatch { messages, groups } =
            encode_batch(&self.settings.contract, Broker::Amqp, batch, None);
        let outgoing = messages.into_iter().map(|Outgoing { record, message }| {
            let allowed = self.settings.unroutable_ok.contains(&record.event_type);
            let returned_ok = |native: bool| {
                (allowed || native && self.settings.contract.native_unroutable_ok()).then(|| record.clone())
            };
            message.map(|message| match message {
                Message::Native { traceparent } => AmqpMessage {
                    exchange: self.settings.exchange.clone(),
                    routing_key: record.routing_key.clone(),
                    properties: Self::properties(record, traceparent.as_deref()),
                    body: record.payload.as_bytes().to_vec(),
                    message_id: record.event_id.to_string(),
                    returned_ok: returned_ok(true),
                },
                // A contract's message on the broker's own exchange is a native one.
                Message::Contract(mut message) => AmqpMessage {
                    returned_ok: returned_ok(message.destination.is_none()),
                    exchange: message.destination.take().unwrap_or_else(|| self.settings.exchange.clone()),
                    routing_key: std::mem::take(&mut message.key),
                    properties: contract_properties(&mut message, record.created_at),
                    message_id: message.message_id.take().unwrap_or_else(|| record.event_id.to_string()),
                    body: message.body,
                },
            })
        });
        let mut waiting: Vec<Result<(u64, oneshot::Receiver<Verdict>), PublishOutcome>> =
            Vec::with_capacity(groups.len());
        let mut returned_ok: Vec<Option<Arc<OutboxRecord>>> = Vec::with_capacity(groups.len());
        let mut broken = false;
        for message in outgoing {
            let message = match message {
                Ok(message) => message,
                Err(outcome) => {
                    waiting.push(Err(outcome));
                    returned_ok.push(None);
                    continue;
                }
            };
            returned_ok.push(message.returned_ok);
            if broken {
                waiting.push(Err(failed(
                    FailureCode::ConnectionLost,
                    "not sent: the connection failed mid-batch",
                )));
                continue;
            }
            // The window is the link's: a batch sent while an earlier one awaits its
            // confirms waits here for the room they free.
            let permit = match tokio::time::timeout_at(deadline, link.window.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                _ => {
                    waiting.push(Err(failed(
                        FailureCode::ConfirmTimeout,
                        "no room in the confirm window in time",
                    )));
                    continue;
                }
            };
            link.next_tag += 1;
            let tag = link.next_tag;
            let (done, verdict) = oneshot::channel();
            link.confirms
                .table()
                .pending
                .insert(tag, Pending { message_id: message.message_id, done, _permit: permit });
            let args =
                BasicPublishArguments::new(&message.exchange, &message.routing_key).mandatory(true).finish();
            let sent = link.channel.basic_publish(message.properties, message.body, args).await;
            match sent {
                Ok(()) => waiting.push(Ok((tag, verdict))),
                Err(e) => {
                    link.confirms.table().pending.remove(&tag);
                    waiting.push(Err(failed(FailureCode::ConnectionLost, format!("publish failed: {e}"))));
                    broken = true;
                }
            }
        }
        if broken && let Some(old) = guard.take() {
            self.nodes.lost(old.node);
            old.confirms.fail_all();
            let _ = old.connection.close().await;
        }
        // What the confirmation needs of the link once its lock is given back.
        let link = guard.as_ref().map(|l| (l.confirms.clone(), l.spoiled.clone()));
        drop(guard);
        let nodes = self.nodes.clone();
        let meter = self.settings.meter.clone();
        Box::pin(async move {
            let outcomes = verdicts(waiting, returned_ok, deadline, link, &meter).await;
            per_record(stalled_or_flowing(outcomes, &nodes), &groups)
        })
    }
}

/// Why the broker is marked stalled.
const BLOCKED: &str =
    "the broker confirmed no message within the timeout: it is blocking publishers (a memory or disk alarm?)";

/// What a publish's verdicts say of the broker: any message confirmed, it takes messages;
/// none answered at all within the timeout on a connection that stayed open, it is
/// blocking publishers (a resource alarm) — those messages failed with
/// `BROKER_UNAVAILABLE`, which spends no retry (docs/spec.md §6, docs/operations.md), and
/// the broker is marked stalled for readiness until a message is confirmed again.
fn stalled_or_flowing(mut outcomes: Vec<PublishOutcome>, nodes: &AmqpNodes) -> Vec<PublishOutcome> {
    let timed_out = |code: &FailureCode| matches!(code, FailureCode::ConfirmTimeout);
    match read_flow(&mut outcomes, timed_out, Some(BLOCKED)) {
        Flow::Flowing => nodes.flowing(),
        Flow::Stalled => nodes.stalled(BLOCKED),
        Flow::Unsure => {}
    }
    outcomes
}

/// Waits, up to `deadline`, for the broker's verdict on each message sent. A confirm that
/// does not come in time, or a nack, spoils the link: the next send starts a fresh channel
/// (so the tag counter cannot drift from the broker's, and on a cluster a channel that kept
/// nacking a quorum queue whose leader moved asks for the leader again — seen with
/// RabbitMQ 3.10, tests/api/cluster.rs); a batch still waiting on the old channel learns
/// then that its confirms will not come. `link`: the channel's confirm table and its
/// "start afresh" flag. `returned_ok[i]`: message `i`'s record when a return of it counts
/// as published, counted per event type in `outbox_unroutable_total` on `meter`.
async fn verdicts(
    waiting: Vec<Result<(u64, oneshot::Receiver<Verdict>), PublishOutcome>>,
    returned_ok: Vec<Option<Arc<OutboxRecord>>>,
    deadline: tokio::time::Instant,
    link: Option<(Arc<Confirms>, Arc<AtomicBool>)>,
    meter: &Meter,
) -> Vec<PublishOutcome> {
    let mut outcomes = Vec::with_capacity(waiting.len());
    let mut timed_out = Vec::new();
    let mut nacked = false;
    for (entry, returned_ok) in waiting.into_iter().zip(returned_ok) {
        let outcome = match entry {
            Err(outcome) => outcome,
            Ok((tag, verdict)) => match tokio::time::timeout_at(deadline, verdict).await {
                Ok(Ok(Verdict::Acked)) => PublishOutcome::Confirmed,
                Ok(Ok(Verdict::Returned(reply))) => match returned_ok {
                    Some(record) => {
                        meter.record(|| {
                            metrics::counter!("outbox_unroutable_total", "event_type" => record.event_type.clone())
                                .increment(1)
                        });
                        PublishOutcome::Confirmed
                    }
                    None => failed(FailureCode::Unroutable, format!("returned by the broker: {reply}")),
                },
                Ok(Ok(Verdict::Nacked)) => {
                    nacked = true;
                    failed(FailureCode::Nacked, "nacked by the broker")
                }
                Ok(Err(_)) => failed(FailureCode::ConnectionLost, "connection lost before the confirm"),
                Err(_) => {
                    timed_out.push(tag);
                    failed(FailureCode::ConfirmTimeout, "no confirm within the timeout")
                }
            },
        };
        outcomes.push(outcome);
    }
    if (nacked || !timed_out.is_empty())
        && let Some((confirms, spoiled)) = link
    {
        // Forget what timed out (a late ack is ignored). A batch sent after this one on the
        // same channel keeps waiting for its own confirms until the next send replaces the
        // channel, which tells it that they will not come.
        let mut table = confirms.table();
        for tag in timed_out {
            table.pending.remove(&tag);
        }
        spoiled.store(true, Ordering::SeqCst);
    }
    outcomes
}

#[async_trait]
impl HealthProbe for AmqpEventPublisher {
    fn name(&self) -> &'static str {
        "broker"
    }

    async fn is_healthy(&self) -> bool {
        self.probe_flow().await;
        self.nodes.stall().is_none() && self.ready().await.is_ok()
    }

    fn detail(&self) -> Option<String> {
        self.nodes.stall().map(|why| format!("BLOCKED: {why}"))
    }
}
