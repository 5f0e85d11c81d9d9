//! The edges of issue 27, each reproduced from outside first: what a hostile client can do
//! to `/metrics` and with a key given twice, and traces at the log level production runs
//! with (traces.rs).

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::{Method, StatusCode};

use crate::helpers::{Backend, TestApp, json, order_body};
use crate::on_both_databases;

/// Every label value of `name`'s series in a Prometheus text page, by label.
fn label_values(metrics: &str, name: &str, label: &str) -> BTreeSet<String> {
    let prefix = format!("{name}{{");
    let key = format!("{label}=\"");
    metrics
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| {
            let start = l.find(&key)? + key.len();
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_owned())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_metric_label_takes_a_value_the_client_chose() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    // Made-up methods (short, long, one per request), probes of made-up paths, and a real
    // request for comparison.
    for i in 0..60 {
        let made_up = format!("X{}{i}", "ABCDEFGHIJ".repeat(if i % 2 == 0 { 1 } else { 100 }));
        let method = Method::from_bytes(made_up.as_bytes()).unwrap();
        let path = if i % 3 == 0 { format!("/health/live?{i}") } else { format!("/probe-{i}/{made_up}") };
        let answer = app.client.request(method, format!("{}{path}", app.base)).send().await.unwrap();
        assert!(answer.status().is_client_error(), "{path}: {}", answer.status());
    }
    let live = app.client.get(format!("{}/health/live", app.base)).send().await.unwrap();
    assert_eq!(live.status(), StatusCode::OK);

    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    let known: BTreeSet<&str> =
        ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "_OTHER"].into();
    for name in ["http_requests_total", "http_request_duration_seconds_count"] {
        let methods = label_values(&metrics, name, "method");
        assert!(methods.contains("GET") && methods.contains("_OTHER"), "{name}: {methods:?}");
        assert!(methods.iter().all(|m| known.contains(m.as_str())), "{name}: {methods:?}");
        let routes = label_values(&metrics, name, "route");
        assert!(
            routes.iter().all(|r| !r.contains("probe") && !r.contains("ABCDEFGHIJ")),
            "{name}: {routes:?}"
        );
    }
    let series = metrics.lines().filter(|l| l.starts_with("http_requests_total{")).count();
    assert!(series <= 6, "a handful of series, not one per request: {series}\n{metrics}");
    assert!(!metrics.contains("ABCDEFGHIJ"), "no client-chosen text anywhere in /metrics");
}

/// Issue 27 item 5: a key given twice was accepted, the last one winning (`"currency":"KRW",
/// "currency":"USD"` made a USD order): refused, naming the field, nothing stored.
async fn a_key_given_twice_is_refused_naming_it(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let cases = [
        (
            r#"{"currency":"KRW","currency":"USD","items":[{"sku":"A","quantity":1,"unitPrice":100}]}"#,
            "currency",
        ),
        (
            r#"{"currency":"KRW","items":[{"sku":"A","quantity":1,"quantity":9,"unitPrice":100}]}"#,
            "items[0].quantity",
        ),
    ];
    for (body, field) in cases {
        let answer = app
            .post("/api/orders", &alice)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        let problem = json(answer, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    assert_eq!(app.count("orders").await, 0, "nothing stored");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let refund = app
        .post(&format!("/api/orders/{}/refund", order["id"].as_str().unwrap()), &alice)
        .header("content-type", "application/json")
        .body(r#"{"reason":"a","reason":"b"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(json(refund, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "reason");
}

on_both_databases!(a_key_given_twice_is_refused_naming_it);

/// Issue 27 item 8: the outbox's counts came from separate statements, so `PUBLISHED` (the
/// fast path's total less its waiting events) moved while events were committed between
/// them. With no relay running nothing is ever published: every read must say 0, and the
/// total never shrinks.
async fn outbox_stats_are_one_snapshot(backend: Backend) {
    use orchestrator::application::ports::{Changes, NewOutboxEvent, UnitOfWork};
    use orchestrator::domain::ids::EventId;
    use orchestrator::domain::outbox::OutboxStatus;
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &[]).await else {
        return;
    };
    let store = orchestrator::adapters::persistence::SeaOrmStore::new(
        app.db.clone(),
        app.services.relay_wake.clone(),
    );
    let producer = tokio::spawn(async move {
        for i in 0..600 {
            let event_id = EventId::new();
            let event = NewOutboxEvent {
                event_id,
                aggregate_type: "order".into(),
                aggregate_id: format!("snap-{i}"),
                event_type: "test.snapshot".into(),
                routing_key: "test.snapshot".into(),
                payload: serde_json::json!({ "eventId": event_id.to_string() }).to_string(),
                correlation_id: None,
                created_at: chrono::Utc::now(),
            };
            store.commit(Changes { outbox: vec![event], ..Default::default() }).await.unwrap();
        }
    });
    let mut last_total = 0;
    let mut reads = 0;
    while !producer.is_finished() {
        let stats = app.services.outbox_store.stats().await.unwrap();
        let count =
            |s: OutboxStatus| stats.by_status.iter().find(|(status, _)| *status == s).map_or(0, |(_, n)| *n);
        assert_eq!(count(OutboxStatus::Published), 0, "nothing was published: {:?}", stats.by_status);
        let total: i64 = stats.by_status.iter().map(|(_, n)| n).sum();
        assert!(total >= last_total, "the total went back from {last_total} to {total}");
        last_total = total;
        reads += 1;
    }
    producer.await.unwrap();
    assert!(reads > 5, "the stats were read while events were committed ({reads} reads)");
}

on_both_databases!(outbox_stats_are_one_snapshot);

/// Issue 27 item 4: `serve` answered `/health/ready` 503 for a whole broker outage while it
/// accepted every order (the outbox keeps them), so a container healthcheck would restart a
/// working checkout. `serve` is ready with its database (the broker a warning); a worker,
/// which publishes, is not ready without its broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_is_ready_without_the_broker_and_a_worker_is_not() {
    let down = [("APP__BROKER__URL", "amqp://guest:guest@127.0.0.1:1/%2f")];
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &down).await else {
        return;
    };
    let ready = app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap();
    let status = ready.status();
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (body["checks"]["database"].clone(), body["checks"]["broker"].clone()),
        ("UP".into(), "DOWN".into())
    );
    assert!(body["warnings"].to_string().contains("broker"), "the broker's state is a warning: {body}");
    assert_eq!(app.place_order(&app.token("alice"), &order_body(), None).await.status(), StatusCode::CREATED);

    let (server, addr) = orchestrator::startup::ops_server(&app.services).unwrap();
    tokio::spawn(server);
    let worker = app.client.get(format!("http://{addr}/health/ready")).send().await.unwrap();
    assert_eq!(worker.status(), StatusCode::SERVICE_UNAVAILABLE, "a worker needs its broker");
}

/// Issue 27 item 7: with `orders` or `outbox_events` locked by another session (an
/// operator's long statement), requests hung up to 30 s. Every statement waits at most
/// `database.lock_timeout` for a lock: the request answers while the lock is still held —
/// 503 when nothing was written, the order as committed when it was — no step half
/// applied, and goes through once it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_table_answers_in_seconds_with_no_step_half_applied() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some(app) = TestApp::spawn_with(Backend::Postgres, &[("APP__DATABASE__LOCK_TIMEOUT", "1s")]).await
    else {
        return;
    };
    let alice = app.token("alice");
    for table in ["orders", "outbox_events"] {
        let lock = app.db.begin().await.unwrap();
        lock.execute_unprepared(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).await.unwrap();
        let answer =
            tokio::time::timeout(Duration::from_secs(20), app.place_order(&alice, &order_body(), None)).await;
        let answer = answer.unwrap_or_else(|_| panic!("still waiting on the lock of {table}"));
        if table == "orders" {
            // Nothing written: a 503 that means "nothing happened".
            assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE, "{table}");
            let problem: serde_json::Value = answer.json().await.unwrap();
            assert_eq!(problem["status"], 503, "{problem}");
        } else {
            // The order was committed before the outbox's lock refused the step whose commit
            // carries its first event: the answer is the order as it stands (issue 43 item 8).
            assert_eq!(json(answer, StatusCode::CREATED).await["status"], "CREATED", "{table}");
        }
        lock.rollback().await.unwrap();
    }
    // The step refused was refused whole: the order stands where its last committed step
    // left it and its saga resumes to the end.
    let admin = app.admin_token("ops");
    let page = json(app.get("/api/orders", &admin).send().await.unwrap(), StatusCode::OK).await;
    let orders = page["items"].as_array().unwrap();
    assert_eq!(orders.len(), 1, "the order accepted before the outbox's lock: {page}");
    for order in orders {
        let id = order["id"].as_str().unwrap();
        let resumed = app.post(&format!("/api/orders/{id}/orchestrate"), &admin).send().await.unwrap();
        assert_eq!(json(resumed, StatusCode::OK).await["status"], "COMPLETED");
    }
    assert_eq!(app.place_order(&alice, &order_body(), None).await.status(), StatusCode::CREATED);
}

/// Issue 27 item 7: a worker whose loops cannot make progress (the outbox locked by another
/// session, every round refused by the lock timeout) answers 503 naming the loop and its
/// error once its rounds have failed for `worker.stuck_after`; ready again after a round
/// succeeds. `serve` stays ready (it does not need the loops).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_relay_cannot_make_progress_is_not_ready() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let env = [
        ("APP__DATABASE__LOCK_TIMEOUT", "300ms"),
        ("APP__WORKER__STUCK_AFTER", "2s"),
        ("APP__OUTBOX__POLL_INTERVAL", "200ms"),
    ];
    let Some(app) = TestApp::spawn_with(Backend::Postgres, &env).await else { return };
    let (server, addr) = orchestrator::startup::ops_server(&app.services).unwrap();
    tokio::spawn(server);
    let workers = orchestrator::startup::Workers::spawn(&app.services);
    let worker_ready = || async {
        let answer = app.client.get(format!("http://{addr}/health/ready")).send().await.unwrap();
        (answer.status(), answer.text().await.unwrap())
    };
    crate::helpers::until("the worker ready", || async { worker_ready().await.0 == StatusCode::OK }).await;
    let lock = app.db.begin().await.unwrap();
    lock.execute_unprepared("LOCK TABLE outbox_events IN ACCESS EXCLUSIVE MODE").await.unwrap();
    crate::helpers::until("the worker unready, naming its relay", || async {
        let (status, body) = worker_ready().await;
        status == StatusCode::SERVICE_UNAVAILABLE && body.contains("outbox relay: no round has succeeded")
    })
    .await;
    let serve = app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap();
    assert_eq!(serve.status(), StatusCode::OK, "serve does not need the loops");
    lock.rollback().await.unwrap();
    crate::helpers::until("the worker ready again", || async { worker_ready().await.0 == StatusCode::OK })
        .await;
    workers.shutdown(Duration::from_secs(10)).await;
}
