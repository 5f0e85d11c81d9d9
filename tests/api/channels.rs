//! Settlement and notification channels over real servers (docs/spec.md §13): the
//! notification step's signed webhooks, each delivery verified by the Standard Webhooks
//! reference library for Python (`tests/support/webhook_receiver.py`, pip
//! `standardwebhooks`), an implementation that is not ours.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json, order_body, service_missing};
use crate::on_both_databases;

/// Two secrets, as during a rotation.
pub(crate) const SECRETS: [&str; 2] =
    ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kLXNlY3JldC0wMTIzNDU2Nzg5"];

/// The receiver, killed when dropped.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) url: String,
    client: reqwest::Client,
}

impl Receiver {
    pub(crate) fn start(secrets: &[&str]) -> Option<Receiver> {
        let probe = Command::new("python3").args(["-c", "import standardwebhooks"]).status();
        if !probe.is_ok_and(|s| s.success()) {
            service_missing(
                "the Standard Webhooks library for Python",
                "pip install standardwebhooks==1.3.0",
            );
            return None;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/webhook_receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(secrets.join(","))
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port: u16 = line.trim().parse().expect("the receiver's port");
        orchestrator::startup::install_tls_provider();
        Some(Receiver { child, url: format!("http://127.0.0.1:{port}"), client: reqwest::Client::new() })
    }

    /// The next answers: (status, Retry-After).
    async fn plan(&self, answers: &[(u16, Option<u64>)]) {
        let plan: Vec<Value> = answers.iter().map(|(s, r)| json!([s, r])).collect();
        self.client.post(format!("{}/plan", self.url)).json(&plan).send().await.unwrap();
    }

    pub(crate) async fn deliveries(&self) -> Vec<Value> {
        let body: Value =
            self.client.get(format!("{}/deliveries", self.url)).send().await.unwrap().json().await.unwrap();
        body.as_array().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A token of the test keys with `claims` (and `exp`, `iat`): for an app run as a process,
/// or with claims `TestApp::token` does not set.
pub(crate) fn signed_token(mut claims: Value) -> String {
    let now = chrono::Utc::now().timestamp();
    claims["exp"] = json!(now + 600);
    claims["iat"] = json!(now);
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("test".into());
    let key = jsonwebtoken::EncodingKey::from_secret(crate::helpers::TEST_SECRET.as_bytes()).unwrap();
    jsonwebtoken::encode(&header, &claims, &key).unwrap()
}

async fn app_with(backend: Backend, receiver: &Receiver) -> Option<TestApp> {
    let url = format!("{}/hooks/orders", receiver.url);
    let secrets = SECRETS.join(" ");
    TestApp::spawn_on_manual_clock(
        backend,
        &[
            ("APP__NOTIFICATION__CHANNEL", "webhook"),
            ("APP__NOTIFICATION__WEBHOOK__URL", &url),
            ("APP__NOTIFICATION__WEBHOOK__SECRETS", &secrets),
            ("APP__NOTIFICATION__WEBHOOK__TIMEOUT", "2s"),
            ("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"),
        ],
    )
    .await
}

async fn detail(app: &TestApp, id: &Value) -> Value {
    let admin = app.admin_token("ops");
    let path = format!("/api/orders/{}", id.as_str().unwrap());
    json(app.get(&path, &admin).send().await.unwrap(), StatusCode::OK).await
}

/// Each delivery verified by the reference library with both secrets of the rotation.
fn assert_signed(deliveries: &[Value]) {
    for d in deliveries {
        assert_eq!(d["verified"], json!([0, 1]), "both secrets' signatures verify: {d}");
        assert_eq!(d["signatures"], 2, "{d}");
    }
}

async fn a_notification_is_a_signed_webhook_under_its_own_id(backend: Backend) {
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = app_with(backend, &receiver).await else { return };
    let placed =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["status"], "COMPLETED", "{placed}");
    assert_eq!(placed["notification"]["status"], "SENT");
    let deliveries = receiver.deliveries().await;
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    assert_signed(&deliveries);
    let d = &deliveries[0];
    assert_eq!(d["id"], placed["notification"]["id"], "webhook-id is the notification's id");
    let body = &d["body"];
    assert_eq!(body["type"], "order.completed");
    assert_eq!(body["notificationId"], placed["notification"]["id"]);
    assert_eq!(
        (body["orderId"].clone(), body["orderNumber"].clone()),
        (placed["id"].clone(), placed["number"].clone())
    );
    assert_eq!((body["customerId"].clone(), body["status"].clone()), (json!("alice"), json!("COMPLETED")));
    assert_eq!(
        (body["amount"].clone(), body["currency"].clone()),
        (placed["totalAmount"].clone(), placed["currency"].clone())
    );
    assert!(body["occurredAt"].as_str().is_some_and(|t| t.ends_with('Z')));
}

/// 503 and 429 are transient: the same `webhook-id` again at the next retry, once delivered
/// counted once; a 400 is a refusal: manual intervention, then an operator's reprocess
/// delivers it under the same id.
async fn a_receiver_down_then_up_and_one_that_refuses(backend: Backend) {
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = app_with(backend, &receiver).await else { return };
    let admin = app.admin_token("ops");
    // The 429 asks for two hours, longer than the backoff (2 min) and than the schedule ever
    // waits (8 min before its last attempt: 1 min doubling, 5 attempts): honoured up to that.
    receiver.plan(&[(503, None), (429, Some(7200))]).await;
    let placed =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["notification"]["status"], "RETRY_SCHEDULED", "{placed}");
    let retry = || async {
        json(
            app.post("/api/admin/notification-events/retry-due", &admin).send().await.unwrap(),
            StatusCode::OK,
        )
        .await
    };
    app.advance(Duration::from_secs(3600));
    assert_eq!(retry().await["failed"], 1, "429 is transient too");
    app.advance(Duration::from_secs(7 * 60));
    assert_eq!(retry().await["claimed"], 0, "the receiver's Retry-After is not over");
    app.advance(Duration::from_secs(2 * 60));
    assert_eq!(retry().await["succeeded"], 1, "nor parked past the schedule's longest wait");
    let after = detail(&app, &placed["id"]).await;
    assert_eq!(
        (after["status"].clone(), after["notification"]["status"].clone()),
        (json!("COMPLETED"), json!("SENT"))
    );
    let deliveries = receiver.deliveries().await;
    assert_eq!(
        deliveries.iter().map(|d| d["answer"].clone()).collect::<Vec<_>>(),
        [json!(503), json!(429), json!(200)]
    );
    assert!(deliveries.iter().all(|d| d["id"] == placed["notification"]["id"]), "one id for every attempt");
    assert_signed(&deliveries);

    // A refusal: manual intervention; the operator's reprocess sends it under the same id.
    receiver.plan(&[(400, None)]).await;
    let refused =
        json(app.place_order(&app.token("bob"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(refused["notification"]["status"], "MANUAL_INTERVENTION_REQUIRED", "{refused}");
    assert_eq!(refused["status"], "FAILED");
    let id = refused["notification"]["id"].as_str().unwrap();
    let reprocessed =
        app.post(&format!("/api/admin/notification-events/{id}/reprocess"), &admin).send().await.unwrap();
    assert_eq!(reprocessed.status(), StatusCode::OK);
    let after = detail(&app, &refused["id"]).await;
    assert_eq!(
        (after["status"].clone(), after["notification"]["status"].clone()),
        (json!("COMPLETED"), json!("SENT"))
    );
    let bobs: Vec<Value> = receiver.deliveries().await.into_iter().filter(|d| d["id"] == id).collect();
    assert_eq!(bobs.iter().map(|d| d["answer"].clone()).collect::<Vec<_>>(), [json!(400), json!(200)]);
}

on_both_databases!(
    a_notification_is_a_signed_webhook_under_its_own_id,
    a_receiver_down_then_up_and_one_that_refuses
);

/// A webhook channel without what it needs is refused at start, naming the key; a secret
/// never appears in the refusal.
#[test]
fn a_webhook_channel_is_refused_without_its_url_or_a_valid_secret() {
    let refused = |extra: &[(&str, &str)]| crate::helpers::try_settings(extra).unwrap_err().to_string();
    let why = refused(&[("APP__NOTIFICATION__CHANNEL", "webhook")]);
    assert!(why.contains("notification.webhook.url"), "{why}");
    let why = refused(&[
        ("APP__NOTIFICATION__CHANNEL", "webhook"),
        ("APP__NOTIFICATION__WEBHOOK__URL", "http://h/x"),
    ]);
    assert!(why.contains("notification.webhook.secrets"), "{why}");
    let why = refused(&[
        ("APP__NOTIFICATION__CHANNEL", "webhook"),
        ("APP__NOTIFICATION__WEBHOOK__URL", "http://h/x"),
        ("APP__NOTIFICATION__WEBHOOK__SECRETS", "whsec_not*base64*hunter2"),
    ]);
    assert!(why.contains("notification.webhook.secrets") && !why.contains("hunter2"), "{why}");
    let why = refused(&[("APP__SETTLEMENT__CHANNEL", "webhook")]);
    assert!(why.contains("settlement.webhook.url"), "{why}");
    let why =
        refused(&[("APP__SETTLEMENT__CHANNEL", "webhook"), ("APP__SETTLEMENT__WEBHOOK__URL", "ftp://h/x")]);
    assert!(why.contains("settlement.webhook.url"), "{why}");
    let why = refused(&[("APP__NOTIFICATION__CHANNEL", "carrier-pigeon")]);
    assert!(why.contains("notification.channel"), "{why}");
}

/// docs/spec.md §13: a worker that dies between a delivery and its outcome's commit (here:
/// the commit refused) leaves the notification's intent; the saga resumed sends it again
/// under the same `webhook-id`, which the receiver counts once — never a second
/// notification under a new id.
async fn a_delivery_whose_outcome_is_lost_is_sent_again_under_its_id(backend: Backend) {
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = app_with(backend, &receiver).await else { return };
    crate::money::refuse(&app, "notification_events", Some("SENT")).await;
    let placed =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["status"], "SETTLEMENT_REQUESTED", "{placed}");
    assert_eq!(placed["notification"]["status"], "PENDING", "the intent, committed before the call");
    crate::money::refuse(&app, "notification_events", None).await;
    let id = placed["id"].as_str().unwrap();
    let resumed =
        app.post(&format!("/api/orders/{id}/orchestrate"), &app.admin_token("ops")).send().await.unwrap();
    let resumed = json(resumed, StatusCode::OK).await;
    assert_eq!(
        (resumed["status"].clone(), resumed["notification"]["status"].clone()),
        (json!("COMPLETED"), json!("SENT"))
    );
    assert_eq!(resumed["notification"]["id"], placed["notification"]["id"]);
    let deliveries = receiver.deliveries().await;
    assert_eq!(deliveries.len(), 2, "delivered, then again after the lost outcome: {deliveries:?}");
    assert!(
        deliveries.iter().all(|d| d["id"] == placed["notification"]["id"]),
        "one webhook-id: counted once"
    );
    assert_signed(&deliveries);
}

on_both_databases!(a_delivery_whose_outcome_is_lost_is_sent_again_under_its_id);

// ---- settlement ------------------------------------------------------------------------------

async fn settling_app(backend: Backend, receiver: &Receiver) -> Option<TestApp> {
    let settle = format!("{}/hooks/settlements", receiver.url);
    let notify = format!("{}/hooks/orders", receiver.url);
    let secrets = SECRETS.join(" ");
    TestApp::spawn_on_manual_clock(
        backend,
        &[
            ("APP__SETTLEMENT__CHANNEL", "webhook"),
            ("APP__SETTLEMENT__WEBHOOK__URL", &settle),
            ("APP__SETTLEMENT__WEBHOOK__SECRETS", &secrets),
            ("APP__SETTLEMENT__WEBHOOK__TIMEOUT", "2s"),
            ("APP__SETTLEMENT__RETRY__MAX_ATTEMPTS", "3"),
            ("APP__SETTLEMENT__RETRY__BACKOFF_BASE", "1m"),
            ("APP__NOTIFICATION__CHANNEL", "webhook"),
            ("APP__NOTIFICATION__WEBHOOK__URL", &notify),
            ("APP__NOTIFICATION__WEBHOOK__SECRETS", &secrets),
        ],
    )
    .await
}

fn of_type<'a>(deliveries: &'a [Value], kind: &str) -> Vec<&'a Value> {
    deliveries.iter().filter(|d| d["body"]["type"] == kind).collect()
}

async fn retry_round(app: &TestApp) {
    let actor = orchestrator::application::Actor::system("test");
    app.services.settlements.retry_due(&actor).await.unwrap();
}

/// The happy path, then an accounting system down for a while: the settlement is tried again
/// under its id, never compensated, delivered once it is back; the order then completes.
async fn a_settlement_is_a_signed_webhook_and_an_outage_never_refunds(backend: Backend) {
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = settling_app(backend, &receiver).await else { return };
    let placed =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["status"], "COMPLETED", "{placed}");
    let deliveries = receiver.deliveries().await;
    assert_signed(&deliveries);
    let settled = of_type(&deliveries, "settlement.requested");
    assert_eq!(settled.len(), 1, "{deliveries:?}");
    let body = &settled[0]["body"];
    assert_eq!(settled[0]["id"], placed["settlement"]["id"], "webhook-id is the settlement's id");
    assert_eq!(
        (body["orderId"].clone(), body["orderNumber"].clone()),
        (placed["id"].clone(), placed["number"].clone())
    );
    assert_eq!(
        (body["amount"].clone(), body["paymentKey"].clone()),
        (placed["totalAmount"].clone(), placed["payment"]["providerTransactionId"].clone())
    );
    assert!(body["approvedAt"].is_string() && body["occurredAt"].is_string(), "{body}");

    // Down for two attempts (503, then a timeout-like 502), then up.
    receiver.plan(&[(503, None), (502, None)]).await;
    let placed =
        json(app.place_order(&app.token("bob"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(placed["status"], "PAYMENT_APPROVED", "nothing compensated: {placed}");
    assert_eq!(placed["settlement"]["status"], "RETRY_SCHEDULED");
    app.advance(Duration::from_secs(3600));
    retry_round(&app).await;
    assert_eq!(detail(&app, &placed["id"]).await["settlement"]["status"], "RETRY_SCHEDULED");
    app.advance(Duration::from_secs(3600));
    retry_round(&app).await;
    let after = detail(&app, &placed["id"]).await;
    assert_eq!(
        (after["status"].clone(), after["settlement"]["status"].clone()),
        (json!("COMPLETED"), json!("SUCCEEDED"))
    );
    assert_eq!(after["payment"]["status"], "APPROVED", "never refunded");
    let bobs: Vec<Value> =
        receiver.deliveries().await.into_iter().filter(|d| d["id"] == placed["settlement"]["id"]).collect();
    assert_eq!(
        bobs.iter().map(|d| d["answer"].clone()).collect::<Vec<_>>(),
        [json!(503), json!(502), json!(200)]
    );
}

/// Attempts spent: the settlement waits for an operator, listed; the operator's retry
/// delivers it, or the operator marks another settled; a refusal compensates (the payment
/// cancelled once at the provider).
async fn an_operator_repairs_a_waiting_settlement_and_a_refusal_compensates(backend: Backend) {
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = settling_app(backend, &receiver).await else { return };
    let admin = app.admin_token("ops");
    let waiting = |user: &'static str| {
        let app = &app;
        async move {
            let placed =
                json(app.place_order(&app.token(user), &order_body(), None).await, StatusCode::CREATED).await;
            app.advance(Duration::from_secs(3600 * 4));
            let ((), warned) = crate::helpers::warnings_of(retry_round(app)).await;
            assert!(!warned.contains("waiting for an operator"), "an attempt is left: {warned}");
            app.advance(Duration::from_secs(3600 * 4));
            let ((), warned) = crate::helpers::warnings_of(retry_round(app)).await;
            let after = detail(app, &placed["id"]).await;
            assert_eq!(after["settlement"]["status"], "AWAITING_OPERATOR", "{after}");
            assert_eq!(after["status"], "PAYMENT_APPROVED");
            // The line an operator's alerting matches, with what the repair needs.
            let line = warned
                .lines()
                .find(|l| l.contains("settlement waiting for an operator"))
                .unwrap_or_else(|| panic!("no WARN for the waiting settlement: {warned}"));
            assert!(line.contains(" WARN "), "{line}");
            for field in [
                format!("order_number={}", after["number"]),
                format!("settlement={}", after["settlement"]["id"].as_str().unwrap()),
                "attempts=3".to_owned(),
                "last_error=".to_owned(),
            ] {
                assert!(line.contains(&field), "{field} missing: {line}");
            }
            after
        }
    };
    receiver.plan(&[(503, None), (503, None), (503, None), (500, None), (500, None), (500, None)]).await;
    let first = waiting("carol").await;
    let second = waiting("dave").await;
    // Waiting settlements are not stalled sagas: stalled-saga recovery leaves them alone
    // (no SAGA_RESUMED, no SAGA_RECOVERY_EXHAUSTED page for an order already waiting here).
    app.advance(Duration::from_secs(3600 * 24));
    assert_eq!(app.services.recovery.resume_stalled().await.unwrap(), 0);
    assert_eq!(crate::helpers::count_where(&app.db, "audit_log", "action = 'SAGA_RESUMED'").await, 0);
    let listed = json(
        app.get("/api/admin/settlements?status=AWAITING_OPERATOR", &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(listed["items"][0]["attempts"], 3);
    // Each with its order's number (the most recently changed first: dave's, then carol's).
    assert_eq!(
        (listed["items"][0]["orderNumber"].clone(), listed["items"][1]["orderNumber"].clone()),
        (second["number"].clone(), first["number"].clone()),
        "{listed}"
    );
    // One by id, as the console's order page reads it.
    let id = first["settlement"]["id"].as_str().unwrap();
    let one =
        json(app.get(&format!("/api/admin/settlements/{id}"), &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(
        (one["status"].clone(), one["orderId"].clone(), one["orderNumber"].clone(), one["attempts"].clone()),
        (json!("AWAITING_OPERATOR"), first["id"].clone(), first["number"].clone(), json!(3)),
        "{one}"
    );
    assert!(one["lastError"].as_str().is_some_and(|e| !e.is_empty()), "{one}");
    let customer =
        app.get(&format!("/api/admin/settlements/{id}"), &app.token("carol")).send().await.unwrap();
    assert_eq!(customer.status(), StatusCode::FORBIDDEN, "an operator's view");
    let unknown = app.get("/api/admin/settlements/not-a-settlement", &admin).send().await.unwrap();
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    // Not Toss: the payouts page has nothing to read, and says so.
    let payouts =
        json(app.get("/api/admin/payouts?date=2026-12-01", &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!((payouts["providerLedger"].clone(), payouts["count"].clone()), (json!(false), json!(0)));
    let id = first["settlement"]["id"].as_str().unwrap();
    let retried = app
        .post(&format!("/api/admin/settlements/{id}/retry"), &admin)
        .json(&json!({ "reason": "accounting is back" }))
        .send()
        .await
        .unwrap();
    let retried = json(retried, StatusCode::OK).await;
    assert_eq!(
        (retried["status"].clone(), retried["settlement"]["status"].clone()),
        (json!("COMPLETED"), json!("SUCCEEDED"))
    );
    let id = second["settlement"]["id"].as_str().unwrap();
    let marked = app.post(&format!("/api/admin/settlements/{id}/mark-settled"), &admin).send().await.unwrap();
    assert_eq!(marked.status(), StatusCode::UNPROCESSABLE_ENTITY, "a reason is required");
    let marked = app
        .post(&format!("/api/admin/settlements/{id}/mark-settled"), &admin)
        .json(&json!({ "reason": "booked by hand, ticket FIN-42" }))
        .send()
        .await
        .unwrap();
    let marked = json(marked, StatusCode::OK).await;
    assert_eq!(
        (marked["status"].clone(), marked["settlement"]["status"].clone()),
        (json!("COMPLETED"), json!("SUCCEEDED"))
    );
    let again = app.post(&format!("/api/admin/settlements/{id}/retry"), &admin).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::CONFLICT, "no longer waiting");
    assert_eq!(
        crate::helpers::count_where(&app.db, "audit_log", "action = 'SETTLEMENT_MARKED_SETTLED'").await,
        1
    );

    // A refusal: the settlement fails, the payment is compensated once.
    receiver.plan(&[(400, None)]).await;
    let cancels = |app: &TestApp| {
        app.services.provider_calls.as_ref().unwrap().cancels.load(std::sync::atomic::Ordering::SeqCst)
    };
    let before = cancels(&app);
    let refused =
        json(app.place_order(&app.token("erin"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(
        (refused["status"].clone(), refused["settlement"]["status"].clone()),
        (json!("CANCELLED"), json!("FAILED")),
        "{refused}"
    );
    assert_eq!(refused["payment"]["status"], "CANCELLED");
    assert_eq!(cancels(&app) - before, 1, "compensated once at the provider");
}

on_both_databases!(
    a_settlement_is_a_signed_webhook_and_an_outage_never_refunds,
    an_operator_repairs_a_waiting_settlement_and_a_refusal_compensates
);

// ---- e-mail ----------------------------------------------------------------------------------

/// The SMTP server, killed when dropped; what it received, one JSON object per message.
struct Smtp {
    child: Child,
    port: u16,
    out: std::path::PathBuf,
}

impl Smtp {
    fn start(plan: &[u16]) -> Option<Smtp> {
        let probe = Command::new("python3").args(["-c", "import aiosmtpd"]).status();
        if !probe.is_ok_and(|s| s.success()) {
            service_missing("aiosmtpd (an SMTP server)", "pip install aiosmtpd==1.4.6");
            return None;
        }
        let out = std::env::temp_dir().join(format!("smtp-{}.jsonl", uuid::Uuid::new_v4().simple()));
        let plan: Vec<String> = plan.iter().map(u16::to_string).collect();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/smtp_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(plan.join(","))
            .arg(&out)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        Some(Smtp { child, port: line.trim().parse().expect("the SMTP server's port"), out })
    }

    fn received(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.out);
    }
}

async fn mailing_app(backend: Backend, smtp: &Smtp, locale: &str) -> Option<TestApp> {
    let url = format!("smtp://127.0.0.1:{}", smtp.port);
    TestApp::spawn_on_manual_clock(
        backend,
        &[
            ("APP__NOTIFICATION__CHANNEL", "email"),
            ("APP__NOTIFICATION__EMAIL__SMTP_URL", &url),
            ("APP__NOTIFICATION__EMAIL__FROM", "Orders <orders@shop.example>"),
            ("APP__NOTIFICATION__EMAIL__LOCALE", locale),
            ("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"),
        ],
    )
    .await
}

fn with_email(email: &str) -> Value {
    let mut body = order_body();
    body["customerEmail"] = json!(email);
    body
}

/// An order with `customerEmail` is told by e-mail (Korean by default, text and HTML,
/// `Message-ID` from the notification's id); without one it is `IGNORED` (`NO_RECIPIENT`);
/// an address that is not one is refused (422); SMTP 451 is retried, 550 waits for an
/// operator whose reprocess sends it.
async fn a_notification_is_an_email(backend: Backend) {
    let Some(smtp) = Smtp::start(&[250, 250, 451, 550]) else { return };
    let Some(app) = mailing_app(backend, &smtp, "ko").await else { return };
    let alice = app.token("alice");
    let placed =
        json(app.place_order(&alice, &with_email("alice@example.com"), None).await, StatusCode::CREATED)
            .await;
    assert_eq!(
        (placed["status"].clone(), placed["notification"]["status"].clone()),
        (json!("COMPLETED"), json!("SENT")),
        "{placed}"
    );
    let mail = &smtp.received()[0];
    assert_eq!(
        (mail["mail_from"].clone(), mail["rcpt_tos"].clone()),
        (json!("orders@shop.example"), json!(["alice@example.com"]))
    );
    let data = mail["data"].as_str().unwrap();
    let id = placed["notification"]["id"].as_str().unwrap();
    assert!(data.contains(&format!("Message-ID: <{id}@shop.example>")), "{data}");
    assert!(
        data.contains("multipart/alternative") && data.contains("text/plain") && data.contains("text/html"),
        "{data}"
    );
    assert!(data.contains("Subject: =?utf-8?"), "a Korean subject, encoded: {data}");

    // No address on the order: the token's `email` claim, for the caller's own order.
    let claimed = signed_token(json!({ "sub": "dora", "email": "dora@example.com" }));
    let dora = json(app.place_order(&claimed, &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(dora["notification"]["status"], "SENT", "{dora}");
    assert_eq!(smtp.received()[1]["rcpt_tos"], json!(["dora@example.com"]));
    // No address at all: nobody to tell, the order completes.
    let none = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(
        (none["status"].clone(), none["notification"]["status"].clone()),
        (json!("COMPLETED"), json!("IGNORED")),
        "{none}"
    );
    let refused = app.place_order(&alice, &with_email("alice@@example.com"), None).await;
    let problem = json(refused, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(problem["field"], "customerEmail");

    // 451: retried under the same Message-ID.
    let later =
        json(app.place_order(&alice, &with_email("bob@example.com"), None).await, StatusCode::CREATED).await;
    assert_eq!(later["notification"]["status"], "RETRY_SCHEDULED", "{later}");
    // 550 (the next message): an operator's.
    let manual =
        json(app.place_order(&alice, &with_email("carol@example.com"), None).await, StatusCode::CREATED)
            .await;
    assert_eq!(manual["notification"]["status"], "MANUAL_INTERVENTION_REQUIRED", "{manual}");
    let admin = app.admin_token("ops");
    app.advance(Duration::from_secs(3600));
    let round = json(
        app.post("/api/admin/notification-events/retry-due", &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(round["succeeded"], 1, "{round}");
    let id = manual["notification"]["id"].as_str().unwrap();
    let reprocessed =
        app.post(&format!("/api/admin/notification-events/{id}/reprocess"), &admin).send().await.unwrap();
    assert_eq!(json(reprocessed, StatusCode::OK).await["notification"]["status"], "SENT");
    let received = smtp.received();
    let answers: Vec<(Value, Value)> =
        received.iter().map(|m| (m["rcpt_tos"][0].clone(), m["answer"].clone())).collect();
    assert_eq!(
        answers,
        [
            (json!("alice@example.com"), json!(250)),
            (json!("dora@example.com"), json!(250)),
            (json!("bob@example.com"), json!(451)),
            (json!("carol@example.com"), json!(550)),
            (json!("bob@example.com"), json!(250)),
            (json!("carol@example.com"), json!(250)),
        ]
    );
    let bobs: Vec<&str> = received
        .iter()
        .filter(|m| m["rcpt_tos"][0] == "bob@example.com")
        .map(|m| m["data"].as_str().unwrap().lines().find(|l| l.starts_with("Message-ID")).unwrap())
        .collect();
    assert_eq!(bobs[0], bobs[1], "the same Message-ID on the retry");
}

on_both_databases!(a_notification_is_an_email);

/// What a hostile SMTP server does once it has taken a message after `DATA`.
#[derive(Clone, Copy)]
enum AfterData {
    /// Never answers, and holds the connection (issue 67: 300 s with a 3 s timeout).
    Silence,
    /// Drops the connection without an answer.
    Drop,
}

/// An SMTP server that takes every message and then does `after`; the `Message-ID` of every
/// message it took, in order. It lives as long as the test's runtime.
async fn hostile_smtp(after: AfterData) -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = taken.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut lines = BufReader::new(read).lines();
                let _ = write.write_all(b"220 hostile ESMTP\r\n").await;
                let (mut in_data, mut id) = (false, String::new());
                while let Ok(Some(line)) = lines.next_line().await {
                    if in_data {
                        if line == "." {
                            seen.lock().unwrap().push(id.clone());
                            match after {
                                AfterData::Silence => std::future::pending::<()>().await,
                                AfterData::Drop => return,
                            }
                        }
                        if let Some(v) = line.strip_prefix("Message-ID: ") {
                            id = v.to_owned();
                        }
                        continue;
                    }
                    let answer: &[u8] = match line.to_ascii_uppercase() {
                        l if l.starts_with("EHLO") => b"250 hostile\r\n",
                        l if l.starts_with("DATA") => {
                            in_data = true;
                            b"354 go on\r\n"
                        }
                        _ => b"250 ok\r\n",
                    };
                    if write.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, taken)
}

/// The app mailing through the server on `port`, with `extra` settings.
async fn mailing_through(backend: Backend, port: u16, extra: &[(&str, &str)]) -> Option<TestApp> {
    let url = format!("smtp://127.0.0.1:{port}");
    let mut env = vec![
        ("APP__NOTIFICATION__CHANNEL", "email"),
        ("APP__NOTIFICATION__EMAIL__SMTP_URL", url.as_str()),
        ("APP__NOTIFICATION__EMAIL__FROM", "orders@shop.example"),
    ];
    env.extend_from_slice(extra);
    TestApp::spawn_on_manual_clock(backend, &env).await
}

/// An SMTP server that takes the message after `DATA` and never answers: how long it is
/// waited for is `notification.email.timeout`, the whole exchange (issue 67: 300 s with a
/// 3 s timeout); the order is answered, its notification retried later under the same
/// `Message-ID`.
async fn a_mail_server_silent_after_data_holds_nobody_past_the_timeout(backend: Backend) {
    let (port, _) = hostile_smtp(AfterData::Silence).await;
    let Some(app) = mailing_through(backend, port, &[("APP__NOTIFICATION__EMAIL__TIMEOUT", "1s")]).await
    else {
        return;
    };
    // Without the bound this request waits for lettre's own five minutes: the client gives
    // up long before, and the test fails.
    let placed = app
        .post("/api/orders", &app.token("alice"))
        .json(&with_email("alice@example.com"))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .expect("the order is answered while the mail server is silent");
    let placed = json(placed, StatusCode::CREATED).await;
    assert_eq!(placed["notification"]["status"], "RETRY_SCHEDULED", "{placed}");
    let flow = json(
        app.get(&format!("/api/orders/{}/flow", placed["id"].as_str().unwrap()), &app.admin_token("ops"))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(flow.to_string().contains("no answer within"), "{flow}");
}

on_both_databases!(a_mail_server_silent_after_data_holds_nobody_past_the_timeout);

/// Issue 67: a server that takes the message and drops the connection before answering has
/// not refused it: the outcome is unknown, so the notification is retried on its schedule
/// (never `MANUAL_INTERVENTION_REQUIRED` as for a 5xx), under the same `Message-ID` every
/// time, so the mail system can drop the copies.
async fn an_answer_lost_after_data_is_retried_under_the_same_message_id(backend: Backend) {
    let (port, taken) = hostile_smtp(AfterData::Drop).await;
    let retry =
        [("APP__NOTIFICATION__RETRY__BACKOFF_BASE", "1m"), ("APP__NOTIFICATION__RETRY__MAX_ATTEMPTS", "2")];
    let Some(app) = mailing_through(backend, port, &retry).await else {
        return;
    };
    let placed = json(
        app.place_order(&app.token("alice"), &with_email("alice@example.com"), None).await,
        StatusCode::CREATED,
    )
    .await;
    assert_eq!(placed["notification"]["status"], "RETRY_SCHEDULED", "{placed}");
    assert_eq!(placed["notification"]["policy"], "AUTO_RETRY", "{placed}");
    let admin = app.admin_token("ops");
    app.advance(std::time::Duration::from_secs(120));
    let round = json(
        app.post("/api/admin/notification-events/retry-due", &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(round["failed"], 1, "{round}");
    let after = json(
        app.get(&format!("/api/orders/{}", placed["id"].as_str().unwrap()), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(after["notification"]["status"], "FAILED", "the schedule spent: {after}");
    let ids = taken.lock().unwrap().clone();
    assert_eq!(ids.len(), 2, "{ids:?}");
    let expected = format!("<{}@shop.example>", placed["notification"]["id"].as_str().unwrap());
    assert!(ids.iter().all(|id| *id == expected), "one Message-ID for every copy: {ids:?} vs {expected}");
}

on_both_databases!(an_answer_lost_after_data_is_retried_under_the_same_message_id);

/// English when asked, and a bad SMTP URL or sender refused at start naming the key.
#[test]
fn an_email_channel_needs_a_server_and_a_sender() {
    let refused = |extra: &[(&str, &str)]| crate::helpers::try_settings(extra).unwrap_err().to_string();
    let email = ("APP__NOTIFICATION__CHANNEL", "email");
    assert!(refused(&[email]).contains("notification.email.smtp_url"));
    let url = ("APP__NOTIFICATION__EMAIL__SMTP_URL", "smtp://mail:hunter2@127.0.0.1:2525");
    assert!(refused(&[email, url]).contains("notification.email.from"));
    let why = refused(&[
        email,
        ("APP__NOTIFICATION__EMAIL__SMTP_URL", "http://mail:hunter2@h"),
        ("APP__NOTIFICATION__EMAIL__FROM", "a@b.co"),
    ]);
    assert!(why.contains("notification.email.smtp_url") && !why.contains("hunter2"), "{why}");
    let why = refused(&[email, url, ("APP__NOTIFICATION__EMAIL__FROM", "not an address")]);
    assert!(why.contains("notification.email") && !why.contains("hunter2"), "{why}");
    let why = refused(&[
        email,
        url,
        ("APP__NOTIFICATION__EMAIL__FROM", "a@b.co"),
        ("APP__NOTIFICATION__EMAIL__LOCALE", "fr"),
    ]);
    assert!(why.contains("notification.email.locale"), "{why}");
    assert!(
        crate::helpers::try_settings(&[
            email,
            url,
            ("APP__NOTIFICATION__EMAIL__FROM", "a@b.co"),
            ("APP__NOTIFICATION__EMAIL__LOCALE", "en")
        ])
        .is_ok()
    );
}

/// docs/spec.md §13: webhook secrets, a token in a webhook URL and SMTP credentials appear in
/// no log line, error, event, metric or response of a whole run — one with deliveries
/// refused and an SMTP server that cannot be reached, so every error path writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_is_ever_written_or_answered() {
    use crate::cli::{app, served_port, temp_dir, wait_ready};
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    receiver.plan(&[(503, None), (500, None)]).await;
    let dir = temp_dir();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let settle = format!("{}/hooks/settlements?token=TOPSECRET-url-token", receiver.url);
    let smtp = format!("smtp://mailer:hunter2-smtp-pass@127.0.0.1:{closed}");
    let secrets = SECRETS.join(" ");
    let log_path = dir.0.join("serve.log");
    let mut cmd = app(&dir.0);
    cmd.env("APP__DATABASE__URL", format!("sqlite://{}/app.db?mode=rwc", dir.0.display()))
        .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
        .env("APP__HTTP__BIND", "127.0.0.1:0")
        .env("APP__LOG__FORMAT", "json")
        .env("RUST_LOG", "debug")
        .env("APP__SETTLEMENT__CHANNEL", "webhook")
        .env("APP__SETTLEMENT__WEBHOOK__URL", &settle)
        .env("APP__SETTLEMENT__WEBHOOK__SECRETS", &secrets)
        .env("APP__NOTIFICATION__CHANNEL", "email")
        .env("APP__NOTIFICATION__EMAIL__SMTP_URL", &smtp)
        .env("APP__NOTIFICATION__EMAIL__FROM", "orders@shop.example")
        .stdout(std::fs::File::create(dir.0.join("serve.out")).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let _serve = crate::helpers::Process::spawn(cmd.arg("serve"));
    let port = served_port(&log_path).await;
    wait_ready(port).await;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let (alice, ops) =
        (signed_token(json!({ "sub": "alice" })), signed_token(json!({ "sub": "ops", "roles": ["admin"] })));
    let mut answers = String::new();
    let mut ids = Vec::new();
    for _ in 0..3 {
        let mut body = order_body();
        body["customerEmail"] = json!("alice@example.com");
        let placed =
            client.post(format!("{base}/api/orders")).bearer_auth(&alice).json(&body).send().await.unwrap();
        let text = placed.text().await.unwrap();
        ids.push(serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_owned());
        answers.push_str(&text);
    }
    let mut paths: Vec<String> = [
        "/metrics",
        "/health/ready",
        "/api/admin/settlements",
        "/api/admin/notification-events",
        "/api/admin/outbox?limit=100",
        "/openapi.json",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    for id in &ids {
        paths.push(format!("/api/orders/{id}"));
        paths.push(format!("/api/orders/{id}/flow"));
    }
    for path in paths {
        let response = client.get(format!("{base}{path}")).bearer_auth(&ops).send().await.unwrap();
        answers.push_str(&response.text().await.unwrap());
    }
    let deliveries = receiver.deliveries().await;
    assert!(deliveries.len() >= 3, "the run reached the receiver: {deliveries:?}");
    assert!(answers.contains("the receiver answered 503"), "an error path was taken");
    let logs = std::fs::read_to_string(&log_path).unwrap()
        + &std::fs::read_to_string(dir.0.join("serve.out")).unwrap();
    assert!(logs.contains("SMTP"), "the SMTP error was logged: the grep below means something");
    let bodies = serde_json::to_string(&deliveries).unwrap();
    for secret in [
        "TOPSECRET",
        "hunter2",
        SECRETS[0],
        "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        SECRETS[1],
        "c2Vjb25kLXNlY3JldC0wMTIzNDU2Nzg5",
    ] {
        assert!(!logs.contains(secret), "{secret} in the logs");
        assert!(!answers.contains(secret), "{secret} in an answer");
        assert!(!bodies.contains(secret), "{secret} sent to the receiver");
    }
}

/// The console's Settlements page in a real browser: the overview counts the waiting
/// settlements; one is retried, the other marked settled, each audited with the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_repairs_settlements_from_the_console() {
    if !crate::console::browser_available() {
        return;
    }
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    let Some(app) = settling_app(Backend::Sqlite, &receiver).await else { return };
    receiver.plan(&[(503, None); 6]).await;
    let mut waiting = Vec::new();
    for user in ["fay", "gus"] {
        let placed =
            json(app.place_order(&app.token(user), &order_body(), None).await, StatusCode::CREATED).await;
        waiting.push(placed["settlement"]["id"].as_str().unwrap().to_owned());
        waiting.push(placed["number"].to_string());
    }
    for _ in 0..2 {
        app.advance(Duration::from_secs(3600 * 4));
        retry_round(&app).await;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console_settlements.py");
    let shots = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screens");
    let mut args = vec![app.base.clone(), app.admin_token("ops-olga")];
    args.extend(waiting);
    args.push(shots.into());
    let output = tokio::task::spawn_blocking(move || Command::new("python3").arg(script).args(args).output())
        .await
        .unwrap()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the console failed in the browser:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (action, detail) in
        [("SETTLEMENT_RETRY", "accounting is back"), ("SETTLEMENT_MARKED_SETTLED", "booked by hand")]
    {
        let condition = format!("actor = 'ops-olga' AND action = '{action}' AND detail LIKE '%{detail}%'");
        assert_eq!(crate::helpers::count_where(&app.db, "audit_log", &condition).await, 1, "{action}");
    }
}

/// docs/spec.md §13, for real: `serve` SIGKILLed while the settlement webhook it sent is
/// being received (delivered, its outcome never committed). A worker started afterwards finds
/// the saga stalled, sends the settlement again under the same `webhook-id` — the receiver
/// counts one settlement — and the order completes; nothing is compensated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_delivery_sends_again_under_the_same_id() {
    use crate::cli::{app, served_port, temp_dir, wait_ready};
    let Some(receiver) = Receiver::start(&SECRETS) else { return };
    receiver.plan(&[(0, None)]).await;
    let dir = temp_dir();
    let db = format!("sqlite://{}/app.db?mode=rwc", dir.0.display());
    let settle = format!("{}/hooks/settlements", receiver.url);
    let secrets = SECRETS.join(" ");
    let env = |cmd: &mut Command| {
        cmd.env("APP__DATABASE__URL", &db)
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .env("APP__SETTLEMENT__CHANNEL", "webhook")
            .env("APP__SETTLEMENT__WEBHOOK__URL", &settle)
            .env("APP__SETTLEMENT__WEBHOOK__SECRETS", &secrets)
            .env("APP__SETTLEMENT__WEBHOOK__TIMEOUT", "120s")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .env("APP__SAGA__LEASE", "2s")
            .env("APP__PAYMENT__RECONCILIATION__INTERVAL", "500ms")
            .env("APP__WORKER__EMBEDDED", "false");
    };
    let log_path = dir.0.join("serve.log");
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    cmd.env("APP__HTTP__BIND", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut serve = crate::helpers::Process::spawn(cmd.arg("serve"));
    let port = served_port(&log_path).await;
    wait_ready(port).await;
    let token = signed_token(json!({ "sub": "alice" }));
    let url = format!("http://127.0.0.1:{port}/api/orders");
    let waiting = tokio::spawn(async move {
        reqwest::Client::new().post(url).bearer_auth(token).json(&order_body()).send().await.is_ok()
    });
    crate::helpers::until("the settlement received (and held)", || async {
        !receiver.deliveries().await.is_empty()
    })
    .await;
    serve.kill().unwrap();
    serve.wait().unwrap();
    assert!(!waiting.await.unwrap(), "the request died with the process");
    // A worker on the same database.
    let worker_log = std::fs::File::create(dir.0.join("worker.log")).unwrap();
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    cmd.env("APP__WORKER__HTTP__BIND", "127.0.0.1:0").stdout(Stdio::null()).stderr(worker_log);
    let _worker = crate::helpers::Process::spawn(cmd.arg("worker"));
    let db = sea_orm::Database::connect(db.as_str()).await.unwrap();
    crate::helpers::until_within("the saga resumed to the end", Duration::from_secs(60), || async {
        crate::helpers::count_where(&db, "orders", "status = 'COMPLETED'").await == 1
    })
    .await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(deliveries.len(), 2, "held, then sent again: {deliveries:?}");
    assert_eq!(
        deliveries[0]["id"], deliveries[1]["id"],
        "one webhook-id: the receiver counts one settlement"
    );
    assert_signed(&deliveries);
    assert_eq!(
        crate::helpers::count_where(&db, "payments", "status = 'APPROVED'").await,
        1,
        "nothing compensated"
    );
    assert_eq!(crate::helpers::count_where(&db, "settlements", "1 = 1").await, 1, "one settlement");
}
