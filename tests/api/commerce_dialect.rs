//! The commerce backend's HTTP API (docs/spec.md §14, docs/dialects.md), as its clients read
//! it: the answers parsed as JSON and compared field by field with what
//! `Gseobi/commerce-orchestration-backend` answers (its `ApiResponse`, `ErrorCode` texts,
//! `RequestTraceFilter`, demo tokens), against the real listener on both databases.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp};
use crate::on_both_databases;

/// 64 bytes: the platform's JWT library signs HS512 with a key this long.
const SECRET: &str = "commerce-orchestration-demo-secret-key-2026-commerce-orchestrati";

async fn dialect(backend: Backend, demo_token: bool) -> Option<(TestApp, String)> {
    let demo = if demo_token { "true" } else { "false" };
    let app = TestApp::spawn_with(
        backend,
        &[
            ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
            ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
            ("APP__HTTP__DIALECTS__COMMERCE__DEMO_TOKEN", demo),
        ],
    )
    .await?;
    let base = app.commerce.clone().expect("the dialect's listener is on");
    Some((app, base))
}

/// A token as the platform mints it: `sub, iss, iat, exp, roles`, under `alg`.
fn platform_token(alg: Algorithm, user: &str, roles: &[&str], exp_in: i64) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = json!({ "sub": user, "iss": "commerce-orchestration-backend", "iat": now, "exp": now + exp_in, "roles": roles });
    jsonwebtoken::encode(&Header::new(alg), &claims, &EncodingKey::from_secret(SECRET.as_bytes()).unwrap())
        .unwrap()
}

/// The envelope of an error, as the platform writes it.
async fn error(
    res: reqwest::Response,
    status: StatusCode,
    code: &str,
    message: &str,
) -> reqwest::header::HeaderMap {
    assert_eq!(res.status(), status);
    let headers = res.headers().clone();
    assert!(
        headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json")),
        "{headers:?}"
    );
    let body: Value = res.json().await.unwrap();
    assert_eq!(body, json!({ "success": false, "code": code, "message": message, "data": null }));
    headers
}

async fn demo_tokens_are_the_platforms(backend: Backend) {
    let Some((app, base)) = dialect(backend, true).await else { return };
    let client = &app.client;
    let res = client
        .post(format!("{base}/api/auth/token"))
        .json(&json!({ "username": "demo-admin", "roles": ["ROLE_USER", "ROLE_ADMIN"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let body: Value = res.json().await.unwrap();
    assert_eq!(
        (&body["success"], &body["code"], &body["message"]),
        (&json!(true), &json!("SUCCESS"), &json!("요청이 정상 처리되었습니다."))
    );
    assert_eq!(body["data"]["tokenType"], "Bearer");
    assert_eq!(body["data"]["roles"], json!(["ROLE_USER", "ROLE_ADMIN"]));
    // As the platform's library reads it: HS512 under a 64-byte key, its claims.
    let token = body["data"]["accessToken"].as_str().unwrap();
    assert_eq!(jsonwebtoken::decode_header(token).unwrap().alg, Algorithm::HS512);
    let mut validation = Validation::new(Algorithm::HS512);
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<Value>(
        token,
        &DecodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        &validation,
    )
    .unwrap()
    .claims;
    assert_eq!(claims["sub"], "demo-admin");
    assert_eq!(claims["iss"], "commerce-orchestration-backend");
    assert_eq!(claims["roles"], json!(["ROLE_USER", "ROLE_ADMIN"]));
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 3600);

    // No roles: ROLE_USER, as the platform's controller defaults them.
    let res = client
        .post(format!("{base}/api/auth/token"))
        .json(&json!({ "username": "demo-user" }))
        .send()
        .await
        .unwrap();
    assert_eq!(res.json::<Value>().await.unwrap()["data"]["roles"], json!(["ROLE_USER"]));
    // Its validation message.
    let res =
        client.post(format!("{base}/api/auth/token")).json(&json!({ "username": " " })).send().await.unwrap();
    error(res, StatusCode::BAD_REQUEST, "BAD_REQUEST", "username은 필수입니다.").await;
    // Not JSON (the platform: 500; docs/dialects.md).
    let res = client
        .post(format!("{base}/api/auth/token"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    error(res, StatusCode::BAD_REQUEST, "BAD_REQUEST", "잘못된 요청입니다.").await;
}

async fn tokens_are_checked_and_every_answer_is_in_the_envelope(backend: Backend) {
    let Some((app, base)) = dialect(backend, false).await else { return };
    let client = &app.client;
    // Demo tokens off: the path is not served. Like any path under /api/, a token comes
    // first: 401 without one (the platform's own test expects it), 404 with one.
    let res =
        client.post(format!("{base}/api/auth/token")).json(&json!({ "username": "x" })).send().await.unwrap();
    error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.").await;
    let res = client
        .post(format!("{base}/api/auth/token"))
        .bearer_auth(platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], 600))
        .json(&json!({ "username": "x" }))
        .send()
        .await
        .unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;

    // Health, outside the envelope, as Spring Boot's actuator.
    let res = client.get(format!("{base}/actuator/health")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({ "status": "UP" }));

    // Under /api/ a token comes first: none, expired, signed with another key, an
    // algorithm the key is not for.
    let unknown = format!("{base}/api/nothing-here");
    let headers = error(
        client.get(&unknown).send().await.unwrap(),
        StatusCode::UNAUTHORIZED,
        "UNAUTHORIZED",
        "인증이 필요합니다.",
    )
    .await;
    assert_eq!(headers.get("www-authenticate").unwrap(), "Bearer");
    let expired = platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], -10);
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({ "sub": "demo-user", "exp": chrono::Utc::now().timestamp() + 60, "roles": ["ROLE_ADMIN"] }),
        &EncodingKey::from_secret(b"another-secret-another-secret-another-secret-another-secret-64b!")
            .unwrap(),
    )
    .unwrap();
    // Signed with its key but issued, or valid only, an hour from now; or `roles` as an
    // object (docs/spec.md §5): refused, never read as granting a role.
    let now = chrono::Utc::now().timestamp();
    let signed = |claims: Value| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    };
    let later =
        signed(json!({ "sub": "demo-user", "iat": now + 3600, "exp": now + 7200, "roles": ["ROLE_USER"] }));
    let not_before =
        signed(json!({ "sub": "demo-user", "nbf": now + 3600, "exp": now + 7200, "roles": ["ROLE_USER"] }));
    let object_roles =
        signed(json!({ "sub": "demo-user", "exp": now + 600, "roles": { "ROLE_ADMIN": true } }));
    for token in [expired.as_str(), forged.as_str(), "not-a-jwt", &later, &not_before, &object_roles] {
        let res = client.get(&unknown).bearer_auth(token).send().await.unwrap();
        error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.").await;
    }
    // A valid one (HS256 under the 64-byte key: accepted, as the platform's library does):
    // then the unknown route is a 404 in the envelope.
    let user = platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], 600);
    let res = client.get(&unknown).bearer_auth(&user).send().await.unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;
    let res = client.get(format!("{base}/nowhere")).send().await.unwrap();
    error(res, StatusCode::NOT_FOUND, "NOT_FOUND", "요청한 리소스를 찾을 수 없습니다.").await;
    // A wrong method.
    let res = client.get(format!("{base}/api/auth/token")).send().await.unwrap();
    let headers =
        error(res, StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED", "지원하지 않는 HTTP 메서드입니다.")
            .await;
    assert_eq!(headers.get("allow").unwrap(), "POST");

    // X-Trace-Id: echoed, else a new UUID, on every answer.
    let res = client
        .get(format!("{base}/actuator/health"))
        .header("X-Trace-Id", "trace-abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(res.headers().get("x-trace-id").unwrap(), "trace-abc-123");
    let res = client.get(&unknown).send().await.unwrap();
    let generated = res.headers().get("x-trace-id").unwrap().to_str().unwrap().to_owned();
    assert!(uuid::Uuid::parse_str(&generated).is_ok(), "{generated}");
    // Its OpenAPI document, on the native listener beside ours: its ten operations, tagged.
    let doc: Value =
        client.get(format!("{}/openapi/commerce.json", app.base)).send().await.unwrap().json().await.unwrap();
    let mut operations: Vec<String> = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            assert_eq!(op["tags"], json!(["commerce"]), "{method} {path}");
            operations.push(format!("{} {path}", method.to_uppercase()));
        }
    }
    operations.sort();
    assert_eq!(
        operations,
        [
            "GET /actuator/health",
            "GET /api/orders/{orderId}",
            "GET /api/orders/{orderId}/flow",
            "POST /api/admin/notification-events/retry-due",
            "POST /api/admin/notification-events/{notificationEventId}/ignore",
            "POST /api/admin/notification-events/{notificationEventId}/retry",
            "POST /api/admin/outbox-events/{outboxEventId}/retry",
            "POST /api/auth/token",
            "POST /api/orders",
            "POST /api/orders/{orderId}/orchestrate",
        ]
    );
    // The native API is not on this listener, nor this dialect on the native one.
    let res = client.get(format!("{base}/health/ready")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
    let res = client.get(format!("{}/actuator/health", app.base)).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::NOT_FOUND);
}

/// Retries a minute apart: on the manual clock a retry is due once the test moves time on.
const RETRIES: &[(&str, &str)] =
    &[("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"), ("APP__NOTIFICATION__RETRY__MAX_ATTEMPTS", "5")];

/// The platform's clients: a bearer token, its paths, its envelope read back.
struct Client<'a> {
    app: &'a TestApp,
    base: String,
    token: String,
}

impl Client<'_> {
    async fn send(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let url = format!("{}{path}", self.base);
        let mut request = match method {
            "GET" => self.app.client.get(url),
            _ => self.app.client.post(url),
        }
        .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let res = request.send().await.unwrap();
        let status = res.status();
        assert!(res.headers().contains_key("x-trace-id"), "{path}: X-Trace-Id on every answer");
        (status, res.json().await.unwrap())
    }

    /// A success's `data`.
    async fn data(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, body) = self.send(method, path, body).await;
        assert_eq!(status, StatusCode::OK, "{method} {path}: {body}");
        assert_eq!(
            (&body["success"], &body["code"], &body["message"]),
            (&json!(true), &json!("SUCCESS"), &json!("요청이 정상 처리되었습니다.")),
            "{body}"
        );
        body["data"].clone()
    }

    /// An error's code and message (`data: null`).
    async fn refused(&self, method: &str, path: &str, body: Option<Value>) -> (StatusCode, String, String) {
        let (status, body) = self.send(method, path, body).await;
        assert_eq!((&body["success"], &body["data"]), (&json!(false), &Value::Null), "{body}");
        (status, body["code"].as_str().unwrap().to_owned(), body["message"].as_str().unwrap().to_owned())
    }

    /// `POST /api/orders` as its `OrderFlowIntegrationTest` does; the new order's id.
    async fn create(&self, description: &str) -> i64 {
        let body = json!({ "customerId": "customer-1", "totalAmount": 12000, "currency": "KRW", "description": description });
        let data = self.data("POST", "/api/orders", Some(body)).await;
        data["orderId"].as_i64().unwrap()
    }
}

fn admin_client<'a>(app: &'a TestApp, base: &str) -> Client<'a> {
    Client {
        app,
        base: base.to_owned(),
        token: platform_token(Algorithm::HS512, "tester", &["ROLE_USER", "ROLE_ADMIN"], 600),
    }
}

/// A `LocalDateTime` as Jackson writes it: no offset, seconds, an optional fraction.
fn is_local_date_time(value: &Value) -> bool {
    let Some(text) = value.as_str() else { return false };
    let (main, fraction) = text.split_once('.').unwrap_or((text, "0"));
    chrono::NaiveDateTime::parse_from_str(main, "%Y-%m-%dT%H:%M:%S").is_ok()
        && !fraction.is_empty()
        && fraction.len() <= 9
        && fraction.bytes().all(|b| b.is_ascii_digit())
}

/// The flow's steps as (stepType, status).
fn sequence(flow: &Value) -> Vec<(String, String)> {
    flow["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stepType"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect()
}

fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
    expected.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

/// A fault word, the order status and steps it leads to, the payment, settlement and
/// notification statuses, and how many outbox rows the flow lists.
type FaultCase = (&'static str, &'static str, &'static [(&'static str, &'static str)], [Value; 3], usize);

const HAPPY: &[(&str, &str)] = &[
    ("ORDER_CREATE", "SUCCESS"),
    ("PAYMENT", "READY"),
    ("PAYMENT", "SUCCESS"),
    ("SETTLEMENT", "SUCCESS"),
    ("NOTIFICATION", "SUCCESS"),
    ("COMPLETE", "SUCCESS"),
];
const NOTIFICATION_FAILED: &[(&str, &str)] = &[
    ("ORDER_CREATE", "SUCCESS"),
    ("PAYMENT", "READY"),
    ("PAYMENT", "SUCCESS"),
    ("SETTLEMENT", "SUCCESS"),
    ("NOTIFICATION", "FAILED"),
    ("COMPENSATION", "READY"),
];

async fn orders_wait_for_orchestrate_and_run_as_its_integration_tests_expect(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(
        backend,
        &[
            ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
            ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
        ],
    )
    .await
    else {
        return;
    };
    let base = app.commerce.clone().expect("the dialect's listener is on");
    let client = admin_client(&app, &base);

    // Created: its OrderResponse, held in CREATED.
    let body = json!({ "customerId": "customer-1", "totalAmount": 12000, "currency": "KRW", "description": "normal happy path" });
    let created = client.data("POST", "/api/orders", Some(body)).await;
    let id = created["orderId"].as_i64().unwrap();
    assert!(id > 0);
    assert_eq!(
        (
            &created["customerId"],
            &created["totalAmount"],
            &created["currency"],
            &created["description"],
            &created["status"]
        ),
        (&json!("customer-1"), &json!(12000), &json!("KRW"), &json!("normal happy path"), &json!("CREATED"))
    );
    assert!(is_local_date_time(&created["createdAt"]), "{created}");
    let detail = client.data("GET", &format!("/api/orders/{id}"), None).await;
    assert_eq!(detail["orderStatus"], "CREATED");
    assert_eq!(
        (&detail["paymentStatuses"], &detail["settlementStatuses"], &detail["notificationStatuses"]),
        (&json!([]), &json!([]), &json!([]))
    );
    assert!(is_local_date_time(&detail["updatedAt"]), "{detail}");
    let flow = client.data("GET", &format!("/api/orders/{id}/flow"), None).await;
    assert_eq!(flow, json!({ "orderId": id, "orderStatus": "CREATED", "steps": [], "outboxEvents": [] }));

    // Held, not stalled: a day later stalled-saga recovery leaves it alone.
    app.advance(std::time::Duration::from_secs(3600 * 24));
    assert_eq!(app.services.recovery.resume_stalled().await.unwrap(), 0);
    assert_eq!(client.data("GET", &format!("/api/orders/{id}"), None).await["orderStatus"], "CREATED");

    // Orchestrated: the happy path, its six steps and two outbox rows.
    let flow = client.data("POST", &format!("/api/orders/{id}/orchestrate"), None).await;
    assert_eq!((&flow["orderId"], &flow["orderStatus"]), (&json!(id), &json!("COMPLETED")));
    assert_eq!(sequence(&flow), pairs(HAPPY));
    let details: Vec<&str> =
        flow["steps"].as_array().unwrap().iter().map(|s| s["detail"].as_str().unwrap()).collect();
    assert_eq!(details[0], "Order already created");
    assert_eq!(details[1], "Payment requested");
    assert!(
        details[2].strip_prefix("Payment approved: paymentId=").unwrap().parse::<i64>().is_ok(),
        "{}",
        details[2]
    );
    assert_eq!(details[3], format!("Settlement requested: settlementId={id}"));
    assert_eq!(details[4], format!("Notification requested: notificationEventId={id}"));
    assert_eq!(details[5], "Happy path orchestration completed");
    let step_ids: Vec<i64> =
        flow["steps"].as_array().unwrap().iter().map(|s| s["stepId"].as_i64().unwrap()).collect();
    assert_eq!(step_ids, [1, 2, 3, 4, 5, 6]);
    assert!(flow["steps"].as_array().unwrap().iter().all(|s| is_local_date_time(&s["createdAt"])));
    let outbox = flow["outboxEvents"].as_array().unwrap();
    assert_eq!(outbox.len(), 2, "{flow}");
    for (row, (topic, event_type)) in outbox.iter().zip([
        ("commerce.settlement.requested", "SETTLEMENT_REQUESTED"),
        ("commerce.notification.requested", "NOTIFICATION_REQUESTED"),
    ]) {
        assert_eq!((&row["topic"], &row["eventType"]), (&json!(topic), &json!(event_type)));
        // The exact payload its consumers parse.
        assert_eq!(row["payload"], format!(r#"{{"orderId":{id},"eventType":"{event_type}"}}"#));
        assert_eq!(row["retryCount"], 0);
        assert!(row["outboxEventId"].as_i64().unwrap() > 0);
        assert!(["READY", "PROCESSING", "PUBLISHED"].contains(&row["status"].as_str().unwrap()), "{row}");
        assert!(is_local_date_time(&row["createdAt"]));
        for key in [
            "nextAttemptAt",
            "lastAttemptAt",
            "publishedAt",
            "deadLetteredAt",
            "failureCode",
            "failureReason",
        ] {
            assert!(row.get(key).is_some(), "{key} is always there, null or not");
        }
    }
    // Its replay: the same flow, nothing run again.
    let again = client.data("POST", &format!("/api/orders/{id}/orchestrate"), None).await;
    assert_eq!(again["steps"], flow["steps"]);
    assert_eq!(again["outboxEvents"].as_array().unwrap().len(), 2);
    let read = client.data("GET", &format!("/api/orders/{id}/flow"), None).await;
    assert_eq!((&read["orderStatus"], &read["steps"]), (&json!("COMPLETED"), &flow["steps"]));
    let detail = client.data("GET", &format!("/api/orders/{id}"), None).await;
    assert_eq!(
        (
            &detail["orderStatus"],
            &detail["paymentStatuses"],
            &detail["settlementStatuses"],
            &detail["notificationStatuses"]
        ),
        (&json!("COMPLETED"), &json!(["APPROVED"]), &json!(["REQUESTED"]), &json!(["SENT"]))
    );
    // The same order in the native API and its audit log.
    let native = crate::helpers::json(
        app.get("/api/orders?customerId=customer-1", &app.admin_token("ops")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let mine = native["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["number"] == json!(id))
        .expect("listed natively");
    assert_eq!((&mine["status"], &mine["source"]), (&json!("COMPLETED"), &json!("COMMERCE")));
    let audited = crate::helpers::count_where(&app.db, "audit_log", "actor = 'commerce:tester'").await;
    assert!(audited >= 2, "placed and replayed by the platform's user: {audited}");

    // Every fault word: its outcome, its step sequence, its statuses.
    let cases: [FaultCase; 7] = [
        (
            "FAIL_PAYMENT",
            "FAILED",
            &[("ORDER_CREATE", "SUCCESS"), ("PAYMENT", "READY"), ("PAYMENT", "FAILED")],
            [json!(["FAILED"]), json!([]), json!([])],
            0,
        ),
        (
            "PAYMENT_TIMEOUT_UNKNOWN",
            "PAYMENT_PENDING",
            &[("ORDER_CREATE", "SUCCESS"), ("PAYMENT", "READY"), ("PAYMENT", "FAILED")],
            [json!(["CONFIRMATION_REQUIRED"]), json!([]), json!([])],
            0,
        ),
        (
            "FAIL_SETTLEMENT",
            "CANCELLED",
            &[
                ("ORDER_CREATE", "SUCCESS"),
                ("PAYMENT", "READY"),
                ("PAYMENT", "SUCCESS"),
                ("SETTLEMENT", "FAILED"),
                ("COMPENSATION", "SUCCESS"),
            ],
            [json!(["CANCELLED"]), json!(["FAILED"]), json!([])],
            0,
        ),
        (
            "FAIL_NOTIFICATION",
            "FAILED",
            NOTIFICATION_FAILED,
            [json!(["APPROVED"]), json!(["REQUESTED"]), json!(["MANUAL_INTERVENTION_REQUIRED"])],
            // Its settlement record, written before the notification was tried.
            1,
        ),
        (
            "FAIL_NOTIFICATION_MANUAL",
            "FAILED",
            NOTIFICATION_FAILED,
            [json!(["APPROVED"]), json!(["REQUESTED"]), json!(["MANUAL_INTERVENTION_REQUIRED"])],
            // Its settlement record, written before the notification was tried.
            1,
        ),
        (
            "FAIL_NOTIFICATION_RETRY",
            "FAILED",
            NOTIFICATION_FAILED,
            [json!(["APPROVED"]), json!(["REQUESTED"]), json!(["RETRY_SCHEDULED"])],
            // Its settlement record, written before the notification was tried.
            1,
        ),
        (
            "FAIL_NOTIFICATION_IGNORE",
            "COMPLETED",
            HAPPY,
            [json!(["APPROVED"]), json!(["REQUESTED"]), json!(["IGNORED"])],
            2,
        ),
    ];
    for (word, status, steps, statuses, outbox) in cases {
        let id = client.create(word).await;
        let flow = client.data("POST", &format!("/api/orders/{id}/orchestrate"), None).await;
        assert_eq!(flow["orderStatus"], status, "{word}: {flow}");
        assert_eq!(sequence(&flow), pairs(steps), "{word}: {flow}");
        assert_eq!(flow["outboxEvents"].as_array().unwrap().len(), outbox, "{word}: {flow}");
        let detail = client.data("GET", &format!("/api/orders/{id}"), None).await;
        assert_eq!(
            [&detail["paymentStatuses"], &detail["settlementStatuses"], &detail["notificationStatuses"]],
            [&statuses[0], &statuses[1], &statuses[2]],
            "{word}: {detail}"
        );
        let details: Vec<&str> =
            flow["steps"].as_array().unwrap().iter().map(|s| s["detail"].as_str().unwrap()).collect();
        match word {
            // Its mock provider's refusal, as its `PaymentService` records the exception.
            "FAIL_PAYMENT" => assert_eq!(details[2], "Simulated payment failure"),
            "FAIL_SETTLEMENT" => {
                assert_eq!(details[3], format!("정산 요청 mock 실패가 발생했습니다. settlementId={id}"));
                assert!(details[4].starts_with("Payment cancelled after settlement failure: paymentId="));
            }
            "FAIL_NOTIFICATION" | "FAIL_NOTIFICATION_MANUAL" => {
                assert_eq!(
                    details[4],
                    format!(
                        "알림 요청 manual intervention 대상 실패가 발생했습니다. notificationEventId={id}"
                    )
                );
                assert_eq!(
                    details[5],
                    "Notification requires manual intervention; payment and settlement are kept as-is"
                );
            }
            "FAIL_NOTIFICATION_RETRY" => {
                assert_eq!(
                    details[4],
                    format!("알림 요청 retry 대상 실패가 발생했습니다. notificationEventId={id}")
                );
                let at = details[5]
                    .strip_prefix(
                        "Notification retry scheduled; payment and settlement are kept as-is, nextAttemptAt=",
                    )
                    .unwrap();
                assert!(is_local_date_time(&json!(at)), "{at}");
            }
            _ => {}
        }
        // A second orchestrate is its replay: nothing more runs.
        let again = client.data("POST", &format!("/api/orders/{id}/orchestrate"), None).await;
        assert_eq!(
            (&again["orderStatus"], &again["steps"]),
            (&flow["orderStatus"], &flow["steps"]),
            "{word}"
        );
    }
}

async fn operators_recover_notifications_and_dead_letters_with_its_admin_paths(backend: Backend) {
    let extra = [
        ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
        RETRIES[0],
        RETRIES[1],
    ];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &extra).await else { return };
    let base = app.commerce.clone().expect("the dialect's listener is on");
    let admin = admin_client(&app, &base);
    let user = Client {
        app: &app,
        base: base.clone(),
        token: platform_token(Algorithm::HS256, "demo-user", &["ROLE_USER"], 600),
    };

    // Manual intervention, retried by an operator: sent, the order completes.
    let manual = admin.create("FAIL_NOTIFICATION").await;
    admin.data("POST", &format!("/api/orders/{manual}/orchestrate"), None).await;
    let retry = format!("/api/admin/notification-events/{manual}/retry");
    // Not for a user without ROLE_ADMIN, nor without a token.
    assert_eq!(
        user.refused("POST", &retry, None).await,
        (StatusCode::FORBIDDEN, "FORBIDDEN".into(), "접근 권한이 없습니다.".into())
    );
    let anonymous = app.client.post(format!("{base}{retry}")).send().await.unwrap();
    error(anonymous, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.").await;
    // Text we would not store (NUL): a 400 before anything is sent or committed, never a
    // notification sent and then a 503 for its audit row (issue 67).
    for bad in [json!({ "operatorId": "ops\u{0}admin" }), json!({ "reason": "a\u{0}b" })] {
        let (status, code, _) = admin.refused("POST", &retry, Some(bad.clone())).await;
        assert_eq!((status, code.as_str()), (StatusCode::BAD_REQUEST, "BAD_REQUEST"), "{bad}");
    }
    let body =
        json!({ "operatorId": "ops-admin", "reason": "manual retry after notification channel recovery" });
    let retried = admin.data("POST", &retry, Some(body)).await;
    assert_eq!(
        (&retried["eventId"], &retried["orderId"], &retried["action"], &retried["result"]),
        (&json!(manual), &json!(manual), &json!("RETRY"), &json!("SUCCESS"))
    );
    assert_eq!(
        (
            &retried["previousStatus"],
            &retried["currentStatus"],
            &retried["handlingPolicy"],
            &retried["orderStatus"]
        ),
        (&json!("MANUAL_INTERVENTION_REQUIRED"), &json!("SENT"), &json!("NONE"), &json!("COMPLETED"))
    );
    assert_eq!(retried["message"], "Notification event was retried successfully.");
    assert_eq!((&retried["failureCode"], &retried["failureReason"]), (&Value::Null, &Value::Null));
    assert!(is_local_date_time(&retried["lastAttemptAt"]), "{retried}");
    assert_eq!(
        crate::helpers::count_where(&app.db, "audit_log", "detail LIKE '%operatorId=ops-admin%'").await,
        1
    );
    // Its refusals, with the current status.
    assert_eq!(
        admin.refused("POST", &retry, None).await,
        (
            StatusCode::BAD_REQUEST,
            "ADMIN_REPROCESS_NOT_ALLOWED".into(),
            "재처리 가능한 알림 이벤트가 아닙니다. current=SENT".into()
        )
    );
    assert_eq!(
        admin.refused("POST", &format!("/api/admin/notification-events/{manual}/ignore"), None).await,
        (
            StatusCode::BAD_REQUEST,
            "ADMIN_REPROCESS_NOT_ALLOWED".into(),
            "무시 처리 가능한 알림 이벤트가 아닙니다. current=SENT".into()
        )
    );
    let detail = admin.data("GET", &format!("/api/orders/{manual}"), None).await;
    assert_eq!(
        (&detail["orderStatus"], &detail["notificationStatuses"]),
        (&json!("COMPLETED"), &json!(["SENT"]))
    );

    // A scheduled retry, ignored: the order completes.
    let ignored = admin.create("FAIL_NOTIFICATION_RETRY").await;
    admin.data("POST", &format!("/api/orders/{ignored}/orchestrate"), None).await;
    let data = admin.data("POST", &format!("/api/admin/notification-events/{ignored}/ignore"), None).await;
    assert_eq!(
        (
            &data["action"],
            &data["result"],
            &data["previousStatus"],
            &data["currentStatus"],
            &data["orderStatus"]
        ),
        (
            &json!("IGNORE"),
            &json!("IGNORED"),
            &json!("RETRY_SCHEDULED"),
            &json!("IGNORED"),
            &json!("COMPLETED")
        )
    );
    assert_eq!(data["message"], "Notification event was marked as ignored.");

    // retry-due: its bare object; nothing before the backoff, then the due one is sent.
    let due = admin.create("FAIL_NOTIFICATION_RETRY").await;
    admin.data("POST", &format!("/api/orders/{due}/orchestrate"), None).await;
    let (status, bare) = admin.send("POST", "/api/admin/notification-events/retry-due", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        bare,
        json!({ "status": "completed", "processedCount": 0, "successCount": 0, "failedCount": 0, "skippedCount": 0, "processedEventIds": [] })
    );
    app.advance(std::time::Duration::from_secs(3600));
    let (_, bare) = admin.send("POST", "/api/admin/notification-events/retry-due", None).await;
    assert_eq!(
        bare,
        json!({ "status": "completed", "processedCount": 1, "successCount": 1, "failedCount": 0, "skippedCount": 0, "processedEventIds": [due] })
    );
    assert_eq!(admin.data("GET", &format!("/api/orders/{due}"), None).await["orderStatus"], "COMPLETED");
    let (status, _) = user.send("POST", "/api/admin/notification-events/retry-due", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Unknown events; an order without a notification yet; a path that is not an id.
    let held = admin.create("normal").await;
    for id in [held, 987_654_321] {
        assert_eq!(
            admin.refused("POST", &format!("/api/admin/notification-events/{id}/retry"), None).await,
            (
                StatusCode::NOT_FOUND,
                "NOTIFICATION_EVENT_NOT_FOUND".into(),
                "알림 이벤트를 찾을 수 없습니다.".into()
            )
        );
    }
    assert_eq!(
        admin.refused("POST", "/api/admin/notification-events/abc/ignore", None).await,
        (StatusCode::BAD_REQUEST, "BAD_REQUEST".into(), "잘못된 요청입니다.".into())
    );
    let (status, code, _) =
        admin.refused("POST", &retry, Some(json!({ "operatorId": "x".repeat(101) }))).await;
    assert_eq!((status, code.as_str()), (StatusCode::BAD_REQUEST, "BAD_REQUEST"));

    // Outbox: its settlement record went out when the notification failed, its notification
    // record when the operator's retry completed the order — one of each, as the platform.
    let flow = admin.data("GET", &format!("/api/orders/{manual}/flow"), None).await;
    let kinds: Vec<&str> =
        flow["outboxEvents"].as_array().unwrap().iter().map(|e| e["eventType"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["SETTLEMENT_REQUESTED", "NOTIFICATION_REQUESTED"], "{flow}");
    // Only a dead letter is retried.
    let row = &flow["outboxEvents"][0];
    let path = format!("/api/admin/outbox-events/{}/retry", row["outboxEventId"]);
    assert_eq!(
        admin.refused("POST", &path, None).await,
        (
            StatusCode::BAD_REQUEST,
            "ADMIN_REPROCESS_NOT_ALLOWED".into(),
            format!(
                "DEAD_LETTER 상태의 outbox 이벤트만 재처리할 수 있습니다. current={}",
                row["status"].as_str().unwrap()
            )
        )
    );
    assert_eq!(
        admin.refused("POST", "/api/admin/outbox-events/987654321/retry", None).await,
        (StatusCode::NOT_FOUND, "OUTBOX_EVENT_NOT_FOUND".into(), "Outbox 이벤트를 찾을 수 없습니다.".into())
    );
    // Dead-letter the head event of the order `held` makes once orchestrated.
    let fresh = admin.create("normal").await;
    admin.data("POST", &format!("/api/orders/{fresh}/orchestrate"), None).await;
    let claimed =
        crate::helpers::dead_letter_heads(&app, chrono::Utc::now() + chrono::Duration::hours(48)).await;
    let dead = claimed.first().expect("a head event was claimed");
    // A relay runs (as in the platform, whose retry publishes within the call): the answer is
    // the event published, not merely queued again (issue 67).
    let workers = orchestrator::startup::Workers::spawn(&app.services);
    let data = admin
        .data(
            "POST",
            &format!("/api/admin/outbox-events/{}/retry", dead.id),
            Some(json!({ "operatorId": "outbox-operator", "reason": "Kafka broker recovered" })),
        )
        .await;
    assert_eq!(
        (&data["eventId"], &data["action"], &data["previousStatus"], &data["currentStatus"], &data["result"]),
        (
            &json!(dead.id),
            &json!("RETRY_DEAD_LETTER"),
            &json!("DEAD_LETTER"),
            &json!("PUBLISHED"),
            &json!("PUBLISHED")
        )
    );
    assert_eq!(data["message"], "Outbox event was republished successfully.");
    workers.shutdown(std::time::Duration::from_secs(5)).await;
    assert!(data["aggregateId"].as_i64().is_some_and(|n| n > 0), "an order's number: {data}");
    assert_eq!(data["eventType"], dead.event_type);
}

async fn its_request_validation_and_path_errors(backend: Backend) {
    let Some((app, base)) = dialect(backend, false).await else { return };
    let client = admin_client(&app, &base);
    let bad = |body: Value| async { client.refused("POST", "/api/orders", Some(body)).await };
    let valid = json!({ "customerId": "customer-1", "totalAmount": 12000, "currency": "KRW" });
    let with = |key: &str, value: Value| {
        let mut body = valid.clone();
        body[key] = value;
        body
    };
    let cases: Vec<(Value, &str)> = vec![
        // Its messages, the first field's in the order customerId, totalAmount, currency.
        (json!({}), "customerId는 필수입니다."),
        (with("customerId", json!(" ")), "customerId는 필수입니다."),
        (json!({ "customerId": "c", "currency": "KRW" }), "totalAmount는 필수입니다."),
        (with("totalAmount", json!(0)), "totalAmount는 0보다 커야 합니다."),
        (with("totalAmount", json!(-1)), "totalAmount는 0보다 커야 합니다."),
        (json!({ "customerId": "c", "totalAmount": 0 }), "totalAmount는 0보다 커야 합니다."),
        (json!({ "customerId": "c", "totalAmount": 1 }), "currency는 필수입니다."),
        (with("currency", json!("")), "currency는 필수입니다."),
        // Ours besides (docs/dialects.md).
        (with("currency", json!("WON")), "currency는 ISO-4217 통화 코드여야 합니다. (예: KRW)"),
        (with("totalAmount", json!(12000.5)), "totalAmount는 KRW의 소수 0자리까지만 가능합니다."),
        (with("totalAmount", json!(1e30)), "totalAmount가 너무 큽니다."),
        (with("customerId", json!("c".repeat(101))), "customerId는 100자 이하의 문자여야 합니다."),
        (with("description", json!("d".repeat(256))), "description은 255자 이하여야 합니다."),
        (with("customerId", json!({ "not": "a string" })), "잘못된 요청입니다."),
        (with("totalAmount", json!("twelve")), "잘못된 요청입니다."),
    ];
    for (body, message) in cases {
        assert_eq!(
            bad(body.clone()).await,
            (StatusCode::BAD_REQUEST, "BAD_REQUEST".into(), message.into()),
            "{body}"
        );
    }
    // As Jackson reads them: a number as text, a decimal string, a two-decimal currency.
    let data = client.data("POST", "/api/orders", Some(with("totalAmount", json!("15000")))).await;
    assert_eq!(data["totalAmount"], 15000);
    let usd = json!({ "customerId": "c", "totalAmount": 12.5, "currency": "USD", "description": null });
    let data = client.data("POST", "/api/orders", Some(usd)).await;
    assert_eq!((&data["totalAmount"], &data["description"]), (&json!(12.5), &Value::Null));
    // Nothing was made by the refusals: only these two orders exist.
    assert_eq!(crate::helpers::count_where(&app.db, "orders", "source = 'COMMERCE'").await, 2);

    // Unknown and impossible ids; not an id; a wrong method; no token before bad JSON.
    for path in
        ["/api/orders/987654321", "/api/orders/0", "/api/orders/-3/flow", "/api/orders/987654321/orchestrate"]
    {
        let method = if path.ends_with("orchestrate") { "POST" } else { "GET" };
        assert_eq!(
            client.refused(method, path, None).await,
            (StatusCode::NOT_FOUND, "ORDER_NOT_FOUND".into(), "주문을 찾을 수 없습니다.".into()),
            "{path}"
        );
    }
    assert_eq!(
        client.refused("GET", "/api/orders/abc", None).await,
        (StatusCode::BAD_REQUEST, "BAD_REQUEST".into(), "잘못된 요청입니다.".into())
    );
    let (status, code, _) = client.refused("GET", "/api/orders", None).await;
    assert_eq!((status, code.as_str()), (StatusCode::METHOD_NOT_ALLOWED, "METHOD_NOT_ALLOWED"));
    let res = app
        .client
        .post(format!("{base}/api/orders"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    error(res, StatusCode::UNAUTHORIZED, "UNAUTHORIZED", "인증이 필요합니다.").await;
    let res = app
        .client
        .post(format!("{base}/api/orders"))
        .bearer_auth(&client.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    error(res, StatusCode::BAD_REQUEST, "BAD_REQUEST", "잘못된 요청입니다.").await;
}

/// Issue 67: one token made 17 757 held orders in 30 s and none ever expired. An order made
/// here that its client never orchestrates fails after `hold_expiry` (`HOLD_EXPIRED`,
/// audited, counted); a younger one, or one whose saga ran, is left as it is.
async fn held_orders_expire_when_never_orchestrated(backend: Backend) {
    let extra = [
        ("APP__HTTP__DIALECTS__COMMERCE__BIND", "127.0.0.1:0"),
        ("APP__HTTP__DIALECTS__COMMERCE__JWT_SECRET", SECRET),
        ("APP__HTTP__DIALECTS__COMMERCE__HOLD_EXPIRY", "1h"),
    ];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &extra).await else { return };
    let base = app.commerce.clone().expect("the dialect's listener is on");
    let admin = admin_client(&app, &base);
    let forgotten = admin.create("normal happy path").await;
    let ran = admin.create("normal happy path").await;
    admin.data("POST", &format!("/api/orders/{ran}/orchestrate"), None).await;
    app.advance(std::time::Duration::from_secs(30 * 60));
    let young = admin.create("normal happy path").await;
    assert_eq!(app.services.orchestrator.expire_held_orders().await.unwrap(), 0, "none held an hour yet");
    app.advance(std::time::Duration::from_secs(31 * 60));
    assert_eq!(app.services.orchestrator.expire_held_orders().await.unwrap(), 1);
    let ops = app.admin_token("ops");
    let detail = |number: i64| {
        let app = &app;
        let ops = ops.clone();
        async move {
            crate::helpers::json(
                app.get(&format!("/api/orders/{number}"), &ops).send().await.unwrap(),
                StatusCode::OK,
            )
            .await
        }
    };
    let expired = detail(forgotten).await;
    assert_eq!(
        (&expired["status"], &expired["failureStage"], &expired["failureReason"]),
        (&json!("FAILED"), &json!("PAYMENT"), &json!("HOLD_EXPIRED")),
        "{expired}"
    );
    assert_eq!(detail(ran).await["status"], json!("COMPLETED"));
    assert_eq!(detail(young).await["status"], json!("CREATED"));
    assert_eq!(
        crate::helpers::count_where(
            &app.db,
            "audit_log",
            "action = 'HOLD_EXPIRED' AND actor = 'system:held-orders'"
        )
        .await,
        1
    );
    // Its client orchestrating it now: the platform's replay of an order that ran, no saga.
    admin.data("POST", &format!("/api/orders/{forgotten}/orchestrate"), None).await;
    assert_eq!(detail(forgotten).await["status"], json!("FAILED"));
    assert_eq!(app.services.orchestrator.expire_held_orders().await.unwrap(), 0, "expired once");
}

on_both_databases!(
    held_orders_expire_when_never_orchestrated,
    demo_tokens_are_the_platforms,
    tokens_are_checked_and_every_answer_is_in_the_envelope,
    orders_wait_for_orchestrate_and_run_as_its_integration_tests_expect,
    operators_recover_notifications_and_dead_letters_with_its_admin_paths,
    its_request_validation_and_path_errors
);
