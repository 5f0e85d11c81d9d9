//! Webhook delivery (docs/spec.md §16) over real HTTP, each delivery verified by the Standard
//! Webhooks reference library for Python (`tests/support/webhook_receiver.py`, pip
//! `standardwebhooks`), not by our signer: signatures per endpoint, rotation, replay
//! protection, filters and merchants; the schedule, `410`, `Retry-After`, exhaustion and its
//! event, recover and resend, the attempt log; the host guard at creation and at delivery.

use std::time::Duration;

use reqwest::StatusCode;
use sea_orm::FromQueryResult;
use serde_json::{Value, json};

use crate::channels::Receiver;
use crate::helpers::{Backend, TestApp, count_where, json, order_body};
use crate::on_both_databases;

on_both_databases!(
    deliveries_are_signed_per_endpoint_and_only_the_merchants_own,
    a_rotated_secret_signs_beside_the_new_one_for_the_overlap_only,
    a_receiver_down_for_the_whole_schedule_then_recovered,
    gone_disables_at_once_and_retry_after_never_parks_a_message,
    finished_messages_and_attempts_go_after_the_retention,
    an_edit_never_undoes_what_a_delivery_recorded_meanwhile,
);

const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

async fn webhook_app(backend: Backend, extra: &[(&str, &str)]) -> Option<TestApp> {
    let mut env = vec![
        ("APP__SECRETS__KEY", SECRETS_KEY),
        ("APP__WEBHOOKS__ALLOW_HTTP", "true"),
        ("APP__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true"),
        ("APP__WEBHOOKS__SCHEDULE", "1s,2s"),
        ("APP__WEBHOOKS__TIMEOUT", "3s"),
    ];
    env.extend_from_slice(extra);
    TestApp::spawn_on_manual_clock(backend, &env).await
}

/// A merchant with an `OPERATOR` key and an `ORDERS` key.
async fn merchant(app: &TestApp, code: &str) -> (String, String, String) {
    let admin = app.admin_token("ops");
    let body = json!({ "code": code, "name": code });
    let m =
        json(app.post("/api/merchants", &admin).json(&body).send().await.unwrap(), StatusCode::CREATED).await;
    let id = m["id"].as_str().unwrap().to_owned();
    let mut keys = Vec::new();
    for role in ["OPERATOR", "ORDERS"] {
        let path = format!("/api/merchants/{id}/api-keys");
        let made = app.post(&path, &admin).json(&json!({ "name": role, "role": role })).send().await.unwrap();
        keys.push(json(made, StatusCode::CREATED).await["key"].as_str().unwrap().to_owned());
    }
    (id, keys[0].clone(), keys[1].clone())
}

/// An endpoint: its id and secret.
async fn endpoint(
    app: &TestApp,
    merchant: &str,
    operator: &str,
    url: &str,
    types: &[&str],
) -> (String, String) {
    let path = format!("/api/merchants/{merchant}/webhook-endpoints");
    let made =
        app.post(&path, operator).json(&json!({ "url": url, "eventTypes": types })).send().await.unwrap();
    let made = json(made, StatusCode::CREATED).await;
    (made["id"].as_str().unwrap().to_owned(), made["secret"].as_str().unwrap().to_owned())
}

async fn place(app: &TestApp, key: &str, merchant: &str) -> Value {
    let path = format!("/api/merchants/{merchant}/orders");
    json(app.post(&path, key).json(&order_body()).send().await.unwrap(), StatusCode::CREATED).await
}

/// One fan-out round, then every due attempt.
async fn round(app: &TestApp) {
    app.services.webhooks.fanout.run_once().await.unwrap();
    app.services.webhooks.deliveries.deliver_due().await.unwrap();
}

async fn tell(receiver: &Receiver, path: &str, body: Value) {
    let response =
        reqwest::Client::new().post(format!("{}{path}", receiver.url)).json(&body).send().await.unwrap();
    assert!(response.status().is_success(), "{path}: {}", response.status());
}

#[derive(FromQueryResult)]
struct Event {
    event_id: uuid::Uuid,
    event_type: String,
    payload: String,
}

/// The outbox's native events of `merchant`: (id, type).
async fn events_of(app: &TestApp, merchant: &str) -> Vec<(String, String)> {
    let backend = app.db.get_database_backend();
    let rows = Event::find_by_statement(sea_orm::Statement::from_string(
        backend,
        "SELECT event_id, event_type, payload FROM outbox_events ORDER BY id",
    ))
    .all(&app.db)
    .await
    .unwrap();
    rows.into_iter()
        .filter(|r| {
            let p: Value = serde_json::from_str(&r.payload).unwrap();
            p["payload"]["merchantId"] == merchant && !r.event_type.starts_with("webhook.")
        })
        .map(|r| (r.event_id.to_string(), r.event_type))
        .collect()
}

fn at_path<'a>(deliveries: &'a [Value], path: &str) -> Vec<&'a Value> {
    deliveries.iter().filter(|d| d["path"] == path).collect()
}

async fn deliveries_are_signed_per_endpoint_and_only_the_merchants_own(backend: Backend) {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[]).await else { return };
    let (a, a_operator, a_orders) = merchant(&app, "WH-A").await;
    let (b, b_operator, b_orders) = merchant(&app, "WH-B").await;
    let url = |path: &str| format!("{}{path}", receiver.url);
    let (a_all, a_all_secret) = endpoint(&app, &a, &a_operator, &url("/a-all"), &["*"]).await;
    let (_, a_refunds_secret) =
        endpoint(&app, &a, &a_operator, &url("/a-refunds"), &["payment.refunded"]).await;
    let (_, b_secret) = endpoint(&app, &b, &b_operator, &url("/b-all"), &["*"]).await;
    tell(&receiver, "/secrets", json!([a_all_secret, a_refunds_secret, b_secret])).await;
    let order_a = place(&app, &a_orders, &a).await;
    place(&app, &b_orders, &b).await;
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    let expected_a = events_of(&app, &a).await;
    assert!(expected_a.len() >= 2, "an order makes several events: {expected_a:?}");
    let got_a = at_path(&deliveries, "/a-all");
    let mut got: Vec<(String, String)> = got_a
        .iter()
        .map(|d| (d["id"].as_str().unwrap().to_owned(), d["body"]["type"].as_str().unwrap().to_owned()))
        .collect();
    got.sort();
    let mut want = expected_a.clone();
    want.sort();
    assert_eq!(got, want, "every event of A's, once, under its own id");
    for d in &got_a {
        assert_eq!(d["verified"], json!([0]), "signed with its endpoint's secret only: {d}");
        let body = &d["body"];
        assert_eq!(body["data"]["merchantId"], a.as_str());
        assert_eq!(body["data"]["orderId"], order_a["id"]);
        assert!(body["timestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
        assert_eq!(body.as_object().unwrap().len(), 3, "{{type, timestamp, data}}: {body}");
    }
    assert!(at_path(&deliveries, "/a-refunds").is_empty(), "no refund yet: nothing for that filter");
    let got_b = at_path(&deliveries, "/b-all");
    assert_eq!(got_b.len(), events_of(&app, &b).await.len());
    assert!(
        got_b.iter().all(|d| d["body"]["data"]["merchantId"] == b.as_str() && d["verified"] == json!([2]))
    );
    // A refund reaches the refunds endpoint, under the refund event's id.
    let refund = format!("/api/merchants/{a}/orders/{}/refund", order_a["id"].as_str().unwrap());
    let refunded = app.post(&refund, &a_operator).header("Idempotency-Key", "r1").send().await.unwrap();
    assert_eq!(refunded.status(), StatusCode::OK);
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    let refunds = at_path(&deliveries, "/a-refunds");
    assert_eq!(refunds.len(), 1, "{refunds:?}");
    assert_eq!(
        (refunds[0]["body"]["type"].clone(), refunds[0]["verified"].clone()),
        (json!("payment.refunded"), json!([1]))
    );
    // The log: the message DELIVERED, its attempt with the answer's first 4 KiB.
    let messages = format!("/api/merchants/{a}/webhook-endpoints/{a_all}/messages");
    let page = json(app.get(&messages, &a_operator).send().await.unwrap(), StatusCode::OK).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), events_of(&app, &a).await.len(), "the refund's events too: {page}");
    assert!(
        items.iter().all(|m| m["status"] == "DELIVERED" && m["attempts"] == 1 && m["lastStatus"] == "200")
    );
    let event = items[0]["eventId"].as_str().unwrap().to_owned();
    let attempts = format!("{messages}/{event}/attempts");
    let log = json(app.get(&attempts, &a_operator).send().await.unwrap(), StatusCode::OK).await;
    let first = &log["attempts"][0];
    assert_eq!((first["attempt"].clone(), first["status"].clone()), (json!(1), json!("200")));
    let response = first["response"].as_str().unwrap();
    assert!(
        response.starts_with("answered 200 ") && response.len() == 4096,
        "the first 4 KiB: {}",
        response.len()
    );
    // Resend: one more attempt, the same webhook-id.
    let resent = app.post(&format!("{messages}/{event}/resend"), &a_operator).send().await.unwrap();
    assert_eq!(resent.status(), StatusCode::ACCEPTED);
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(deliveries.iter().filter(|d| d["id"] == event.as_str()).count(), 2, "sent again under its id");
    let log = json(app.get(&attempts, &a_operator).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(log["attempts"].as_array().unwrap().len(), 2);
    // B's people see none of A's endpoints' messages.
    let foreign = app.get(&messages, &b_operator).send().await.unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    let cross = format!("/api/merchants/{b}/webhook-endpoints/{a_all}/messages");
    assert_eq!(app.get(&cross, &b_operator).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

async fn a_rotated_secret_signs_beside_the_new_one_for_the_overlap_only(backend: Backend) {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[("APP__WEBHOOKS__ROTATION_OVERLAP", "30s")]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-ROT").await;
    let (id, old) =
        endpoint(&app, &m, &operator, &format!("{}/rot", receiver.url), &["order.completed"]).await;
    let rotate = format!("/api/merchants/{m}/webhook-endpoints/{id}/secret/rotate");
    let new = json(app.post(&rotate, &operator).send().await.unwrap(), StatusCode::OK).await["secret"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(new, old);
    tell(&receiver, "/secrets", json!([old, new])).await;
    place(&app, &orders, &m).await;
    round(&app).await;
    let during = receiver.deliveries().await;
    assert_eq!(during.len(), 1);
    assert_eq!((during[0]["verified"].clone(), during[0]["signatures"].clone()), (json!([0, 1]), json!(2)));
    app.advance(Duration::from_secs(31));
    place(&app, &orders, &m).await;
    round(&app).await;
    let after = receiver.deliveries().await;
    assert_eq!(after.len(), 2);
    assert_eq!(
        (after[1]["verified"].clone(), after[1]["signatures"].clone()),
        (json!([1]), json!(1)),
        "only the new"
    );
    // Replay protection: a delivery stamped six minutes ago is refused by the verifier. The
    // timestamp is the attempt's own: the app's clock is set back and the message resent.
    let clock = app.clock.as_ref().unwrap();
    clock.advance(chrono::TimeDelta::seconds(-31 - 360));
    let event = after[1]["id"].as_str().unwrap();
    let resend = format!("/api/merchants/{m}/webhook-endpoints/{id}/messages/{event}/resend");
    assert_eq!(app.post(&resend, &operator).send().await.unwrap().status(), StatusCode::ACCEPTED);
    round(&app).await;
    let stale = receiver.deliveries().await;
    assert_eq!(stale.len(), 3);
    assert_eq!(stale[2]["id"], event, "the same webhook-id");
    assert_eq!(stale[2]["verified"], json!([]), "{}", stale[2]);
    assert!(stale[2]["error"].as_str().is_some_and(|e| e.contains("too old")), "{}", stale[2]);
}

async fn message_status(app: &TestApp, m: &str, key: &str, endpoint: &str) -> Vec<Value> {
    let path = format!("/api/merchants/{m}/webhook-endpoints/{endpoint}/messages");
    json(app.get(&path, key).send().await.unwrap(), StatusCode::OK).await["items"].as_array().unwrap().clone()
}

async fn a_receiver_down_for_the_whole_schedule_then_recovered(backend: Backend) {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-DOWN").await;
    let (down, down_secret) =
        endpoint(&app, &m, &operator, &format!("{}/down", receiver.url), &["order.completed"]).await;
    let (_, watch_secret) =
        endpoint(&app, &m, &operator, &format!("{}/watch", receiver.url), &["webhook.message.exhausted"])
            .await;
    tell(&receiver, "/secrets", json!([down_secret, watch_secret])).await;
    tell(&receiver, "/always/down", json!([503, null])).await;
    let since = chrono::Utc::now() - chrono::TimeDelta::minutes(1);
    place(&app, &orders, &m).await;
    round(&app).await;
    let messages = message_status(&app, &m, &operator, &down).await;
    assert_eq!(
        (messages[0]["status"].clone(), messages[0]["attempts"].clone()),
        (json!("PENDING"), json!(1))
    );
    // The schedule (1 s, 2 s, with up to 10 % jitter): two retries, then FAILED.
    for wait in [2, 3] {
        round(&app).await;
        app.advance(Duration::from_secs(wait));
        round(&app).await;
    }
    let messages = message_status(&app, &m, &operator, &down).await;
    assert_eq!((messages[0]["status"].clone(), messages[0]["attempts"].clone()), (json!("FAILED"), json!(3)));
    let deliveries = receiver.deliveries().await;
    let to_down = at_path(&deliveries, "/down");
    assert_eq!(to_down.len(), 3);
    assert!(
        to_down.iter().all(|d| d["id"] == to_down[0]["id"] && d["verified"] == json!([0])),
        "one webhook-id"
    );
    // Our own event about it, delivered to the endpoint that asked for it.
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    let watched = at_path(&deliveries, "/watch");
    assert_eq!(watched.len(), 1, "{deliveries:?}");
    let data = &watched[0]["body"]["data"];
    assert_eq!(watched[0]["body"]["type"], "webhook.message.exhausted");
    assert_eq!(
        (data["endpointId"].as_str(), data["eventId"].clone()),
        (Some(down.as_str()), to_down[0]["id"].clone())
    );
    assert_eq!((data["attempts"].clone(), data["lastStatus"].clone()), (json!(3), json!("503")));
    // The receiver back: recover resends every failed message since then, once.
    tell(&receiver, "/always/down", Value::Null).await;
    let recover = format!("/api/merchants/{m}/webhook-endpoints/{down}/recover");
    let recovered = app.post(&recover, &operator).json(&json!({ "since": since })).send().await.unwrap();
    assert_eq!(json(recovered, StatusCode::ACCEPTED).await["recovered"], 1);
    round(&app).await;
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(at_path(&deliveries, "/down").len(), 4, "once more, and no more");
    let messages = message_status(&app, &m, &operator, &down).await;
    assert_eq!(
        (messages[0]["status"].clone(), messages[0]["attempts"].clone()),
        (json!("DELIVERED"), json!(4))
    );
    assert_eq!(count_where(&app.db, "audit_log", "action = 'WEBHOOK_MESSAGES_RECOVERED'").await, 1);
}

async fn gone_disables_at_once_and_retry_after_never_parks_a_message(backend: Backend) {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-GONE").await;
    let (gone, _) =
        endpoint(&app, &m, &operator, &format!("{}/gone", receiver.url), &["order.completed"]).await;
    let (parked, _) =
        endpoint(&app, &m, &operator, &format!("{}/parked", receiver.url), &["order.completed"]).await;
    let (_, _) =
        endpoint(&app, &m, &operator, &format!("{}/watch", receiver.url), &["webhook.endpoint.disabled"])
            .await;
    tell(&receiver, "/plan/gone", json!([[410, null]])).await;
    // Retry-After: ten years.
    tell(&receiver, "/plan/parked", json!([[503, 315_360_000]])).await;
    place(&app, &orders, &m).await;
    let attempted_at = app.services.clock.now();
    round(&app).await;
    let path = format!("/api/merchants/{m}/webhook-endpoints/{gone}");
    let e = json(app.get(&path, &operator).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!((e["enabled"].clone(), e["disabledReason"].clone()), (json!(false), json!("GONE")), "{e}");
    assert_eq!(message_status(&app, &m, &operator, &gone).await[0]["status"], "FAILED");
    let condition = format!("action = 'WEBHOOK_ENDPOINT_DISABLED' AND entity_id = '{gone}'");
    assert_eq!(count_where(&app.db, "audit_log", &condition).await, 1);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("webhook_endpoints_disabled_total{reason=\"GONE\"} 1"), "{metrics}");
    // Retried within the schedule: the next step (2 s) at most, not ten years.
    let parked_messages = message_status(&app, &m, &operator, &parked).await;
    let next: chrono::DateTime<chrono::Utc> =
        parked_messages[0]["nextAttemptAt"].as_str().unwrap().parse().unwrap();
    assert!(next <= attempted_at + chrono::TimeDelta::milliseconds(2_200), "{next} vs {attempted_at}");
    assert!(
        next >= attempted_at + chrono::TimeDelta::milliseconds(1_900),
        "Retry-After honoured up to the step"
    );
    // The disabling is an event another endpoint takes; the disabled one takes nothing more.
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    let watched = at_path(&deliveries, "/watch");
    assert_eq!(watched.len(), 1);
    assert_eq!(watched[0]["body"]["data"]["reason"], "GONE");
    place(&app, &orders, &m).await;
    app.advance(Duration::from_secs(3));
    round(&app).await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(at_path(&deliveries, "/gone").len(), 1, "one attempt, then nothing");
    assert_eq!(at_path(&deliveries, "/parked").len(), 3, "its retry, and the next order's");
    let enable = app.post(&format!("{path}/enable"), &operator).send().await.unwrap();
    assert_eq!(json(enable, StatusCode::OK).await["enabled"], true);
}

/// `webhooks.retention`: attempts, finished messages and the bodies nobody needs go; a
/// message still to deliver stays, and its age is the lag gauge's.
async fn finished_messages_and_attempts_go_after_the_retention(backend: Backend) {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[("APP__WEBHOOKS__RETENTION", "1d")]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-KEEP").await;
    endpoint(&app, &m, &operator, &format!("{}/ok", receiver.url), &["*"]).await;
    endpoint(&app, &m, &operator, &format!("{}/down", receiver.url), &["order.completed"]).await;
    tell(&receiver, "/always/down", json!([503, null])).await;
    place(&app, &orders, &m).await;
    round(&app).await;
    let upkeep = &app.services.webhooks.upkeep;
    assert_eq!(upkeep.run_once().await.unwrap(), 0, "nothing is old yet");
    let (messages, attempts) = (app.count("webhook_messages").await, app.count("webhook_attempts").await);
    assert!(messages >= 3 && attempts == messages, "{messages} messages, {attempts} attempts");
    app.advance(Duration::from_secs(2 * 24 * 3600));
    let removed = upkeep.run_once().await.unwrap();
    assert_eq!(app.count("webhook_attempts").await, 0);
    assert_eq!(app.count("webhook_messages").await, 1, "the undelivered one stays");
    assert_eq!(count_where(&app.db, "webhook_messages", "status = 'PENDING'").await, 1);
    assert_eq!(app.count("webhook_events").await, 1, "its body stays; the others' go");
    assert_eq!(removed as i64, attempts + (messages - 1) + (events_of(&app, &m).await.len() as i64 - 1));
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    let age: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("webhook_oldest_undelivered_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no lag gauge: {metrics}"));
    assert!((2.0 * 24.0 * 3600.0..2.0 * 24.0 * 3600.0 + 60.0).contains(&age), "{age}");
}

/// The host guard: with private networks off, an address or a name of loopback is refused
/// when the endpoint is made, and a URL made while they were allowed is refused at delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_addresses_are_refused_at_creation_and_at_delivery() {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = TestApp::spawn_on_manual_clock(
        Backend::Sqlite,
        &[("APP__SECRETS__KEY", SECRETS_KEY), ("APP__WEBHOOKS__ALLOW_HTTP", "true")],
    )
    .await
    else {
        return;
    };
    let (m, operator, _) = merchant(&app, "WH-GUARD").await;
    let port = receiver.url.rsplit(':').next().unwrap();
    let path = format!("/api/merchants/{m}/webhook-endpoints");
    for url in [
        format!("http://127.0.0.1:{port}/x"),
        format!("http://localhost:{port}/x"),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://[::1]/x".to_owned(),
        "http://10.0.0.7/x".to_owned(),
    ] {
        let refused = app
            .post(&path, &operator)
            .json(&json!({ "url": url, "eventTypes": ["*"] }))
            .send()
            .await
            .unwrap();
        let refused = json(refused, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(refused["field"], "url", "{url}: {refused}");
    }
    assert_eq!(count_where(&app.db, "webhook_endpoints", "1 = 1").await, 0);
}

/// DNS rebinding: a name that resolved to a public address when the endpoint was made and to
/// 127.0.0.1 at delivery is refused at delivery; nothing reaches the receiver on 127.0.0.1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_rebound_to_loopback_is_refused_at_delivery() {
    use orchestrator::adapters::webhook_sender::{HttpWebhookSender, Lookup};
    use orchestrator::application::ports::{PostError, WebhookPost, WebhookSender};
    use std::net::IpAddr;
    use std::sync::Mutex;

    struct Scripted(Mutex<Vec<IpAddr>>);
    impl Lookup for Scripted {
        fn lookup(
            &self,
            _host: String,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<Vec<IpAddr>>> + Send>>
        {
            let mut answers = self.0.lock().unwrap();
            let next = if answers.len() > 1 { answers.remove(0) } else { answers[0] };
            Box::pin(async move { Ok(vec![next]) })
        }
    }
    let Some(receiver) = Receiver::start(&[]) else { return };
    let port = receiver.url.rsplit(':').next().unwrap();
    let lookup = Scripted(Mutex::new(vec!["93.184.216.34".parse().unwrap(), "127.0.0.1".parse().unwrap()]));
    let sender = HttpWebhookSender::new(Duration::from_secs(2), false, std::sync::Arc::new(lookup)).unwrap();
    let url = format!("http://rebind.example:{port}/hooks");
    assert_eq!(sender.check_host(&url).await, Ok(()), "public when the endpoint is made");
    let post = WebhookPost {
        url,
        id: "ev-1".into(),
        timestamp: chrono::Utc::now().timestamp(),
        body: "{}".into(),
        secrets: vec!["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()],
    };
    let answer = sender.post(&post).await;
    assert_eq!(answer.status, Err(PostError::RefusedAddress), "{answer:?}");
    assert!(receiver.deliveries().await.is_empty(), "no connection was made");
    // With private networks allowed (development), the same name is delivered to.
    let lookup = Scripted(Mutex::new(vec!["127.0.0.1".parse().unwrap()]));
    let sender = HttpWebhookSender::new(Duration::from_secs(2), true, std::sync::Arc::new(lookup)).unwrap();
    assert_eq!(sender.post(&post).await.status, Ok(200));
    assert_eq!(receiver.deliveries().await.len(), 1);
}

/// PostgreSQL hands out an event's id when it is inserted, not when its transaction
/// commits: an event that took its id first and committed last is fanned out all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_a_later_one_is_fanned_out_all_the_same() {
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(Backend::Postgres, &[]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-LATE").await;
    let (_, secret) =
        endpoint(&app, &m, &operator, &format!("{}/late", receiver.url), &["order.completed"]).await;
    tell(&receiver, "/secrets", json!([secret])).await;
    place(&app, &orders, &m).await;
    round(&app).await;
    assert_eq!(receiver.deliveries().await.len(), 1);
    // Copies of that event under new ids: one in a transaction left open, one committed.
    let columns: Vec<String> = sea_orm::JsonValue::find_by_statement(sea_orm::Statement::from_string(
        sea_orm::DatabaseBackend::Postgres,
        "SELECT column_name AS c FROM information_schema.columns WHERE table_name = 'outbox_events' \
         AND column_name NOT IN ('id', 'event_id', 'txid')",
    ))
    .all(&app.db)
    .await
    .unwrap()
    .into_iter()
    .map(|row| row["c"].as_str().unwrap().to_owned())
    .collect();
    let copy = |event: uuid::Uuid| {
        let list = columns.join(", ");
        format!(
            "INSERT INTO outbox_events (event_id, {list}) SELECT '{event}', {list} FROM outbox_events \
             WHERE event_type = 'order.completed' ORDER BY id LIMIT 1"
        )
    };
    let (early, late) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let open = app.db.begin().await.unwrap();
    open.execute_unprepared(&copy(early)).await.unwrap();
    app.db.execute_unprepared(&copy(late)).await.unwrap();
    round(&app).await;
    let ids: Vec<Value> = receiver.deliveries().await.iter().map(|d| d["id"].clone()).collect();
    assert_eq!(ids.len(), 2, "the committed one: {ids:?}");
    assert_eq!(ids[1], late.to_string());
    open.commit().await.unwrap();
    round(&app).await;
    let ids: Vec<Value> = receiver.deliveries().await.iter().map(|d| d["id"].clone()).collect();
    assert_eq!(ids.len(), 3, "then the one that took its id first: {ids:?}");
    assert_eq!(ids[2], early.to_string());
    round(&app).await;
    assert_eq!(receiver.deliveries().await.len(), 3, "each once");
}

/// A slow endpoint (answering after 14 s) and a dead one hold their own slots only: with the
/// delivery workers running, a healthy endpoint of the same merchant receives every message
/// while the slow one still holds its first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_or_dead_endpoint_never_delays_another() {
    let Some(receiver) = Receiver::start(&[]) else { return };
    // As many claims as the slow endpoint has slots: its waiting attempts must not hold them.
    let extra = [
        ("APP__WEBHOOKS__MAX_IN_FLIGHT", "2"),
        ("APP__WEBHOOKS__WORKERS", "2"),
        ("APP__WEBHOOKS__TIMEOUT", "15s"),
    ];
    let Some(app) = webhook_app(Backend::Sqlite, &extra).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-SLOW").await;
    let url = |p: &str| format!("{}{p}", receiver.url);
    endpoint(&app, &m, &operator, &url("/slow"), &["*"]).await;
    endpoint(&app, &m, &operator, "http://127.0.0.1:9/dead", &["*"]).await;
    endpoint(&app, &m, &operator, &url("/good"), &["*"]).await;
    tell(&receiver, "/always/slow", json!([200, null, 14])).await;
    for _ in 0..10 {
        place(&app, &orders, &m).await;
    }
    let stop = tokio_util::sync::CancellationToken::new();
    let workers = tokio::spawn(app.services.webhooks.deliveries.clone().run_until_stopped(stop.clone()));
    app.services.webhooks.fanout.run_once().await.unwrap();
    let expected = events_of(&app, &m).await.len();
    crate::helpers::until_within(
        "every message at the healthy endpoint",
        Duration::from_secs(10),
        || async { at_path(&receiver.deliveries().await, "/good").len() == expected },
    )
    .await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(at_path(&deliveries, "/slow").len(), 2, "the slow one holds its two slots, no more");
    stop.cancel();
    drop(workers);
}

#[derive(FromQueryResult)]
struct Count {
    n: i64,
}

/// docs/spec.md §16, for real: a worker SIGKILLed while an attempt is being received (sent,
/// never recorded) and with messages committed but not yet sent. The next worker sends the
/// unsent ones once and the unrecorded one again under the same `webhook-id` once its claim
/// has run out — the one duplicate the specification allows, counted in
/// `webhook_reclaimed_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_delivery_sends_again_under_the_same_id() {
    use std::process::{Command, Stdio};

    use crate::channels::signed_token;
    use crate::cli::{app, served_port, temp_dir, wait_ready};
    let Some(receiver) = Receiver::start(&[]) else { return };
    let dir = temp_dir();
    let db_url = format!("sqlite://{}/app.db?mode=rwc", dir.0.display());
    let env = |cmd: &mut Command| {
        cmd.env("APP__DATABASE__URL", &db_url)
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .env("APP__SECRETS__KEY", SECRETS_KEY)
            .env("APP__WEBHOOKS__ALLOW_HTTP", "true")
            .env("APP__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true")
            .env("APP__WEBHOOKS__MAX_IN_FLIGHT", "1")
            .env("APP__WEBHOOKS__TIMEOUT", "2s")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .env("APP__WORKER__EMBEDDED", "false");
    };
    // `serve`: the merchant, its endpoint and an order; its events committed.
    let log_path = dir.0.join("serve.log");
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    cmd.env("APP__HTTP__BIND", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    let mut serve = crate::helpers::Process::spawn(cmd.arg("serve"));
    let port = served_port(&log_path).await;
    wait_ready(port).await;
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    let admin = signed_token(json!({ "sub": "ops", "roles": ["admin"] }));
    let made = client
        .post(format!("{base}/api/merchants"))
        .bearer_auth(&admin)
        .json(&json!({ "code": "CRASH", "name": "Crash" }));
    let m = json(made.send().await.unwrap(), StatusCode::CREATED).await["id"].as_str().unwrap().to_owned();
    let mut keys = Vec::new();
    for role in ["OPERATOR", "ORDERS"] {
        let made = client
            .post(format!("{base}/api/merchants/{m}/api-keys"))
            .bearer_auth(&admin)
            .json(&json!({ "name": role, "role": role }));
        keys.push(
            json(made.send().await.unwrap(), StatusCode::CREATED).await["key"].as_str().unwrap().to_owned(),
        );
    }
    let made = client
        .post(format!("{base}/api/merchants/{m}/webhook-endpoints"))
        .bearer_auth(&keys[0])
        .json(&json!({ "url": format!("{}/crash", receiver.url), "eventTypes": ["*"] }));
    let secret =
        json(made.send().await.unwrap(), StatusCode::CREATED).await["secret"].as_str().unwrap().to_owned();
    tell(&receiver, "/secrets", json!([secret])).await;
    let placed =
        client.post(format!("{base}/api/merchants/{m}/orders")).bearer_auth(&keys[1]).json(&order_body());
    json(placed.send().await.unwrap(), StatusCode::CREATED).await;
    serve.kill().unwrap();
    serve.wait().unwrap();
    // Worker 1: the first attempt held by the receiver, then killed.
    tell(&receiver, "/plan/crash", json!([[0, null]])).await;
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    cmd.env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.0.join("w1.log")).unwrap());
    let mut first = crate::helpers::Process::spawn(cmd.arg("worker"));
    crate::helpers::until("the first attempt received (and held)", || async {
        !receiver.deliveries().await.is_empty()
    })
    .await;
    first.kill().unwrap();
    first.wait().unwrap();
    let db = sea_orm::Database::connect(db_url.as_str()).await.unwrap();
    let messages = count_where(&db, "webhook_messages", "1 = 1").await;
    assert!(messages >= 2, "an order makes several events: {messages}");
    assert_eq!(count_where(&db, "webhook_attempts", "1 = 1").await, 0, "nothing recorded before the kill");
    // Worker 2: everything delivered.
    let w2_log = dir.0.join("w2.log");
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    cmd.env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&w2_log).unwrap());
    let _second = crate::helpers::Process::spawn(cmd.arg("worker"));
    crate::helpers::until_within("every message delivered", Duration::from_secs(60), || async {
        count_where(&db, "webhook_messages", "status = 'DELIVERED'").await == messages
    })
    .await;
    let deliveries = receiver.deliveries().await;
    let first_id = deliveries[0]["id"].clone();
    assert_eq!(deliveries.len() as i64, messages + 1, "each once, the held one twice: {deliveries:?}");
    assert_eq!(deliveries.iter().filter(|d| d["id"] == first_id).count(), 2, "the same webhook-id again");
    assert!(deliveries.iter().all(|d| d["verified"] == json!([0])));
    let attempts = Count::find_by_statement(sea_orm::Statement::from_string(
        db.get_database_backend(),
        "SELECT COUNT(*) AS n FROM webhook_attempts",
    ))
    .one(&db)
    .await
    .unwrap()
    .unwrap();
    assert_eq!(attempts.n, messages, "the send the kill interrupted was never recorded");
    let metrics_url: String =
        crate::helpers::until_some("the worker's metrics address", Duration::from_secs(10), || async {
            std::fs::read_to_string(&w2_log)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find_map(|l| l["metrics"].as_str().map(str::to_owned))
        })
        .await;
    let metrics = client.get(metrics_url).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("webhook_reclaimed_total 1"), "{metrics}");
}

/// `webhooks.max_rate` 2 (issue 70): the fan-out makes a bucket's worth and leaves the other
/// events in the outbox, the workers attempt a bucket's worth and leave the other messages
/// due; as the buckets refill, every message reaches its endpoint, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_holds_webhooks_back_then_every_one_is_delivered_once() {
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(Backend::Postgres, &[("APP__WEBHOOKS__MAX_RATE", "2")]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-BUDGET").await;
    for i in 0..3 {
        endpoint(&app, &m, &operator, &format!("{}/b{i}", receiver.url), &["*"]).await;
    }
    for _ in 0..3 {
        place(&app, &orders, &m).await;
    }
    let events = events_of(&app, &m).await;
    assert!(events.len() > 2, "more events than the bucket holds: {events:?}");
    // Two events (the bucket), three endpoints each.
    assert_eq!(app.services.webhooks.fanout.run_once().await.unwrap(), 6);
    // Two attempts (the workers' bucket) of the six due.
    assert_eq!(app.services.webhooks.deliveries.deliver_due().await.unwrap(), 2);
    assert_eq!(receiver.deliveries().await.len(), 2);
    let expected = events.len() * 3;
    crate::helpers::until_within("every message", Duration::from_secs(60), || async {
        round(&app).await;
        receiver.deliveries().await.len() >= expected
    })
    .await;
    let deliveries = receiver.deliveries().await;
    assert_eq!(deliveries.len(), expected, "each message once");
    for i in 0..3 {
        let ids: Vec<&Value> = at_path(&deliveries, &format!("/b{i}")).iter().map(|d| &d["id"]).collect();
        let wanted: Vec<Value> = events.iter().map(|(id, _)| Value::from(id.as_str())).collect();
        assert_eq!(ids.len(), wanted.len(), "/b{i}");
        assert!(wanted.iter().all(|id| ids.contains(&id)), "/b{i}: every event: {ids:?}");
    }
}

/// An operator's edit reads the endpoint, then writes it: a delivery recorded in between (a
/// `410` that disabled it) stands — the edit writes only what it changes.
async fn an_edit_never_undoes_what_a_delivery_recorded_meanwhile(backend: Backend) {
    use orchestrator::adapters::persistence::SeaOrmStore;
    use orchestrator::application::ports::WebhookEndpointStore;
    use orchestrator::domain::ids::{MerchantId, WebhookEndpointId};
    let Some(receiver) = Receiver::start(&[]) else { return };
    let Some(app) = webhook_app(backend, &[]).await else { return };
    let (m, operator, orders) = merchant(&app, "WH-EDIT").await;
    let (id, _) = endpoint(&app, &m, &operator, &format!("{}/edited", receiver.url), &["*"]).await;
    let store = SeaOrmStore::new(app.db.clone(), app.services.relay_wake.clone());
    let (merchant_id, endpoint_id): (MerchantId, WebhookEndpointId) =
        (m.parse().unwrap(), id.parse().unwrap());
    // The edit's read ...
    let (mut edited, _) = store.endpoint(merchant_id, endpoint_id).await.unwrap().unwrap();
    // ... a delivery meanwhile, answered 410 ...
    tell(&receiver, "/always/edited", json!([410, null])).await;
    place(&app, &orders, &m).await;
    round(&app).await;
    // ... and the edit's write.
    edited.description = "renamed".into();
    store.update_endpoint(&edited, None).await.unwrap();
    let path = format!("/api/merchants/{m}/webhook-endpoints/{id}");
    let e = json(app.get(&path, &operator).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(e["description"], "renamed", "{e}");
    assert_eq!((e["enabled"].clone(), e["disabledReason"].clone()), (json!(false), json!("GONE")), "{e}");
}
