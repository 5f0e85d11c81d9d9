//! Operators' view and repairs over HTTP: the outbox admin endpoints, an order's flow,
//! metrics — and that none of it is open to customers.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, count_where, json, order_body};
use crate::on_both_databases;

/// Places `n` orders (two events each) and dead-letters the first event of each.
async fn dead_letters(app: &TestApp, n: usize) -> Vec<i64> {
    let token = app.token("alice");
    for _ in 0..n {
        json(app.place_order(&token, &order_body(), None).await, StatusCode::CREATED).await;
    }
    let claimed = crate::helpers::dead_letter_heads(app, Utc::now()).await;
    assert_eq!(claimed.len(), n, "one head event per order");
    claimed.iter().map(|e| e.id).collect()
}

async fn admin_routes_are_closed_to_customers(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let customer = app.token("alice");
    let routes: [(&str, &str); 6] = [
        ("GET", "/api/admin/outbox"),
        ("GET", "/api/admin/outbox/stats"),
        ("POST", "/api/admin/outbox/1/republish"),
        ("POST", "/api/admin/outbox/1/discard"),
        ("POST", "/api/admin/outbox/redrive"),
        ("GET", "/api/admin/outbox?status=DEAD_LETTER"),
    ];
    for (method, path) in routes {
        let url = format!("{}{path}", app.base);
        let request = |token: Option<&str>| {
            let mut r = match method {
                "GET" => app.client.get(&url),
                _ => app.client.post(&url).json(&json!({ "limit": 10 })),
            };
            if let Some(t) = token {
                r = r.bearer_auth(t);
            }
            r.send()
        };
        assert_eq!(request(None).await.unwrap().status(), StatusCode::UNAUTHORIZED, "{method} {path}");
        let forbidden = json(request(Some(&customer)).await.unwrap(), StatusCode::FORBIDDEN).await;
        assert_eq!(forbidden["code"], "FORBIDDEN", "{method} {path}");
    }
}

async fn operators_inspect_and_repair_dead_letters(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let ids = dead_letters(&app, 4).await;
    let admin = app.admin_token("ops");

    let page = json(
        app.get("/api/admin/outbox?status=DEAD_LETTER&limit=3", &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    let cursor = page["nextCursor"].as_str().expect("a next page");
    let rest = json(
        app.get(&format!("/api/admin/outbox?status=DEAD_LETTER&limit=3&cursor={cursor}"), &admin)
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["nextCursor"], Value::Null);
    assert_eq!(page["items"][0]["failureCode"], "UNROUTABLE");

    let stats = json(app.get("/api/admin/outbox/stats", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(stats["byStatus"]["DEAD_LETTER"], 4);
    assert_eq!(stats["byStatus"]["READY"], 4, "each order's second event waits");
    assert_eq!(stats["deadLettersByType"]["payment.approved"], 4);
    assert_eq!(stats["blockedAggregates"], 4);
    assert!(stats["oldestReadyAgeSeconds"].as_f64().unwrap() >= 0.0);

    // Only dead letters can be republished or discarded.
    let filter = orchestrator::application::ports::OutboxFilter {
        status: Some(orchestrator::domain::outbox::OutboxStatus::Ready),
        limit: 1,
        ..Default::default()
    };
    let ready_id = app.services.outbox_store.list(&filter).await.unwrap()[0].id;
    let conflict = json(
        app.post(&format!("/api/admin/outbox/{ready_id}/republish"), &admin).send().await.unwrap(),
        StatusCode::CONFLICT,
    )
    .await;
    assert_eq!(conflict["code"], "OUTBOX_NOT_DEAD_LETTER");
    let missing = app.post("/api/admin/outbox/999999/republish", &admin).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    let republished = json(
        app.post(&format!("/api/admin/outbox/{}/republish", ids[0]), &admin)
            .json(&json!({ "reason": "consumer fixed" }))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(republished["status"], "READY");
    assert_eq!(republished["retryCount"], 0);
    let discarded = json(
        app.post(&format!("/api/admin/outbox/{}/discard", ids[1]), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(discarded["status"], "DISCARDED");
    let audited = count_where(
        &app.db,
        "audit_log",
        &format!("action = 'OUTBOX_REPUBLISH' AND entity_id = '{}' AND actor = 'ops' AND detail = 'consumer fixed'", ids[0]),
    )
    .await;
    assert_eq!(audited, 1, "the actor and reason are audited");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'OUTBOX_DISCARD' AND actor = 'ops'").await, 1);

    // Redrive the remaining two: dry run first.
    let body =
        json!({ "eventType": "payment.approved", "failureCode": "UNROUTABLE", "limit": 10, "dryRun": true });
    let dry =
        json(app.post("/api/admin/outbox/redrive", &admin).json(&body).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!((dry["matched"].clone(), dry["redriven"].clone()), (json!(2), json!(0)));
    assert_eq!(dry["ids"], json!([ids[2], ids[3]]));
    let body = json!({ "olderThan": "0ms", "limit": 10, "reason": "broker binding restored" });
    let real =
        json(app.post("/api/admin/outbox/redrive", &admin).json(&body).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!((real["matched"].clone(), real["redriven"].clone()), (json!(2), json!(2)));
    let again = json(
        app.post("/api/admin/outbox/redrive", &admin).json(&json!({ "limit": 10 })).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["matched"], 0);
    let bad = json(
        app.post("/api/admin/outbox/redrive", &admin).json(&json!({ "limit": 0 })).send().await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(bad["field"], "limit");
    let stats = json(app.get("/api/admin/outbox/stats", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(stats["byStatus"]["DEAD_LETTER"], 0);
    assert_eq!(stats["blockedAggregates"], 0);
}

/// Issue 27 item 10: the console filtered dead letters in the page over the first 100 rows
/// while the redrive's dry run filtered on the server over all; `GET /api/admin/outbox`
/// filters on the server now, as the redrive does.
async fn the_outbox_list_filters_on_the_server(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let ids = dead_letters(&app, 3).await;
    let admin = app.admin_token("ops");
    let listed = |query: &'static str| {
        let (app, admin) = (&app, admin.clone());
        async move {
            let page = json(
                app.get(&format!("/api/admin/outbox?{query}"), &admin).send().await.unwrap(),
                StatusCode::OK,
            )
            .await;
            page["items"].as_array().unwrap().iter().map(|e| e["id"].as_i64().unwrap()).collect::<Vec<_>>()
        }
    };
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(listed("status=DEAD_LETTER&eventType=payment.approved").await, newest_first);
    assert!(listed("status=DEAD_LETTER&eventType=order.completed").await.is_empty());
    assert_eq!(listed("failureCode=UNROUTABLE").await, newest_first);
    assert!(listed("failureCode=CONFIRM_TIMEOUT").await.is_empty());
    assert_eq!(listed("olderThan=0ms").await, newest_first);
    assert!(listed("olderThan=1h").await.is_empty());
    for (query, field) in [("failureCode=SOMETIMES", "failureCode"), ("olderThan=yesterday", "olderThan")] {
        let refused = app.get(&format!("/api/admin/outbox?{query}"), &admin).send().await.unwrap();
        assert_eq!(json(refused, StatusCode::UNPROCESSABLE_ENTITY).await["field"], field);
    }
}

async fn an_orders_flow_tells_its_whole_story(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let detail =
        json(app.place_order(&alice, &order_body(), Some("settlement=fail")).await, StatusCode::CREATED)
            .await;
    let id = detail["id"].as_str().unwrap();
    let flow =
        json(app.get(&format!("/api/orders/{id}/flow"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(flow["orderId"], id);
    assert_eq!(flow["steps"].as_array().unwrap().len(), 3);
    let events: Vec<(&str, &str)> = flow["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["eventType"].as_str().unwrap(), e["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        vec![
            ("payment.approved", "READY"),
            ("settlement.failed", "READY"),
            ("order.failed", "READY"),
            ("payment.cancelled", "READY"),
            ("order.cancelled", "READY"),
        ]
    );
    let actions: Vec<&str> =
        flow["audit"].as_array().unwrap().iter().map(|a| a["action"].as_str().unwrap()).collect();
    assert_eq!(actions, vec!["ORDER_PLACED", "SETTLEMENT_FAILED", "COMPENSATED"]);

    let relay = app.services.relay();
    while relay.run_once().await.unwrap().claimed > 0 {}
    let flow =
        json(app.get(&format!("/api/orders/{id}/flow"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert!(
        flow["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["status"] == "PUBLISHED" && e["publishedAt"].is_string())
    );
    let hidden = app.get(&format!("/api/orders/{id}/flow"), &app.token("bob")).send().await.unwrap();
    assert_eq!(hidden.status(), StatusCode::NOT_FOUND);
}

async fn metrics_expose_orders_and_the_outbox(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    json(app.place_order(&alice, &order_body(), Some("payment=decline")).await, StatusCode::CREATED).await;
    let relay = app.services.relay();
    while relay.run_once().await.unwrap().claimed > 0 {}
    let text = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    for expected in [
        "orders{status=\"COMPLETED\"} 1",
        "orders{status=\"FAILED\"} 1",
        "outbox_rows{status=\"PUBLISHED\"} 4",
        "outbox_published_total 4",
        "outbox_confirms_total{outcome=\"ack\"} 4",
        "outbox_commit_to_confirm_seconds_bucket",
        "outbox_oldest_ready_age_seconds 0",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
}

on_both_databases!(
    admin_routes_are_closed_to_customers,
    operators_inspect_and_repair_dead_letters,
    the_outbox_list_filters_on_the_server,
    an_orders_flow_tells_its_whole_story,
    metrics_expose_orders_and_the_outbox,
);
