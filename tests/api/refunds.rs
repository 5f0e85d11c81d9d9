//! Refunds, full or partial (docs/spec.md §3, §5): each refund a record of its own, the
//! payment's balance kept, never more than the amount under any concurrency, a request asked
//! again with its key the same refund.

use std::sync::atomic::Ordering;

use orchestrator::adapters::providers::ProviderCalls;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, count_where, json, order_body};
use crate::on_both_databases;

on_both_databases!(
    a_meetings_cancellation_and_deletion_refund_what_is_left,
    an_order_is_refunded_in_parts_then_whole,
    twenty_concurrent_partial_refunds_never_refund_more_than_the_amount,
    a_refund_asked_again_with_its_key_is_the_same_refund,
);

async fn completed(app: &TestApp) -> String {
    let order =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(order["status"], "COMPLETED");
    order["id"].as_str().unwrap().to_owned()
}

fn refund(app: &TestApp, id: &str, body: Value) -> reqwest::RequestBuilder {
    app.post(&format!("/api/orders/{id}/refund"), &app.token("alice")).json(&body)
}

fn cancels(app: &TestApp) -> u64 {
    ProviderCalls::get(&app.services.provider_calls.as_ref().unwrap().cancels)
}

async fn an_order_is_refunded_in_parts_then_whole(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let id = completed(&app).await;

    // One ticket of two: the payment is partly refunded, the order stays COMPLETED.
    let one = refund(&app, &id, json!({ "reason": "one ticket", "amount": 15000 })).send().await.unwrap();
    let one = json(one, StatusCode::OK).await;
    assert_eq!(one["status"], "COMPLETED");
    assert_eq!(one["payment"]["status"], "PARTIALLY_REFUNDED");
    assert_eq!(
        (one["payment"]["refundedAmount"].as_i64(), one["payment"]["balance"].as_i64()),
        (Some(15000), Some(15000))
    );
    assert_eq!(one["refunds"].as_array().unwrap().len(), 1);
    assert_eq!(one["refunds"][0]["amount"], 15000);
    assert_eq!(one["refunds"][0]["status"], "SUCCEEDED");
    assert_eq!(one["refunds"][0]["reason"], "one ticket");
    assert_eq!(one["refunds"][0]["actor"], "alice");

    // Nothing, or more than the balance: 422, and the provider is not called.
    let before = cancels(&app);
    for amount in [0, -5, 15001] {
        let refused = refund(&app, &id, json!({ "amount": amount })).send().await.unwrap();
        let refused = json(refused, StatusCode::UNPROCESSABLE_ENTITY).await;
        assert_eq!(refused["code"], "REFUND_AMOUNT_INVALID", "{amount}");
    }
    assert_eq!(cancels(&app), before, "a refused amount calls nothing");

    // No amount: the rest of the balance; the payment is REFUNDED, the order CANCELLED.
    let rest =
        json(refund(&app, &id, json!({ "reason": "the other one" })).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(rest["status"], "CANCELLED");
    assert_eq!(rest["payment"]["status"], "REFUNDED");
    assert_eq!(
        (rest["payment"]["refundedAmount"].as_i64(), rest["payment"]["balance"].as_i64()),
        (Some(30000), Some(0))
    );
    let amounts: Vec<i64> =
        rest["refunds"].as_array().unwrap().iter().map(|r| r["amount"].as_i64().unwrap()).collect();
    assert_eq!(amounts, [15000, 15000]);
    let again = json(refund(&app, &id, json!({})).send().await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(again["code"], "REFUND_NOT_ALLOWED");

    // One payment.refunded per refund, with its amounts; one order.cancelled.
    let payloads = crate::helpers::payloads(&app.db, "payment.refunded").await;
    let seen: Vec<(i64, i64, i64)> = payloads
        .iter()
        .map(|p| {
            let p = &p["payload"];
            (
                p["amount"].as_i64().unwrap(),
                p["refundedAmount"].as_i64().unwrap(),
                p["balance"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(seen, [(15000, 15000, 15000), (15000, 30000, 0)]);
    assert!(payloads.iter().all(|p| p["payload"]["refundId"].is_string()));
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'order.cancelled'").await, 1);
    assert_eq!(count_where(&app.db, "refunds", "status = 'SUCCEEDED'").await, 2);

    // The flow shows each refund in its steps and audit.
    let flow = json(
        app.get(&format!("/api/orders/{id}/flow"), &app.token("alice")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let refunded = flow["audit"].as_array().unwrap().iter().filter(|a| a["action"] == "REFUNDED").count();
    assert_eq!(refunded, 2);

    // Fully refunded, the customer may order again.
    completed(&app).await;
}

async fn twenty_concurrent_partial_refunds_never_refund_more_than_the_amount(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let id = completed(&app).await; // 30 000
    let app = std::sync::Arc::new(app);
    // 20 clients, each asking for 7 000 with its own key, retrying while the order is busy:
    // at most 4 fit in 30 000.
    let mut tasks = Vec::new();
    for client in 0..20 {
        let (app, id) = (app.clone(), id.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..400 {
                let response =
                    refund(&app, &id, json!({ "reason": format!("client {client}"), "amount": 7000 }))
                        .header("Idempotency-Key", format!("client-{client}"))
                        .send()
                        .await
                        .unwrap();
                let status = response.status();
                let body: Value = response.json().await.unwrap();
                if status == StatusCode::CONFLICT && body["code"] == "ORDER_BUSY" {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    continue;
                }
                return (status, body["code"].as_str().map(str::to_owned));
            }
            panic!("client {client} never got an answer but ORDER_BUSY");
        }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let ok = answers.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let too_much = answers
        .iter()
        .filter(|(s, c)| {
            *s == StatusCode::UNPROCESSABLE_ENTITY && c.as_deref() == Some("REFUND_AMOUNT_INVALID")
        })
        .count();
    assert_eq!((ok, too_much), (4, 16), "{answers:?}");
    let detail = json(
        app.get(&format!("/api/orders/{id}"), &app.token("alice")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(detail["payment"]["refundedAmount"], 28000);
    assert_eq!(detail["payment"]["balance"], 2000);
    assert_eq!(detail["payment"]["status"], "PARTIALLY_REFUNDED");
    assert_eq!(count_where(&app.db, "refunds", "status = 'SUCCEEDED'").await, 4);
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refunded'").await, 4);
    let calls = app.services.provider_calls.as_ref().unwrap();
    assert_eq!(calls.effects("cancel-"), 4, "the provider cancelled 4 times");
    assert_eq!(calls.cancels.load(Ordering::SeqCst), 4);
}

async fn a_refund_asked_again_with_its_key_is_the_same_refund(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let id = completed(&app).await;
    let ask =
        || refund(&app, &id, json!({ "amount": 1000 })).header("Idempotency-Key", "refund-ticket-1").send();
    let first = json(ask().await.unwrap(), StatusCode::OK).await;
    let second = json(ask().await.unwrap(), StatusCode::OK).await;
    assert_eq!(first["refunds"], second["refunds"]);
    assert_eq!(second["payment"]["refundedAmount"], 1000);
    assert_eq!(cancels(&app), 1);
    // Another caller's same key is another request (keys are the caller's own).
    let admin = app.admin_token("ops");
    let theirs = app
        .post(&format!("/api/orders/{id}/refund"), &admin)
        .header("Idempotency-Key", "refund-ticket-1")
        .json(&json!({ "amount": 1000 }))
        .send()
        .await
        .unwrap();
    assert_eq!(json(theirs, StatusCode::OK).await["payment"]["refundedAmount"], 2000);
    // A malformed key is refused naming the header, and changes nothing.
    let bad =
        refund(&app, &id, json!({ "amount": 1000 })).header("Idempotency-Key", "").send().await.unwrap();
    assert_eq!(json(bad, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "Idempotency-Key");
    assert_eq!(cancels(&app), 2);
}

/// docs/spec.md §7: a participant's cancellation and a meeting's deletion refund the
/// remaining balance of a partly refunded order; a redelivery is the same refund.
async fn a_meetings_cancellation_and_deletion_refund_what_is_left(backend: Backend) {
    use orchestrator::application::inbound::{
        Handled, MeetingDeleted, ParticipantCancelled, ParticipantRegistered,
    };
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let events = &app.services.meeting_events;
    let register = |event: &str, meeting: &str, user: &str| ParticipantRegistered {
        event_id: event.into(),
        meeting_id: meeting.into(),
        user_id: user.into(),
        amount: 30000,
        currency: "KRW".into(),
        digest: event.into(),
    };
    let mut ids = Vec::new();
    for (event, meeting, user) in [("r1", "m-1", "ann"), ("r2", "m-2", "bob"), ("r3", "m-2", "cyd")] {
        let handled =
            events.participant_registered(register(event, meeting, user), Default::default(), None).await;
        assert_eq!(handled.unwrap(), Handled::Processed);
        let orders = crate::meeting::orders_of(&app, user).await;
        let id = orders[0]["id"].as_str().unwrap().to_owned();
        // One ticket of it refunded first, by an operator.
        let partly = app
            .post(&format!("/api/orders/{id}/refund"), &app.admin_token("ops"))
            .json(&json!({ "amount": 10000 }))
            .send()
            .await
            .unwrap();
        assert_eq!(json(partly, StatusCode::OK).await["payment"]["status"], "PARTIALLY_REFUNDED");
        ids.push(id);
    }
    let cancel = ParticipantCancelled {
        event_id: "c1".into(),
        meeting_id: "m-1".into(),
        user_id: "ann".into(),
        refund_required: true,
        reason: None,
        digest: "c1".into(),
    };
    assert_eq!(
        events.participant_cancelled(cancel.clone(), Default::default()).await.unwrap(),
        Handled::Processed
    );
    assert_eq!(standing(&app, &ids[0]).await, ("CANCELLED".into(), 0, 2), "the remaining 20 000 refunded");
    let before = cancels(&app);
    assert_eq!(events.participant_cancelled(cancel, Default::default()).await.unwrap(), Handled::Duplicate);
    assert_eq!(cancels(&app), before, "a redelivery refunds nothing");

    let deleted =
        MeetingDeleted { event_id: "d1".into(), meeting_id: "m-2".into(), reason: None, digest: "d1".into() };
    assert_eq!(events.meeting_deleted(deleted, Default::default()).await.unwrap(), Handled::Processed);
    for id in &ids[1..] {
        assert_eq!(standing(&app, id).await, ("CANCELLED".into(), 0, 2));
    }
    let amounts: Vec<i64> = crate::helpers::payloads(&app.db, "payment.refunded")
        .await
        .iter()
        .map(|e| e["payload"]["amount"].as_i64().unwrap())
        .collect();
    assert_eq!(amounts, [10000, 10000, 10000, 20000, 20000, 20000]);
}

/// An order's status, its payment's balance and how many refunds it has.
async fn standing(app: &TestApp, id: &str) -> (String, i64, usize) {
    let detail = json(
        app.get(&format!("/api/orders/{id}"), &app.admin_token("ops")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    (
        detail["status"].as_str().unwrap().to_owned(),
        detail["payment"]["balance"].as_i64().unwrap(),
        detail["refunds"].as_array().unwrap().len(),
    )
}
