//! The saga over HTTP (docs/spec.md §4, §5): every scenario, idempotency keys, visibility.

use std::sync::atomic::Ordering;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json, order_body, steps};
use crate::on_both_databases;

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// Event types in the order's outbox, oldest first.
async fn outbox_event_types(app: &TestApp, order_id: &str) -> Vec<String> {
    app.services
        .outbox_store
        .for_aggregate("order", order_id)
        .await
        .expect("outbox")
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

async fn happy_path_completes_the_order(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let detail = json(app.place_order(&token, &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(detail["status"], "COMPLETED");
    assert_eq!(detail["customerId"], "alice");
    assert_eq!(detail["source"], "API");
    assert_eq!(detail["totalAmount"], 30000);
    assert_eq!(detail["payment"]["status"], "APPROVED");
    assert_eq!(detail["payment"]["amount"], 30000);
    assert!(detail["payment"]["providerTransactionId"].is_string());
    assert_eq!(detail["settlement"]["status"], "SUCCEEDED");
    assert_eq!(detail["notification"]["status"], "SENT");
    assert_eq!(
        steps(&detail),
        pairs(&[("PAYMENT", "SUCCESS"), ("SETTLEMENT", "SUCCESS"), ("NOTIFICATION", "SUCCESS")])
    );
    let id = detail["id"].as_str().unwrap();
    assert_eq!(outbox_event_types(&app, id).await, vec!["payment.approved", "order.completed"]);

    // The run gave its saga lease back (in its last commit).
    let leased = crate::helpers::count_where(&app.db, "orders", "saga_locked_by IS NOT NULL").await;
    assert_eq!(leased, 0, "no saga lease left behind");
    // GET answers the same shape and content.
    let fetched =
        json(app.get(&format!("/api/orders/{id}"), &token).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(fetched, detail);
}

async fn payment_decline_fails_the_order(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let detail =
        json(app.place_order(&token, &order_body(), Some("payment=decline")).await, StatusCode::CREATED)
            .await;
    assert_eq!(detail["status"], "FAILED");
    assert_eq!(detail["failureStage"], "PAYMENT");
    assert_eq!(detail["failureReason"], "PAYMENT_DECLINED");
    assert_eq!(detail["payment"]["status"], "DECLINED");
    assert_eq!(detail["settlement"], Value::Null);
    assert_eq!(steps(&detail), pairs(&[("PAYMENT", "FAILED")]));
    let id = detail["id"].as_str().unwrap();
    assert_eq!(outbox_event_types(&app, id).await, vec!["payment.declined", "order.failed"]);
    let calls = app.services.provider_calls.as_ref().unwrap();
    assert_eq!(calls.settlements.load(Ordering::SeqCst), 0, "no settlement after a decline");
}

async fn settlement_failure_cancels_payment_and_order(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let detail =
        json(app.place_order(&token, &order_body(), Some("settlement=fail")).await, StatusCode::CREATED)
            .await;
    assert_eq!(detail["status"], "CANCELLED");
    assert_eq!(detail["failureStage"], "SETTLEMENT");
    assert_eq!(detail["payment"]["status"], "CANCELLED");
    assert_eq!(detail["settlement"]["status"], "FAILED");
    assert_eq!(
        steps(&detail),
        pairs(&[("PAYMENT", "SUCCESS"), ("SETTLEMENT", "FAILED"), ("COMPENSATION", "SUCCESS")])
    );
    let id = detail["id"].as_str().unwrap();
    assert_eq!(
        outbox_event_types(&app, id).await,
        vec!["payment.approved", "settlement.failed", "order.failed", "payment.cancelled", "order.cancelled"]
    );
    let calls = app.services.provider_calls.as_ref().unwrap();
    assert_eq!(calls.cancels.load(Ordering::SeqCst), 1, "compensation runs once");
}

async fn notification_failure_keeps_payment_and_waits(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    for (scenario, notification_status) in [
        ("notification=auto_retry", "RETRY_SCHEDULED"),
        ("notification=auto_retry:3", "RETRY_SCHEDULED"),
        ("notification=manual", "MANUAL_INTERVENTION_REQUIRED"),
    ] {
        let detail =
            json(app.place_order(&token, &order_body(), Some(scenario)).await, StatusCode::CREATED).await;
        assert_eq!(detail["status"], "FAILED", "{scenario}");
        assert_eq!(detail["failureStage"], "NOTIFICATION", "{scenario}");
        assert_eq!(detail["payment"]["status"], "APPROVED", "payment is not undone ({scenario})");
        assert_eq!(detail["settlement"]["status"], "SUCCEEDED", "settlement is not undone ({scenario})");
        assert_eq!(detail["notification"]["status"], notification_status, "{scenario}");
        assert_eq!(detail["notification"]["attempts"], 1);
        assert_eq!(
            steps(&detail),
            pairs(&[
                ("PAYMENT", "SUCCESS"),
                ("SETTLEMENT", "SUCCESS"),
                ("NOTIFICATION", "FAILED"),
                ("COMPENSATION", "READY"),
            ]),
            "{scenario}"
        );
        let id = detail["id"].as_str().unwrap();
        assert_eq!(
            outbox_event_types(&app, id).await,
            vec!["payment.approved", "notification.failed", "order.failed"]
        );
    }
    let detail = json(
        app.place_order(&token, &order_body(), Some("notification=auto_retry")).await,
        StatusCode::CREATED,
    )
    .await;
    assert!(detail["notification"]["nextAttemptAt"].is_string(), "auto retry is scheduled");
    assert_eq!(detail["notification"]["policy"], "AUTO_RETRY");
}

async fn ignored_notification_completes_the_order(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let detail =
        json(app.place_order(&token, &order_body(), Some("notification=ignore")).await, StatusCode::CREATED)
            .await;
    assert_eq!(detail["status"], "COMPLETED");
    assert_eq!(detail["notification"]["status"], "IGNORED");
    assert_eq!(
        steps(&detail),
        pairs(&[("PAYMENT", "SUCCESS"), ("SETTLEMENT", "SUCCESS"), ("NOTIFICATION", "SKIPPED")])
    );
}

async fn orchestrate_on_a_finished_order_changes_nothing(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    for scenario in [None, Some("payment=decline"), Some("settlement=fail"), Some("notification=manual")] {
        let detail = json(app.place_order(&token, &order_body(), scenario).await, StatusCode::CREATED).await;
        let id = detail["id"].as_str().unwrap();
        let calls = app.services.provider_calls.as_ref().unwrap();
        let before = (
            calls.approvals.load(Ordering::SeqCst),
            calls.settlements.load(Ordering::SeqCst),
            calls.notifications.load(Ordering::SeqCst),
            calls.cancels.load(Ordering::SeqCst),
        );
        let again = json(
            app.post(&format!("/api/orders/{id}/orchestrate"), &token).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        assert_eq!(again, detail, "{scenario:?}");
        let after = (
            calls.approvals.load(Ordering::SeqCst),
            calls.settlements.load(Ordering::SeqCst),
            calls.notifications.load(Ordering::SeqCst),
            calls.cancels.load(Ordering::SeqCst),
        );
        assert_eq!(before, after, "no provider is called again ({scenario:?})");
    }
}

async fn idempotency_key_replays_refuses_reuse_and_conflicts_in_flight(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let send = |body: Value, key: &str| {
        app.post("/api/orders", &token).header("Idempotency-Key", key).json(&body).send()
    };
    let first = send(order_body(), "key-1").await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body = first.text().await.unwrap();

    // Same key, same body (keys in another order): the first response, byte for byte.
    let reordered =
        json!({ "items": [{ "unitPrice": 15000, "quantity": 2, "sku": "TICKET-STD" }], "currency": "KRW" });
    let replay = send(reordered, "key-1").await.unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers().get("idempotent-replayed").unwrap(), "true");
    assert_eq!(replay.text().await.unwrap(), first_body);
    assert_eq!(app.count("orders").await, 1, "a replay creates nothing");
    let calls = app.services.provider_calls.as_ref().unwrap();
    assert_eq!(calls.approvals.load(Ordering::SeqCst), 1, "a replay charges nothing");
    let replays =
        crate::helpers::count_where(&app.db, "audit_log", "action = 'REPLAY' AND entity_id = 'key-1'").await;
    assert_eq!(replays, 1, "a replay is audited");

    // Same key, different body.
    let mut other = order_body();
    other["items"][0]["quantity"] = json!(3);
    let reused = json(send(other, "key-1").await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(reused["code"], "IDEMPOTENCY_KEY_REUSED");

    // The key is scoped to the caller: bob may use "key-1" for his own order.
    let bob = app.token("bob");
    let response = app
        .post("/api/orders", &bob)
        .header("Idempotency-Key", "key-1")
        .json(&order_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);

    // A key whose first request is still running.
    let now = chrono::Utc::now();
    app.services
        .idempotency_store
        .begin(
            "alice",
            "key-2",
            "fingerprint",
            orchestrator::domain::ids::OrderId::new(),
            now,
            now + chrono::Duration::seconds(60),
        )
        .await
        .unwrap();
    let busy = json(send(order_body(), "key-2").await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(busy["code"], "IDEMPOTENCY_KEY_IN_PROGRESS");

    // An over-long key is refused, naming the header.
    let long = "k".repeat(256);
    let refused = json(send(order_body(), &long).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(refused["field"], "Idempotency-Key");
    // Not visible ASCII: the same status and the same name (issue 27 item 9: was 400
    // naming `idempotency-key`).
    let request = app
        .post("/api/orders", &app.token("alice"))
        .json(&order_body())
        .header("Idempotency-Key", reqwest::header::HeaderValue::from_bytes("clé".as_bytes()).unwrap());
    let refused = json(request.send().await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(refused["field"], "Idempotency-Key");
}

async fn failed_validation_frees_the_idempotency_key(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let mut bad = order_body();
    bad["items"][0]["quantity"] = json!(0);
    let response =
        app.post("/api/orders", &token).header("Idempotency-Key", "k").json(&bad).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let response = app
        .post("/api/orders", &token)
        .header("Idempotency-Key", "k")
        .json(&order_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED, "the key was not consumed by a refused request");
}

async fn customers_see_only_their_own_orders(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let bob = app.token("bob");
    let admin = app.admin_token("ops");
    let a = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let b = json(app.place_order(&bob, &order_body(), None).await, StatusCode::CREATED).await;
    let a_id = a["id"].as_str().unwrap();

    let hidden =
        json(app.get(&format!("/api/orders/{a_id}"), &bob).send().await.unwrap(), StatusCode::NOT_FOUND)
            .await;
    assert_eq!(hidden["code"], "NOT_FOUND");
    json(app.get(&format!("/api/orders/{a_id}"), &admin).send().await.unwrap(), StatusCode::OK).await;
    let resumed = app.post(&format!("/api/orders/{a_id}/orchestrate"), &bob).send().await.unwrap();
    assert_eq!(resumed.status(), StatusCode::NOT_FOUND);

    let page = json(app.get("/api/orders", &bob).send().await.unwrap(), StatusCode::OK).await;
    let ids: Vec<&str> =
        page["items"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![b["id"].as_str().unwrap()]);
    let page =
        json(app.get("/api/orders?customerId=alice", &bob).send().await.unwrap(), StatusCode::OK).await;
    assert!(page["items"].as_array().unwrap().is_empty(), "bob cannot list alice's orders");
    let page =
        json(app.get("/api/orders?customerId=alice", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let page = json(app.get("/api/orders", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);

    // By the number the support desk is given (issue 67): the detail at `/api/orders/{number}`
    // and the list's `?number=`, under the same access rule as the id.
    let number = a["number"].as_i64().unwrap();
    let by_number =
        json(app.get(&format!("/api/orders/{number}"), &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(by_number["id"], a["id"]);
    let flow = app.get(&format!("/api/orders/{number}/flow"), &alice).send().await.unwrap();
    assert_eq!(flow.status(), StatusCode::OK);
    let hidden = app.get(&format!("/api/orders/{number}"), &bob).send().await.unwrap();
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND, "another's order by number: the same 404");
    let nobody = app.get("/api/orders/999999999", &admin).send().await.unwrap();
    assert_eq!(nobody.status(), StatusCode::NOT_FOUND);
    let page =
        json(app.get(&format!("/api/orders?number={number}"), &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    let found: Vec<&Value> = page["items"].as_array().unwrap().iter().map(|o| &o["id"]).collect();
    assert_eq!(found, [&a["id"]]);
    let page =
        json(app.get(&format!("/api/orders?number={number}"), &bob).send().await.unwrap(), StatusCode::OK)
            .await;
    assert!(page["items"].as_array().unwrap().is_empty(), "bob does not find alice's order by number");
    let by_source = |source: &str| {
        let app = &app;
        let admin = admin.clone();
        let source = source.to_owned();
        async move {
            let page = json(
                app.get(&format!("/api/orders?source={source}"), &admin).send().await.unwrap(),
                StatusCode::OK,
            )
            .await;
            page["items"].as_array().unwrap().len()
        }
    };
    assert_eq!((by_source("API").await, by_source("MEETING").await), (2, 0));
    for bad in ["number=abc", "number=-1", "source=FAX"] {
        let problem = json(
            app.get(&format!("/api/orders?{bad}"), &admin).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert!(bad.starts_with(problem["field"].as_str().unwrap()), "{bad}: {problem}");
    }

    // A customer may not order for someone else; an admin may.
    let mut for_alice = order_body();
    for_alice["customerId"] = json!("alice");
    let refused = json(app.place_order(&bob, &for_alice, None).await, StatusCode::FORBIDDEN).await;
    assert_eq!(refused["code"], "FORBIDDEN");
    let placed = json(app.place_order(&admin, &for_alice, None).await, StatusCode::CREATED).await;
    assert_eq!(placed["customerId"], "alice");
}

async fn listing_pages_newest_first_and_filters_by_status(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let mut ids = Vec::new();
    for scenario in [None, Some("payment=decline"), None, Some("payment=decline"), None] {
        let detail = json(app.place_order(&token, &order_body(), scenario).await, StatusCode::CREATED).await;
        ids.push(detail["id"].as_str().unwrap().to_owned());
    }
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/orders?limit=2&cursor={c}"),
            None => "/api/orders?limit=2".to_owned(),
        };
        let page = json(app.get(&path, &token).send().await.unwrap(), StatusCode::OK).await;
        for o in page["items"].as_array().unwrap() {
            seen.push(o["id"].as_str().unwrap().to_owned());
        }
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every order once, newest first");
    let failed =
        json(app.get("/api/orders?status=FAILED", &token).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(failed["items"].as_array().unwrap().len(), 2);
    assert!(failed["items"].as_array().unwrap().iter().all(|o| o["status"] == "FAILED"));
    for bad in ["status=DONE", "limit=0", "limit=101", "limit=x", "cursor=nope"] {
        let problem = json(
            app.get(&format!("/api/orders?{bad}"), &token).send().await.unwrap(),
            StatusCode::UNPROCESSABLE_ENTITY,
        )
        .await;
        assert!(bad.starts_with(problem["field"].as_str().unwrap()), "{bad}: {problem}");
    }
}

async fn correlation_id_is_echoed_and_recorded_on_events(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let response = app
        .post("/api/orders", &token)
        .header("X-Correlation-Id", "checkout-42")
        .json(&order_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers().get("x-correlation-id").unwrap(), "checkout-42");
    let detail = json(response, StatusCode::CREATED).await;
    let events =
        app.services.outbox_store.for_aggregate("order", detail["id"].as_str().unwrap()).await.unwrap();
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e.correlation_id.as_deref(), Some("checkout-42"));
        let envelope: Value = serde_json::from_str(&e.payload).unwrap();
        assert_eq!(envelope["correlationId"], "checkout-42");
        assert_eq!(envelope["eventId"], e.event_id.to_string());
        assert_eq!(envelope["eventType"], e.event_type);
        assert_eq!(envelope["aggregateId"], detail["id"]);
    }
    // Generated when absent, on every response (errors too).
    let response = app.client.get(format!("{}/api/orders", app.base)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert!(response.headers().get("x-correlation-id").is_some());
}

async fn the_relay_publishes_committed_events(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let token = app.token("alice");
    let detail =
        json(app.place_order(&token, &order_body(), Some("settlement=fail")).await, StatusCode::CREATED)
            .await;
    let relay = app.services.relay();
    // The order's five events go out in one batch, in five waves (one per event of the
    // aggregate, each after the previous one's confirm).
    let mut rounds = 0;
    while relay.run_once().await.unwrap().claimed > 0 {
        rounds += 1;
        assert!(rounds <= 10, "the relay must drain");
    }
    assert_eq!(rounds, 1);
    let events =
        app.services.outbox_store.for_aggregate("order", detail["id"].as_str().unwrap()).await.unwrap();
    assert!(events.iter().all(|e| e.status.as_str() == "PUBLISHED" && e.published_at.is_some()));
}

async fn health_docs_and_unknown_routes(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let live =
        json(app.client.get(format!("{}/health/live", app.base)).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(live["status"], "UP");
    let ready =
        json(app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(ready["checks"]["database"], "UP");
    let spec =
        json(app.client.get(format!("{}/openapi.json", app.base)).send().await.unwrap(), StatusCode::OK)
            .await;
    assert!(spec["paths"]["/api/orders"]["post"].is_object());
    assert!(spec["paths"]["/api/orders/{id}"]["get"].is_object());
    let docs = app.client.get(format!("{}/docs/", app.base)).send().await.unwrap();
    assert_eq!(docs.status(), StatusCode::OK);
    let page = docs.text().await.unwrap();
    assert!(page.contains("swagger-ui") && !page.contains("https://"), "the docs page is self-contained");
    let init = app.client.get(format!("{}/docs/swagger-initializer.js", app.base)).send().await.unwrap();
    assert!(init.text().await.unwrap().contains("/openapi.json"), "Swagger UI reads our document");
    let bare = app.client.get(format!("{}/docs", app.base)).send().await.unwrap();
    assert_eq!(bare.url().path(), "/docs/", "/docs redirects to the page");
    let absent = app.client.get(format!("{}/docs/nope.js", app.base)).send().await.unwrap();
    assert_eq!(absent.status(), StatusCode::NOT_FOUND);
    let missing = app.client.get(format!("{}/nope", app.base)).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(missing.headers().get("content-type").unwrap(), "application/problem+json");
    let wrong_method = app.client.delete(format!("{}/api/orders", app.base)).send().await.unwrap();
    assert_eq!(wrong_method.status(), StatusCode::METHOD_NOT_ALLOWED);
}

on_both_databases!(
    happy_path_completes_the_order,
    payment_decline_fails_the_order,
    settlement_failure_cancels_payment_and_order,
    notification_failure_keeps_payment_and_waits,
    ignored_notification_completes_the_order,
    orchestrate_on_a_finished_order_changes_nothing,
    idempotency_key_replays_refuses_reuse_and_conflicts_in_flight,
    failed_validation_frees_the_idempotency_key,
    customers_see_only_their_own_orders,
    listing_pages_newest_first_and_filters_by_status,
    correlation_id_is_echoed_and_recorded_on_events,
    the_relay_publishes_committed_events,
    health_docs_and_unknown_routes,
);
