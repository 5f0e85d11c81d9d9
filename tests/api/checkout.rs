//! Toss's checkout end to end (docs/spec.md §10), the service against the fake Toss API over
//! HTTP on both databases: an order waits `AWAITING_PAYMENT` with the widget's parameters,
//! the customer's `paymentKey` is confirmed once however often it is sent, a wrong amount
//! calls nothing, a refusal declines with Toss's code, a confirm whose answer was lost is
//! found by its orderId, and an order unpaid past the window fails.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, json, order_body};
use crate::on_both_databases;
use crate::toss::{Fake, SECRET};

async fn spawn(backend: Backend, fake: &Fake, manual: bool) -> Option<TestApp> {
    crate::toss::spawn_on(backend, fake, &[("APP__PAYMENT__TOSS__TIMEOUT", "2s")], manual).await
}

async fn pay(app: &TestApp, token: &str, order: &Value, payment_key: &str, amount: i64) -> reqwest::Response {
    let id = order["id"].as_str().unwrap();
    app.post(&format!("/api/orders/{id}/payment"), token)
        .json(&json!({ "paymentKey": payment_key, "amount": amount }))
        .send()
        .await
        .unwrap()
}

async fn a_checkout_waits_for_the_customer_and_is_confirmed_once(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = spawn(backend, &fake, false).await else { return };
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(order["status"], "AWAITING_PAYMENT", "{order}");
    assert!(order["payment"].is_null());
    let checkout = &order["checkout"];
    let total = order["totalAmount"].as_i64().unwrap();
    assert_eq!(checkout["orderId"], format!("pay-{}-1", order["id"].as_str().unwrap()));
    assert_eq!(checkout["amount"], total);
    let customer_key = checkout["customerKey"].as_str().unwrap().to_owned();
    assert_eq!(customer_key.len(), 36, "UUID-shaped: {customer_key}");
    assert!(!customer_key.contains("alice"));
    // Stable per customer, another for another customer.
    let again = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(again["checkout"]["customerKey"], customer_key);
    let bob = json(app.place_order(&app.token("bob"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_ne!(bob["checkout"]["customerKey"], customer_key);

    let payment_key = fake.checkout(checkout["orderId"].as_str().unwrap(), total, None).await;
    // Another amount than the order's: refused, nothing called.
    let wrong =
        json(pay(&app, &alice, &order, &payment_key, total - 1).await, StatusCode::UNPROCESSABLE_ENTITY)
            .await;
    assert_eq!(wrong["code"], "AMOUNT_MISMATCH");
    assert_eq!(fake.calls("confirm").await, 0);
    // Someone else's order: refused.
    let theirs = pay(&app, &app.token("mallory"), &order, &payment_key, total).await;
    assert_eq!(theirs.status(), StatusCode::FORBIDDEN);
    // A key no widget ever gave: 422 naming the field.
    let bad =
        json(pay(&app, &alice, &order, "../cancel", total).await, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(bad["field"], "paymentKey");

    let paid = json(pay(&app, &alice, &order, &payment_key, total).await, StatusCode::OK).await;
    assert_eq!(paid["status"], "COMPLETED", "{paid}");
    assert_eq!(paid["payment"]["status"], "APPROVED");
    assert_eq!(paid["payment"]["providerTransactionId"], payment_key);
    assert!(paid.get("checkout").is_none(), "no widget once paid");
    // The same authorization again (a retried request): the order as it is, no second charge.
    let replay = json(pay(&app, &alice, &order, &payment_key, total).await, StatusCode::OK).await;
    assert_eq!(replay["status"], "COMPLETED");
    assert_eq!(fake.effects("confirm").await, 1);
    // A paid order takes no other payment.
    let other = fake.checkout(checkout["orderId"].as_str().unwrap(), total, None).await;
    let refused = json(pay(&app, &alice, &order, &other, total).await, StatusCode::CONFLICT).await;
    assert_eq!(refused["code"], "PAYMENT_NOT_EXPECTED");
    // The same customer's second order with the key that paid the first (issue 67: answered
    // `ORDER_BUSY` "retry shortly" for ever): a 409 naming why, and the order still waits.
    for _ in 0..2 {
        let reused = json(pay(&app, &alice, &again, &payment_key, total).await, StatusCode::CONFLICT).await;
        assert_eq!(reused["code"], "PAYMENT_KEY_USED", "{reused}");
    }
    let waiting = json(
        app.get(&format!("/api/orders/{}", again["id"].as_str().unwrap()), &alice).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!((&waiting["status"], &waiting["payment"]), (&json!("AWAITING_PAYMENT"), &Value::Null));
    // Support sees Toss's own record beside ours (admins only).
    let payment_id = paid["payment"]["id"].as_str().unwrap();
    let view_path = format!("/api/admin/payments/{payment_id}/provider");
    let view = json(app.get(&view_path, &app.admin_token("ops")).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(view["payment"]["id"], payment_id);
    let theirs = &view["provider"];
    assert_eq!(
        (theirs["paymentKey"].clone(), theirs["status"].clone()),
        (json!(payment_key), json!("DONE")),
        "{view}"
    );
    assert_eq!(theirs["totalAmount"], total);
    assert_eq!(app.get(&view_path, &alice).send().await.unwrap().status(), StatusCode::FORBIDDEN);
    // The secret key is in no answer, event or audit row of the whole run.
    let admin = app.admin_token("ops");
    let flow =
        app.get(&format!("/api/orders/{}/flow", order["id"].as_str().unwrap()), &admin).send().await.unwrap();
    let everything =
        [flow.text().await.unwrap(), paid.to_string(), replay.to_string(), wrong.to_string()].concat();
    assert!(everything.contains("order.completed") && !everything.contains(SECRET), "{everything}");
}

async fn a_refused_card_declines_with_tosss_code(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = spawn(backend, &fake, false).await else { return };
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let total = order["totalAmount"].as_i64().unwrap();
    let key = fake
        .checkout(order["checkout"]["orderId"].as_str().unwrap(), total, Some("REJECT_CARD_PAYMENT"))
        .await;
    let failed = json(pay(&app, &alice, &order, &key, total).await, StatusCode::OK).await;
    assert_eq!(
        (failed["status"].clone(), failed["failureStage"].clone()),
        (json!("FAILED"), json!("PAYMENT"))
    );
    assert_eq!(failed["payment"]["status"], "DECLINED");
    let steps = failed["steps"].to_string();
    assert!(steps.contains("REJECT_CARD_PAYMENT"), "{steps}");
}

async fn a_confirm_whose_answer_was_lost_is_found_and_charged_once(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = spawn(backend, &fake, true).await else { return };
    let alice = app.token("alice");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let total = order["totalAmount"].as_i64().unwrap();
    let key = fake.checkout(order["checkout"]["orderId"].as_str().unwrap(), total, None).await;
    // The charge is made, its answer comes after our timeout (2 s): the outcome is unknown.
    // (An answer lost once is found by the same key's replay: tests/api/toss.rs.)
    fake.fault("confirm", "delay", 3000, 1).await;
    let pending = json(pay(&app, &alice, &order, &key, total).await, StatusCode::OK).await;
    assert_eq!(pending["status"], "PENDING_CONFIRMATION", "{pending}");
    assert_eq!(pending["payment"]["status"], "CONFIRMATION_REQUIRED");
    // Reconciliation asks Toss by orderId and goes on.
    let mut rounds = 0;
    loop {
        app.services.recovery.reconcile_due().await.unwrap();
        let now = json(
            app.get(&format!("/api/orders/{}", order["id"].as_str().unwrap()), &alice).send().await.unwrap(),
            StatusCode::OK,
        )
        .await;
        if now["status"] == "COMPLETED" {
            assert_eq!(now["payment"]["providerTransactionId"], key);
            break;
        }
        rounds += 1;
        assert!(rounds < 10, "reconciled within bounded rounds: {now}");
        app.advance(Duration::from_secs(3600));
    }
    assert_eq!(fake.effects("confirm").await, 1, "charged once");
}

async fn an_order_unpaid_past_the_window_fails_and_takes_no_payment(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = spawn(backend, &fake, true).await else { return };
    let alice = app.token("alice");
    let late = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let forgotten = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let total = late["totalAmount"].as_i64().unwrap();
    let key = fake.checkout(late["checkout"]["orderId"].as_str().unwrap(), total, None).await;
    assert_eq!(app.services.orchestrator.expire_unpaid().await.unwrap(), 0, "within the window");
    app.advance(Duration::from_secs(11 * 60));
    // Paid too late: refused, nothing called, and the order fails.
    let refused = json(pay(&app, &alice, &late, &key, total).await, StatusCode::CONFLICT).await;
    assert_eq!(refused["code"], "PAYMENT_WINDOW_EXPIRED");
    assert_eq!(fake.calls("confirm").await, 0);
    // The worker fails the other.
    assert_eq!(app.services.orchestrator.expire_unpaid().await.unwrap(), 1);
    for order in [&late, &forgotten] {
        let id = order["id"].as_str().unwrap();
        let now =
            json(app.get(&format!("/api/orders/{id}"), &alice).send().await.unwrap(), StatusCode::OK).await;
        assert_eq!(
            (now["status"].clone(), now["failureStage"].clone(), now["failureReason"].clone()),
            (json!("FAILED"), json!("PAYMENT"), json!("PAYMENT_WINDOW_EXPIRED")),
            "{now}"
        );
        let flow =
            json(app.get(&format!("/api/orders/{id}/flow"), &alice).send().await.unwrap(), StatusCode::OK)
                .await;
        assert!(
            flow["events"].as_array().unwrap().iter().any(|e| e["eventType"] == "order.failed"),
            "{flow}"
        );
    }
    assert_eq!(app.services.orchestrator.expire_unpaid().await.unwrap(), 0, "once");
}

on_both_databases!(
    a_checkout_waits_for_the_customer_and_is_confirmed_once,
    a_refused_card_declines_with_tosss_code,
    a_confirm_whose_answer_was_lost_is_found_and_charged_once,
    an_order_unpaid_past_the_window_fails_and_takes_no_payment,
);
