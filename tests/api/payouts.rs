//! What Toss pays out (docs/spec.md §13), against the fake Toss API over real HTTP on both
//! databases: the ledger run reads `GET /v1/settlements` for the day and records each
//! transaction's fee and payout; the order detail, `/flow` and `GET /api/admin/payouts`
//! show them; Toss's arithmetic that does not add up, a payment it never settled and a
//! settlement of a payment we never had are findings. The expected figures are Toss's
//! arithmetic written out here (the fake's default: a fee of 3.3 %, rounded half away from
//! zero, VAT = round(fee / 11) inside it, paid out two days after the sale), never read
//! back from our own encoder.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::helpers::{Backend, TestApp, count_where, json};
use crate::on_both_databases;
use crate::toss::Fake;
use crate::webhooks::paid_order;

on_both_databases!(
    a_days_payouts_add_up_and_a_partial_refund_is_netted,
    settlements_that_do_not_add_up_or_are_not_ours_are_findings,
    tosss_disagreeing_spellings_still_reconcile,
    a_payment_toss_never_settled_is_missing_only_after_the_grace,
    twelve_thousand_settlement_rows_over_three_pages_reconcile,
    a_provider_answering_rows_without_end_is_kept_to_a_bounded_run,
);

/// The fee Toss keeps on `amount` at 3.3 %, and its VAT.
fn fee_of(amount: i64) -> (i64, i64) {
    let fee = (amount * 330 + amount.signum() * 5_000) / 10_000;
    (fee, (fee + fee.signum() * 5) / 11)
}

/// Today in Toss's zone, as the fake dates its sales.
fn toss_today() -> chrono::NaiveDate {
    (chrono::Utc::now() + chrono::Duration::hours(9)).date_naive()
}

fn date(day: chrono::NaiveDate) -> String {
    day.format("%Y-%m-%d").to_string()
}

async fn run_day(app: &TestApp) -> Vec<String> {
    let actor = orchestrator::application::Actor::system("test");
    let report = app.services.money.ledger.reconcile_day(&actor, toss_today()).await.unwrap();
    report.findings.iter().map(|f| f.kind.to_string()).collect()
}

async fn get(app: &TestApp, path: &str) -> Value {
    json(app.get(path, &app.admin_token("ops")).send().await.unwrap(), StatusCode::OK).await
}

async fn a_days_payouts_add_up_and_a_partial_refund_is_netted(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, _) = paid_order(&app, &fake).await;
    let refunded = app
        .post(&format!("/api/orders/{id}/refund"), &app.token("alice"))
        .json(&json!({ "amount": 4000 }))
        .send()
        .await
        .unwrap();
    assert_eq!(refunded.status(), StatusCode::OK);
    let detail = get(&app, &format!("/api/orders/{id}")).await;
    assert!(detail["payment"]["payout"].is_null(), "unknown until Toss settled it: {detail}");

    assert_eq!(run_day(&app).await, Vec::<String>::new(), "a day that adds up");
    let (total, refund) = (30_000, -4_000);
    let ((fee, vat), (refund_fee, refund_vat)) = (fee_of(total), fee_of(refund));
    let paid_out = date(toss_today() + chrono::Duration::days(2));
    let detail = get(&app, &format!("/api/orders/{id}")).await;
    let payout = &detail["payment"]["payout"];
    assert_eq!(payout["fee"], fee + refund_fee, "{detail}");
    assert_eq!(payout["payOutAmount"], (total - fee) + (refund - refund_fee));
    assert_eq!(
        (payout["soldDate"].as_str(), payout["paidOutDate"].as_str()),
        (Some(date(toss_today()).as_str()), Some(paid_out.as_str()))
    );
    let flow = get(&app, &format!("/api/orders/{id}/flow")).await;
    assert_eq!(flow["payout"], *payout, "the flow shows the same");

    // What the bank should receive that day: both rows, netted.
    let day = get(&app, &format!("/api/admin/payouts?date={paid_out}")).await;
    assert_eq!(day["count"], 2, "{day}");
    assert_eq!(day["providerLedger"], true, "Toss keeps the ledger payouts are read from");
    assert_eq!(day["amount"], total + refund);
    assert_eq!(day["fee"], fee + refund_fee);
    assert_eq!(day["vat"], vat + refund_vat);
    assert_eq!(day["payOutAmount"], (total - fee) + (refund - refund_fee));
    let amounts: Vec<i64> =
        day["rows"].as_array().unwrap().iter().map(|r| r["amount"].as_i64().unwrap()).collect();
    assert_eq!(amounts.iter().sum::<i64>(), total + refund);
    assert!(amounts.contains(&refund), "the cancel is a row of its own, negative: {amounts:?}");
    let nothing = get(&app, &format!("/api/admin/payouts?date={}", date(toss_today()))).await;
    assert_eq!((nothing["count"].clone(), nothing["payOutAmount"].clone()), (json!(0), json!(0)));

    // A rerun is idempotent: the same rows, no finding, one more run audited.
    assert_eq!(run_day(&app).await, Vec::<String>::new());
    assert_eq!(count_where(&app.db, "payouts", "1 = 1").await, 2);
    assert_eq!(get(&app, &format!("/api/admin/payouts?date={paid_out}")).await, day);

    // Operators only, and a date that is one.
    let customer =
        app.get(&format!("/api/admin/payouts?date={paid_out}"), &app.token("alice")).send().await.unwrap();
    assert_eq!(customer.status(), StatusCode::FORBIDDEN);
    let bad = app.get("/api/admin/payouts?date=tomorrow", &app.admin_token("ops")).send().await.unwrap();
    assert_eq!(json(bad, StatusCode::UNPROCESSABLE_ENTITY).await["field"], "date");
}

async fn settlements_that_do_not_add_up_or_are_not_ours_are_findings(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (_, _, key) = paid_order(&app, &fake).await;
    // Toss keeps 1 000 of 30 000 but pays out as if it kept its 990.
    fake.post(
        "/__fake/settlements/tamper",
        json!({ "paymentKey": key, "fee": 1000, "payOutAmount": 29_010 }),
    )
    .await;
    fake.post("/__fake/settlements/extra", json!({ "soldDate": date(toss_today()), "amount": 7000 })).await;
    let mut found = run_day(&app).await;
    found.sort();
    assert_eq!(found, ["PAYOUT_MISMATCH", "SETTLEMENT_UNKNOWN"]);
    let shown = get(&app, &format!("/api/admin/reconciliation/findings?date={}", date(toss_today()))).await;
    let mismatch = shown["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "PAYOUT_MISMATCH")
        .unwrap()
        .clone();
    assert_eq!(mismatch["paymentKey"], key.as_str(), "{shown}");
    assert!(mismatch["detail"].as_str().unwrap().contains("payOutAmount 29010"), "{mismatch}");
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_FINDING'").await, 2);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"ledger_findings{kind="PAYOUT_MISMATCH"} 1"#), "{metrics}");
    assert!(metrics.contains(r#"ledger_findings{kind="SETTLEMENT_UNKNOWN"} 1"#), "{metrics}");
    // Re-run: the same findings, replaced, audited once.
    run_day(&app).await;
    assert_eq!(count_where(&app.db, "ledger_findings", "1 = 1").await, 2);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'LEDGER_FINDING'").await, 2);
    // Test mode's rows carry no keys at all: a settlement of nothing we know.
    fake.post(
        "/__fake/settlements/extra",
        json!({ "soldDate": date(toss_today()), "amount": 500, "nullKeys": true }),
    )
    .await;
    assert_eq!(run_day(&app).await.iter().filter(|k| *k == "SETTLEMENT_UNKNOWN").count(), 2);
}

async fn tosss_disagreeing_spellings_still_reconcile(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, _) = paid_order(&app, &fake).await;
    for quirks in [
        json!({ "suppliedAmount": true }),
        json!({ "feesMissing": true }),
        json!({ "feesAsStrings": true }),
        json!({ "suppliedAmount": true, "feesMissing": true, "feesAsStrings": true }),
    ] {
        fake.post("/__fake/settlements/quirks", quirks.clone()).await;
        assert_eq!(run_day(&app).await, Vec::<String>::new(), "{quirks}");
        let payout = get(&app, &format!("/api/orders/{id}")).await["payment"]["payout"].clone();
        assert_eq!(payout["fee"], fee_of(30_000).0, "{quirks}: {payout}");
    }
}

async fn a_payment_toss_never_settled_is_missing_only_after_the_grace(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], true).await else { return };
    let (_, _, key) = paid_order(&app, &fake).await;
    fake.post("/__fake/settlements/tamper", json!({ "paymentKey": key, "withhold": true })).await;
    assert_eq!(run_day(&app).await, Vec::<String>::new(), "Toss may settle it yet");
    app.advance(std::time::Duration::from_secs(6 * 86_400));
    assert_eq!(run_day(&app).await, Vec::<String>::new(), "still within the 7 days");
    app.advance(std::time::Duration::from_secs(2 * 86_400));
    assert_eq!(run_day(&app).await, ["SETTLEMENT_MISSING"]);
    let shown = get(&app, &format!("/api/admin/reconciliation/findings?date={}", date(toss_today()))).await;
    assert_eq!(shown["findings"][0]["paymentKey"], key.as_str(), "{shown}");
    assert_eq!(shown["findings"][0]["ours"], "30000");
}

async fn twelve_thousand_settlement_rows_over_three_pages_reconcile(backend: Backend) {
    let fake = Fake::start().await;
    let Some(app) = crate::toss::spawn_on(backend, &fake, &[], false).await else { return };
    let (id, _, _) = paid_order(&app, &fake).await;
    fake.post(
        "/__fake/settlements/extra",
        json!({ "soldDate": date(toss_today()), "amount": 1000, "count": 11_999 }),
    )
    .await;
    let found = run_day(&app).await;
    assert_eq!(found.len(), 11_999, "every row not ours, and only those");
    assert!(found.iter().all(|k| k == "SETTLEMENT_UNKNOWN"));
    assert_eq!(fake.calls("settlements").await, 3, "5 000 + 5 000 + 2 000 rows");
    assert_eq!(get(&app, &format!("/api/orders/{id}")).await["payment"]["payout"]["fee"], fee_of(30_000).0);
}

/// The worker finds `SETTLEMENT_MISSING` by itself: once a day's grace has ended, it runs
/// that day once more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_runs_a_day_again_once_its_grace_has_ended() {
    let fake = Fake::start().await;
    let extra = [("APP__PAYMENT__TOSS__LEDGER_AT", "00:00")];
    let Some(app) = crate::toss::spawn_on(Backend::Sqlite, &fake, &extra, true).await else { return };
    let (_, _, key) = paid_order(&app, &fake).await;
    fake.post("/__fake/settlements/tamper", json!({ "paymentKey": key, "withhold": true })).await;
    let sold = toss_today();
    assert_eq!(run_day(&app).await, Vec::<String>::new(), "the day, run on the day: Toss may settle it yet");
    // Nine days on: yesterday is run first (never run), then the sold day, whose 7 days of
    // grace have ended since it was last run, once more.
    app.advance(std::time::Duration::from_secs(9 * 86_400));
    let first = app.services.money.ledger.run_due().await.unwrap().expect("yesterday was due");
    assert_eq!(first.run.day, sold + chrono::Duration::days(8));
    let again = app.services.money.ledger.run_due().await.unwrap().expect("the sold day's grace has ended");
    assert_eq!(again.run.day, sold);
    let kinds: Vec<String> = again.findings.iter().map(|f| f.kind.to_string()).collect();
    assert_eq!(kinds, ["SETTLEMENT_MISSING"]);
    assert!(app.services.money.ledger.run_due().await.unwrap().is_none(), "once");
}

/// Issue 67: a provider whose pages never end (here: rows of payments we never had, more
/// than a run keeps) fills neither the memory nor the store. The first
/// `payment.toss.ledger_max_findings` are kept and audited, the rest counted in one
/// `TRUNCATED` finding, which alerts.
async fn a_provider_answering_rows_without_end_is_kept_to_a_bounded_run(backend: Backend) {
    const MAX_FINDINGS: usize = 40;
    let fake = Fake::start().await;
    let cap = [("APP__PAYMENT__TOSS__LEDGER_MAX_FINDINGS", "40")];
    let Some(app) = crate::toss::spawn_on(backend, &fake, &cap, false).await else { return };
    let extra = MAX_FINDINGS + 500;
    fake.post(
        "/__fake/settlements/extra",
        json!({ "soldDate": date(toss_today()), "amount": 700, "count": extra }),
    )
    .await;
    let found = run_day(&app).await;
    assert_eq!(found.len(), MAX_FINDINGS + 1);
    assert_eq!(found.iter().filter(|k| *k == "SETTLEMENT_UNKNOWN").count(), MAX_FINDINGS);
    assert_eq!(found.last().map(String::as_str), Some("TRUNCATED"));
    assert_eq!(count_where(&app.db, "ledger_findings", "1 = 1").await as usize, MAX_FINDINGS + 1);
    let shown = get(&app, &format!("/api/admin/reconciliation/findings?date={}", date(toss_today()))).await;
    let truncated =
        shown["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "TRUNCATED").unwrap().clone();
    assert!(truncated["detail"].as_str().unwrap().starts_with("500 more findings"), "{truncated}");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"ledger_findings{kind="TRUNCATED"} 1"#), "{metrics}");
}
