//! Notification retries and operator repair over HTTP (docs/spec.md §3–§5).

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use orchestrator::startup::Workers;

use crate::helpers::until;
use crate::helpers::{Backend, TestApp, count_where, json, order_body, steps};
use crate::on_both_databases;

/// Retries a minute apart (doubling): on the manual clock, a retry is due only once the test
/// has moved time past its backoff.
const RETRIES: &[(&str, &str)] =
    &[("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"), ("APP__NOTIFICATION__RETRY__MAX_ATTEMPTS", "5")];

/// Past any backoff these tests schedule.
const PAST_THE_BACKOFF: Duration = Duration::from_secs(3600);

fn sends(app: &TestApp) -> u64 {
    app.services.provider_calls.as_ref().unwrap().notifications.load(Ordering::SeqCst)
}

async fn retry_due(app: &TestApp) -> Value {
    let admin = app.admin_token("ops");
    json(app.post("/api/admin/notification-events/retry-due", &admin).send().await.unwrap(), StatusCode::OK)
        .await
}

async fn order(app: &TestApp, id: &Value) -> Value {
    let admin = app.admin_token("ops");
    json(
        app.get(&format!("/api/orders/{}", id.as_str().unwrap()), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await
}

async fn auto_retry_succeeds_after_the_failures_it_was_given(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(backend, RETRIES).await else {
        return;
    };
    let alice = app.token("alice");
    let placed = json(
        app.place_order(&alice, &order_body(), Some("notification=auto_retry:2")).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(placed["notification"]["status"], "RETRY_SCHEDULED");
    assert_eq!(retry_due(&app).await["claimed"], 0, "not due before its backoff");
    app.advance(PAST_THE_BACKOFF);

    let first = retry_due(&app).await;
    assert_eq!(
        (first["claimed"].clone(), first["failed"].clone(), first["succeeded"].clone()),
        (json!(1), json!(1), json!(0))
    );
    assert_eq!(first["processedIds"], json!([placed["notification"]["id"]]));
    let detail = order(&app, &placed["id"]).await;
    assert_eq!(detail["status"], "FAILED");
    assert_eq!(detail["notification"]["status"], "RETRY_SCHEDULED");
    assert_eq!(detail["notification"]["attempts"], 2);

    assert_eq!(retry_due(&app).await["claimed"], 0, "the next retry waits for its backoff");
    app.advance(PAST_THE_BACKOFF);
    let second = retry_due(&app).await;
    assert_eq!((second["claimed"].clone(), second["succeeded"].clone()), (json!(1), json!(1)));
    let detail = order(&app, &placed["id"]).await;
    assert_eq!(detail["status"], "COMPLETED", "a sent notification completes the order");
    assert_eq!(detail["failureStage"], Value::Null);
    assert_eq!(detail["notification"]["status"], "SENT");
    assert_eq!(detail["notification"]["attempts"], 3);
    assert_eq!(sends(&app), 3);
    assert_eq!(steps(&detail).last().unwrap(), &("NOTIFICATION".to_owned(), "SUCCESS".to_owned()));
    let completed = count_where(&app.db, "outbox_events", "event_type = 'order.completed'").await;
    assert_eq!(completed, 1, "order.completed goes out");
    let nothing = retry_due(&app).await;
    assert_eq!(nothing["claimed"], 0);
}

async fn attempts_run_out_and_the_order_stays_failed(backend: Backend) {
    let env =
        [("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"), ("APP__NOTIFICATION__RETRY__MAX_ATTEMPTS", "2")];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
        return;
    };
    let alice = app.token("alice");
    let placed = json(
        app.place_order(&alice, &order_body(), Some("notification=auto_retry:5")).await,
        StatusCode::CREATED,
    )
    .await;
    app.advance(PAST_THE_BACKOFF);
    let round = retry_due(&app).await;
    assert_eq!(round["failed"], 1);
    let detail = order(&app, &placed["id"]).await;
    assert_eq!(detail["notification"]["status"], "FAILED", "max attempts reached");
    assert_eq!(detail["status"], "FAILED");
    app.advance(PAST_THE_BACKOFF);
    assert_eq!(retry_due(&app).await["claimed"], 0, "a FAILED notification is no longer retried");
    let admin = app.admin_token("ops");
    let listed = json(
        app.get("/api/admin/notification-events?status=FAILED", &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    assert_eq!(listed["items"][0]["orderId"], placed["id"]);
}

async fn manual_intervention_reprocessed_by_an_operator_completes(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let admin = app.admin_token("ops");
    let placed =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    assert_eq!(placed["notification"]["status"], "MANUAL_INTERVENTION_REQUIRED");
    assert_eq!(retry_due(&app).await["claimed"], 0, "manual ones are not retried automatically");
    let id = placed["notification"]["id"].as_str().unwrap();
    let detail = json(
        app.post(&format!("/api/admin/notification-events/{id}/reprocess"), &admin)
            .json(&json!({ "reason": "customer email fixed" }))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(detail["status"], "COMPLETED");
    assert_eq!(detail["notification"]["status"], "SENT");
    assert_eq!(sends(&app), 2, "it really re-sent");
    let audited = count_where(
        &app.db,
        "audit_log",
        "action = 'NOTIFICATION_REPROCESS' AND actor = 'ops' AND detail LIKE '%customer email fixed%'",
    )
    .await;
    assert_eq!(audited, 1);
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'order.completed'").await, 1);
    let again = json(
        app.post(&format!("/api/admin/notification-events/{id}/reprocess"), &admin).send().await.unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(again["code"], "NOTIFICATION_NOT_REPROCESSABLE");
}

async fn manual_intervention_ignored_by_an_operator_completes(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let admin = app.admin_token("ops");
    let placed =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    let id = placed["notification"]["id"].as_str().unwrap();
    let detail = json(
        app.post(&format!("/api/admin/notification-events/{id}/ignore"), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(detail["status"], "COMPLETED");
    assert_eq!(detail["notification"]["status"], "IGNORED");
    assert_eq!(sends(&app), 1, "ignoring sends nothing");
    assert_eq!(steps(&detail).last().unwrap(), &("NOTIFICATION".to_owned(), "SKIPPED".to_owned()));
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'order.completed'").await, 1);
    assert_eq!(
        count_where(&app.db, "audit_log", "action = 'NOTIFICATION_IGNORE' AND actor = 'ops'").await,
        1
    );
    let again = json(
        app.post(&format!("/api/admin/notification-events/{id}/ignore"), &admin).send().await.unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(again["code"], "NOTIFICATION_NOT_IGNORABLE");
}

async fn concurrent_retry_rounds_never_send_twice(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(backend, RETRIES).await else {
        return;
    };
    let alice = app.token("alice");
    for _ in 0..8 {
        json(
            app.place_order(&alice, &order_body(), Some("notification=auto_retry:1")).await,
            StatusCode::CREATED,
        )
        .await;
    }
    assert_eq!(sends(&app), 8);
    app.advance(PAST_THE_BACKOFF);
    let scheduler = app.services.notifications.clone();
    let system = orchestrator::application::Actor::system("test-scheduler");
    let (a, b, c, d) =
        tokio::join!(retry_due(&app), retry_due(&app), retry_due(&app), scheduler.retry_due(&system),);
    let scheduled = d.unwrap();
    let claimed: u64 =
        [&a, &b, &c].iter().map(|r| r["claimed"].as_u64().unwrap()).sum::<u64>() + scheduled.claimed as u64;
    let succeeded: u64 = [&a, &b, &c].iter().map(|r| r["succeeded"].as_u64().unwrap()).sum::<u64>()
        + scheduled.succeeded as u64;
    assert_eq!(claimed, 8, "each due notification claimed exactly once");
    assert_eq!(succeeded, 8);
    assert_eq!(sends(&app), 16, "no notification sent twice");
    let completed = count_where(&app.db, "orders", "status = 'COMPLETED'").await;
    assert_eq!(completed, 8);
}

async fn stuck_claims_are_released_for_another_attempt(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(backend, RETRIES).await else {
        return;
    };
    let alice = app.token("alice");
    let placed = json(
        app.place_order(&alice, &order_body(), Some("notification=auto_retry:1")).await,
        StatusCode::CREATED,
    )
    .await;
    // A worker claims and dies: the row is PROCESSING with a lease already over.
    let id: orchestrator::domain::ids::OrderId = placed["id"].as_str().unwrap().parse().unwrap();
    let record =
        app.services.queries.get_order(&orchestrator::application::Actor::admin("t"), id).await.unwrap();
    let mut n = record.notification.unwrap();
    let clock = app.clock.clone().unwrap();
    let past = orchestrator::application::ports::Clock::now(clock.as_ref()) - chrono::Duration::seconds(1);
    n.claim(past, past).unwrap();
    let mut changes = orchestrator::application::ports::Changes::default();
    changes.update_notification(&mut n);
    let uow = orchestrator::adapters::persistence::SeaOrmStore::new(app.db.clone(), Default::default());
    orchestrator::application::ports::UnitOfWork::commit(&uow, changes).await.unwrap();
    assert_eq!(retry_due(&app).await["claimed"], 0, "a PROCESSING claim is not due");
    assert_eq!(app.services.notifications.recover_stuck().await.unwrap(), 1);
    app.advance(PAST_THE_BACKOFF);
    let round = retry_due(&app).await;
    assert_eq!(round["succeeded"], 1);
}

async fn notification_admin_is_closed_to_customers(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let customer = app.token("alice");
    let admin = app.admin_token("ops");
    let id = uuid::Uuid::now_v7();
    for (method, path) in [
        ("GET", "/api/admin/notification-events".to_owned()),
        ("POST", "/api/admin/notification-events/retry-due".to_owned()),
        ("POST", format!("/api/admin/notification-events/{id}/reprocess")),
        ("POST", format!("/api/admin/notification-events/{id}/ignore")),
    ] {
        let send = |token: &str| match method {
            "GET" => app.get(&path, token).send(),
            _ => app.post(&path, token).send(),
        };
        let forbidden = json(send(&customer).await.unwrap(), StatusCode::FORBIDDEN).await;
        assert_eq!(forbidden["code"], "FORBIDDEN", "{method} {path}");
        let none = app.client.get(format!("{}{path}", app.base)).send().await.unwrap();
        assert!(none.status() == StatusCode::UNAUTHORIZED || none.status() == StatusCode::METHOD_NOT_ALLOWED);
    }
    for action in ["reprocess", "ignore"] {
        let missing =
            app.post(&format!("/api/admin/notification-events/{id}/{action}"), &admin).send().await.unwrap();
        assert_eq!(missing.status(), StatusCode::NOT_FOUND, "{action}");
    }
    let bad = app.get("/api/admin/notification-events?status=LOST", &admin).send().await.unwrap();
    assert_eq!(bad.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

async fn the_scheduler_retries_when_enabled_and_only_then(backend: Backend) {
    for enabled in [true, false] {
        let mut env = RETRIES.to_vec();
        env.extend([
            ("APP__NOTIFICATION__RETRY__ENABLED", if enabled { "true" } else { "false" }),
            ("APP__NOTIFICATION__RETRY__INTERVAL", "50ms"),
        ]);
        let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
            return;
        };
        let workers = Workers::spawn(&app.services);
        assert_eq!(workers.loops().contains(&"notification retries"), enabled, "{:?}", workers.loops());
        crate::helpers::names_are_unique(workers.loops());
        let alice = app.token("alice");
        let placed = json(
            app.place_order(&alice, &order_body(), Some("notification=auto_retry:1")).await,
            StatusCode::CREATED,
        )
        .await;
        app.advance(PAST_THE_BACKOFF);
        if enabled {
            until("the scheduler's retry", || async {
                order(&app, &placed["id"]).await["status"] == "COMPLETED"
            })
            .await;
        } else {
            // No loop to wait for: none was started. The retry is due and still there.
            let round = retry_due(&app).await;
            assert_eq!(
                round["claimed"], 1,
                "disabled means disabled: the due retry was left to the operator"
            );
        }
        workers.shutdown(Duration::from_secs(5)).await;
    }
}

on_both_databases!(
    the_scheduler_retries_when_enabled_and_only_then,
    auto_retry_succeeds_after_the_failures_it_was_given,
    attempts_run_out_and_the_order_stays_failed,
    manual_intervention_reprocessed_by_an_operator_completes,
    manual_intervention_ignored_by_an_operator_completes,
    concurrent_retry_rounds_never_send_twice,
    stuck_claims_are_released_for_another_attempt,
    notification_admin_is_closed_to_customers,
);
