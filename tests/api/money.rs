//! Money never moves unrecorded (docs/spec.md §4 "intent before every call", §7): a provider call
//! whose outcome cannot be committed is finished by the worker through the provider, with
//! the effect happening once; a provider that answers garbage gets bounded attempts and an
//! operator-visible state; stalled sagas are resumed a bounded number of times; one live
//! order per (meeting, user), enforced by the database.

use std::time::Duration;

use orchestrator::adapters::providers::ProviderCalls;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::external::{PAST_THE_BACKOFF, approved, detail, place, spawn, spawn_manual};
use crate::helpers::until;
use crate::helpers::{Backend, TestApp, count_where, json, order_body};
use crate::meeting::{registered, start};
use crate::on_both_databases;

/// Makes every write that moves a payment to `status` fail, like a database that refuses
/// the outcome commit after the provider answered. `None` removes it.
async fn refuse_payment_status(app: &TestApp, status: Option<&str>) {
    refuse(app, "payments", status).await
}

/// Makes every write of a `table` row in `status` fail; `None` removes it.
pub(crate) async fn refuse(app: &TestApp, table: &str, status: Option<&str>) {
    let db = &app.db;
    let postgres = db.get_database_backend() == sea_orm::DatabaseBackend::Postgres;
    let statements: Vec<String> = match (status, postgres) {
        (Some(status), true) => vec![
            format!(
                "CREATE OR REPLACE FUNCTION refuse_write() RETURNS trigger AS $$ BEGIN \
                 IF NEW.status = '{status}' THEN RAISE EXCEPTION 'injected failure'; END IF; \
                 RETURN NEW; END $$ LANGUAGE plpgsql"
            ),
            format!(
                "CREATE TRIGGER refuse_write BEFORE INSERT OR UPDATE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION refuse_write()"
            ),
        ],
        (Some(status), false) => vec![
            format!(
                "CREATE TRIGGER refuse_update BEFORE UPDATE ON {table} \
                 WHEN NEW.status = '{status}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            ),
            format!(
                "CREATE TRIGGER refuse_insert BEFORE INSERT ON {table} \
                 WHEN NEW.status = '{status}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            ),
        ],
        (None, true) => vec![format!("DROP TRIGGER refuse_write ON {table}")],
        (None, false) => vec!["DROP TRIGGER refuse_update".into(), "DROP TRIGGER refuse_insert".into()],
    };
    for sql in statements {
        db.execute_unprepared(&sql).await.unwrap();
    }
}

async fn requests_to(server: &MockServer, method_name: &str, suffix: &str) -> usize {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == method_name && r.url.path().ends_with(suffix))
        .count()
}

fn admin(app: &TestApp) -> String {
    app.admin_token("ops")
}

async fn refund(app: &TestApp, order: &Value, reason: &str) -> reqwest::Response {
    app.post(&format!("/api/orders/{}/refund", order["id"].as_str().unwrap()), &app.token("alice"))
        .json(&json!({ "reason": reason }))
        .send()
        .await
        .unwrap()
}

/// Issue 43 item 8: with the outbox refusing writes (a locked `outbox_events`), orders were
/// answered `503 Retry-After: 1` though they had been committed — and were later charged and
/// completed: a client that believed the 503 ordered again. The order's commit is the
/// answer: `201` with the order as it stands; the saga goes on when the outbox takes writes.
async fn an_order_placed_is_answered_as_placed_whatever_the_saga_meets_next(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm")).respond_with(approved("tx-locked")).mount(&server).await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    refuse(&app, "outbox_events", Some("READY")).await;
    let placed = app.place_order(&app.token("alice"), &order_body(), None).await;
    assert_eq!(placed.status(), StatusCode::CREATED, "the order was committed: a 503 would invite a second");
    let order = json(placed, StatusCode::CREATED).await;
    assert_eq!(order["status"], "CREATED", "{order}");
    assert_eq!(app.count("orders").await, 1);
    assert_eq!(app.count("outbox_events").await, 0, "no event the outbox refused");

    refuse(&app, "outbox_events", None).await;
    let resumed = app
        .post(&format!("/api/orders/{}/orchestrate", order["id"].as_str().unwrap()), &admin(&app))
        .send()
        .await
        .unwrap();
    assert_eq!(json(resumed, StatusCode::OK).await["status"], "COMPLETED");
    assert_eq!(app.count("orders").await, 1);
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.approved'").await, 1);
}

/// Issue 11 item 1: the provider refunded, then the outcome commit failed. The intent
/// (`REFUND_PENDING`) was committed first, so the worker finds it, learns from the
/// provider that the refund happened, and records it: one cancel call in all.
async fn a_refund_whose_outcome_commit_fails_is_finished_by_the_worker(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm")).respond_with(approved("tx-refund")).mount(&server).await;
    Mock::given(path("/v1/payments/tx-refund/cancel"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({ "status": "CANCELLED" })))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payments/by-request/"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({ "providerTransactionId": "tx-refund", "status": "CANCELLED" })),
        )
        .mount(&server)
        .await;
    let Some(app) = spawn(backend, &server, &[]).await else {
        return;
    };
    let order = place(&app).await;
    assert_eq!(order["status"], "COMPLETED");

    refuse_payment_status(&app, Some("REFUNDED")).await;
    let response = refund(&app, &order, "changed my mind").await;
    // Issue 43 item 8: the refund was made; an error answer would invite a second one.
    let answered = json(response, StatusCode::ACCEPTED).await;
    assert_eq!(answered["payment"]["status"], "REFUND_PENDING", "{answered}");
    let pending = detail(&app, &order["id"]).await;
    assert_eq!(pending["status"], "COMPLETED");
    assert_eq!(pending["payment"]["status"], "REFUND_PENDING", "the intent was committed first");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REFUND_REQUESTED'").await, 1);
    let listed =
        json(app.get("/api/admin/payments/unconfirmed", &admin(&app)).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(listed[0]["status"], "REFUND_PENDING");

    refuse_payment_status(&app, None).await;
    let report = app.services.money.refunds.resolve_pending().await.unwrap();
    assert_eq!(report.refunded, 1, "{report:?}");
    let done = detail(&app, &order["id"]).await;
    assert_eq!(done["status"], "CANCELLED");
    assert_eq!(done["payment"]["status"], "REFUNDED");
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refunded'").await, 1);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REFUNDED'").await, 1);
    assert_eq!(requests_to(&server, "POST", "/cancel").await, 1, "the money moved once");
    assert_eq!(
        app.services.money.refunds.resolve_pending().await.unwrap(),
        Default::default(),
        "nothing left"
    );
}

/// A provider that never confirms a refund: bounded attempts, then audited and listed.
async fn a_refund_the_provider_never_confirms_is_left_to_an_operator(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm")).respond_with(approved("tx-silent")).mount(&server).await;
    Mock::given(path("/v1/payments/tx-silent/cancel"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    // A look-up that answers garbage forever (a transaction id with a NUL in it).
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payments/by-request/"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({ "providerTransactionId": "tx\u{0}silent", "status": "APPROVED" })),
        )
        .mount(&server)
        .await;
    let env = [("APP__PAYMENT__RECONCILIATION__MAX_ATTEMPTS", "3")];
    let Some(app) = spawn_manual(backend, &server, &env).await else {
        return;
    };
    let order = place(&app).await;
    // Issue 43 item 5: the answer lost, the refund is accepted and pending (202), not
    // "retry later" — a client that retried without a key would have made a second one.
    let pending = json(refund(&app, &order, "please").await, StatusCode::ACCEPTED).await;
    assert_eq!(pending["payment"]["status"], "REFUND_PENDING", "{pending}");
    assert_eq!(pending["refunds"][0]["status"], "PENDING", "{pending}");
    for _ in 0..20 {
        app.services.money.refunds.resolve_pending().await.unwrap();
        app.advance(PAST_THE_BACKOFF);
    }
    let d = detail(&app, &order["id"]).await;
    assert_eq!(d["payment"]["status"], "REFUND_PENDING", "never guessed");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REFUND_UNRESOLVED'").await, 1);
    let cancels = requests_to(&server, "POST", "/cancel").await;
    assert!(cancels <= 3 * 3, "bounded: {cancels} cancel calls (3 attempts, each retried twice)");
    let listed =
        json(app.get("/api/admin/payments/unconfirmed", &admin(&app)).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(listed[0]["reconcileAttempts"], 3);

    // Issue 43 item 2: an operator who looked at the provider's books ends it (audited).
    let refund_id = d["refunds"][0]["id"].as_str().unwrap();
    let resolve = |body: serde_json::Value| {
        app.post(
            &format!("/api/admin/orders/{}/refunds/{refund_id}/resolve", order["id"].as_str().unwrap()),
            &admin(&app),
        )
        .json(&body)
        .send()
    };
    let bad = json(
        resolve(json!({ "outcome": "MAYBE", "reason": "x" })).await.unwrap(),
        StatusCode::UNPROCESSABLE_ENTITY,
    )
    .await;
    assert_eq!(bad["field"], "outcome");
    let customer = app
        .post(
            &format!("/api/admin/orders/{}/refunds/{refund_id}/resolve", order["id"].as_str().unwrap()),
            &app.token("alice"),
        )
        .json(&json!({ "outcome": "NOT_MADE", "reason": "x" }))
        .send()
        .await
        .unwrap();
    assert_eq!(customer.status(), StatusCode::FORBIDDEN);
    let ended = json(
        resolve(json!({ "outcome": "NOT_MADE", "reason": "not in the provider's dashboard" })).await.unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(ended["payment"]["status"], "APPROVED", "{ended}");
    assert_eq!(ended["payment"]["balance"], ended["totalAmount"]);
    assert_eq!(ended["refunds"][0]["status"], "FAILED");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REFUND_RESOLVED_BY_OPERATOR'").await, 1);
    let again = resolve(json!({ "outcome": "MADE", "reason": "again" })).await.unwrap();
    assert_eq!(json(again, StatusCode::CONFLICT).await["code"], "REFUND_NOT_PENDING");
}

/// Issue 11 item 3: an approval whose transaction id cannot be stored (over-long, a NUL)
/// is an unknown outcome: no stuck `CREATED` order, no approve loop; reconciliation asks a
/// bounded number of times, never reports it resolved, and hands it to an operator.
async fn an_approval_that_breaks_the_protocol_is_reconciled_not_repeated(backend: Backend) {
    for garbage in [json!("x".repeat(201)), json!("tx\u{0}nul")] {
        let server = MockServer::start().await;
        let answer = json!({ "providerTransactionId": garbage, "status": "APPROVED" });
        Mock::given(path("/v1/payments/confirm"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer.clone()))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path_regex("^/v1/payments/by-request/"))
            .respond_with(ResponseTemplate::new(200).set_body_json(answer))
            .mount(&server)
            .await;
        let env = [("APP__PAYMENT__RECONCILIATION__MAX_ATTEMPTS", "3")];
        let Some(app) = spawn_manual(backend, &server, &env).await else {
            return;
        };
        let order = place(&app).await;
        assert_eq!(order["status"], "PENDING_CONFIRMATION");
        assert_eq!(order["payment"]["status"], "CONFIRMATION_REQUIRED");
        let mut resolved = 0;
        for _ in 0..20 {
            resolved += app.services.recovery.reconcile_due().await.unwrap().resolved;
            app.services.recovery.resume_stalled().await.unwrap();
            app.advance(PAST_THE_BACKOFF);
        }
        assert_eq!(resolved, 0);
        assert_eq!(requests_to(&server, "POST", "/confirm").await, 1, "approved once, never again");
        assert!(requests_to(&server, "GET", "").await <= 3, "bounded look-ups");
        assert_eq!(count_where(&app.db, "audit_log", "action = 'RECONCILIATION_EXHAUSTED'").await, 1);
        assert_eq!(detail(&app, &order["id"]).await["status"], "PENDING_CONFIRMATION");
    }
}

/// Issue 11 item 3: a transaction id another payment already has. The provider charged,
/// so the order must not stay `CREATED` to be approved again and again.
async fn a_transaction_id_already_used_is_an_unknown_outcome(backend: Backend) {
    let server = MockServer::start().await;
    Mock::given(path("/v1/payments/confirm")).respond_with(approved("tx-same")).mount(&server).await;
    Mock::given(method("GET"))
        .and(path_regex("^/v1/payments/by-request/"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({ "providerTransactionId": "tx-same", "status": "APPROVED" })),
        )
        .mount(&server)
        .await;
    let env = [("APP__PAYMENT__RECONCILIATION__MAX_ATTEMPTS", "2")];
    let Some(app) = spawn_manual(backend, &server, &env).await else {
        return;
    };
    let first = place(&app).await;
    assert_eq!(first["status"], "COMPLETED");
    let second = place(&app).await;
    assert_eq!(second["status"], "PENDING_CONFIRMATION");
    assert_eq!(second["payment"]["status"], "CONFIRMATION_REQUIRED");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'PAYMENT_OUTCOME_UNSTORABLE'").await, 1);
    let mut resolved = 0;
    for _ in 0..10 {
        resolved += app.services.recovery.reconcile_due().await.unwrap().resolved;
        app.services.recovery.resume_stalled().await.unwrap();
        app.advance(PAST_THE_BACKOFF);
    }
    assert_eq!(resolved, 0, "an answer that cannot be stored is not a resolution");
    assert_eq!(requests_to(&server, "POST", "/confirm").await, 2, "one approve per order");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'RECONCILIATION_EXHAUSTED'").await, 1);
}

/// A database that refuses the approval's outcome every time: the order stays `CREATED`,
/// and stalled-saga recovery resumes it a bounded number of times (each a call with the
/// same idempotency key), then hands it to an operator.
async fn stalled_saga_recovery_is_bounded_and_hands_over(backend: Backend) {
    let env = [("APP__SAGA__LEASE", "1m"), ("APP__SAGA__RECOVERY_MAX_ATTEMPTS", "2")];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
        return;
    };
    refuse_payment_status(&app, Some("APPROVED")).await;
    let response = app.place_order(&app.token("alice"), &order_body(), None).await;
    assert_eq!(json(response, StatusCode::CREATED).await["status"], "CREATED", "the order as committed");
    let calls = app.services.provider_calls.clone().unwrap();
    let approvals = || ProviderCalls::get(&calls.approvals);
    assert_eq!(approvals(), 1);
    app.services.recovery.resume_stalled().await.unwrap();
    assert_eq!(approvals(), 1, "not stalled before its lease could have run out");
    let mut rounds = 0;
    while count_where(&app.db, "audit_log", "action = 'SAGA_RECOVERY_EXHAUSTED'").await == 0 {
        rounds += 1;
        assert!(rounds <= 10, "recovery never gave up");
        // Past the lease and any backoff between resumes.
        app.advance(Duration::from_secs(3600));
        app.services.recovery.resume_stalled().await.unwrap();
    }
    assert_eq!(approvals(), 3, "the first run and two resumes, each with the same key");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'SAGA_RESUMED'").await, 1);
    // Nothing more: the order is the operator's now.
    app.advance(Duration::from_secs(24 * 3600));
    app.services.recovery.resume_stalled().await.unwrap();
    assert_eq!(approvals(), 3);
    let stalled =
        json(app.get("/api/admin/orders/stalled", &admin(&app)).send().await.unwrap(), StatusCode::OK).await;
    assert_eq!(stalled.as_array().unwrap().len(), 1);
    assert_eq!(stalled[0]["status"], "CREATED");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("operator_attention{kind=\"saga_stalled\"} 1"), "{metrics}");
}

/// The outcome commit of a provider call fails once after the provider answered (a
/// database that refuses the write); the worker finishes the step through the provider
/// with the same idempotency key, so the effect happens once.
async fn an_outcome_the_database_refused_once_is_finished_with_the_same_key(
    backend: Backend,
    table: &str,
    status: &str,
    scenario: Option<&str>,
    effect: &str,
    expected: &str,
) {
    let env = [("APP__SAGA__LEASE", "1m")];
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &env).await else {
        return;
    };
    refuse(&app, table, Some(status)).await;
    let response = app.place_order(&app.token("alice"), &order_body(), scenario).await;
    // The order was committed before the refused step: it is the answer (issue 43 item 8).
    assert_eq!(response.status(), StatusCode::CREATED, "{table} {status}");
    refuse(&app, table, None).await;
    let calls = app.services.provider_calls.clone().unwrap();
    let mut rounds = 0;
    loop {
        app.services.recovery.resume_stalled().await.unwrap();
        app.services.recovery.retry_compensations().await.unwrap();
        if count_where(&app.db, "orders", &format!("status = '{expected}'")).await == 1 {
            break;
        }
        rounds += 1;
        assert!(rounds <= 10, "{table} {status}: never finished");
        // Past the lease, the stall delay and any backoff.
        app.advance(PAST_THE_BACKOFF);
    }
    assert_eq!(calls.effects(effect), 1, "{effect}: the effect happened once");
    let asked = match effect {
        "settle-" => ProviderCalls::get(&calls.settlements),
        "notify-" => ProviderCalls::get(&calls.notifications),
        _ => ProviderCalls::get(&calls.cancels),
    };
    assert_eq!(asked, 2, "{effect}: asked again with the same key, once");
    let audited = count_where(&app.db, "audit_log", "action IN ('SAGA_RESUMED', 'COMPENSATED')").await;
    assert!(audited >= 1, "the audit says what happened");
}

async fn a_settlement_outcome_the_database_refused_is_finished_once(backend: Backend) {
    let (table, status) = ("settlements", "SUCCEEDED");
    an_outcome_the_database_refused_once_is_finished_with_the_same_key(
        backend,
        table,
        status,
        None,
        "settle-",
        "COMPLETED",
    )
    .await
}

async fn a_notification_outcome_the_database_refused_is_finished_once(backend: Backend) {
    let (table, status) = ("notification_events", "SENT");
    an_outcome_the_database_refused_once_is_finished_with_the_same_key(
        backend,
        table,
        status,
        None,
        "notify-",
        "COMPLETED",
    )
    .await
}

async fn a_compensation_outcome_the_database_refused_is_finished_once(backend: Backend) {
    let (table, status, scenario) = ("payments", "CANCELLED", Some("settlement=fail"));
    an_outcome_the_database_refused_once_is_finished_with_the_same_key(
        backend,
        table,
        status,
        scenario,
        "cancel-",
        "CANCELLED",
    )
    .await
}

/// Issue 11 item 4: many registrations of one (meeting, user) pair with distinct event ids,
/// concurrently from two consumers' worth of deliveries: one order, one charge; the rest
/// are refused (audited, `payment.failed` ALREADY_REGISTERED). After a refund the pair may
/// register again.
async fn one_live_order_per_meeting_and_user(backend: Backend) {
    // 40 registrations land at once. SQLite has one writer: under a loaded test machine a
    // transaction may be refused with SQLITE_BUSY more often than the default 2 in-place
    // retries absorb (the message would go to the DLQ as a system failure). More retries
    // here keep the test about the registration rule, which is what it checks.
    let env = [("APP__BROKER__CONSUMER_RETRIES", "8")];
    let Some((app, broker, meeting, workers)) = start(backend, &env).await else {
        return;
    };
    let n = 40;
    for i in 0..n {
        meeting
            .publish(
                "meeting.participant.registered",
                &registered(&format!("ev-{i}"), "m-1", "u-1", 5000),
                None,
            )
            .await;
    }
    until("every registration", || async {
        count_where(&app.db, "inbox", "consumer = 'participant-register'").await == n
            || meeting.depth("register").await == 0 && meeting.dlq_depth("register").await > 0
    })
    .await;
    assert_eq!(meeting.dlq_depth("register").await, 0, "no registration failed as a system failure");
    assert_eq!(count_where(&app.db, "orders", "customer_id = 'u-1'").await, 1);
    let calls = app.services.provider_calls.clone().unwrap();
    assert_eq!(ProviderCalls::get(&calls.approvals), 1, "charged once");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'REGISTRATION_REJECTED'").await, n - 1);
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.failed'").await, n - 1);
    until("payment.failed published", || async {
        broker.received.lock().unwrap().iter().any(|m| {
            m.message_type.as_deref() == Some("payment.failed")
                && m.body["payload"]["reason"] == "ALREADY_REGISTERED"
        })
    })
    .await;

    // A refund frees the pair.
    meeting
        .publish(
            "meeting.participant.cancelled",
            &json!({ "eventId": "cancel-1", "meetingId": "m-1", "userId": "u-1", "refundRequired": true })
                .to_string(),
            None,
        )
        .await;
    until("the refund", || async {
        count_where(&app.db, "orders", "customer_id = 'u-1' AND status = 'CANCELLED'").await == 1
    })
    .await;
    meeting
        .publish("meeting.participant.registered", &registered("ev-again", "m-1", "u-1", 5000), None)
        .await;
    until("the second order", || async {
        count_where(&app.db, "orders", "customer_id = 'u-1' AND status = 'COMPLETED'").await == 1
    })
    .await;
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

/// Issue 11 item 6: a participant whose cancellation refund was refused still gets a
/// refund attempt when the meeting is deleted (docs/spec.md §7: every completed payment).
async fn a_meeting_deletion_retries_refunds_refused_before(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    meeting.publish("meeting.participant.registered", &registered("ev-r", "m-9", "u-9", 5000), None).await;
    until("the order", || async {
        count_where(&app.db, "orders", "customer_id = 'u-9' AND status = 'COMPLETED'").await == 1
    })
    .await;
    let cancel = json!({ "eventId": "c-9", "meetingId": "m-9", "userId": "u-9", "refundRequired": true });
    meeting.publish("meeting.participant.cancelled", &cancel.to_string(), Some("refund=fail")).await;
    until("the refused refund", || async {
        count_where(&app.db, "payments", "refund_failure_reason IS NOT NULL AND status = 'APPROVED'").await
            == 1
    })
    .await;
    meeting
        .publish("meeting.deleted", &json!({ "eventId": "d-9", "meetingId": "m-9" }).to_string(), None)
        .await;
    until("the refund on deletion", || async {
        count_where(&app.db, "payments", "status = 'REFUNDED'").await == 1
    })
    .await;
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

on_both_databases!(
    an_order_placed_is_answered_as_placed_whatever_the_saga_meets_next,
    a_refund_whose_outcome_commit_fails_is_finished_by_the_worker,
    a_refund_the_provider_never_confirms_is_left_to_an_operator,
    an_approval_that_breaks_the_protocol_is_reconciled_not_repeated,
    a_transaction_id_already_used_is_an_unknown_outcome,
    stalled_saga_recovery_is_bounded_and_hands_over,
    one_live_order_per_meeting_and_user,
    a_meeting_deletion_retries_refunds_refused_before,
    a_settlement_outcome_the_database_refused_is_finished_once,
    a_notification_outcome_the_database_refused_is_finished_once,
    a_compensation_outcome_the_database_refused_is_finished_once,
);
