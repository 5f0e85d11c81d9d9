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

on_both_databases!(
    a_refund_after_a_dashboard_cancel_we_had_not_recorded_goes_through,
    the_rest_after_a_dashboard_cancel_is_the_rest_at_toss,
);
