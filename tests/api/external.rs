//! The external payment provider (docs/spec.md §9) against an HTTP mock of it (wiremock): the
//! request contract, every error mapping, unknown outcomes and reconciliation, signed
//! callbacks, and the race between the two.

use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use wiremock::matchers::{body_partial_json, header, header_regex, method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::helpers::{Backend, TestApp, count_where, json, order_body, steps};
use crate::on_both_databases;

const SECRET: &str = "sk_test_secret";
const WEBHOOK: &str = "whsec_test";
/// base64("sk_test_secret:")
const BASIC: &str = "Basic c2tfdGVzdF9zZWNyZXQ6";

pub(crate) async fn spawn(backend: Backend, server: &MockServer, extra: &[(&str, &str)]) -> Option<TestApp> {
    spawn_on(backend, server, extra, false).await
}

/// [`spawn`] on the manual clock: look-ups and compensations fall due when the test
/// advances time past their backoff.
pub(crate) async fn spawn_manual(
    backend: Backend,
    server: &MockServer,
    extra: &[(&str, &str)],
) -> Option<TestApp> {
    spawn_on(backend, server, extra, true).await
}

async fn spawn_on(
    backend: Backend,
    server: &MockServer,
    extra: &[(&str, &str)],
    manual: bool,
) -> Option<TestApp> {
    let uri = server.uri();
    let mut env = vec![
        ("APP__PAYMENT__PROVIDER", "external"),
        ("APP__PAYMENT__EXTERNAL__BASE_URL", uri.as_str()),
        ("APP__PAYMENT__EXTERNAL__SECRET_KEY", SECRET),
        ("APP__PAYMENT__EXTERNAL__WEBHOOK_SECRET", WEBHOOK),
        ("APP__PAYMENT__EXTERNAL__TIMEOUT", "300ms"),
        ("APP__PAYMENT__RECONCILIATION__INTERVAL", "10ms"),
    ];
    env.extend_from_slice(extra);
    if manual {
        TestApp::spawn_on_manual_clock(backend, &env).await
    } else {
        TestApp::spawn_with(backend, &env).await
    }
}

/// Past any reconciliation or compensation backoff these tests schedule.
pub(crate) const PAST_THE_BACKOFF: Duration = Duration::from_secs(24 * 3600);

pub(crate) fn approved(tx: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({ "providerTransactionId": tx, "status": "APPROVED" }))
}

pub(crate) async fn place(app: &TestApp) -> Value {
    json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await
}

pub(crate) async fn detail(app: &TestApp, id: &Value) -> Value {
    let admin = app.admin_token("ops");
    json(
        app.get(&format!("/api/orders/{}", id.as_str().unwrap()), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await
}

fn signed(body: &str, t: i64, secret: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(format!("{t}.{body}").as_bytes());
    let v1: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={v1}")
}

async fn callback(app: &TestApp, body: &Value, signature: Option<String>) -> reqwest::Response {
    let text = body.to_string();
    let mut request = app
        .client
        .post(format!("{}/api/payments/callbacks", app.base))
        .header("content-type", "application/json")
        .body(text.clone());
    if let Some(s) = signature {
        request = request.header("X-Signature", s);
    }
    request.send().await.unwrap()
}

async fn approvals_follow_the_contract(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/payments/confirm"))
        .and(header("authorization", BASIC))
        .and(header_regex("idempotency-key", "^pay-[0-9a-f-]{36}-1$"))
        .and(body_partial_json(json!({ "amount": 30000, "currency": "KRW", "customerId": "alice" })))
        .respond_with(approved("tx-contract"))
        .expect(1)
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["status"], "COMPLETED");
    assert_eq!(order["payment"]["providerTransactionId"], "tx-contract");
    let sent = &server.received_requests().await.unwrap()[0];
    let body: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(body["paymentRequestId"], order["payment"]["paymentRequestId"]);
    assert_eq!(body["orderId"], order["id"]);
    assert_eq!(
        sent.headers.get("idempotency-key").unwrap().to_str().unwrap(),
        order["payment"]["paymentRequestId"]
    );
}

async fn provider_errors_map_to_the_saga(backend: Backend) {
    // 4xx: a business decline, with the provider's code.
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(
            ResponseTemplate::new(400)
                .set_body_json(json!({ "code": "INSUFFICIENT_FUNDS", "message": "no" })),
        )
        .expect(1)
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["status"], "FAILED");
    assert_eq!(order["failureReason"], "PAYMENT_DECLINED");
    assert_eq!(order["payment"]["status"], "DECLINED");
    assert!(order["steps"][0]["detail"].as_str().unwrap().contains("INSUFFICIENT_FUNDS"));
    drop(app);

    // 5xx: transient, retried (bounded), then PROVIDER_UNAVAILABLE.
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(ResponseTemplate::new(503))
        .expect(3)
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["status"], "FAILED");
    assert_eq!(order["failureStage"], "PAYMENT");
    assert_eq!(order["failureReason"], "PROVIDER_UNAVAILABLE");
    assert_eq!(order["payment"], Value::Null, "nothing was charged, nothing recorded as a payment");
    drop(app);

    // Connection refused: the same.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let uri = format!("http://127.0.0.1:{closed}");
    let refused = [("APP__PAYMENT__EXTERNAL__BASE_URL", uri.as_str())];
    let Some(app) = spawn(backend, &server, &refused).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["failureReason"], "PROVIDER_UNAVAILABLE");
}

async fn a_timeout_is_an_unknown_outcome_that_reconciliation_resolves(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx-late").set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["status"], "PENDING_CONFIRMATION");
    assert_eq!(order["payment"]["status"], "CONFIRMATION_REQUIRED");
    assert_eq!(order["settlement"], Value::Null, "nothing goes on while the outcome is unknown");
    assert_eq!(steps(&order).last().unwrap(), &("PAYMENT".into(), "READY".into()));
    let prid = order["payment"]["paymentRequestId"].as_str().unwrap().to_owned();
    // Orchestrating again does not touch an unknown outcome (no second approve, no compensation).
    let again = json(
        app.post(&format!("/api/orders/{}/orchestrate", order["id"].as_str().unwrap()), &app.token("alice"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(again["status"], "PENDING_CONFIRMATION");
    let admin = app.admin_token("ops");
    let listed =
        json(app.get("/api/admin/payments/unconfirmed", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(listed[0]["paymentRequestId"], prid.as_str());

    Mock::given(method("GET"))
        .and(path(format!("/v1/payments/by-request/{prid}")))
        .and(header("authorization", BASIC))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({ "providerTransactionId": "tx-late", "status": "APPROVED" })),
        )
        .expect(1)
        .mount(&server)
        .await;
    let report = app.services.recovery.reconcile_due().await.unwrap();
    assert_eq!(report.resolved, 1);
    let now = detail(&app, &order["id"]).await;
    assert_eq!(now["status"], "COMPLETED");
    assert_eq!(now["payment"]["providerTransactionId"], "tx-late");
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.approved'").await, 1);
    assert_eq!(app.services.recovery.reconcile_due().await.unwrap().resolved, 0, "nothing left");
}

async fn reconciliation_declines_and_reapproves_with_the_same_key(backend: Backend) {
    let server = MockServer::start().await;
    // The first confirm times out; the second (after a 404 look-up) is answered.
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx-slow").set_delay(Duration::from_secs(2)))
        .up_to_n_times(2)
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let declined = place(&app).await;
    let lost = place(&app).await;
    let prid = |o: &Value| o["payment"]["paymentRequestId"].as_str().unwrap().to_owned();
    server.reset().await;
    Mock::given(path(format!("/v1/payments/by-request/{}", prid(&declined))))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({ "providerTransactionId": "tx-d", "status": "DECLINED", "declineCode": "CARD_EXPIRED" }),
        ))
        .mount(&server)
        .await;
    Mock::given(path(format!("/v1/payments/by-request/{}", prid(&lost))))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(path("/v1/payments/confirm"))
        .and(header("idempotency-key", prid(&lost).as_str()))
        .respond_with(approved("tx-second"))
        .expect(1)
        .mount(&server)
        .await;
    let report = app.services.recovery.reconcile_due().await.unwrap();
    assert_eq!(report.resolved, 2);
    let d = detail(&app, &declined["id"]).await;
    assert_eq!((d["status"].clone(), d["payment"]["status"].clone()), (json!("FAILED"), json!("DECLINED")));
    let l = detail(&app, &lost["id"]).await;
    assert_eq!(l["status"], "COMPLETED");
    assert_eq!(l["payment"]["providerTransactionId"], "tx-second");
}

async fn reconciliation_gives_up_after_its_attempts(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx").set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let env = [("APP__PAYMENT__RECONCILIATION__MAX_ATTEMPTS", "2")];
    let Some(app) = spawn_manual(backend, &server, &env).await else {
        return;
    };
    let order = place(&app).await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(500)).mount(&server).await;
    let mut exhausted = 0;
    for _ in 0..5 {
        exhausted += app.services.recovery.reconcile_due().await.unwrap().exhausted;
        app.advance(PAST_THE_BACKOFF);
    }
    assert_eq!(exhausted, 1);
    let d = detail(&app, &order["id"]).await;
    assert_eq!(d["status"], "PENDING_CONFIRMATION", "never guessed, never compensated");
    let admin = app.admin_token("ops");
    let listed =
        json(app.get("/api/admin/payments/unconfirmed", &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(listed[0]["reconcileAttempts"], 2);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'RECONCILIATION_EXHAUSTED'").await, 1);
}

async fn signed_callbacks_resume_the_saga_once(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx-cb").set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    let prid = order["payment"]["paymentRequestId"].as_str().unwrap();
    let body = json!({ "providerTransactionId": "tx-cb", "paymentRequestId": prid, "status": "APPROVED" });
    let now = chrono::Utc::now().timestamp();

    for (name, signature) in [
        ("missing", None),
        ("wrong secret", Some(signed(&body.to_string(), now, "not-the-secret"))),
        ("stale", Some(signed(&body.to_string(), now - 301, WEBHOOK))),
        ("malformed", Some("t=abc,v1=zz".to_owned())),
    ] {
        let response = callback(&app, &body, signature).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{name}");
    }
    assert_eq!(detail(&app, &order["id"]).await["status"], "PENDING_CONFIRMATION", "nothing changed");
    // Bounded (docs/spec.md §5, issue 11 item 7): one audit row per 10 s window for an
    // unauthenticated flood; every rejection still counts in /metrics.
    assert_eq!(count_where(&app.db, "audit_log", "action = 'CALLBACK_REJECTED'").await, 1);

    let applied =
        json(callback(&app, &body, Some(signed(&body.to_string(), now, WEBHOOK))).await, StatusCode::OK)
            .await;
    assert_eq!(applied["result"], "APPLIED");
    assert_eq!(applied["orderStatus"], "COMPLETED");
    let replay =
        json(callback(&app, &body, Some(signed(&body.to_string(), now, WEBHOOK))).await, StatusCode::OK)
            .await;
    assert_eq!(replay["result"], "DUPLICATE");
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.approved'").await, 1);

    let unknown =
        json!({ "providerTransactionId": "tx-x", "paymentRequestId": "pay-nope", "status": "APPROVED" });
    let missing = callback(&app, &unknown, Some(signed(&unknown.to_string(), now, WEBHOOK))).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let odd = json!({ "providerTransactionId": "tx-x", "paymentRequestId": prid, "status": "MAYBE" });
    let invalid = callback(&app, &odd, Some(signed(&odd.to_string(), now, WEBHOOK))).await;
    assert_eq!(invalid.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

async fn a_callback_racing_reconciliation_applies_once(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx-race").set_delay(Duration::from_secs(2)))
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let orders = [place(&app).await, place(&app).await, place(&app).await];
    Mock::given(path_regex("^/v1/payments/by-request/"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({ "providerTransactionId": "tx-race", "status": "APPROVED" }))
                .set_delay(Duration::from_millis(50)),
        )
        .mount(&server)
        .await;
    let now = chrono::Utc::now().timestamp();
    let callbacks = orders.iter().map(|o| {
        let body = json!({
            "providerTransactionId": format!("tx-cb-{}", o["id"].as_str().unwrap()),
            "paymentRequestId": o["payment"]["paymentRequestId"],
            "status": "APPROVED"
        });
        let signature = signed(&body.to_string(), now, WEBHOOK);
        let app = &app;
        async move { callback(app, &body, Some(signature)).await.status() }
    });
    let (statuses, reconciled) =
        tokio::join!(futures_util::future::join_all(callbacks), app.services.recovery.reconcile_due(),);
    reconciled.unwrap();
    for status in statuses {
        assert!(status == StatusCode::OK || status == StatusCode::CONFLICT, "{status}");
    }
    // Whatever lost its race is settled by the next round (or the provider's retry).
    app.services.recovery.reconcile_due().await.unwrap();
    for o in &orders {
        let d = detail(&app, &o["id"]).await;
        assert_eq!(d["status"], "COMPLETED");
    }
    assert_eq!(
        count_where(&app.db, "outbox_events", "event_type = 'payment.approved'").await,
        3,
        "once per order"
    );
    assert_eq!(count_where(&app.db, "settlements", "1 = 1").await, 3, "settled once per order");
}

async fn an_idempotent_replay_never_calls_the_provider_again(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm"))
        .respond_with(approved("tx-once"))
        .expect(1)
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let token = app.token("alice");
    for _ in 0..3 {
        let response = app
            .post("/api/orders", &token)
            .header("Idempotency-Key", "k-1")
            .json(&order_body())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
}

on_both_databases!(
    approvals_follow_the_contract,
    provider_errors_map_to_the_saga,
    a_timeout_is_an_unknown_outcome_that_reconciliation_resolves,
    reconciliation_declines_and_reapproves_with_the_same_key,
    reconciliation_gives_up_after_its_attempts,
    signed_callbacks_resume_the_saga_once,
    a_callback_racing_reconciliation_applies_once,
    an_idempotent_replay_never_calls_the_provider_again,
);

/// A compensation whose cancel keeps failing is retried with backoff, then left to an
/// operator: the order stays FAILED with its payment APPROVED (mock providers).
async fn failing_compensations_are_retried_then_left_to_an_operator(backend: Backend) {
    let env = [
        ("APP__PAYMENT__RECONCILIATION__INTERVAL", "1m"),
        ("APP__PAYMENT__RECONCILIATION__MAX_ATTEMPTS", "3"),
    ];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
        return;
    };
    let order = json(
        app.place_order(&app.token("alice"), &order_body(), Some("settlement=fail,refund=fail")).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(order["status"], "FAILED");
    assert_eq!(order["payment"]["status"], "APPROVED");
    assert_eq!(steps(&order).last().unwrap(), &("COMPENSATION".into(), "FAILED".into()));
    assert_eq!(
        app.services.recovery.retry_compensations().await.unwrap().retried,
        0,
        "not before its backoff"
    );
    let exhausted = |token: String| {
        let request = app.get("/api/admin/payments/compensations-exhausted", &token).send();
        async move { request.await.unwrap() }
    };
    let listed = json(exhausted(app.admin_token("ops")).await, StatusCode::OK).await;
    assert_eq!(listed, json!([]), "one failure is not exhaustion");
    let mut retried = 0;
    for _ in 0..20 {
        app.advance(PAST_THE_BACKOFF);
        retried += app.services.recovery.retry_compensations().await.unwrap().retried;
    }
    assert_eq!(retried, 2, "two more attempts after the first (max 3)");
    let d = detail(&app, &order["id"]).await;
    let failures =
        steps(&d).iter().filter(|s| *s == &("COMPENSATION".to_owned(), "FAILED".to_owned())).count();
    assert_eq!(failures, 3);
    assert_eq!(d["status"], "FAILED");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'COMPENSATION_EXHAUSTED'").await, 1);
    let listed = json(exhausted(app.admin_token("ops")).await, StatusCode::OK).await;
    assert_eq!(listed[0]["id"], order["id"], "listed for an operator: {listed}");
    assert_eq!(exhausted(app.token("alice")).await.status(), StatusCode::FORBIDDEN);
    let cancels =
        app.services.provider_calls.as_ref().unwrap().cancels.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(cancels, 3);
}

/// `payment=timeout` in mock mode: unknown outcome, then the embedded worker reconciles.
async fn the_embedded_worker_reconciles_unknown_outcomes(backend: Backend) {
    let env = [("APP__PAYMENT__RECONCILIATION__INTERVAL", "20ms"), ("APP__WORKER__EMBEDDED", "true")];
    let Some(app) = TestApp::spawn_with(backend, &env).await else {
        return;
    };
    let order = json(
        app.place_order(&app.token("alice"), &order_body(), Some("payment=timeout")).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(order["status"], "PENDING_CONFIRMATION");
    crate::helpers::until_within("the order reconciled", Duration::from_secs(15), || async {
        detail(&app, &order["id"]).await["status"] == "COMPLETED"
    })
    .await;
}

on_both_databases!(
    failing_compensations_are_retried_then_left_to_an_operator,
    the_embedded_worker_reconciles_unknown_outcomes
);
