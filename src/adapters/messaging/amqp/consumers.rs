//! Consumers of the meeting service's events (docs/spec.md §7): topology, decoding, and the
//! failure policy — malformed or mistyped messages go to the queue's DLQ at once
//! (`basic.nack`, no requeue, through `x-dead-letter-exchange`); business outcomes are
//! acknowledged; system failures are retried with backoff, then dead-lettered. Every
//! delivery is acknowledged only after its effects are committed, with manual acks and a
//! bounded prefetch. The connection is re-opened after any failure.

use std::sync::Arc;
use std::time::Duration;

use amqprs::FieldValue;
use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicNackArguments, BasicQosArguments, Channel, ConsumerMessage,
};
use amqprs::connection::Connection;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::connection::{AmqpError, AmqpNodes};
use super::topology::{declare, field_name};
use tracing::Instrument;

use super::super::meeting::{Delivery, Kind, MeetingHandler, Received, Verdict, read, reconnecting};
use crate::adapters::messaging::contract::topology::{MeetingTopology, Topology};
use crate::adapters::messaging::contract::{Broker, Contract};
use crate::application::inbound::MeetingEvents;
use crate::application::meter::Meter;

#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    pub topology: MeetingTopology,
    pub prefetch: u16,
    pub retries: u32,
    pub retry_backoff: Duration,
    /// Honour the `x-mock-scenario` header (mock providers only).
    pub honour_mock_scenario: bool,
    /// How the meeting service's messages are read (docs/spec.md §12).
    pub contract: Contract,
    /// The currency of the platform's fees (`meetings.currency`; the `momo` contract's
    /// registrations carry none).
    pub meetings_currency: String,
}

impl ConsumerSettings {
    /// The contract's topology: the platform's own (`momo`) or ours, from `topology`.
    fn topology(&self) -> Topology {
        self.contract.own_topology().unwrap_or_else(|| self.topology.topology())
    }
}

/// A text header used as data: absent is `None`; present but not text (an integer
/// `x-mock-scenario`) is malformed, never silently ignored.
fn header(props: &amqprs::BasicProperties, key: &str) -> Result<Option<String>, String> {
    let Some(table) = props.headers() else { return Ok(None) };
    let Ok(field) = field_name(key) else { return Ok(None) };
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
    handler: MeetingHandler,
}

impl MeetingConsumers {
    pub fn new(nodes: AmqpNodes, settings: ConsumerSettings, events: Arc<MeetingEvents>) -> Self {
        let handler = MeetingHandler::new(
            events,
            settings.retries,
            settings.retry_backoff,
            settings.honour_mock_scenario,
        );
        MeetingConsumers { nodes, settings, handler }
    }

    /// Records the consumers' metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.handler.meter = meter;
        self
    }

    /// Consumes until `stop`; deliveries in progress finish (bounded) before it returns.
    pub async fn run_until_stopped(self: Arc<Self>, stop: CancellationToken) {
        reconnecting("meeting consumers (AMQP)", &stop, || self.session(&stop)).await;
    }

    /// One connection's life: `Ok` when stopped, `Err` when it failed (the next session
    /// starts at the next node of a cluster).
    async fn session(self: &Arc<Self>, stop: &CancellationToken) -> Result<(), AmqpError> {
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
    ) -> Result<(), AmqpError> {
        let setup = connection.open_channel(None).await.map_err(AmqpError::broker("open a channel"))?;
        // The contract's queues: ours, or the meetup platform's own, declared as it declares
        // them (§12).
        let topology = self.settings.topology();
        declare(&setup, &topology).await?;
        let _ = setup.close().await;
        let queues = topology.inbound;
        let mut loops = Vec::new();
        let in_flight = Arc::new(Semaphore::new(3 * self.settings.prefetch as usize));
        // A channel the broker closes (its queue's node gone, say) ends the session too.
        let ended = CancellationToken::new();
        for (kind, queue) in [Kind::Register, Kind::Cancel, Kind::Deleted].into_iter().zip(&queues) {
            let channel = connection.open_channel(None).await.map_err(AmqpError::broker("open a channel"))?;
            channel
                .register_callback(ConsumerChannelCallback)
                .await
                .map_err(AmqpError::broker("register the channel callback"))?;
            channel
                .basic_qos(BasicQosArguments::new(0, self.settings.prefetch, false))
                .await
                .map_err(AmqpError::broker("set the prefetch"))?;
            let (_, mut rx) = channel
                .basic_consume_rx(BasicConsumeArguments::new(queue, kind.label()).manual_ack(true).finish())
                .await
                .map_err(AmqpError::broker(format!("consume {queue}")))?;
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
            _ = lost => Err(AmqpError::Lost("connection lost")),
            _ = ended.cancelled() => Err(AmqpError::Lost("the broker closed a consumer's channel")),
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
        let outcome = tokio::spawn(
            async move {
                let scenario = header(&props, "x-mock-scenario");
                let correlation_id = props.correlation_id().cloned();
                let delivery = {
                    let received = Received {
                        queue: Some(kind),
                        content_type: props.content_type().map(String::as_str),
                        header: &|name: &str| header(&props, name),
                        body: &content,
                    };
                    let settings = &this.settings;
                    read(&settings.contract, Broker::Amqp, &settings.meetings_currency, &received)
                };
                match delivery {
                    Delivery::Malformed(_, why) => Verdict::Reject("malformed", why),
                    Delivery::Dropped(_) => Verdict::Ack("dropped"),
                    Delivery::Decoded { kind, inbound, correlation_id: carried } => {
                        let correlation_id = carried.or(correlation_id);
                        this.handler.handle(kind, inbound, scenario, correlation_id).await
                    }
                }
            }
            .instrument(span),
        )
        .await;
        let elapsed = started.elapsed().as_secs_f64();
        self.handler.meter.record(|| {
            metrics::histogram!("consumer_handling_duration_seconds", "consumer" => kind.label())
                .record(elapsed)
        });
        let verdict = outcome
            .unwrap_or_else(|panic| Verdict::Reject("panicked", format!("processing panicked: {panic}")));
        let queue = kind.label();
        let result = match verdict {
            Verdict::Ack(outcome) => {
                self.handler.meter.record(|| {
                    metrics::counter!("consumer_messages_total", "consumer" => queue, "outcome" => outcome)
                        .increment(1)
                });
                channel.basic_ack(BasicAckArguments::new(tag, false)).await
            }
            Verdict::Reject(outcome, why) => {
                tracing::warn!(consumer = queue, %why, "message dead-lettered");
                self.handler.meter.record(|| {
                    metrics::counter!("consumer_messages_total", "consumer" => queue, "outcome" => outcome)
                        .increment(1)
                });
                channel.basic_nack(BasicNackArguments::new(tag, false, false)).await
            }
        };
        if let Err(e) = result {
            // The channel is gone: the broker redelivers the message, and the inbox makes
            // the second delivery change nothing.
            tracing::warn!(consumer = queue, error = %e, "could not acknowledge or reject a delivery");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_header_of_another_type_is_malformed_not_ignored() {
        let mut table = amqprs::FieldTable::new();
        table.insert(field_name("x-mock-scenario").unwrap(), FieldValue::I(7));
        let mut props = amqprs::BasicProperties::default();
        props.with_headers(table);
        let props = props.finish();
        assert!(header(&props, "x-mock-scenario").unwrap_err().contains("x-mock-scenario"));
        assert_eq!(header(&props, "traceparent"), Ok(None));
        assert_eq!(header(&amqprs::BasicProperties::default(), "x-mock-scenario"), Ok(None));
    }
}
