//! The Toss edges an outside test found (issue 43 items 2, 3, 5, 6, 10, 11), against the fake
//! Toss API over real HTTP, on both databases: a refund against a balance a dashboard cancel
//! made stale, a paymentKey posted to another customer's order, a refund answered 503 asked
//! again, refund reasons Toss refuses.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, count_where, json};
use crate::on_both_databases;
use crate::toss::Fake;
use crate::webhooks::{at_toss, paid_order};

async fn detail(app: &crate::helpers::TestApp, id: &str) -> Value {
    json(app.get(&format!("/api/orders/{id}"), &app.admin_token("ops")).send().await.unwrap(), StatusCode::OK)
        .await
}

/// 5 000 of 30 000 cancelled in Toss's dashboard, its webhook not come yet; a refund of
/// 10 000 sends `refundableAmount: 30000` and Toss answers 400 NOT_MATCHES_REFUNDABLE_AMOUNT.
/// The dashboard's cancel is recorded (by `provider`), the refund made against the new
/// balance, and both books say 15 000 left — never a refund pending for good.
async fn a_refund_after_a_dashboard_cancel_we_had_not_recorded_goes_through(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, key) = paid_order(&app, &fake).await; // 30 000
    fake.post(
        &format!("/__fake/payments/{key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called", "cancelAmount": 5000 }),
    )
    .await;
    let alice = app.token("alice");
    let refunded = app
        .post(&format!("/api/orders/{id}/refund"), &alice)
        .json(&json!({ "reason": "one ticket", "amount": 10000 }))
        .send()
        .await
        .unwrap();
    let body = json(refunded, StatusCode::OK).await;
    assert_eq!(body["payment"]["status"], "PARTIALLY_REFUNDED", "{body}");
    assert_eq!(body["payment"]["refundedAmount"], 15000, "{body}");
    assert_eq!(body["payment"]["balance"], 15000);
    let toss = at_toss(&fake, &key).await;
    assert_eq!(toss["balanceAmount"], 15000, "Toss's books and ours agree: {toss}");
    let refunds = body["refunds"].as_array().unwrap();
    let by = |status: &str| refunds.iter().filter(|r| r["status"] == status).cloned().collect::<Vec<_>>();
    assert_eq!(by("PENDING").len(), 0, "{refunds:?}");
    let succeeded = by("SUCCEEDED");
    let mut amounts: Vec<(i64, &str)> =
        succeeded.iter().map(|r| (r["amount"].as_i64().unwrap(), r["actor"].as_str().unwrap())).collect();
    amounts.sort();
    assert_eq!(amounts, [(5000, "provider"), (10000, "alice")]);
    assert_eq!(by("FAILED").len(), 1, "the superseded attempt is kept: {refunds:?}");
    assert_eq!(fake.effects("cancel").await, 1, "one cancel of ours at Toss");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REFUND_BALANCE_MISMATCH'").await, 1);
    // The late webhook changes nothing now.
    let notice = json!({ "eventType": "PAYMENT_STATUS_CHANGED", "createdAt": "2026-12-02T15:00:00.000000",
                         "data": { "paymentKey": key, "status": "PARTIAL_CANCELED" } });
    let late = app
        .client
        .post(format!("{}/api/payments/toss/webhook", app.base))
        .json(&notice)
        .send()
        .await
        .unwrap();
    assert_eq!(json(late, StatusCode::OK).await["outcome"], "UNCHANGED");
    assert_eq!(detail(&app, &id).await["payment"]["refundedAmount"], 15000);
}

/// The rest of the balance asked for after a dashboard cancel: the rest at Toss is refunded.
async fn the_rest_after_a_dashboard_cancel_is_the_rest_at_toss(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, key) = paid_order(&app, &fake).await;
    fake.post(
        &format!("/__fake/payments/{key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called", "cancelAmount": 5000 }),
    )
    .await;
    let rest =
        app.post(&format!("/api/orders/{id}/refund"), &app.token("alice")).json(&json!({})).send().await;
    let body = json(rest.unwrap(), StatusCode::OK).await;
    assert_eq!(
        (body["status"].as_str(), body["payment"]["status"].as_str()),
        (Some("CANCELLED"), Some("REFUNDED"))
    );
    assert_eq!(at_toss(&fake, &key).await["balanceAmount"], 0);
    // A refund larger than what the dashboard left is refused, nothing left pending.
    let (other, _, other_key) = paid_order(&app, &fake).await;
    fake.post(
        &format!("/__fake/payments/{other_key}/dashboard-cancel"),
        json!({ "cancelReason": "customer called", "cancelAmount": 25000 }),
    )
    .await;
    let too_much = app
        .post(&format!("/api/orders/{other}/refund"), &app.token("alice"))
        .json(&json!({ "reason": "two tickets", "amount": 10000 }))
        .send()
        .await
        .unwrap();
    let refused = json(too_much, StatusCode::CONFLICT).await;
    assert_eq!(refused["code"], "REFUND_FAILED");
    assert!(refused["detail"].as_str().unwrap().contains("now 5000"), "{refused}");
    let now = detail(&app, &other).await;
    assert_eq!(now["payment"]["balance"], 5000, "{now}");
    assert!(now["refunds"].as_array().unwrap().iter().all(|r| r["status"] != "PENDING"), "{now}");
}

/// A checkout: the order placed by `who`, its id, Toss orderId and total.
async fn checkout(app: &crate::helpers::TestApp, who: &str) -> (String, String, i64) {
    let order = json(
        app.place_order(&app.token(who), &crate::helpers::order_body(), None).await,
        StatusCode::CREATED,
    )
    .await;
    (
        order["id"].as_str().unwrap().to_owned(),
        order["checkout"]["orderId"].as_str().unwrap().to_owned(),
        order["totalAmount"].as_i64().unwrap(),
    )
}

async fn pay(
    app: &crate::helpers::TestApp,
    who: &str,
    id: &str,
    key: &str,
    amount: i64,
) -> reqwest::Response {
    app.post(&format!("/api/orders/{id}/payment"), &app.token(who))
        .json(&json!({ "paymentKey": key, "amount": amount }))
        .send()
        .await
        .unwrap()
}

/// Item 3: bob posts alice's paymentKey (from her redirect URL) to his own order. Toss
/// refuses the orderId; that is bob's error (422, his order declined, the key let go, no
/// operator alert), and alice's own confirm goes through. Item 10: a customer who
/// authorized another amount in the widget is declined the same way, with one call to Toss.
async fn a_payment_key_is_an_orders_only_once_toss_confirmed_it_for_that_order(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (alices, alices_toss_order, total) = checkout(&app, "alice").await;
    let key = fake.checkout(&alices_toss_order, total, None).await;
    let (bobs, _, _) = checkout(&app, "bob").await;
    let squat = json(pay(&app, "bob", &bobs, &key, total).await, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(squat["code"], "AUTHORIZATION_MISMATCH", "{squat}");
    let bob = detail(&app, &bobs).await;
    assert_eq!(
        (bob["status"].as_str(), bob["payment"]["status"].as_str()),
        (Some("FAILED"), Some("DECLINED")),
        "{bob}"
    );
    assert!(bob["payment"]["providerTransactionId"].is_null(), "the key is not bob's: {bob}");
    let paid = json(pay(&app, "alice", &alices, &key, total).await, StatusCode::OK).await;
    assert_eq!(paid["status"], "COMPLETED", "{paid}");
    assert_eq!(paid["payment"]["providerTransactionId"], key.as_str());

    // Another amount authorized in the widget than the order's total.
    let (carols, carols_toss_order, total) = checkout(&app, "carol").await;
    let other = fake.checkout(&carols_toss_order, total - 1000, None).await;
    let confirms = fake.calls("confirm").await;
    let refused =
        json(pay(&app, "carol", &carols, &other, total).await, StatusCode::UNPROCESSABLE_ENTITY).await;
    assert_eq!(refused["code"], "AUTHORIZATION_MISMATCH");
    assert_eq!(fake.calls("confirm").await - confirms, 1, "one call to Toss");
    assert_eq!(detail(&app, &carols).await["payment"]["status"], "DECLINED");
    for action in ["PAYMENT_OUTCOME_UNKNOWN", "RECONCILIATION_EXHAUSTED"] {
        assert_eq!(
            count_where(&app.db, "audit_log", &format!("action = '{action}'")).await,
            0,
            "no alert: {action}"
        );
    }
    let unconfirmed =
        app.get("/api/admin/payments/unconfirmed", &app.admin_token("ops")).send().await.unwrap();
    assert_eq!(json(unconfirmed, StatusCode::OK).await, json!([]));
}

/// Item 11: a card refusal shows Toss's own code in the order (`payment.declineCode`).
/// Item 6: a refund reason Toss would refuse (blank, over its 200 characters) is a 422
/// naming `reason` before anything is stored; 200 characters go through.
async fn tosss_decline_code_is_shown_and_refund_reasons_fit_toss(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, toss_order, total) = checkout(&app, "alice").await;
    let key = fake.checkout(&toss_order, total, Some("REJECT_CARD_PAYMENT")).await;
    let declined = pay(&app, "alice", &id, &key, total).await;
    let declined: Value = declined.json().await.unwrap();
    let now = detail(&app, &id).await;
    assert_eq!(now["payment"]["declineCode"], "REJECT_CARD_PAYMENT", "{declined} {now}");
    assert_eq!(now["status"], "FAILED");

    let (paid, _, _) = paid_order(&app, &fake).await;
    let refund = |reason: Value| {
        app.post(&format!("/api/orders/{paid}/refund"), &app.token("alice"))
            .json(&json!({ "reason": reason, "amount": 1000 }))
            .send()
    };
    for reason in [json!(""), json!("   "), json!("x".repeat(201))] {
        let refused = json(refund(reason.clone()).await.unwrap(), StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(refused["field"], "reason", "{reason}: {refused}");
    }
    assert!(detail(&app, &paid).await["refunds"].as_array().unwrap().is_empty(), "nothing stored");
    let fits = json(refund(json!("한".repeat(200))).await.unwrap(), StatusCode::OK).await;
    assert_eq!(fits["refunds"][0]["status"], "SUCCEEDED", "{fits}");
}

on_both_databases!(
    tosss_decline_code_is_shown_and_refund_reasons_fit_toss,
    a_payment_key_is_an_orders_only_once_toss_confirmed_it_for_that_order,
    a_refund_after_a_dashboard_cancel_we_had_not_recorded_goes_through,
    the_rest_after_a_dashboard_cancel_is_the_rest_at_toss,
);
