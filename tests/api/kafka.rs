//! The outbox and the meeting consumers over Kafka (docs/spec.md §11), against a real
//! Kafka-protocol broker started per test (`kafka_broker`): the contract the RabbitMQ suite
//! holds the relay to — every event exactly once, in its aggregate's order across 16 lanes and
//! 4 relays; dead letters and their repair; the connection cut mid-drain; a worker killed
//! mid-drain — and the meeting consumers': one order per registration however often
//! delivered, poison to `<topic>.dlq` with the reason, a consumer killed mid-stream.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use orchestrator::application::ports::{Changes, UnitOfWork};
use orchestrator::domain::outbox::OutboxStatus;
use orchestrator::startup::Workers;
use reqwest::StatusCode;
use tokio_util::sync::CancellationToken;

use crate::faults::{LogsOnFailure, kill9, worker_on};
use crate::helpers::{Backend, TestApp, TestDb, count_where, until, until_within};
use crate::kafka_broker::{Record, TestKafka};
use crate::meeting::registered;
use crate::on_both_databases;
use crate::relay::{event, repo, seed};

const TOPIC: &str = "commerce.events";

async fn spawn_app(backend: Backend, kafka: &TestKafka, extra: &[(&str, &str)]) -> Option<TestApp> {
    let mut env = kafka.env(TOPIC);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    TestApp::spawn_with(backend, &refs).await
}

async fn published(app: &TestApp) -> i64 {
    crate::helpers::outbox_in(&app.db, OutboxStatus::Published).await
}

/// Every record of the outbox's shape: keyed by its aggregate, the §11 headers, each
/// aggregate in one partition in its order. Returns the event ids seen, with duplicates.
fn check_records(records: &[Record]) -> Vec<String> {
    let mut last: HashMap<String, (i32, i64, i64)> = HashMap::new();
    let mut ids = Vec::new();
    for r in records {
        let aggregate = r.body["aggregateId"].as_str().unwrap().to_owned();
        assert_eq!(r.key.as_deref(), Some(aggregate.as_str()), "keyed by the aggregate id");
        assert_eq!(r.header("event_type"), Some("test.seq"));
        assert_eq!(r.header("content_type"), Some("application/json"));
        assert_eq!(r.header("correlation_id"), Some(format!("corr-{aggregate}").as_str()));
        let id = r.header("message_id").expect("message_id header").to_owned();
        assert_eq!(r.body["eventId"].as_str(), Some(id.as_str()), "message_id is the event id");
        ids.push(id);
        let seq = r.body["seq"].as_i64().unwrap();
        if let Some((partition, offset, previous)) =
            last.insert(aggregate.clone(), (r.partition, r.offset, seq))
        {
            assert_eq!(partition, r.partition, "aggregate {aggregate} in one partition");
            assert!(offset < r.offset && previous < seq, "aggregate {aggregate} out of order");
        }
    }
    ids
}

/// Records in partition order (the reader sees partitions interleaved).
fn by_partition(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by_key(|r| (r.partition, r.offset));
    records
}

async fn four_relays_deliver_every_event_exactly_once_in_aggregate_order(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let Some(app) = spawn_app(backend, &kafka, &[("APP__OUTBOX__BATCH_SIZE", "64")]).await else { return };
    let reader = kafka.read(TOPIC).await;
    // Saga-shaped: several events per aggregate, committed one after another.
    let events = seed(&repo(&app), 500, 4).await;
    let stop = CancellationToken::new();
    let mut relays = Vec::new();
    for _ in 0..4 {
        let relay = app.services.relay();
        let token = stop.clone();
        relays.push(tokio::spawn(async move { relay.run_until_stopped(token).await }));
    }
    reader.wait_for(events.len(), Duration::from_secs(90)).await;
    stop.cancel();
    for r in relays {
        r.await.unwrap();
    }
    // Anything sent twice was written before this barrier on every partition.
    let records = by_partition(reader.barrier(&kafka, TOPIC).await);
    let ids = check_records(&records);
    let distinct: HashSet<&String> = ids.iter().collect();
    assert_eq!(ids.len(), events.len(), "every event exactly once (got {})", ids.len());
    assert_eq!(distinct.len(), events.len(), "no duplicates");
    assert!(events.iter().all(|e| distinct.contains(&e.event_id.to_string())), "none missing");
    assert_eq!(published(&app).await, events.len() as i64);
}

async fn a_connection_cut_mid_drain_loses_nothing(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let env = [
        ("APP__OUTBOX__BACKOFF_BASE", "20ms"),
        ("APP__OUTBOX__BACKOFF_CAP", "100ms"),
        ("APP__OUTBOX__MAX_RETRIES", "20"),
        ("APP__OUTBOX__POLL_INTERVAL", "100ms"),
        ("APP__BROKER__CONFIRM_TIMEOUT", "5s"),
    ];
    let Some(app) = spawn_app(backend, &kafka, &env).await else { return };
    let reader = kafka.read(TOPIC).await;
    let events = seed(&repo(&app), 1500, 2).await;
    let stop = CancellationToken::new();
    let relay = app.services.relay();
    let token = stop.clone();
    let task = tokio::spawn(async move { relay.run_until_stopped(token).await });
    reader.wait_for(300, Duration::from_secs(30)).await;
    kafka.proxy.sever();
    until_within("the relay to recover and publish everything", Duration::from_secs(90), || async {
        published(&app).await >= events.len() as i64
    })
    .await;
    stop.cancel();
    task.await.unwrap();
    let records = by_partition(reader.barrier(&kafka, TOPIC).await);
    let ids = check_records(&records);
    let distinct: HashSet<&String> = ids.iter().collect();
    for e in &events {
        assert!(distinct.contains(&e.event_id.to_string()), "event {} lost", e.event_id);
    }
    let duplicates = ids.len() - distinct.len();
    // An idempotent producer's own retries write nothing twice; the relay sends again only
    // what it was told failed.
    assert!(duplicates <= 2 * 256, "duplicates only for reports lost at the cut: {duplicates}");
    eprintln!("RELIABILITY kafka-cut events={} duplicated={duplicates}", events.len());
}

async fn a_dead_letter_holds_its_aggregate_until_an_operator_repairs_it(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let env = [
        ("APP__OUTBOX__BACKOFF_BASE", "20ms"),
        ("APP__OUTBOX__BACKOFF_CAP", "40ms"),
        ("APP__OUTBOX__MAX_RETRIES", "1"),
        ("APP__OUTBOX__POLL_INTERVAL", "100ms"),
        ("APP__OUTBOX__RETRY_POLL_INTERVAL", "100ms"),
    ];
    let Some(app) = spawn_app(backend, &kafka, &env).await else { return };
    let reader = kafka.read(TOPIC).await;
    // A record larger than the client's `message.max.bytes` (1 MB) is refused, every time.
    let aggregate = format!("agg-big-{}", uuid::Uuid::new_v4().simple());
    let mut big = event(&aggregate, 0, "test.seq", "test.seq");
    let mut payload: serde_json::Value = serde_json::from_str(&big.payload).unwrap();
    payload["padding"] = serde_json::Value::String("x".repeat(1_100_000));
    big.payload = payload.to_string();
    let behind = event(&aggregate, 1, "test.seq", "test.seq");
    let uow = repo(&app);
    uow.commit(Changes { outbox: vec![big.clone(), behind.clone()], ..Default::default() }).await.unwrap();
    let others = seed(&uow, 20, 1).await;
    let workers = Workers::spawn(&app.services);
    until("the oversized event dead-lettered", || async {
        count_where(&app.db, "outbox_events", "status = 'DEAD_LETTER' AND failure_code = 'NACK'").await == 1
    })
    .await;
    reader.wait_for(others.len(), Duration::from_secs(30)).await;
    // Order-preserving: its aggregate's next event waits behind it.
    let sent = |records: &[Record], e: &orchestrator::application::ports::NewOutboxEvent| {
        let id = e.event_id.to_string();
        records.iter().any(|r| r.header("message_id") == Some(id.as_str()))
    };
    assert!(!sent(&reader.records(), &behind), "the next event waits");
    let token = app.admin_token("ops");
    let page = crate::helpers::json(
        app.get("/api/admin/outbox?status=DEAD_LETTER", &token).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(page["items"][0]["eventId"], big.event_id.to_string());
    assert_eq!(page["items"][0]["failureCode"], "NACK");
    let id = page["items"][0]["id"].as_i64().expect("the dead letter's id");
    // The operator discards it (the record can never be sent): the aggregate moves on.
    let response = app
        .post(&format!("/api/admin/outbox/{id}/discard"), &token)
        .json(&serde_json::json!({"reason": "larger than the broker takes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let records = reader.wait_for(others.len() + 1, Duration::from_secs(30)).await;
    assert!(sent(&records, &behind), "released by the repair");
    assert!(!sent(&records, &big), "the discarded event never sent");
    workers.shutdown(Duration::from_secs(10)).await;
}

on_both_databases!(
    four_relays_deliver_every_event_exactly_once_in_aggregate_order,
    a_connection_cut_mid_drain_loses_nothing,
    a_dead_letter_holds_its_aggregate_until_an_operator_repairs_it,
);

/// SIGKILL while draining into Kafka: every event ends PUBLISHED and on the topic;
/// duplicates only for what the killed worker had read and not recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_drain_loses_nothing() {
    let Some(kafka) = TestKafka::start().await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let reader = kafka.read(TOPIC).await;
    let events = crate::faults::seed_events(&conn, 6000).await;
    let dir = crate::cli::temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    let env = kafka.env(TOPIC);
    let mut first = worker_on(&dir.0, "first", &db, &env, &[]);
    reader.wait_for(1500, Duration::from_secs(60)).await;
    kill9(&mut first);
    let mut second = worker_on(&dir.0, "second", &db, &env, &[]);
    until("every row published", || async {
        crate::helpers::outbox_in(&conn, OutboxStatus::Published).await == events.len() as i64
    })
    .await;
    crate::helpers::terminate(&mut second);
    let records = reader.barrier(&kafka, TOPIC).await;
    let ids: Vec<&str> = records.iter().filter_map(|r| r.header("message_id")).collect();
    let distinct: HashSet<&str> = ids.iter().copied().collect();
    for e in &events {
        assert!(distinct.contains(e.event_id.to_string().as_str()), "event {} lost", e.event_id);
    }
    let duplicates = ids.len() - distinct.len();
    let bound = orchestrator::application::outbox::UNRECORDED_BATCHES * 256;
    assert!(
        duplicates <= bound,
        "duplicates only for batches unrecorded at the kill: {duplicates} > {bound}"
    );
    assert_eq!(crate::helpers::outbox_unpublished(&conn).await, 0, "nothing stuck");
    eprintln!("RELIABILITY kafka-crash-relay events={} lost=0 duplicated={duplicates}", events.len());
}

// ---- the meeting service's events over Kafka ----------------------------------------

const INBOUND: &str = "meeting.events";

fn consumer_env(kafka: &TestKafka) -> Vec<(String, String)> {
    let mut env = kafka.env(TOPIC);
    env.push(("APP__BROKER__CONSUMER_RETRIES".into(), "2".into()));
    env.push(("APP__BROKER__CONSUMER_RETRY_BACKOFF".into(), "20ms".into()));
    env
}

async fn one_order_per_registration_and_poison_to_the_dead_letter_topic(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let env = consumer_env(&kafka);
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    kafka.create(INBOUND).await;
    let dead = kafka.read(&format!("{INBOUND}.dlq")).await;
    let workers = Workers::spawn(&app.services);
    let typed = [("event_type", "meeting.participant.registered")];
    let first = registered("reg-1", "m-k", "u-1", 15000);
    // Delivered three times: one order.
    for _ in 0..3 {
        kafka.produce(INBOUND, "m-k", &typed, first.as_bytes()).await;
    }
    // The kind from the body's `type` when there is no header.
    let mut untyped: serde_json::Value =
        serde_json::from_str(&registered("reg-2", "m-k", "u-2", 5000)).unwrap();
    untyped["type"] = "meeting.participant.registered".into();
    kafka.produce(INBOUND, "m-k", &[], untyped.to_string().as_bytes()).await;
    // Poison: not JSON; an unknown type; a key given twice (never last-one-wins).
    kafka.produce(INBOUND, "m-k", &typed, b"not json").await;
    kafka.produce(INBOUND, "m-k", &[("event_type", "meeting.renamed")], first.as_bytes()).await;
    let twice =
        r#"{"eventId":"reg-3","meetingId":"m-k","userId":"u-3","amount":15000,"amount":1,"currency":"KRW"}"#;
    kafka.produce(INBOUND, "m-k", &typed, twice.as_bytes()).await;
    let letters = dead.wait_for(3, Duration::from_secs(60)).await;
    until("both registrations' orders completed", || async {
        count_where(&app.db, "orders", "status = 'COMPLETED'").await == 2
    })
    .await;
    assert_eq!(count_where(&app.db, "orders", "1 = 1").await, 2, "one order per registration");
    assert_eq!(count_where(&app.db, "inbox", "1 = 1").await, 2);
    let reasons: Vec<&str> = letters.iter().filter_map(|r| r.header("x-dlq-reason")).collect();
    assert!(reasons.iter().any(|r| r.contains("participant-register")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("meeting.renamed")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("amount")), "{reasons:?}");
    assert!(
        letters.iter().all(|r| r.header("x-dlq-topic") == Some(INBOUND) && r.key.as_deref() == Some("m-k"))
    );
    workers.shutdown(Duration::from_secs(10)).await;
}

on_both_databases!(one_order_per_registration_and_poison_to_the_dead_letter_topic);

/// SIGKILL of a worker consuming registrations from Kafka: after a restart each record has
/// exactly one effect (one order, one charge), none is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_stream_loses_nothing() {
    let Some(kafka) = TestKafka::start().await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let mut env = consumer_env(&kafka);
    env.push(("APP__SAGA__LEASE".into(), "2s".into()));
    env.push(("APP__PAYMENT__RECONCILIATION__INTERVAL".into(), "300ms".into()));
    let dir = crate::cli::temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    kafka.create(INBOUND).await;
    let mut first = worker_on(&dir.0, "first", &db, &env, &[]);
    let n = 60;
    for i in 0..n {
        let body = registered(&format!("crash-{i}"), "m-crash", &format!("u-{i}"), 1000);
        kafka
            .produce(
                INBOUND,
                &format!("u-{i}"),
                &[("event_type", "meeting.participant.registered")],
                body.as_bytes(),
            )
            .await;
    }
    until_within("some orders", Duration::from_secs(60), || async {
        count_where(&conn, "orders", "1 = 1").await >= 10
    })
    .await;
    kill9(&mut first);
    let mut second = worker_on(&dir.0, "second", &db, &env, &[]);
    until_within("every registration", Duration::from_secs(90), || async {
        count_where(&conn, "inbox", "consumer = 'participant-register'").await == n
            && count_where(&conn, "orders", "status <> 'COMPLETED'").await == 0
    })
    .await;
    crate::helpers::terminate(&mut second);
    assert_eq!(count_where(&conn, "orders", "1 = 1").await, n, "one order per record");
    assert_eq!(count_where(&conn, "payments", "1 = 1").await, n, "one payment per order");
}
