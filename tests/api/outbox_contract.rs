//! The outbox's contract with its broker (docs/spec.md §6, §11): one suite, run against
//! RabbitMQ and against Kafka, each on both databases — every event exactly once in its
//! aggregate's order across 16 lanes and 4 relays; a refused event retried with its failure
//! recorded; an event behind a dead letter held until an operator repairs it; the broker's
//! connections cut mid-drain with nothing lost; a worker killed mid-drain with duplicates
//! bounded by what it had read and not recorded.
//!
//! What differs by broker lives in [`Sink`]: how the app is pointed at it (always through a
//! TCP proxy that can cut every connection), what arrived, and which event it refuses
//! (RabbitMQ: a routing key bound to a queue that rejects every message; Kafka: a record
//! larger than the producer's `message.max.bytes`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use orchestrator::application::ports::{Changes, NewOutboxEvent, UnitOfWork};
use orchestrator::domain::outbox::{FailureCode, OutboxStatus};
use tokio_util::sync::CancellationToken;

use crate::broker::{TestBroker, amqp_url};
use crate::faults::{LogsOnFailure, kill9, worker_on};
use crate::helpers::{Backend, TcpProxy, TestApp, TestDb, until, until_within};
use crate::kafka_broker::{Reader, TestKafka};
use crate::relay::{event, repo, seed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broker {
    Amqp,
    Kafka,
}

const TOPIC: &str = "commerce.events";

/// Runs `$name(Broker, Backend)` once per broker and database: `$name::amqp_sqlite`,
/// `amqp_postgres`, `kafka_sqlite`, `kafka_postgres`.
macro_rules! on_both_brokers {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                use $crate::helpers::Backend;
                use $crate::outbox_contract::Broker;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn amqp_sqlite() {
                    super::$name(Broker::Amqp, Backend::Sqlite).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn amqp_postgres() {
                    super::$name(Broker::Amqp, Backend::Postgres).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn kafka_sqlite() {
                    super::$name(Broker::Kafka, Backend::Sqlite).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn kafka_postgres() {
                    super::$name(Broker::Kafka, Backend::Postgres).await
                }
            }
        )+
    };
}

/// One event as it arrived, whatever the broker.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub message_id: String,
    pub event_type: Option<String>,
    pub correlation_id: Option<String>,
    pub body: serde_json::Value,
}

/// The broker side of one test.
pub enum Sink {
    Amqp { broker: TestBroker, proxy: TcpProxy },
    Kafka { kafka: TestKafka, reader: Reader },
}

impl Sink {
    pub async fn start(broker: Broker) -> Option<Sink> {
        match broker {
            Broker::Amqp => {
                let broker = TestBroker::start().await?;
                let (host, port) = broker.endpoint.host_port();
                let proxy = TcpProxy::start((host.to_owned(), port)).await;
                Some(Sink::Amqp { broker, proxy })
            }
            Broker::Kafka => {
                let kafka = TestKafka::start().await?;
                let reader = kafka.read(TOPIC).await;
                Some(Sink::Kafka { kafka, reader })
            }
        }
    }

    /// The environment that points an app (or an `app worker`) at this broker, through
    /// the proxy.
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            Sink::Amqp { broker, proxy } => broker.env(&proxy.url(&broker.endpoint)),
            Sink::Kafka { kafka, .. } => kafka.env(TOPIC),
        }
    }

    /// Cuts every connection to the broker (the app reconnects through the proxy).
    pub fn cut(&self) {
        match self {
            Sink::Amqp { proxy, .. } => proxy.sever(),
            Sink::Kafka { kafka, .. } => kafka.proxy.sever(),
        }
    }

    fn count(&self) -> usize {
        match self {
            Sink::Amqp { broker, .. } => broker.count(),
            Sink::Kafka { reader, .. } => reader.records().len(),
        }
    }

    /// Waits until at least `n` events arrived, failing the test after `limit`.
    pub async fn wait_for(&self, n: usize, limit: Duration) {
        until_within(&format!("{n} events at the broker"), limit, || async move { self.count() >= n }).await;
    }

    /// Every event the broker took before this call (a barrier behind them), each checked
    /// for the broker's own contract, in an order that keeps each aggregate's (RabbitMQ: one
    /// queue, FIFO; Kafka: partition by partition, by offset). Call it after the relays stopped.
    pub async fn delivered(&self) -> Vec<Delivered> {
        match self {
            Sink::Amqp { broker, .. } => {
                broker.barrier().await;
                broker
                    .received()
                    .into_iter()
                    .map(|r| {
                        assert!(r.persistent, "persistent delivery mode");
                        assert_eq!(r.message_type.as_deref(), Some(r.routing_key.as_str()), "routed by type");
                        Delivered {
                            message_id: r.message_id,
                            event_type: r.message_type,
                            correlation_id: r.correlation_id,
                            body: r.body,
                        }
                    })
                    .collect()
            }
            Sink::Kafka { kafka, reader } => {
                let mut records = reader.barrier(kafka, TOPIC).await;
                records.sort_by_key(|r| (r.partition, r.offset));
                let mut partition_of: HashMap<String, i32> = HashMap::new();
                records
                    .into_iter()
                    .map(|r| {
                        let aggregate = r.body["aggregateId"].as_str().unwrap_or_default().to_owned();
                        assert_eq!(r.key.as_deref(), Some(aggregate.as_str()), "keyed by the aggregate id");
                        assert_eq!(r.header("content_type"), Some("application/json"));
                        let partition = *partition_of.entry(aggregate.clone()).or_insert(r.partition);
                        assert_eq!(partition, r.partition, "aggregate {aggregate} in one partition");
                        Delivered {
                            message_id: r.header("message_id").expect("message_id header").to_owned(),
                            event_type: r.header("event_type").map(str::to_owned),
                            correlation_id: r.header("correlation_id").map(str::to_owned),
                            body: r.body,
                        }
                    })
                    .collect()
            }
        }
    }

    /// An event of `aggregate` this broker refuses every time, and the failure it is
    /// recorded with.
    pub fn refused(&self, aggregate: &str, seq: usize) -> (NewOutboxEvent, FailureCode) {
        match self {
            // Bound to a queue with `x-max-length 0, reject-publish`: nacked.
            Sink::Amqp { .. } => (event(aggregate, seq, "reject.me", "test.refused"), FailureCode::Nacked),
            // Larger than the producer's `message.max.bytes` (1 MB): refused at once.
            Sink::Kafka { .. } => {
                let mut e = event(aggregate, seq, "test.refused", "test.refused");
                let mut body: serde_json::Value = serde_json::from_str(&e.payload).unwrap();
                body["padding"] = serde_json::Value::String("x".repeat(1_100_000));
                e.payload = body.to_string();
                (e, FailureCode::Nacked)
            }
        }
    }
}

async fn spawn_app(sink: &Sink, backend: Backend, extra: &[(&str, &str)]) -> Option<TestApp> {
    let mut env = sink.env();
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    TestApp::spawn_with(backend, &refs).await
}

async fn published(db: &sea_orm::DatabaseConnection) -> i64 {
    crate::helpers::outbox_in(db, OutboxStatus::Published).await
}

/// Each aggregate's `seq` in the order delivered: 0, 1, 2, … with nothing skipped or repeated.
fn assert_in_aggregate_order(delivered: &[Delivered]) {
    let mut last: HashMap<String, i64> = HashMap::new();
    for d in delivered {
        let aggregate = d.body["aggregateId"].as_str().unwrap().to_owned();
        let seq = d.body["seq"].as_i64().unwrap();
        let previous = last.insert(aggregate.clone(), seq).unwrap_or(-1);
        assert_eq!(seq, previous + 1, "aggregate {aggregate} out of order");
        assert_eq!(d.body["eventId"].as_str(), Some(d.message_id.as_str()), "message id = event id");
        assert_eq!(d.event_type.as_deref(), Some("test.seq"));
        assert_eq!(d.correlation_id.as_deref(), Some(format!("corr-{aggregate}").as_str()));
    }
}

async fn four_relays_deliver_every_event_exactly_once_in_aggregate_order(broker: Broker, backend: Backend) {
    let Some(sink) = Sink::start(broker).await else { return };
    let Some(app) = spawn_app(&sink, backend, &[("APP__OUTBOX__BATCH_SIZE", "64")]).await else { return };
    // Several events per aggregate, committed one after another (the saga's shape).
    let events = seed(&repo(&app), 500, 4).await;
    let stop = CancellationToken::new();
    let mut relays = Vec::new();
    for _ in 0..4 {
        let relay = app.services.relay();
        let token = stop.clone();
        relays.push(tokio::spawn(async move { relay.run_until_stopped(token).await }));
    }
    sink.wait_for(events.len(), Duration::from_secs(90)).await;
    stop.cancel();
    for r in relays {
        r.await.unwrap();
    }
    let delivered = sink.delivered().await;
    assert_eq!(delivered.len(), events.len(), "every event exactly once (got {})", delivered.len());
    let ids: HashSet<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    assert_eq!(ids.len(), events.len(), "no duplicates");
    assert!(events.iter().all(|e| ids.contains(e.event_id.to_string().as_str())), "none missing");
    assert_in_aggregate_order(&delivered);
    assert_eq!(published(&app.db).await, events.len() as i64);
}

async fn a_refused_event_is_retried_with_its_failure_recorded(broker: Broker, backend: Backend) {
    let Some(sink) = Sink::start(broker).await else { return };
    let Some(app) = spawn_app(&sink, backend, &[]).await else { return };
    let (refused, code) = sink.refused("agg-refused", 0);
    repo(&app).commit(Changes { outbox: vec![refused], ..Default::default() }).await.unwrap();
    let report = app.services.relay().run_once().await.unwrap();
    assert_eq!((report.claimed, report.published, report.retried), (1, 0, 1));
    let filter = orchestrator::application::ports::OutboxFilter { limit: 10, ..Default::default() };
    let row = app.services.outbox_store.list(&filter).await.unwrap().remove(0);
    assert_eq!(row.status, OutboxStatus::RetryWait);
    assert_eq!(row.retry_count, 1);
    assert_eq!(row.failure_code, Some(code), "{:?}", row.failure_reason);
    assert!(row.failure_reason.is_some_and(|r| !r.is_empty()), "the broker's reason is kept");
}

/// docs/spec.md §6 ordering: an event behind a failed event of its aggregate is not sent in a
/// later wave of the same batch, nor in a later batch; it waits (`READY`, `blocked`) until
/// the dead letter is discarded, then goes out in order.
async fn an_event_behind_a_dead_letter_waits_until_it_is_repaired(broker: Broker, backend: Backend) {
    let Some(sink) = Sink::start(broker).await else { return };
    let Some(app) = spawn_app(&sink, backend, &[("APP__OUTBOX__MAX_RETRIES", "0")]).await else { return };
    let uow = repo(&app);
    let (poison, _) = sink.refused("agg-g", 0);
    let second = event("agg-g", 1, "test.seq", "test.seq");
    let other = event("agg-h", 0, "test.seq", "test.seq");
    uow.commit(Changes { outbox: vec![poison, second, other], ..Default::default() }).await.unwrap();
    let relay = app.services.relay();
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.published, report.dead_lettered, report.held_back), (1, 1, 1), "{report:?}");
    let third = event("agg-g", 2, "test.seq", "test.seq");
    uow.commit(Changes { outbox: vec![third], ..Default::default() }).await.unwrap();
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.published, report.held_back), (0, 1), "a later batch holds it back too");
    let store = &app.services.outbox_store;
    assert_eq!(store.stats().await.unwrap().blocked_aggregates, 1);
    let g = store.for_aggregate("order", "agg-g").await.unwrap();
    let states: Vec<OutboxStatus> = g.iter().map(|r| r.status).collect();
    assert_eq!(states, vec![OutboxStatus::DeadLetter, OutboxStatus::Ready, OutboxStatus::Ready]);
    // The operator's repair, as the admin API makes it.
    let token = app.admin_token("ops");
    let response = app
        .post(&format!("/api/admin/outbox/{}/discard", g[0].id), &token)
        .json(&serde_json::json!({"reason": "the broker will never take it"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 2);
    sink.wait_for(3, Duration::from_secs(10)).await;
    let g_seqs: Vec<i64> = sink
        .delivered()
        .await
        .iter()
        .filter(|d| d.body["aggregateId"] == "agg-g")
        .map(|d| d.body["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(g_seqs, vec![1, 2], "in order, after the discard");
}

async fn a_connection_cut_mid_drain_loses_nothing(broker: Broker, backend: Backend) {
    let Some(sink) = Sink::start(broker).await else { return };
    let env = [
        ("APP__OUTBOX__BACKOFF_BASE", "20ms"),
        ("APP__OUTBOX__BACKOFF_CAP", "100ms"),
        ("APP__OUTBOX__MAX_RETRIES", "20"),
        ("APP__OUTBOX__POLL_INTERVAL", "100ms"),
        ("APP__BROKER__CONFIRM_TIMEOUT", "2s"),
    ];
    let Some(app) = spawn_app(&sink, backend, &env).await else { return };
    let events = seed(&repo(&app), 1500, 2).await;
    let stop = CancellationToken::new();
    let relay = app.services.relay();
    let token = stop.clone();
    let task = tokio::spawn(async move { relay.run_until_stopped(token).await });
    sink.wait_for(300, Duration::from_secs(30)).await;
    sink.cut();
    until_within("the relay to recover and publish everything", Duration::from_secs(90), || async {
        published(&app.db).await >= events.len() as i64
    })
    .await;
    stop.cancel();
    task.await.unwrap();
    let delivered = sink.delivered().await;
    let ids: HashSet<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    for e in &events {
        assert!(ids.contains(e.event_id.to_string().as_str()), "event {} lost", e.event_id);
    }
    let duplicates = delivered.len() - ids.len();
    assert!(duplicates <= 2 * 256, "duplicates only for confirms in flight at the cut: {duplicates}");
    eprintln!("RELIABILITY cut-{broker:?} events={} duplicated={duplicates}", events.len());
}

on_both_brokers!(
    four_relays_deliver_every_event_exactly_once_in_aggregate_order,
    a_refused_event_is_retried_with_its_failure_recorded,
    an_event_behind_a_dead_letter_waits_until_it_is_repaired,
    a_connection_cut_mid_drain_loses_nothing,
);

/// SIGKILL while draining: every event ends PUBLISHED and at the broker; duplicates only
/// for what the killed worker had read and not recorded (`UNRECORDED_BATCHES` batches of
/// `outbox.batch_size`, 256 here); no row stays claimed.
async fn a_worker_killed_mid_drain_loses_nothing(broker: Broker) {
    let Some(sink) = Sink::start(broker).await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let events = crate::faults::seed_events(&conn, 6000).await;
    let dir = crate::cli::temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    // Straight to the broker, not through the proxy (nothing is cut here).
    let env = match &sink {
        Sink::Amqp { broker, .. } => broker.env(&amqp_url()),
        Sink::Kafka { .. } => sink.env(),
    };
    let mut first = worker_on(&dir.0, "first", &db, &env, &[]);
    sink.wait_for(1500, Duration::from_secs(60)).await;
    kill9(&mut first);
    let at_kill = sink.count();
    let killed_at = std::time::Instant::now();
    let mut second = worker_on(&dir.0, "second", &db, &env, &[]);
    until("every row published", || async { published(&conn).await == events.len() as i64 }).await;
    let recovered_in = killed_at.elapsed();
    crate::helpers::terminate(&mut second);
    let delivered = sink.delivered().await;
    let ids: HashSet<&str> = delivered.iter().map(|d| d.message_id.as_str()).collect();
    for e in &events {
        assert!(ids.contains(e.event_id.to_string().as_str()), "event {} lost", e.event_id);
    }
    let duplicates = delivered.len() - ids.len();
    let bound = orchestrator::application::outbox::UNRECORDED_BATCHES * 256;
    assert!(
        duplicates <= bound,
        "duplicates only for batches unrecorded at the kill: {duplicates} > {bound}"
    );
    assert_eq!(crate::helpers::outbox_unpublished(&conn).await, 0, "nothing stuck");
    eprintln!(
        "RELIABILITY crash-relay-{broker:?} events={} received_at_kill={at_kill} lost=0 duplicated={duplicates} recovered_in_ms={}",
        events.len(),
        recovered_in.as_millis()
    );
}

mod a_worker_killed_mid_drain_loses_nothing {
    use super::Broker;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn amqp() {
        super::a_worker_killed_mid_drain_loses_nothing(Broker::Amqp).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn kafka() {
        super::a_worker_killed_mid_drain_loses_nothing(Broker::Kafka).await
    }
}
