//! The authorization matrix (docs/spec.md §5): every route against every kind of caller, no object
//! of one customer visible or refundable by another, admin routes closed to customers, and
//! signing-key rotation.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TEST_SECRET, TestApp, json, order_body};
use crate::on_both_databases;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    Nobody,
    Expired,
    BadSignature,
    UnknownKid,
    Owner,
    OtherCustomer,
    Admin,
}

const CALLERS: [Caller; 7] = [
    Caller::Nobody,
    Caller::Expired,
    Caller::BadSignature,
    Caller::UnknownKid,
    Caller::Owner,
    Caller::OtherCustomer,
    Caller::Admin,
];

fn hs256(kid: &str, secret: &str, sub: &str, exp_offset: i64, roles: &[&str]) -> String {
    let now = chrono::Utc::now().timestamp();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(
        &header,
        &json!({ "sub": sub, "roles": roles, "exp": now + exp_offset, "iat": now }),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

fn token(app: &TestApp, caller: Caller) -> Option<String> {
    match caller {
        Caller::Nobody => None,
        Caller::Expired => Some(hs256("test", TEST_SECRET, "alice", -3600, &[])),
        Caller::BadSignature => {
            Some(hs256("test", "a-different-secret-a-different-secret!!", "alice", 600, &[]))
        }
        Caller::UnknownKid => Some(hs256("retired", TEST_SECRET, "alice", 600, &[])),
        Caller::Owner => Some(app.token("alice")),
        Caller::OtherCustomer => Some(app.token("mallory")),
        Caller::Admin => Some(app.admin_token("ops")),
    }
}

async fn call(
    app: &TestApp,
    method: &str,
    path: &str,
    body: Option<&Value>,
    caller: Caller,
) -> (StatusCode, Value) {
    let url = format!("{}{path}", app.base);
    let mut request = match method {
        "GET" => app.client.get(&url),
        _ => app.client.post(&url),
    };
    if let Some(b) = body {
        request = request.json(b);
    }
    if let Some(t) = token(app, caller) {
        request = request.bearer_auth(t);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The status each caller gets, per route.
async fn every_route_against_every_caller(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else { return };
    let alice = app.token("alice");
    // Objects of alice: a completed order per refund attempt, a failed one, a notification.
    let mut completed = Vec::new();
    for _ in 0..CALLERS.len() {
        completed.push(json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await);
    }
    let manual =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    let id = completed[0]["id"].as_str().unwrap().to_owned();
    let notification = manual["notification"]["id"].as_str().unwrap().to_owned();
    let for_alice = json!({ "customerId": "alice", "currency": "KRW", "items": [{ "sku": "A", "quantity": 1, "unitPrice": 1 }] });
    let redrive = json!({ "limit": 1, "dryRun": true });

    use Caller::*;
    let unauthenticated = |c: Caller| matches!(c, Nobody | Expired | BadSignature | UnknownKid);
    type Expect = fn(Caller) -> u16;
    let routes: Vec<(&str, String, Option<&Value>, Expect)> = vec![
        ("POST", "/api/orders".into(), Some(&for_alice), |c| match c {
            Owner | Admin => 201,
            OtherCustomer => 403,
            _ => 401,
        }),
        ("GET", "/api/orders".into(), None, |_| 200),
        ("GET", format!("/api/orders/{id}"), None, |c| match c {
            Owner | Admin => 200,
            _ => 404,
        }),
        ("GET", format!("/api/orders/{id}/flow"), None, |c| match c {
            Owner | Admin => 200,
            _ => 404,
        }),
        ("POST", format!("/api/orders/{id}/orchestrate"), None, |c| match c {
            Owner | Admin => 200,
            _ => 404,
        }),
        ("GET", "/api/admin/outbox".into(), None, |c| if c == Admin { 200 } else { 403 }),
        ("GET", "/api/admin/outbox/stats".into(), None, |c| if c == Admin { 200 } else { 403 }),
        ("POST", "/api/admin/outbox/999999/republish".into(), None, |c| if c == Admin { 404 } else { 403 }),
        ("POST", "/api/admin/outbox/999999/discard".into(), None, |c| if c == Admin { 404 } else { 403 }),
        ("POST", "/api/admin/outbox/redrive".into(), Some(&redrive), |c| if c == Admin { 200 } else { 403 }),
        ("GET", "/api/admin/notification-events".into(), None, |c| if c == Admin { 200 } else { 403 }),
        (
            "POST",
            "/api/admin/notification-events/retry-due".into(),
            None,
            |c| if c == Admin { 200 } else { 403 },
        ),
        ("GET", "/api/admin/payments/unconfirmed".into(), None, |c| if c == Admin { 200 } else { 403 }),
        ("GET", "/health/live".into(), None, |_| 200),
        ("GET", "/health/ready".into(), None, |_| 200),
        ("GET", "/openapi.json".into(), None, |_| 200),
    ];
    for (method, path, body, expect) in &routes {
        for caller in CALLERS {
            let (status, problem) = call(&app, method, path, *body, caller).await;
            let is_ops = path.starts_with("/health") || path.starts_with("/openapi");
            let expected = if unauthenticated(caller) && !is_ops { 401 } else { expect(caller) };
            assert_eq!(status.as_u16(), expected, "{method} {path} as {caller:?}: {problem}");
            if status.as_u16() >= 400 {
                assert!(problem["code"].is_string(), "{method} {path} as {caller:?}: problem+json expected");
            }
        }
    }
    // Refund: the owner or an admin; another customer gets 403 UNAUTHORIZED_REFUND.
    for (caller, order) in CALLERS.iter().zip(&completed) {
        let path = format!("/api/orders/{}/refund", order["id"].as_str().unwrap());
        let (status, problem) = call(&app, "POST", &path, None, *caller).await;
        let expected = match caller {
            c if unauthenticated(*c) => 401,
            OtherCustomer => 403,
            _ => 200,
        };
        assert_eq!(status.as_u16(), expected, "refund as {caller:?}: {problem}");
        if *caller == OtherCustomer {
            assert_eq!(problem["code"], "UNAUTHORIZED_REFUND");
        }
    }
    // Notification repairs: admin only.
    for caller in CALLERS {
        let path = format!("/api/admin/notification-events/{notification}/ignore");
        let (status, _) = call(&app, "POST", &path, None, caller).await;
        let expected = match caller {
            c if unauthenticated(c) => 401,
            Admin => 200,
            _ => 403,
        };
        assert_eq!(status.as_u16(), expected, "ignore as {caller:?}");
    }
    // Nothing of alice's is listed for mallory.
    let (_, page) = call(&app, "GET", "/api/orders?customerId=alice", None, OtherCustomer).await;
    assert!(page["items"].as_array().unwrap().is_empty());
}

on_both_databases!(every_route_against_every_caller);

const K1: &str = "first-signing-secret-first-signing-secret";
const K2: &str = "second-signing-secret-second-signing-secret";

/// Rotation: while both keys are configured, tokens of either verify and the new one
/// signs; once the old one is removed its tokens are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_keys_rotate() {
    let both = format!(
        r#"[{{"kid":"k2","algorithm":"HS256","secret":"{K2}"}},{{"kid":"k1","algorithm":"HS256","secret":"{K1}"}}]"#
    );
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &[("APP__AUTH__KEYS", both.as_str())]).await else {
        return;
    };
    let old = hs256("k1", K1, "alice", 600, &[]);
    let new = hs256("k2", K2, "alice", 600, &[]);
    for t in [&old, &new] {
        let r = app.client.get(format!("{}/api/orders", app.base)).bearer_auth(t).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
    }
    let minted = app.token("alice");
    let header = jsonwebtoken::decode_header(&minted).unwrap();
    assert_eq!(header.kid.as_deref(), Some("k2"), "the first key signs");

    let only_new = format!(r#"[{{"kid":"k2","algorithm":"HS256","secret":"{K2}"}}]"#);
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &[("APP__AUTH__KEYS", only_new.as_str())]).await
    else {
        return;
    };
    let r = app.client.get(format!("{}/api/orders", app.base)).bearer_auth(&old).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "a removed key's tokens are refused");
    let r = app.client.get(format!("{}/api/orders", app.base)).bearer_auth(&new).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}
