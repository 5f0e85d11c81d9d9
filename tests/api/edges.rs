//! The edges an outside test found (issue 11 items 2, 5–7): docs/spec.md §5's input rules the same
//! on both databases and for every source, the audit of replays and retries, the outbox
//! admin's limits, and the authentication rules.

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TEST_SECRET, TestApp, count, count_where, json, order_body};
use crate::on_both_databases;

fn admin(app: &TestApp) -> String {
    app.admin_token("ops")
}

/// A `422` naming `field`, as problem+json.
async fn refused(response: reqwest::Response, field: &str) {
    let body = json(response, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(body["field"], field, "{body}");
}

fn sends(app: &TestApp) -> u64 {
    app.services.provider_calls.as_ref().unwrap().notifications.load(Ordering::SeqCst)
}

fn cancels(app: &TestApp) -> u64 {
    app.services.provider_calls.as_ref().unwrap().cancels.load(Ordering::SeqCst)
}

async fn control_characters_are_refused_the_same_on_both_databases(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let nul_sku =
        json!({ "currency": "KRW", "items": [{ "sku": "A\u{0}", "quantity": 1, "unitPrice": 100 }] });
    refused(app.place_order(&alice, &nul_sku, None).await, "items[0].sku").await;
    let tab_customer = json!({ "customerId": "al\tice", "currency": "KRW", "items": [{ "sku": "A", "quantity": 1, "unitPrice": 100 }] });
    refused(app.place_order(&admin(&app), &tab_customer, None).await, "customerId").await;
    assert_eq!(count(&app.db, "orders").await, 0, "nothing stored");

    // A refund with a NUL in its reason: refused before the provider is asked.
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let id = order["id"].as_str().unwrap();
    let refund =
        app.post(&format!("/api/orders/{id}/refund"), &alice).json(&json!({ "reason": "bad\u{0}reason" }));
    refused(refund.send().await.unwrap(), "reason").await;
    let long =
        app.post(&format!("/api/orders/{id}/refund"), &alice).json(&json!({ "reason": "x".repeat(1001) }));
    refused(long.send().await.unwrap(), "reason").await;
    assert_eq!(cancels(&app), 0, "the provider was never asked");
    let after =
        json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(
        (after["status"].clone(), after["payment"]["status"].clone()),
        (json!("COMPLETED"), json!("APPROVED"))
    );

    // An operator's reason, on a notification waiting for one: nothing re-sent.
    let manual =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    let notification = manual["notification"]["id"].as_str().unwrap();
    let before = sends(&app);
    let reprocess = app
        .post(&format!("/api/admin/notification-events/{notification}/reprocess"), &admin(&app))
        .json(&json!({ "reason": "re\u{0}send" }));
    refused(reprocess.send().await.unwrap(), "reason").await;
    assert_eq!(sends(&app), before, "not re-sent");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'NOTIFICATION_REPROCESS'").await, 0);

    let redrive = app
        .post("/api/admin/outbox/redrive", &admin(&app))
        .json(&json!({ "eventType": "order.\u{0}completed", "limit": 10, "dryRun": true }));
    refused(redrive.send().await.unwrap(), "eventType").await;

    // A token claim is input too.
    let dirty = app.services.jwt.mint("eve\u{0}", &[], Duration::from_secs(60)).unwrap();
    refused(app.get("/api/orders", &dirty).send().await.unwrap(), "sub").await;

    // Query parameters: empty is absent; a control character is refused.
    let page =
        json(app.get("/api/orders?status=&limit=", &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    refused(app.get("/api/orders?customerId=%00", &admin(&app)).send().await.unwrap(), "customerId").await;
}

async fn an_order_of_nothing_is_refused(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let free = json!({ "currency": "KRW", "items": [{ "sku": "FREE", "quantity": 3, "unitPrice": 0 }] });
    refused(app.place_order(&app.token("alice"), &free, None).await, "totalAmount").await;
    assert_eq!(count(&app.db, "orders").await, 0);
    assert_eq!(app.services.provider_calls.as_ref().unwrap().approvals.load(Ordering::SeqCst), 0);
}

/// Issue 11 item 5: a replay that changes nothing and a retry that succeeds are audited.
async fn replays_and_successful_retries_are_audited(backend: Backend) {
    let env = [("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m")];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
        return;
    };
    let alice = app.token("alice");
    let completed = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let failed =
        json(app.place_order(&alice, &order_body(), Some("payment=decline")).await, StatusCode::CREATED)
            .await;
    for order in [&completed, &failed] {
        let path = format!("/api/orders/{}/orchestrate", order["id"].as_str().unwrap());
        let again = json(app.post(&path, &alice).send().await.unwrap(), StatusCode::OK).await;
        assert_eq!(again["status"], order["status"], "nothing changed");
    }
    assert_eq!(count_where(&app.db, "audit_log", "action = 'ORCHESTRATE_NOOP'").await, 2);

    let retried = json(
        app.place_order(&alice, &order_body(), Some("notification=auto_retry:1")).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(retried["notification"]["policy"], "AUTO_RETRY");
    app.advance(Duration::from_secs(3600));
    let report = json(
        app.post("/api/admin/notification-events/retry-due", &admin(&app)).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(report["succeeded"], 1, "{report}");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'NOTIFICATION_SENT'").await, 1);
    let id = retried["id"].as_str().unwrap();
    let now = json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(now["status"], "COMPLETED");
    assert_eq!(now["notification"]["policy"], "NONE", "docs/spec.md §3: NONE once sent");

    // An operator's ignore shows IGNORE, whatever the failure's policy was.
    let manual =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    let notification = manual["notification"]["id"].as_str().unwrap();
    // A `null` body equals no body (docs/spec.md §5).
    let ignored = app
        .post(&format!("/api/admin/notification-events/{notification}/ignore"), &admin(&app))
        .header("content-type", "application/json")
        .body("null")
        .send()
        .await
        .unwrap();
    assert_eq!(ignored.status(), StatusCode::OK);
    let id = manual["id"].as_str().unwrap();
    let now = json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(now["notification"]["policy"], "IGNORE");
}

/// Issue 11 item 6: the page size the API documents is accepted.
async fn the_outbox_listing_accepts_its_largest_page(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    for _ in 0..3 {
        app.place_order(&app.token("alice"), &order_body(), None).await;
    }
    let page =
        json(app.get("/api/admin/outbox?limit=100", &admin(&app)).send().await.unwrap(), StatusCode::OK)
            .await;
    assert!(page["items"].as_array().unwrap().len() >= 3);
    assert_eq!(page["nextCursor"], Value::Null);
    let small =
        json(app.get("/api/admin/outbox?limit=1", &admin(&app)).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(small["items"].as_array().unwrap().len(), 1);
    assert!(small["nextCursor"].is_string());
    let over = app.get("/api/admin/outbox?limit=101", &admin(&app)).send().await.unwrap();
    assert_eq!(over.status(), StatusCode::UNPROCESSABLE_ENTITY);
}

on_both_databases!(
    control_characters_are_refused_the_same_on_both_databases,
    an_order_of_nothing_is_refused,
    replays_and_successful_retries_are_audited,
    the_outbox_listing_accepts_its_largest_page,
);

fn token_with(claims: Value) -> String {
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("test".into());
    jsonwebtoken::encode(
        &header,
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(TEST_SECRET.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// Issue 11 item 7: the scheme in any case; one `Authorization` header only; `iat`/`nbf`
/// no further ahead than the leeway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_follows_the_rules_of_spec_5() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    let url = format!("{}/api/orders", app.base);
    let token = app.token("alice");
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let r =
            app.client.get(&url).header("Authorization", format!("{scheme} {token}")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{scheme}");
    }
    let other = app.token("mallory");
    let two = app
        .client
        .get(&url)
        .header("Authorization", format!("Bearer {token}"))
        .header("Authorization", format!("Bearer {other}"))
        .send()
        .await
        .unwrap();
    assert_eq!(two.status(), StatusCode::UNAUTHORIZED);

    let now = chrono::Utc::now().timestamp();
    let cases = [
        (json!({ "sub": "alice", "exp": now + 600, "iat": now + 3600 }), StatusCode::UNAUTHORIZED),
        (
            json!({ "sub": "alice", "exp": now + 600, "iat": now, "nbf": now + 3600 }),
            StatusCode::UNAUTHORIZED,
        ),
        (json!({ "sub": "alice", "exp": now + 600, "iat": now + 30, "nbf": now + 30 }), StatusCode::OK),
    ];
    for (claims, expected) in cases {
        let r = app.client.get(&url).bearer_auth(token_with(claims.clone())).send().await.unwrap();
        assert_eq!(r.status(), expected, "{claims}");
    }
}

#[test]
fn two_keys_with_one_kid_are_a_configuration_error() {
    let keys = r#"[{"kid":"k","algorithm":"HS256","secret":"first-secret-first-secret-first-secret"},
                   {"kid":"k","algorithm":"HS256","secret":"second-secret-second-secret-second"}]"#;
    let settings = orchestrator::config::Settings::load_from(
        None,
        vec![("APP__AUTH__KEYS".to_owned(), keys.to_owned())],
    )
    .expect("the keys themselves parse");
    let err =
        orchestrator::adapters::http::auth::JwtKeys::from_settings(&settings.auth).err().expect("refused");
    assert!(err.to_string().contains("auth.keys[1]"), "{err}");
}

/// docs/spec.md §5: a body must arrive within 10 s; a client that trickles it gets `408`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_arrive_in_time_is_refused() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else {
        return;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = app.base.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /api/orders HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"cur",
        app.token("alice")
    );
    let started = std::time::Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    // The rest of the body never comes.
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(count(&app.db, "orders").await, 0);
}

/// Issue 67: the dialects' listeners hold a body that stops arriving no longer than the
/// native one (10 s, then `408`), and answer it, and a body over 64 KiB, in their envelopes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialects_body_that_does_not_arrive_in_time_is_refused_in_its_envelope() {
    let env = [
        ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
        (
            "APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET",
            "commerce-orchestration-demo-secret-key-2026-commerce-orchestrati",
        ),
        ("APP__HTTP__DIALECTS__MOMO__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__MOMO__JWT_SECRET", "momo-platform-jwt-secret-key-for-tests-2026"),
    ];
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &env).await else {
        return;
    };
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let trickle = async |base: &str, path: &str| {
        let address = base.trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n\r\n{{\"meet"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        // The rest never comes.
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer)).await;
        String::from_utf8_lossy(&answer).into_owned()
    };
    let (commerce, momo) = (app.commerce.clone().unwrap(), app.momo.clone().unwrap());
    let (c, m) = tokio::join!(trickle(&commerce, "/api/orders"), trickle(&momo, "/payments/test/keyin"));
    assert!(c.starts_with("HTTP/1.1 408"), "{c}");
    assert!(c.contains(r#""code":"REQUEST_TIMEOUT""#) && c.contains(r#""success":false"#), "{c}");
    assert!(m.starts_with("HTTP/1.1 408"), "{m}");
    assert!(
        m.contains("요청 본문이 제시간에 도착하지 않았습니다.") && m.contains(r#""success":false"#),
        "{m}"
    );
    // Over 64 KiB: 413 in the envelope, never a plain-text answer of the HTTP library.
    let big = format!(r#"{{"meetingId":1,"pad":"{}"}}"#, "x".repeat(70 * 1024));
    for (base, path) in [(&commerce, "/api/orders"), (&momo, "/payments/test/keyin")] {
        let res = app
            .client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(big.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE, "{path}");
        let body: Value = res.json().await.expect("JSON in the envelope");
        assert_eq!(body["success"], json!(false), "{body}");
    }
    assert_eq!(count(&app.db, "orders").await, 0);
}

/// Issue 11 item 7: audit rows have a retention, applied by the daily clean-up.
async fn audit_rows_are_kept_for_their_retention(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &[("APP__AUDIT__RETENTION", "30d")]).await else {
        return;
    };
    let alice = app.token("alice");
    json(app.place_order(&alice, &order_body(), Some("payment=decline")).await, StatusCode::CREATED).await;
    let old = count(&app.db, "audit_log").await;
    assert!(old > 0);
    app.services.housekeeping.clean_up().await.unwrap();
    assert_eq!(count(&app.db, "audit_log").await, old, "nothing is past its retention yet");
    app.advance(Duration::from_secs(31 * 24 * 3600));
    json(app.place_order(&alice, &order_body(), Some("payment=decline")).await, StatusCode::CREATED).await;
    let before = count(&app.db, "audit_log").await;
    app.services.housekeeping.clean_up().await.unwrap();
    assert_eq!(count(&app.db, "audit_log").await, before - old, "only the rows past retention went");
}

/// Issue 11 item 7: an unauthenticated flood of bad callbacks cannot grow the audit log.
async fn a_flood_of_rejected_callbacks_writes_one_audit_row(backend: Backend) {
    let server = wiremock::MockServer::start().await;
    let Some(app) = crate::external::spawn(backend, &server, &[]).await else {
        return;
    };
    for _ in 0..200 {
        let r = app
            .client
            .post(format!("{}/api/payments/callbacks", app.base))
            .header("content-type", "application/json")
            .header("X-Signature", "t=1,v1=00")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(count_where(&app.db, "audit_log", "action = 'CALLBACK_REJECTED'").await, 1);
}

on_both_databases!(
    audit_rows_are_kept_for_their_retention,
    a_flood_of_rejected_callbacks_writes_one_audit_row
);
