//! `bench payouts`: the daily ledger run of a day whose settlements are `rows` rows at Toss
//! (pages of 5 000), as `app reconcile ledger --date` runs it — a process of its own under
//! GNU time, so its peak RSS is the run's whole footprint. The fake Toss API (`fake-toss`, a
//! process: needs `cargo build --release -p fake-toss`) answers; the rows are settlements of
//! payments this database never had (each read, matched against the books, stored as a
//! finding and audited: the most a row costs a run). PostgreSQL.

use serde_json::{Value, json};

use crate::fixture::*;

const SECRET: &str = "test_sk_bench_0000000000000000";
const DAY: &str = "2026-12-01";

pub(crate) async fn payouts_scenario(rows: u32, runs: usize) -> Result<(), BoxError> {
    let app_bin = std::env::current_exe()?.with_file_name("app");
    if !app_bin.exists() {
        return Err(format!("{} is missing: cargo build --release", app_bin.display()).into());
    }
    let (mut fake, fake_url) = start_fake_toss(SECRET).await?;
    let fixture = Fixture::create().await?;
    let result = async {
        let extra = json!({ "soldDate": DAY, "amount": 10_000, "count": rows });
        let added = reqwest::Client::new().post(format!("{fake_url}/__fake/settlements/extra")).json(&extra).send().await?;
        if !added.status().is_success() {
            return Err(format!("the fake refused the rows: {}", added.status()).into());
        }
        println!("payouts: {rows} settlement rows of {DAY} at the fake Toss API, `app reconcile ledger` on PostgreSQL");
        println!("| run | rows | Toss calls | findings | seconds | peak RSS |\n|---:|---:|---:|---:|---:|---:|");
        let mut results = Vec::new();
        for run in 1..=runs {
            let calls_before = settlement_calls(&fake_url).await?;
            let out = std::process::Command::new("/usr/bin/time")
                .args(["-f", "bench-rss %M %e"])
                .arg(&app_bin)
                .args(["reconcile", "ledger", "--date", DAY])
                .env("APP__DATABASE__URL", &fixture.db_url)
                .env("APP__PAYMENT__PROVIDER", "toss")
                .env("APP__PAYMENT__TOSS__SECRET_KEY", SECRET)
                .env("APP__PAYMENT__TOSS__BASE_URL", &fake_url)
                .env("APP__BROKER__KIND", "log")
                .env("APP__SETTLEMENT__CHANNEL", "simulated")
                .env("APP__NOTIFICATION__CHANNEL", "simulated")
                .env("APP__AUTH__KEYS", r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#)
                .env("RUST_LOG", "warn")
                .output()?;
            let stderr = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() {
                return Err(format!("app reconcile ledger failed: {stderr}").into());
            }
            let measured = stderr.lines().rev().find_map(|l| l.strip_prefix("bench-rss ")).ok_or("no GNU time line")?;
            let (kb, seconds) = measured.split_once(' ').ok_or("GNU time's line unreadable")?;
            let (kb, seconds): (f64, f64) = (kb.parse()?, seconds.parse()?);
            let printed: Value = serde_json::from_slice(&out.stdout)?;
            let findings = printed["findings"].as_array().map_or(0, Vec::len);
            let calls = settlement_calls(&fake_url).await? - calls_before;
            println!("| {run} | {rows} | {calls} | {findings} | {seconds:.2} | {:.1} MB |", kb / 1024.0);
            results.push(json!({ "run": run, "rows": rows, "calls": calls, "findings": findings, "seconds": seconds, "peakRssMb": kb / 1024.0 }));
        }
        write_json("payouts", &json!({ "rows": rows, "runs": results }))
    }
    .await;
    let _ = fake.kill();
    let _ = fake.wait();
    fixture.drop_all().await;
    result
}

async fn settlement_calls(fake_url: &str) -> Result<u64, BoxError> {
    let calls: Value = reqwest::get(format!("{fake_url}/__fake/calls")).await?.json().await?;
    Ok(calls["calls"]["settlements"].as_u64().unwrap_or(0))
}
