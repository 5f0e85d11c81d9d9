//! RabbitMQ test support: a uniquely named exchange and a queue bound to all of it, per
//! test (deleted afterwards), a consumer that records what arrives, and a TCP proxy that
//! can sever every connection through it to simulate a broker outage.
//!
//! The broker is `TEST_AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`); when it
//! cannot be reached a test is skipped — except under `CI=true`, where it fails.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{
    BasicConsumeArguments, ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments,
    QueueDeclareArguments,
};
use amqprs::connection::Connection;
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect};
use tokio::task::JoinHandle;

use crate::helpers::service_missing;

pub fn amqp_url() -> String {
    std::env::var("TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// One message as the test consumer received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub message_id: String,
    pub message_type: Option<String>,
    pub correlation_id: Option<String>,
    pub routing_key: String,
    pub persistent: bool,
    /// The W3C trace context header, if the message carries one.
    pub traceparent: Option<String>,
    pub body: serde_json::Value,
    /// Its headers whose values are text or numbers, as text.
    pub headers: Vec<(String, String)>,
    pub content_type: Option<String>,
    /// The body as it came.
    pub raw: Vec<u8>,
}

pub struct TestBroker {
    pub endpoint: AmqpEndpoint,
    pub exchange: String,
    /// The consumer's queue (bound to every routing key but `nobody.*` and `reject.*`).
    queue: String,
    /// Keeps the consumer's exclusive queue alive.
    _connection: Connection,
    pub received: Arc<Mutex<Vec<Received>>>,
    _consumer: JoinHandle<()>,
}

impl TestBroker {
    /// A fresh exchange (declared as the publisher declares it) and a consumer of all of it.
    pub async fn start() -> Option<TestBroker> {
        let endpoint = AmqpEndpoint::parse(&amqp_url()).expect("TEST_AMQP_URL");
        let connection = match connect(&endpoint, "test-consumer").await {
            Ok(c) => c,
            Err(e) => {
                service_missing("RabbitMQ", e);
                return None;
            }
        };
        let id = uuid::Uuid::new_v4().simple().to_string();
        let exchange = format!("test.events.{id}");
        let channel = connection.open_channel(None).await.expect("channel");
        channel
            .exchange_declare(ExchangeDeclareArguments::new(&exchange, "topic").durable(true).finish())
            .await
            .expect("declare exchange");
        let queue = format!("test.all.{id}");
        channel
            .queue_declare(QueueDeclareArguments::new(&queue).exclusive(true).auto_delete(true).finish())
            .await
            .expect("declare queue");
        // A queue that refuses every message: routing keys `reject.#` are nacked.
        let mut full = amqprs::FieldTable::new();
        full.insert("x-max-length".try_into().unwrap(), amqprs::FieldValue::l(0));
        full.insert(
            "x-overflow".try_into().unwrap(),
            amqprs::FieldValue::S("reject-publish".try_into().unwrap()),
        );
        let rejecting = format!("test.reject.{id}");
        channel
            .queue_declare(QueueDeclareArguments::new(&rejecting).exclusive(true).arguments(full).finish())
            .await
            .expect("declare rejecting queue");
        channel.queue_bind(QueueBindArguments::new(&rejecting, &exchange, "reject.#")).await.expect("bind");
        // Everything except routing keys starting with `nobody.`, which stay unroutable.
        for pattern in ["order.#", "payment.#", "settlement.#", "notification.#", "test.#"] {
            channel.queue_bind(QueueBindArguments::new(&queue, &exchange, pattern)).await.expect("bind");
        }
        let (_, mut rx) = channel
            .basic_consume_rx(BasicConsumeArguments::new(&queue, "test-consumer").manual_ack(false).finish())
            .await
            .expect("consume");
        let received = Arc::new(Mutex::new(Vec::new()));
        let sink = received.clone();
        let consumer = tokio::spawn(async move {
            let _channel = channel;
            while let Some(msg) = rx.recv().await {
                let (Some(deliver), Some(props), Some(content)) =
                    (msg.deliver, msg.basic_properties, msg.content)
                else {
                    continue;
                };
                sink.lock().unwrap().push(Received {
                    message_id: props.message_id().cloned().unwrap_or_default(),
                    message_type: props.message_type().cloned(),
                    correlation_id: props.correlation_id().cloned(),
                    routing_key: deliver.routing_key().clone(),
                    persistent: props.delivery_mode() == Some(2),
                    traceparent: props.headers().and_then(|h| {
                        h.as_ref().iter().find_map(|(k, v)| match v {
                            amqprs::FieldValue::S(s) if k.as_ref() == "traceparent" => {
                                Some(s.as_ref().to_owned())
                            }
                            _ => None,
                        })
                    }),
                    body: serde_json::from_slice(&content).unwrap_or(serde_json::Value::Null),
                    headers: props
                        .headers()
                        .map(|h| {
                            h.as_ref()
                                .iter()
                                .filter_map(|(k, v)| {
                                    let text = match v {
                                        amqprs::FieldValue::S(s) => s.as_ref().to_owned(),
                                        amqprs::FieldValue::l(n) => n.to_string(),
                                        amqprs::FieldValue::I(n) => n.to_string(),
                                        _ => return None,
                                    };
                                    Some((k.as_ref().to_owned(), text))
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    content_type: props.content_type().cloned(),
                    raw: content,
                });
            }
        });
        Some(TestBroker { endpoint, exchange, queue, _connection: connection, received, _consumer: consumer })
    }

    /// Environment for an app publishing to this exchange through `url`.
    pub fn env(&self, url: &str) -> Vec<(String, String)> {
        vec![("APP__BROKER__URL".into(), url.into()), ("APP__BROKER__EXCHANGE".into(), self.exchange.clone())]
    }

    pub fn count(&self) -> usize {
        self.received.lock().unwrap().len()
    }

    /// Waits until at least `n` messages arrived (or the deadline passes), returns them all.
    pub async fn wait_for(&self, n: usize, deadline: Duration) -> Vec<Received> {
        let until = tokio::time::Instant::now() + deadline;
        while self.count() < n {
            assert!(
                tokio::time::Instant::now() < until,
                "timed out after {deadline:?} waiting for {n} messages: {} arrived",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.received.lock().unwrap().clone()
    }

    /// What has arrived so far (after [`Self::barrier`]: everything the broker took).
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Routes `pattern` to the consumer too (e.g. `nobody.#`: what was unroutable no longer is).
    pub async fn bind(&self, pattern: &str) {
        let channel = self._connection.open_channel(None).await.expect("channel");
        channel
            .queue_bind(QueueBindArguments::new(&self.queue, &self.exchange, pattern))
            .await
            .expect("bind");
        let _ = channel.close().await;
    }

    /// Returns once every message the broker accepted before this call has reached the
    /// consumer: a marker published now queues behind them (one queue, FIFO), so its
    /// arrival is the barrier. The marker is taken out of `received`. Call it after the
    /// publishers have stopped (their confirms settled) instead of waiting for stragglers.
    pub async fn barrier(&self) {
        let channel = self._connection.open_channel(None).await.expect("channel");
        let marker = uuid::Uuid::new_v4().to_string();
        let mut props = amqprs::BasicProperties::default();
        props.with_message_id(&marker);
        channel
            .basic_publish(
                props.finish(),
                b"null".to_vec(),
                amqprs::channel::BasicPublishArguments::new(&self.exchange, "test.barrier"),
            )
            .await
            .expect("publish the barrier");
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            {
                let mut received = self.received.lock().unwrap();
                if let Some(at) = received.iter().position(|r| r.message_id == marker) {
                    received.remove(at);
                    break;
                }
            }
            assert!(tokio::time::Instant::now() < until, "the barrier never arrived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = channel.close().await;
    }

    /// Deletes the exchange (the queue goes with the connection). Dropping does the same,
    /// so a failing test leaves nothing behind either.
    pub async fn cleanup(self) {
        drop(self);
    }
}

/// `(messages, consumers)` of `queue`, asked on a channel of its own (a passive declare of
/// a queue that does not exist yet closes its channel).
pub(crate) async fn queue_state(
    connection: &amqprs::connection::Connection,
    queue: &str,
) -> Option<(u32, u32)> {
    let probe = connection.open_channel(None).await.ok()?;
    let state = probe
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await
        .ok()
        .flatten()
        .map(|(_, messages, consumers)| (messages, consumers));
    let _ = probe.close().await;
    state
}

/// Deletes broker objects from a thread of its own (drop runs inside the test's runtime).
pub fn delete_objects(endpoint: AmqpEndpoint, exchanges: Vec<String>, queues: Vec<String>) {
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async move {
            let Ok(connection) = connect(&endpoint, "test-cleanup").await else { return };
            if let Ok(channel) = connection.open_channel(None).await {
                for q in queues {
                    let _ = channel.queue_delete(amqprs::channel::QueueDeleteArguments::new(&q)).await;
                }
                for e in exchanges {
                    let _ = channel.exchange_delete(ExchangeDeleteArguments::new(&e)).await;
                }
            }
            let _ = connection.close().await;
        });
    })
    .join();
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self._consumer.abort();
        delete_objects(self.endpoint.clone(), vec![self.exchange.clone()], Vec::new());
    }
}
