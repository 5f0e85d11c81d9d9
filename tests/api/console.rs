//! The operator console (`/console/`) in a real browser: headless Chromium driven by
//! `tests/browser/console_page.py`. A customer token is refused; an admin signs in, sees a
//! dead letter, dry-runs and redrives it and sees it published; reprocesses a notification
//! waiting for an operator and sees its order completed. Screenshots of each page are
//! written to `target/console-screens/` (the ones in docs/images come from there).

use std::path::Path;
use std::process::Command;

use orchestrator::startup::Workers;
use reqwest::StatusCode;

use crate::broker::{TestBroker, amqp_url};
use crate::helpers::{Backend, TestApp, count_where, json, order_body, service_missing, until};

/// Whether headless Chromium, its driver and selenium are here (a missing one is reported as
/// a skipped service, a failure under `CI=true`).
pub(crate) fn browser_available() -> bool {
    if !Path::new("/usr/bin/chromium").exists() || !Path::new("/usr/bin/chromedriver").exists() {
        service_missing("chromium", "/usr/bin/chromium or /usr/bin/chromedriver missing");
        return false;
    }
    if !Command::new("python3").args(["-c", "import selenium"]).output().is_ok_and(|o| o.status.success()) {
        service_missing("selenium", "python3 cannot import selenium (pip install selenium)");
        return false;
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_repairs_a_dead_letter_and_a_notification_from_the_console() {
    if !browser_available() {
        return;
    }
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    // No retries: an event nobody routes is a dead letter at its first return.
    let mut env = broker.env(&amqp_url());
    env.push(("APP__OUTBOX__MAX_RETRIES".into(), "0".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &refs).await else {
        return;
    };
    let workers = Workers::spawn(&app.services);
    let alice = app.token("alice");
    // An order, and an event of it that no queue is bound for: returned unroutable, a dead letter.
    let broken = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let broken_id = broken["id"].as_str().unwrap().to_owned();
    let event_id = orchestrator::domain::ids::EventId::new();
    let unroutable = orchestrator::application::ports::NewOutboxEvent {
        event_id,
        aggregate_type: "order".into(),
        aggregate_id: broken_id.clone(),
        event_type: "order.archived".into(),
        routing_key: "nobody.archive".into(),
        payload: serde_json::json!({ "eventId": event_id.to_string(), "orderId": broken_id }).to_string(),
        correlation_id: None,
        created_at: chrono::Utc::now(),
    };
    let store = orchestrator::adapters::persistence::SeaOrmStore::new(
        app.db.clone(),
        app.services.relay_wake.clone(),
    );
    orchestrator::application::ports::UnitOfWork::commit(
        &store,
        orchestrator::application::ports::Changes { outbox: vec![unroutable], ..Default::default() },
    )
    .await
    .unwrap();
    until("the unroutable event dead-lettered", || async {
        crate::helpers::outbox_in(&app.db, orchestrator::domain::outbox::OutboxStatus::DeadLetter).await == 1
    })
    .await;
    // The archive's queue is bound now: a redrive can deliver it.
    broker.bind("nobody.#").await;
    // An order whose notification waits for an operator.
    let manual =
        json(app.place_order(&alice, &order_body(), Some("notification=manual")).await, StatusCode::CREATED)
            .await;
    assert_eq!(manual["notification"]["status"], "MANUAL_INTERVENTION_REQUIRED");
    let manual_id = manual["id"].as_str().unwrap().to_owned();
    let manual_number = manual["number"].as_i64().unwrap().to_string();

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console_page.py");
    let shots = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screens");
    let args = [
        app.base.clone(),
        app.admin_token("ops-olga"),
        alice,
        broken_id.clone(),
        manual_id.clone(),
        shots.into(),
        manual_number,
    ];
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
    assert!(stdout.starts_with("ok:"), "{stdout}");
    // What the page showed is what the service recorded, with who did it.
    let admin = app.admin_token("checker");
    let after =
        json(app.get(&format!("/api/orders/{manual_id}"), &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(after["status"], "COMPLETED");
    assert_eq!(
        count_where(&app.db, "audit_log", "actor = 'ops-olga' AND detail LIKE '%broker fixed%'").await,
        1
    );
    assert!(
        count_where(&app.db, "audit_log", "actor = 'ops-olga' AND detail LIKE '%customer asked again%'")
            .await
            >= 1
    );
    workers.shutdown(std::time::Duration::from_secs(10)).await;
    broker.cleanup().await;
}

/// The console's merchant pages in a real browser (`tests/browser/console_merchants.py`):
/// the operator's picker over every merchant, a key made from the page and shown once, and
/// a member who sees its merchant only; what the page made is what the service stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merchants_are_managed_from_the_console_and_a_member_sees_only_its_own() {
    if !browser_available() {
        return;
    }
    let Some(receiver) = crate::channels::Receiver::start(&[]) else { return };
    let env = [
        ("APP__SECRETS__KEY", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="),
        ("APP__WEBHOOKS__ALLOW_HTTP", "true"),
        ("APP__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true"),
    ];
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &env).await else { return };
    let admin = app.admin_token("ops");
    let mut ids = Vec::new();
    for code in ["CONSOLE-A", "CONSOLE-B"] {
        let body = serde_json::json!({ "code": code, "name": code, "timezone": "Asia/Seoul" });
        let made =
            json(app.post("/api/merchants", &admin).json(&body).send().await.unwrap(), StatusCode::CREATED)
                .await;
        ids.push(made["id"].as_str().unwrap().to_owned());
    }
    let store = serde_json::json!({ "code": "gangnam", "name": "Gangnam" });
    json(
        app.post(&format!("/api/merchants/{}/stores", ids[0]), &admin).json(&store).send().await.unwrap(),
        StatusCode::CREATED,
    )
    .await;
    let member =
        app.client.put(format!("{}/api/merchants/{}/members/carol", app.base, ids[0])).bearer_auth(&admin);
    json(member.json(&serde_json::json!({ "role": "VIEWER" })).send().await.unwrap(), StatusCode::OK).await;
    // A webhook endpoint whose receiver answered 410: disabled, its message FAILED.
    let url = format!("{}/gone", receiver.url);
    let endpoint = serde_json::json!({ "url": url, "eventTypes": ["order.completed"] });
    let path = format!("/api/merchants/{}/webhook-endpoints", ids[0]);
    let endpoint =
        json(app.post(&path, &admin).json(&endpoint).send().await.unwrap(), StatusCode::CREATED).await;
    reqwest::Client::new()
        .post(format!("{}/plan/gone", receiver.url))
        .json(&serde_json::json!([[410, null]]))
        .send()
        .await
        .unwrap();
    let placed =
        app.post(&format!("/api/merchants/{}/orders", ids[0]), &admin).json(&crate::helpers::order_body());
    json(placed.send().await.unwrap(), StatusCode::CREATED).await;
    app.services.webhooks.fanout.run_once().await.unwrap();
    app.services.webhooks.deliveries.deliver_due().await.unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console_merchants.py");
    let shots = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screens");
    let args = [
        app.base.clone(),
        admin.clone(),
        app.token("carol"),
        "CONSOLE-A".into(),
        "CONSOLE-B".into(),
        shots.into(),
    ];
    let output = tokio::task::spawn_blocking(move || Command::new("python3").arg(script).args(args).output())
        .await
        .unwrap()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the merchant pages failed in the browser:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.starts_with("ok:"), "{stdout}");
    let keys = json(
        app.get(&format!("/api/merchants/{}/api-keys", ids[0]), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(keys[0]["name"], "console key", "the key the page made: {keys}");
    // What the webhook page's buttons did: enabled, and the message resent.
    let endpoint_path = format!("{path}/{}", endpoint["id"].as_str().unwrap());
    let now = json(app.get(&endpoint_path, &admin).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(now["enabled"], true, "{now}");
    let messages =
        json(app.get(&format!("{endpoint_path}/messages"), &admin).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(messages["items"][0]["status"], "PENDING", "resent from the page: {messages}");
    assert_eq!(
        crate::helpers::count_where(&app.db, "audit_log", "action = 'WEBHOOK_MESSAGE_RESENT'").await,
        1
    );
}
