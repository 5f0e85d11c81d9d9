//! The meeting consumers over Kafka (docs/spec.md §11), against a real Kafka-protocol broker
//! started per test (`kafka_broker`): one order per registration however often delivered,
//! the kind from the header or the body, poison to `<topic>.dlq` with the reason, a consumer
//! killed mid-stream. The outbox's side runs in `outbox_contract`, one suite for both brokers.

use std::time::Duration;

use orchestrator::startup::Workers;

use crate::faults::{LogsOnFailure, kill9, worker_on};
use crate::helpers::{Backend, TestApp, TestDb, count_where, until, until_within};
use crate::kafka_broker::{Reader, TestKafka};
use crate::meeting::registered;
use crate::on_both_databases;

const TOPIC: &str = "commerce.events";

// ---- the meeting service's events over Kafka ----------------------------------------

const INBOUND: &str = "meeting.events";

fn consumer_env(kafka: &TestKafka) -> Vec<(String, String)> {
    let mut env = kafka.env(TOPIC);
    env.push(("APP__BROKER__CONSUMER_RETRIES".into(), "2".into()));
    env.push(("APP__BROKER__CONSUMER_RETRY_BACKOFF".into(), "20ms".into()));
    env
}

/// A broker, the app on it (consumers not started yet), the inbound topic and a reader of
/// its dead-letter topic; `None` (skip) without a broker or database.
async fn consuming(backend: Backend) -> Option<(TestKafka, TestApp, Reader)> {
    let kafka = TestKafka::start().await?;
    let env = consumer_env(&kafka);
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let app = TestApp::spawn_with(backend, &refs).await?;
    kafka.create(INBOUND).await;
    let dead = kafka.read(&format!("{INBOUND}.dlq")).await;
    Some((kafka, app, dead))
}

async fn one_order_per_registration_and_poison_to_the_dead_letter_topic(backend: Backend) {
    let Some((kafka, app, dead)) = consuming(backend).await else { return };
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
    // Issue 43 item 10: `event_type` twice, or a header the body's `type` disagrees with,
    // is a record read two ways: malformed (the first header used to win, silently).
    let doubled =
        [("event_type", "meeting.participant.registered"), ("event_type", "meeting.participant.registered")];
    kafka.produce(INBOUND, "m-k", &doubled, registered("reg-6", "m-k", "u-6", 1000).as_bytes()).await;
    let mut cancelled: serde_json::Value =
        serde_json::from_str(&registered("reg-7", "m-k", "u-7", 1000)).unwrap();
    cancelled["type"] = "meeting.participant.cancelled".into();
    kafka.produce(INBOUND, "m-k", &typed, cancelled.to_string().as_bytes()).await;
    // A correlation id another system sent too long, or with a NUL: kept cut, or dropped —
    // never a database failure that loses the registration to the DLQ.
    let long = "c".repeat(300);
    let correlated = [("event_type", "meeting.participant.registered"), ("correlation_id", long.as_str())];
    kafka.produce(INBOUND, "m-k", &correlated, registered("reg-4", "m-k", "u-4", 1000).as_bytes()).await;
    let nul = [("event_type", "meeting.participant.registered"), ("correlation_id", "a\u{0}b")];
    kafka.produce(INBOUND, "m-k", &nul, registered("reg-5", "m-k", "u-5", 1000).as_bytes()).await;
    let letters = dead.wait_for(5, Duration::from_secs(60)).await;
    until("the registrations' orders completed", || async {
        count_where(&app.db, "orders", "status = 'COMPLETED'").await == 4
    })
    .await;
    assert_eq!(count_where(&app.db, "orders", "1 = 1").await, 4, "one order per registration");
    assert_eq!(count_where(&app.db, "inbox", "1 = 1").await, 4);
    let reasons: Vec<&str> = letters.iter().filter_map(|r| r.header("x-dlq-reason")).collect();
    assert!(reasons.iter().any(|r| r.contains("more than once")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("disagrees")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("participant-register")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("meeting.renamed")), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.contains("amount")), "{reasons:?}");
    assert!(
        letters.iter().all(|r| r.header("x-dlq-topic") == Some(INBOUND) && r.key.as_deref() == Some("m-k"))
    );
    workers.shutdown(Duration::from_secs(10)).await;
}

async fn a_system_failure_is_retried_then_dead_lettered(backend: Backend) {
    let Some((kafka, app, dead)) = consuming(backend).await else { return };
    // The database "breaks": the table the inbox lives in disappears.
    sea_orm::ConnectionTrait::execute_unprepared(&app.db, "ALTER TABLE inbox RENAME TO inbox_away")
        .await
        .unwrap();
    let workers = Workers::spawn(&app.services);
    let body = registered("ev-sys", "m-3", "u-sys", 1000);
    kafka.produce(INBOUND, "m-3", &[("event_type", "meeting.participant.registered")], body.as_bytes()).await;
    let letters = dead.wait_for(1, Duration::from_secs(60)).await;
    sea_orm::ConnectionTrait::execute_unprepared(&app.db, "ALTER TABLE inbox_away RENAME TO inbox")
        .await
        .unwrap();
    assert_eq!(letters[0].header("x-dlq-outcome"), Some("dead_lettered"));
    assert!(letters[0].header("x-dlq-reason").is_some_and(|r| r.contains("after 2 retries")), "{letters:?}");
    assert_eq!(count_where(&app.db, "orders", "1 = 1").await, 0);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("consumer_messages_total{consumer=\"participant-register\",outcome=\"retried\"} 2"),
        "{metrics}"
    );
    workers.shutdown(Duration::from_secs(10)).await;
}

/// A record just under a default broker's limit (~1 MiB) is malformed (over 64 KiB), and its
/// copy with the `x-dlq-*` headers no longer fits the producer's `message.max.bytes`: the
/// dead letter is cut to what fits (the value's start, the reason, the coordinates), and the
/// records behind it — on its key and on others — are processed. Before, the dead letter was
/// retried every 10 s forever and no partition moved.
async fn an_oversized_record_is_dead_lettered_cut_and_the_partitions_move_on(backend: Backend) {
    let Some((kafka, app, dead)) = consuming(backend).await else { return };
    let workers = Workers::spawn(&app.services);
    let typed = [("event_type", "meeting.participant.registered")];
    kafka.produce(INBOUND, "m-big", &typed, &vec![b'x'; 999_900]).await;
    for i in 0..3 {
        let body = registered(&format!("big-{i}"), "m-big", &format!("u-{i}"), 1000);
        kafka.produce(INBOUND, "m-big", &typed, body.as_bytes()).await;
    }
    for i in 0..5 {
        let meeting = format!("m-other-{i}");
        let body = registered(&format!("other-{i}"), &meeting, "u-o", 1000);
        kafka.produce(INBOUND, &meeting, &typed, body.as_bytes()).await;
    }
    let letters = dead.wait_for(1, Duration::from_secs(60)).await;
    let letter = &letters[0];
    assert_eq!(letter.header("x-dlq-original-size"), Some("999900"), "{:?}", letter.headers);
    assert_eq!(letter.header("x-dlq-truncated"), Some("value"));
    assert_eq!(letter.size, 64 * 1024, "the value's first 64 KiB");
    assert!(letter.header("x-dlq-reason").is_some_and(|r| !r.is_empty()));
    assert_eq!((letter.header("x-dlq-topic"), letter.key.as_deref()), (Some(INBOUND), Some("m-big")));
    assert!(letter.header("x-dlq-offset").is_some_and(|o| o.parse::<i64>().is_ok()));
    until_within("the 8 registrations behind it completed", Duration::from_secs(90), || async {
        count_where(&app.db, "orders", "status = 'COMPLETED'").await == 8
    })
    .await;
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("consumer_stalled{consumer=\"kafka\"} 0"), "{metrics}");
    workers.shutdown(Duration::from_secs(10)).await;
}

/// Readiness says when the cluster cannot be reached: a worker is not ready, `serve` stays
/// ready with a warning (docs/spec.md §5: orders are accepted, their events wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reports_an_unreachable_cluster() {
    let Some(mut kafka) = TestKafka::start().await else { return };
    let env = kafka.env(TOPIC);
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &refs).await else { return };
    let ready = || async { app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap() };
    let body: serde_json::Value = ready().await.json().await.unwrap();
    assert_eq!(body["checks"]["broker"], "UP", "{body}");
    kafka.kill();
    let last =
        crate::helpers::until_some("readiness to see the cluster gone", Duration::from_secs(30), || async {
            let response = ready().await;
            let ok = response.status() == reqwest::StatusCode::OK;
            let body: serde_json::Value = response.json().await.unwrap();
            (ok && body["checks"]["broker"] == "DOWN").then_some(body)
        })
        .await;
    let warnings = last["warnings"].to_string();
    assert!(warnings.contains("broker: DOWN"), "{last}");
    assert!(warnings.contains("UNREACHABLE"), "the client's reason is shown: {last}");
}

on_both_databases!(
    one_order_per_registration_and_poison_to_the_dead_letter_topic,
    a_system_failure_is_retried_then_dead_lettered,
    an_oversized_record_is_dead_lettered_cut_and_the_partitions_move_on,
);

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
