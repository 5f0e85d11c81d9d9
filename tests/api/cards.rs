//! Saved cards with Toss (docs/spec.md §10), against the fake Toss API on both databases: a
//! card saved from the billing-auth widget's `authKey` charges the member's registrations
//! with `POST /v1/billing/{billingKey}`; without one a registration is refused
//! `NO_PAYMENT_METHOD` and nothing is charged; the billing key is in no answer.

use orchestrator::application::Actor;
use orchestrator::application::inbound::{Handled, ParticipantRegistered};
use orchestrator::application::orchestration::PlaceOrder;
use orchestrator::domain::order::OrderSource;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, count_where, json};
use crate::on_both_databases;
use crate::toss::{Fake, SECRET};

async fn register_for(
    app: &TestApp,
    user: &str,
    meeting: &str,
) -> orchestrator::application::ports::OrderRecord {
    let command = PlaceOrder::meeting(OrderSource::Meeting, meeting, user, "KRW", 15000);
    app.services.orchestrator.place_order(&Actor::system("test-meeting"), command).await.unwrap()
}

async fn methods(app: &TestApp, token: &str) -> reqwest::Response {
    app.get("/api/payment-methods", token).send().await.unwrap()
}

async fn a_saved_card_charges_registrations_and_none_refuses_them(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let alice = app.token("alice");
    let before = json(methods(&app, &alice).await, StatusCode::OK).await;
    assert!(before["card"].is_null(), "{before}");
    let customer_key = before["customerKey"].as_str().unwrap().to_owned();

    // The billing-auth widget (the fake's stand-in) gives an authKey for Alice's key.
    let auth = fake.post("/__fake/billing-auth", json!({ "customerKey": customer_key })).await;
    let auth_key = auth["authKey"].as_str().unwrap();
    let saved =
        app.post("/api/payment-methods", &alice).json(&json!({ "authKey": auth_key })).send().await.unwrap();
    let saved = json(saved, StatusCode::CREATED).await;
    assert_eq!(saved["customerKey"], customer_key);
    assert!(saved["card"]["number"].as_str().unwrap().contains("****"), "{saved}");
    let billing_key = saved_billing_key(&app, "alice").await;
    assert!(billing_key.starts_with("bk_"));
    assert!(!saved.to_string().contains(&billing_key), "the billing key is never answered");
    // The same authKey again (a retried request): Toss replays its issue, the same card.
    let again =
        app.post("/api/payment-methods", &alice).json(&json!({ "authKey": auth_key })).send().await.unwrap();
    assert_eq!(json(again, StatusCode::CREATED).await["card"], saved["card"]);
    assert_eq!(saved_billing_key(&app, "alice").await, billing_key);
    assert_eq!(fake.effects("billing_issue").await, 1);
    // Another customer's authKey: Toss refuses it for Alice's key.
    let bob = json(methods(&app, &app.token("bob")).await, StatusCode::OK).await;
    let bobs = fake.post("/__fake/billing-auth", json!({ "customerKey": bob["customerKey"] })).await;
    let stolen = app
        .post("/api/payment-methods", &alice)
        .json(&json!({ "authKey": bobs["authKey"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(json(stolen, StatusCode::UNPROCESSABLE_ENTITY).await["code"], "CARD_REFUSED");
    assert_eq!(saved_billing_key(&app, "alice").await, billing_key, "her card stays");
    // Issue 43 item 10: Bob posts Alice's (spent) authKey. The idempotency key was
    // the authKey's alone, so Toss replayed Alice's card and Bob got a 503 "retry": the key
    // is scoped to the customer, and a card issued for another customer is refused.
    let squatted = app
        .post("/api/payment-methods", &app.token("bob"))
        .json(&json!({ "authKey": auth_key }))
        .send()
        .await
        .unwrap();
    assert_eq!(json(squatted, StatusCode::UNPROCESSABLE_ENTITY).await["code"], "CARD_REFUSED");
    assert!(json(methods(&app, &app.token("bob")).await, StatusCode::OK).await["card"].is_null());

    // Alice's registration is charged with her card; Bob has none: refused, nothing charged.
    let charged = register_for(&app, "alice", "m-1").await;
    assert_eq!(charged.order.status.as_str(), "COMPLETED", "{charged:?}");
    let paid_with = charged.payment.as_ref().and_then(|p| p.provider_transaction_id.clone()).unwrap();
    assert!(paid_with.starts_with("tbill_"), "{paid_with}");
    // Bob's registration through the meeting consumer: refused before any order or charge,
    // announced as payment.failed {reason: NO_PAYMENT_METHOD}, acknowledged (not retried).
    let handled = app
        .services
        .meeting_events
        .participant_registered(
            ParticipantRegistered {
                event_id: "reg-bob-1".into(),
                meeting_id: "m-1".into(),
                user_id: "bob".into(),
                amount: 15000,
                currency: "KRW".into(),
                digest: "d".into(),
            },
            Default::default(),
            None,
        )
        .await
        .unwrap();
    assert!(
        matches!(&handled, Handled::BusinessFailure(why) if why.contains("NO_PAYMENT_METHOD")),
        "{handled:?}"
    );
    assert_eq!(count_where(&app.db, "orders", "customer_id = 'bob'").await, 0);
    let failed = crate::helpers::payloads(&app.db, "payment.failed").await;
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["payload"]["reason"], "NO_PAYMENT_METHOD");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REGISTRATION_REJECTED'").await, 1);
    assert_eq!(fake.effects("billing_charge").await, 1);

    // What Alice can read of her order and its story never holds the billing key.
    let admin = app.admin_token("ops");
    let flow = app
        .get(&format!("/api/orders/{}/flow", charged.order.id), &admin)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        flow.contains("order.completed") && !flow.contains(&billing_key) && !flow.contains(SECRET),
        "{flow}"
    );

    // Forgotten: her next registration is refused too.
    assert_eq!(
        app.client
            .delete(format!("{}/api/payment-methods", app.base))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NO_CONTENT
    );
    let after: Value = json(methods(&app, &alice).await, StatusCode::OK).await;
    assert!(after["card"].is_null());
    assert_eq!(
        app.client
            .delete(format!("{}/api/payment-methods", app.base))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
}

/// Issue 47: a card was saved (or forgotten) in one write and audited in a second commit, so
/// a failure between them left a card no audit row accounts for. Now the audit row is in the
/// card's own transaction: when it cannot be written, nothing is.
async fn a_card_is_saved_and_forgotten_with_its_audit_row_or_not_at_all(backend: Backend) {
    use sea_orm::ConnectionTrait;
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let postgres = app.db.get_database_backend() == sea_orm::DatabaseBackend::Postgres;
    let refuse_audit = |action: &str| {
        if postgres {
            vec![
                format!(
                    "CREATE OR REPLACE FUNCTION refuse_audit() RETURNS trigger AS $$ BEGIN \
                     IF NEW.action = '{action}' THEN RAISE EXCEPTION 'injected failure'; END IF; \
                     RETURN NEW; END $$ LANGUAGE plpgsql"
                ),
                "DROP TRIGGER IF EXISTS refuse_audit ON audit_log".to_owned(),
                "CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log FOR EACH ROW EXECUTE FUNCTION refuse_audit()"
                    .to_owned(),
            ]
        } else {
            // One trigger per action, the others dropped.
            let mut statements: Vec<String> = ["PAYMENT_METHOD_SAVED", "PAYMENT_METHOD_FORGOTTEN", "NOTHING"]
                .iter()
                .map(|a| format!("DROP TRIGGER IF EXISTS refuse_audit_{a}"))
                .collect();
            statements.push(format!(
                "CREATE TRIGGER refuse_audit_{action} BEFORE INSERT ON audit_log WHEN NEW.action = '{action}' \
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            ));
            statements
        }
    };
    let run = |statements: Vec<String>| async {
        for sql in statements {
            app.db.execute_unprepared(&sql).await.unwrap();
        }
    };
    let alice = app.token("alice");
    let key =
        json(methods(&app, &alice).await, StatusCode::OK).await["customerKey"].as_str().unwrap().to_owned();
    let save = || async {
        let auth = fake.post("/__fake/billing-auth", json!({ "customerKey": key })).await;
        app.post("/api/payment-methods", &alice)
            .json(&json!({ "authKey": auth["authKey"] }))
            .send()
            .await
            .unwrap()
    };

    run(refuse_audit("PAYMENT_METHOD_SAVED")).await;
    assert_eq!(save().await.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(count_where(&app.db, "payment_methods", "1 = 1").await, 0, "no card without its audit row");

    run(refuse_audit("PAYMENT_METHOD_FORGOTTEN")).await;
    assert_eq!(save().await.status(), StatusCode::CREATED);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'PAYMENT_METHOD_SAVED'").await, 1);
    let forget = || async {
        app.client
            .delete(format!("{}/api/payment-methods", app.base))
            .bearer_auth(&alice)
            .send()
            .await
            .unwrap()
    };
    assert_eq!(forget().await.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        count_where(&app.db, "payment_methods", "1 = 1").await,
        1,
        "the card stays, its forgetting unaudited"
    );

    run(refuse_audit("NOTHING")).await;
    assert_eq!(forget().await.status(), StatusCode::NO_CONTENT);
    assert_eq!(count_where(&app.db, "payment_methods", "1 = 1").await, 0);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'PAYMENT_METHOD_FORGOTTEN'").await, 1);
}

/// The billing key stored for `customer` (test assertions only: it is never answered).
async fn saved_billing_key(app: &TestApp, customer: &str) -> String {
    use sea_orm::ConnectionTrait;
    let row = app
        .db
        .query_one_raw(sea_orm::Statement::from_sql_and_values(
            app.db.get_database_backend(),
            match app.db.get_database_backend() {
                sea_orm::DatabaseBackend::Postgres => {
                    "SELECT billing_key FROM payment_methods WHERE customer_id = $1"
                }
                _ => "SELECT billing_key FROM payment_methods WHERE customer_id = ?",
            },
            [customer.into()],
        ))
        .await
        .expect("read")
        .expect("a saved card");
    row.try_get::<String>("", "billing_key").expect("billing_key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_saved_cards_says_so() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let answer = json(methods(&app, &app.token("alice")).await, StatusCode::CONFLICT).await;
    assert_eq!(answer["code"], "NOT_SUPPORTED");
    // Nor a provider's record to show.
    let alice = app.token("alice");
    let order =
        json(app.place_order(&alice, &crate::helpers::order_body(), None).await, StatusCode::CREATED).await;
    let path = format!("/api/admin/payments/{}/provider", order["payment"]["id"].as_str().unwrap());
    let view =
        json(app.get(&path, &app.admin_token("ops")).send().await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(view["code"], "NOT_SUPPORTED");
}

on_both_databases!(
    a_saved_card_charges_registrations_and_none_refuses_them,
    a_card_is_saved_and_forgotten_with_its_audit_row_or_not_at_all,
);
