//! The provider's ledger, reconciled (docs/spec.md §10), against the fake Toss API on both
//! databases: a day that agrees is a clean run; money moved at Toss that the service never
//! saw is `MISSING_HERE`, stored, audited, shown and counted; running a day again replaces
//! its findings; the CLI runs a day by hand.

use reqwest::StatusCode;
use serde_json::{Value, json};

use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::helpers::{Backend, TestApp, count_where, json};
use crate::on_both_databases;
use crate::toss::{Fake, SECRET};
use crate::webhooks::paid_order;

on_both_databases!(
    the_ledger_of_a_day_is_matched_with_our_books,
    a_day_of_twelve_thousand_findings_is_stored_and_a_rerun_audited_once,
    an_unreadable_row_is_a_finding_of_its_own,
);

/// The app with `payment.provider = toss` against a Toss that answers what `server` says.
async fn spawn_against(backend: Backend, server: &MockServer) -> Option<TestApp> {
    let uri = server.uri();
    let env = [
        ("APP__PAYMENT__PROVIDER", "toss"),
        ("APP__PAYMENT__TOSS__SECRET_KEY", SECRET),
        ("APP__PAYMENT__TOSS__BASE_URL", uri.as_str()),
    ];
    TestApp::spawn_with(backend, &env).await
}

/// `n` approvals at Toss of payments we do not have, `from` on, as `GET /v1/transactions` lists them.
fn strangers(from: usize, n: usize) -> Vec<Value> {
    (from..from + n)
        .map(|i| {
            json!({ "mId": "tosspayments", "transactionKey": format!("tx{i:08}"), "paymentKey": format!("tgen_pk{i:08}"),
                    "orderId": format!("pay-stranger-{i}"), "method": "카드", "customerKey": null, "useEscrow": false,
                    "receiptUrl": "https://dashboard.tosspayments.com/receipt", "status": "DONE",
                    "transactionAt": "2026-12-01T10:00:00+09:00", "currency": "KRW", "amount": 1000 })
        })
        .collect()
}

/// Serves `pages` in turn, each after the cursor its predecessor ends with, and no
/// settlements (the same run reads them, docs/spec.md §13).
async fn serve_pages(server: &MockServer, pages: Vec<Vec<Value>>) {
    Mock::given(method("GET"))
        .and(path("/v1/settlements"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(server)
        .await;
    for (i, page) in pages.iter().enumerate() {
        let mut mock = Mock::given(method("GET")).and(path("/v1/transactions"));
        mock = match i {
            0 => mock.and(query_param_is_missing("startingAfter")),
            _ => {
                let cursor = pages[i - 1].last().unwrap()["transactionKey"].as_str().unwrap().to_owned();
                mock.and(query_param("startingAfter", cursor))
            }
        };
        mock.respond_with(ResponseTemplate::new(200).set_body_json(Value::Array(page.clone())))
            .mount(server)
            .await;
    }
}

/// Issue 43 item 9: more than 10 922 findings did not fit one INSERT (PostgreSQL's 65 535
/// parameters) and the day could never be stored; each rerun audited every finding again.
async fn a_day_of_twelve_thousand_findings_is_stored_and_a_rerun_audited_once(backend: Backend) {
    let server = MockServer::start().await;
    serve_pages(&server, vec![strangers(0, 5000), strangers(5000, 5000), strangers(10_000, 2000)]).await;
    let Some(app) = spawn_against(backend, &server).await else { return };
    let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 1).unwrap();
    let actor = orchestrator::application::Actor::system("test");
    let report = app.services.money.ledger.reconcile_day(&actor, day).await.unwrap();
    assert_eq!((report.run.transactions, report.findings.len()), (12_000, 12_000));
    assert_eq!(count_where(&app.db, "ledger_findings", "kind = 'MISSING_HERE'").await, 12_000);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_FINDING'").await, 12_000);
    app.services.money.ledger.reconcile_day(&actor, day).await.unwrap();
    assert_eq!(count_where(&app.db, "ledger_findings", "1 = 1").await, 12_000, "replaced, not added");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_FINDING'").await, 12_000, "audited once");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_RECONCILED'").await, 2, "each run once");
}

/// Issue 43 item 9: one row Toss sends that cannot be read failed the whole day, silently.
/// It is a finding of its own (`UNREADABLE`, counted in `ledger_findings`); the rest stands.
async fn an_unreadable_row_is_a_finding_of_its_own(backend: Backend) {
    let server = MockServer::start().await;
    let mut page = strangers(0, 2);
    page[1]["amount"] = json!("a lot");
    page.push(json!({ "transactionKey": "tx-late", "paymentKey": "tgen_late", "orderId": "pay-late",
                      "status": "DONE", "transactionAt": "yesterday-ish", "amount": 5 }));
    serve_pages(&server, vec![page]).await;
    let Some(app) = spawn_against(backend, &server).await else { return };
    let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 1).unwrap();
    let report = app
        .services
        .money
        .ledger
        .reconcile_day(&orchestrator::application::Actor::system("test"), day)
        .await
        .unwrap();
    let kinds: Vec<(String, Option<String>)> =
        report.findings.iter().map(|f| (f.kind.to_string(), f.transaction_key.clone())).collect();
    assert_eq!(
        kinds,
        [
            ("UNREADABLE".to_owned(), Some("tx00000001".to_owned())),
            ("UNREADABLE".to_owned(), Some("tx-late".to_owned())),
            ("MISSING_HERE".to_owned(), Some("tx00000000".to_owned())),
        ],
        "{:?}",
        report.findings
    );
    assert_eq!(report.run.transactions, 3);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"ledger_findings{kind="UNREADABLE"} 2"#), "{metrics}");
}

/// Issue 43 item 9: a Toss whose cursor never advances was paged 1 000 times, every row
/// held in memory (1.5 GB, 109 s). A cursor seen before ends the run: nothing stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_that_repeats_ends_the_run() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/transactions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(Value::Array(strangers(0, 5000))))
        .mount(&server)
        .await;
    let Some(app) = spawn_against(Backend::Sqlite, &server).await else { return };
    let day = chrono::NaiveDate::from_ymd_opt(2026, 12, 1).unwrap();
    let failed =
        app.services.money.ledger.reconcile_day(&orchestrator::application::Actor::system("test"), day).await;
    assert!(matches!(failed, Err(orchestrator::application::AppError::Unavailable(_))), "{failed:?}");
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        2,
        "the second page repeated the first's cursor"
    );
    assert_eq!(count_where(&app.db, "ledger_runs", "1 = 1").await, 0);
}

/// Today in Toss's zone (Asia/Seoul, UTC+09:00), as the fake dates its transactions.
fn toss_today() -> chrono::NaiveDate {
    (chrono::Utc::now() + chrono::Duration::hours(9)).date_naive()
}

async fn findings(app: &TestApp, date: &str) -> Value {
    let response = app
        .get(&format!("/api/admin/reconciliation/findings?date={date}"), &app.admin_token("ops"))
        .send()
        .await
        .unwrap();
    json(response, StatusCode::OK).await
}

async fn the_ledger_of_a_day_is_matched_with_our_books(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let day = toss_today();
    let date = day.format("%Y-%m-%d").to_string();
    let never = findings(&app, &date).await;
    assert!(never["run"].is_null(), "a day never run: {never}");

    // A day that agrees: an approval and a partial refund, both ours.
    let (id, _, _) = paid_order(&app, &fake).await;
    let refunded = app
        .post(&format!("/api/orders/{id}/refund"), &app.token("alice"))
        .json(&json!({ "amount": 4000 }))
        .send()
        .await
        .unwrap();
    assert_eq!(refunded.status(), StatusCode::OK);
    let actor = orchestrator::application::Actor::system("test");
    let clean = app.services.money.ledger.reconcile_day(&actor, day).await.unwrap();
    assert_eq!((clean.run.transactions, clean.findings.len()), (2, 0), "{:?}", clean.findings);
    let shown = findings(&app, &date).await;
    assert_eq!(shown["run"]["clean"], true, "{shown}");
    assert_eq!(shown["run"]["transactions"], 2);

    // Money moved at Toss that the service never saw: a payment confirmed there directly.
    let key = fake.checkout("pay-someone-elses-1", 12000, None).await;
    let confirmed = reqwest::Client::new()
        .post(format!("{}/v1/payments/confirm", fake.running.base_url))
        .basic_auth(SECRET, Some(""))
        .json(&json!({ "paymentKey": key, "orderId": "pay-someone-elses-1", "amount": 12000 }))
        .send()
        .await
        .unwrap();
    assert!(confirmed.status().is_success());
    let report = app.services.money.ledger.reconcile_day(&actor, day).await.unwrap();
    assert_eq!(report.run.transactions, 3);
    let shown = findings(&app, &date).await;
    assert_eq!(shown["run"]["clean"], false);
    // Twice: the approval in Toss's ledger, and its settlement (docs/spec.md §13).
    let found = shown["findings"].as_array().unwrap();
    let kinds: Vec<&str> = found.iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["MISSING_HERE", "SETTLEMENT_UNKNOWN"], "{shown}");
    assert_eq!(found[0]["paymentKey"], key.as_str());
    assert_eq!(found[0]["orderId"], "pay-someone-elses-1");
    assert_eq!(found[0]["theirs"], "DONE 12000");
    assert_eq!(found[1]["paymentKey"], key.as_str());
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_FINDING'").await, 2);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"ledger_findings{kind="MISSING_HERE"} 1"#), "{metrics}");

    // Running the day again replaces its findings: still two.
    app.services.money.ledger.reconcile_day(&actor, day).await.unwrap();
    assert_eq!(findings(&app, &date).await["findings"].as_array().unwrap().len(), 2);
    assert_eq!(count_where(&app.db, "ledger_findings", "1 = 1").await, 2);
    assert_eq!(count_where(&app.db, "ledger_runs", "1 = 1").await, 1);

    // By hand: `app reconcile ledger --date` prints the same and stores the same.
    let dir = crate::cli::temp_dir();
    let out = crate::cli::app(&dir.0)
        .args(["reconcile", "ledger", "--date", &date])
        .env("APP__DATABASE__URL", app.database_url())
        .env("APP__PAYMENT__PROVIDER", "toss")
        .env("APP__SETTLEMENT__CHANNEL", "simulated")
        .env("APP__NOTIFICATION__CHANNEL", "simulated")
        .env("APP__PAYMENT__TOSS__SECRET_KEY", SECRET)
        .env("APP__PAYMENT__TOSS__BASE_URL", &fake.running.base_url)
        .env("APP__BROKER__KIND", "log")
        .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["findings"][0]["kind"], "MISSING_HERE", "{printed}");
    assert_eq!(count_where(&app.db, "ledger_findings", "1 = 1").await, 2);

    // A bad date is refused naming it; an admin only.
    let bad = app
        .get("/api/admin/reconciliation/findings?date=yesterday", &app.admin_token("ops"))
        .send()
        .await
        .unwrap();
    assert_eq!(json(bad, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "date");
    let customer = app
        .get(&format!("/api/admin/reconciliation/findings?date={date}"), &app.token("alice"))
        .send()
        .await
        .unwrap();
    assert_eq!(customer.status(), StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_reconciles_the_previous_day_once_its_time_has_come() {
    let fake = Fake::start().await;
    let Some(app) =
        crate::toss::spawn_on(Backend::Sqlite, &fake, &[("APP__PAYMENT__TOSS__LEDGER_AT", "00:00")], true)
            .await
    else {
        return;
    };
    // 00:00 has passed in Seoul whatever the time: yesterday is due, once.
    let ran = app.services.money.ledger.run_due().await.unwrap();
    let run = ran.expect("the previous day was due").run;
    assert_eq!(
        run.day,
        app.services
            .clock
            .now()
            .with_timezone(&chrono::FixedOffset::east_opt(9 * 3600).unwrap())
            .date_naive()
            .pred_opt()
            .unwrap()
    );
    assert!(app.services.money.ledger.run_due().await.unwrap().is_none(), "a day already run is left alone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_without_a_ledger_says_so() {
    let Some(app) = TestApp::spawn(Backend::Sqlite).await else { return };
    let actor = orchestrator::application::Actor::system("test");
    let refused = app.services.money.ledger.reconcile_day(&actor, toss_today()).await.unwrap_err();
    assert!(
        matches!(&refused, orchestrator::application::AppError::Conflict { code: "NOT_SUPPORTED", .. }),
        "{refused:?}"
    );
}

/// The console's payment pages in a real browser (`tests/browser/console_toss_page.py`): an
/// order's refunds and Toss's record beside ours, and a day's findings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_refunds_the_providers_record_and_the_ledger() {
    use std::process::Command;
    if !crate::console::browser_available() {
        return;
    }
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(Backend::Sqlite, &fake, &[], false).await else { return };
    let (id, _, _) = paid_order(&app, &fake).await;
    let refunded = app
        .post(&format!("/api/orders/{id}/refund"), &app.token("alice"))
        .json(&json!({ "amount": 4000, "reason": "one ticket" }))
        .send()
        .await
        .unwrap();
    assert_eq!(refunded.status(), StatusCode::OK);
    let missing = fake.checkout("pay-someone-elses-2", 5000, None).await;
    let confirmed = reqwest::Client::new()
        .post(format!("{}/v1/payments/confirm", fake.running.base_url))
        .basic_auth(SECRET, Some(""))
        .json(&json!({ "paymentKey": missing, "orderId": "pay-someone-elses-2", "amount": 5000 }))
        .send()
        .await
        .unwrap();
    assert!(confirmed.status().is_success());
    let day = toss_today();
    app.services
        .money
        .ledger
        .reconcile_day(&orchestrator::application::Actor::system("test"), day)
        .await
        .unwrap();

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/console_toss_page.py");
    let shots = concat!(env!("CARGO_MANIFEST_DIR"), "/target/console-screens");
    // Toss's arithmetic at the fake's 3.3 %: 30 000 sold (fee 990), 4 000 cancelled (fee
    // 132 given back), paid out two days after the sale.
    let payout = (30_000 - 990) + (-4_000 + 132);
    let args = [
        app.base.clone(),
        app.admin_token("ops"),
        id,
        day.format("%Y-%m-%d").to_string(),
        missing,
        shots.into(),
        (day + chrono::Duration::days(2)).format("%Y-%m-%d").to_string(),
        payout.to_string(),
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
}
