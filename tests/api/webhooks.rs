//! Toss's webhooks (docs/spec.md §10) against the fake Toss API on both databases: never
//! trusted — a forged notice changes nothing, Toss is asked and its answer applied: a cancel
//! made in Toss's dashboard is recorded as a refund by `provider`, an unknown outcome is
//! resolved; duplicates are no-ops; the endpoint is rate-limited.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json, order_body, until, until_within};
use crate::on_both_databases;
use crate::toss::Fake;

async fn notify(app: &TestApp, body: &Value) -> reqwest::Response {
    app.client.post(format!("{}/api/payments/toss/webhook", app.base)).json(body).send().await.unwrap()
}

fn notice(payment_key: &str, order_id: &str) -> Value {
    json!({ "eventType": "PAYMENT_STATUS_CHANGED", "createdAt": "2026-12-02T15:00:00.000000",
            "data": { "paymentKey": payment_key, "orderId": order_id, "status": "DONE" } })
}

async fn detail(app: &TestApp, id: &str) -> Value {
    json(app.get(&format!("/api/orders/{id}"), &app.admin_token("ops")).send().await.unwrap(), StatusCode::OK)
        .await
}

/// A paid order (the checkout through the fake), its Toss orderId and paymentKey.
pub(crate) async fn paid_order(app: &TestApp, fake: &Fake) -> (String, String, String) {
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let (id, toss_order) =
        (order["id"].as_str().unwrap().to_owned(), order["checkout"]["orderId"].as_str().unwrap().to_owned());
    let total = order["totalAmount"].as_i64().unwrap();
    let key = fake.checkout(&toss_order, total, None).await;
    let paid = app
        .post(&format!("/api/orders/{id}/payment"), &alice)
        .json(&json!({ "paymentKey": key, "amount": total }))
        .send()
        .await
        .unwrap();
    assert_eq!(json(paid, StatusCode::OK).await["status"], "COMPLETED");
    (id, toss_order, key)
}

async fn a_cancel_in_tosss_dashboard_is_recorded_as_a_refund_by_the_provider(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, toss_order, key) = paid_order(&app, &fake).await;
    // A forged notice changes nothing: Toss, asked, still has the payment DONE.
    let forged = json(notify(&app, &notice(&key, &toss_order)).await, StatusCode::OK).await;
    assert_eq!(forged["outcome"], "UNCHANGED");
    assert_eq!(detail(&app, &id).await["status"], "COMPLETED");
    // A notice of a payment we do not have, and one that is not JSON.
    assert_eq!(
        json(notify(&app, &notice("tgen_nobody", "pay-nobody")).await, StatusCode::OK).await["outcome"],
        "UNCHANGED"
    );
    let garbage =
        app.client.post(format!("{}/api/payments/toss/webhook", app.base)).body("{{{").send().await.unwrap();
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);

    // Staff cancel it in Toss's dashboard; Toss's webhook tells us.
    fake.post("/__fake/webhook", json!({ "url": format!("{}/api/payments/toss/webhook", app.base) })).await;
    fake.post(
        &format!("/__fake/payments/{key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called" }),
    )
    .await;
    until("the dashboard cancel recorded", || async { detail(&app, &id).await["status"] == "CANCELLED" })
        .await;
    let now = detail(&app, &id).await;
    assert_eq!(now["payment"]["status"], "REFUNDED");
    let flow = json(
        app.get(&format!("/api/orders/{id}/flow"), &app.admin_token("ops")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert!(
        flow["events"].as_array().unwrap().iter().any(|e| e["eventType"] == "payment.refunded"),
        "{flow}"
    );
    assert!(
        flow["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["action"] == "REFUNDED" && a["actor"] == "system:provider"),
        "{flow}"
    );
    // Toss's retry of the same webhook: a no-op.
    assert_eq!(
        json(notify(&app, &notice(&key, &toss_order)).await, StatusCode::OK).await["outcome"],
        "UNCHANGED"
    );
    assert_eq!(fake.effects("cancel").await, 0, "the service itself cancelled nothing");
}

async fn a_webhook_resolves_an_unknown_outcome_by_asking_toss(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) =
        crate::toss::spawn_on(backend, &fake, &[("APP__PAYMENT__TOSS__TIMEOUT", "1s")], false).await
    else {
        return;
    };
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let id = order["id"].as_str().unwrap();
    let toss_order = order["checkout"]["orderId"].as_str().unwrap();
    let total = order["totalAmount"].as_i64().unwrap();
    let key = fake.checkout(toss_order, total, None).await;
    fake.fault("confirm", "delay", 1500, 1).await;
    let paid = app
        .post(&format!("/api/orders/{id}/payment"), &alice)
        .json(&json!({ "paymentKey": key, "amount": total }))
        .send()
        .await
        .unwrap();
    assert_eq!(json(paid, StatusCode::OK).await["status"], "PENDING_CONFIRMATION");
    // The charge made at Toss (after its delay).
    until_within("the delayed confirm to be made at Toss", Duration::from_secs(10), || async {
        fake.effects("confirm").await == 1
    })
    .await;
    let applied = json(notify(&app, &notice(&key, toss_order)).await, StatusCode::OK).await;
    assert_eq!(applied["outcome"], "APPLIED");
    assert_eq!(detail(&app, id).await["status"], "COMPLETED");
    assert_eq!(fake.effects("confirm").await, 1);
}

/// Issue 43 item 7: a flood of notices about made-up keys used to spend the one budget
/// every caller shared, and Toss's genuine notice was refused (429). Strangers have a budget
/// of their own; each payment we have has its own too.
async fn a_flood_of_made_up_keys_never_starves_a_genuine_notice(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, toss_order, key) = paid_order(&app, &fake).await;
    let mut refused = 0;
    for n in 0..250 {
        let status =
            notify(&app, &notice(&format!("tgen_flood{n}"), &format!("pay-flood{n}"))).await.status();
        refused += usize::from(status == StatusCode::TOO_MANY_REQUESTS);
    }
    assert!(refused >= 100, "the strangers' budget is spent: {refused} of 250 refused");
    fake.post(
        &format!("/__fake/payments/{key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called" }),
    )
    .await;
    let genuine = json(notify(&app, &notice(&key, &toss_order)).await, StatusCode::OK).await;
    assert_eq!(genuine["outcome"], "APPLIED");
    assert_eq!(detail(&app, &id).await["status"], "CANCELLED");
    // One payment's own flood (its key is in the customer's redirect URL) spends its own budget.
    let mut limited = 0;
    for _ in 0..20 {
        limited += usize::from(
            notify(&app, &notice(&key, &toss_order)).await.status() == StatusCode::TOO_MANY_REQUESTS,
        );
    }
    assert!(limited >= 5, "a known payment's notices are bounded too: {limited} of 20 refused");
    let asked = fake.calls("get_payment").await;
    assert!(asked <= 11, "Toss asked at most once per admitted notice, never for a stranger: {asked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_is_rate_limited() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let mut limited = 0;
    for _ in 0..150 {
        if notify(&app, &json!({ "eventType": "SOMETHING_ELSE" })).await.status()
            == StatusCode::TOO_MANY_REQUESTS
        {
            limited += 1;
        }
    }
    assert!(limited >= 40, "past its burst the endpoint refuses: {limited} of 150");
}

/// Toss's Payment object as the fake has it.
pub(crate) async fn at_toss(fake: &Fake, payment_key: &str) -> Value {
    at_toss_path(fake, &format!("/v1/payments/{payment_key}")).await
}

/// What the fake answers a `GET` of `path` under the tests' secret key (Toss's look-ups).
pub(crate) async fn at_toss_path(fake: &Fake, path: &str) -> Value {
    reqwest::Client::new()
        .get(format!("{}{path}", fake.running.base_url))
        .basic_auth(crate::toss::SECRET, Some(""))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn partial_refunds_at_toss_and_in_its_dashboard_agree_with_its_books(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, toss_order, key) = paid_order(&app, &fake).await; // 30 000
    let alice = app.token("alice");
    let refund = |amount: i64| {
        app.post(&format!("/api/orders/{id}/refund"), &alice)
            .json(&json!({ "reason": "one ticket", "amount": amount }))
            .send()
    };
    // Ours: a partial cancel with its own key; Toss's transactionKey recorded on the refund.
    let one = json(refund(10000).await.unwrap(), StatusCode::OK).await;
    assert_eq!(one["payment"]["status"], "PARTIALLY_REFUNDED");
    let toss = at_toss(&fake, &key).await;
    assert_eq!(
        (toss["status"].as_str(), toss["balanceAmount"].as_i64()),
        (Some("PARTIAL_CANCELED"), Some(20000))
    );
    assert_eq!(one["refunds"][0]["providerTransactionKey"], toss["cancels"][0]["transactionKey"]);

    // Staff cancel 5 000 more in Toss's dashboard; the webhook makes it a refund by provider.
    fake.post("/__fake/webhook", json!({ "url": format!("{}/api/payments/toss/webhook", app.base) })).await;
    fake.post(
        &format!("/__fake/payments/{key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called", "cancelAmount": 5000 }),
    )
    .await;
    until("the dashboard's partial cancel recorded", || async {
        detail(&app, &id).await["payment"]["refundedAmount"] == 15000
    })
    .await;
    let now = detail(&app, &id).await;
    assert_eq!(
        (now["status"].as_str(), now["payment"]["status"].as_str()),
        (Some("COMPLETED"), Some("PARTIALLY_REFUNDED"))
    );
    let by_provider = &now["refunds"][1];
    assert_eq!(
        (by_provider["actor"].as_str(), by_provider["amount"].as_i64()),
        (Some("provider"), Some(5000))
    );
    assert_eq!(
        by_provider["providerTransactionKey"],
        at_toss(&fake, &key).await["cancels"][1]["transactionKey"]
    );
    // The same notice again: nothing new.
    assert_eq!(
        json(notify(&app, &notice(&key, &toss_order)).await, StatusCode::OK).await["outcome"],
        "UNCHANGED"
    );

    // The rest through the API: the balance Toss has and ours agree to the last won.
    let rest = json(
        app.post(&format!("/api/orders/{id}/refund"), &alice).json(&json!({})).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(
        (rest["status"].as_str(), rest["payment"]["status"].as_str()),
        (Some("CANCELLED"), Some("REFUNDED"))
    );
    let toss = at_toss(&fake, &key).await;
    assert_eq!((toss["status"].as_str(), toss["balanceAmount"].as_i64()), (Some("CANCELED"), Some(0)));
    let ours: Vec<i64> =
        rest["refunds"].as_array().unwrap().iter().map(|r| r["amount"].as_i64().unwrap()).collect();
    let theirs: Vec<i64> =
        toss["cancels"].as_array().unwrap().iter().map(|c| c["cancelAmount"].as_i64().unwrap()).collect();
    assert_eq!(ours, theirs);
    assert_eq!(fake.effects("cancel").await, 2, "two cancels were ours, one was the dashboard's");
    assert_eq!(
        crate::helpers::count_where(&app.db, "audit_log", "action = 'REFUND_BALANCE_MISMATCH'").await,
        0
    );
}

async fn twenty_concurrent_partial_refunds_at_toss_never_pass_the_amount(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, key) = paid_order(&app, &fake).await; // 30 000
    let app = std::sync::Arc::new(app);
    let mut tasks = Vec::new();
    for client in 0..20 {
        let (app, id) = (app.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..400 {
                let response = app
                    .post(&format!("/api/orders/{id}/refund"), &app.token("alice"))
                    .header("Idempotency-Key", format!("client-{client}"))
                    .json(&json!({ "amount": 7000 }))
                    .send()
                    .await
                    .unwrap();
                let status = response.status();
                let body: Value = response.json().await.unwrap();
                if status == StatusCode::CONFLICT && body["code"] == "ORDER_BUSY" {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                return status;
            }
            panic!("client {client} was never answered but ORDER_BUSY");
        }));
    }
    let mut ok = 0;
    for task in tasks {
        if task.await.unwrap() == StatusCode::OK {
            ok += 1;
        }
    }
    assert_eq!(ok, 4);
    let toss = at_toss(&fake, &key).await;
    assert_eq!(toss["balanceAmount"], 2000);
    assert_eq!(fake.effects("cancel").await, 4);
    assert_eq!(detail(&app, &id).await["payment"]["balance"], 2000);
}

on_both_databases!(
    a_cancel_in_tosss_dashboard_is_recorded_as_a_refund_by_the_provider,
    a_webhook_resolves_an_unknown_outcome_by_asking_toss,
    partial_refunds_at_toss_and_in_its_dashboard_agree_with_its_books,
    twenty_concurrent_partial_refunds_at_toss_never_pass_the_amount,
    a_flood_of_made_up_keys_never_starves_a_genuine_notice,
);
