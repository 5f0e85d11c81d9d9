//! `bench backlog`: the drain rate at a large backlog against a small one, and the worker's peak RSS.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use crate::fixture::*;

pub(crate) async fn backlog_scenario(big: usize, small: usize, batch: usize) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let app_bin = std::env::current_exe()?.with_file_name("app");
    if !app_bin.exists() {
        return Err(format!("{} not found: run `cargo build --release` first", app_bin.display()).into());
    }
    println!("backlog: drain by one `app worker` process, batch {batch}");
    println!("| backlog | events/s | peak RSS of the worker |\n|---:|---:|---:|");
    let mut results = Vec::new();
    let mut plan = String::new();
    for n in [small, big] {
        fixture.reset().await?;
        seed_sql(&fixture.db, n).await?;
        let explain = fixture
            .db
            .query_all_raw(Statement::from_string(
                fixture.db.get_database_backend(),
                // The fast path's read of one lane's snapshot difference (from nothing done).
                "EXPLAIN SELECT o.lane, o.id FROM outbox_events o WHERE o.lane = 3 AND NOT o.slow \
                   AND o.txid >= '0'::xid8 AND o.txid < pg_snapshot_xmax(pg_current_snapshot()) \
                   AND pg_visible_in_snapshot(o.txid, pg_current_snapshot()) ORDER BY o.lane, o.id"
                    .to_owned(),
            ))
            .await?;
        plan = explain
            .iter()
            .filter_map(|r| r.try_get::<String>("", "QUERY PLAN").ok())
            .collect::<Vec<_>>()
            .join("\n");
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let settings_env = [
            ("APP__DATABASE__URL", fixture.db_url.clone()),
            ("APP__BROKER__URL", amqp_url()),
            ("APP__BROKER__EXCHANGE", fixture.exchange.clone()),
            ("APP__HTTP__BIND", format!("127.0.0.1:{port}")),
            ("APP__WORKER__HTTP__BIND", format!("127.0.0.1:{port}")),
            ("APP__PAYMENT__PROVIDER", "mock".into()),
            ("APP__OUTBOX__BATCH_SIZE", batch.to_string()),
            ("APP__NOTIFICATION__RETRY__ENABLED", "false".into()),
            (
                "APP__AUTH__KEYS",
                r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                    .into(),
            ),
            ("RUST_LOG", "warn".into()),
        ];
        let mut child = std::process::Command::new(&app_bin)
            .arg("worker")
            .envs(settings_env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // The clock starts at the first published row: process start-up and connecting
        // are not part of the drain rate.
        let mut first: Option<(Instant, i64)> = None;
        let mut peak = 0;
        let mut last_report = Instant::now();
        let mut last_count = 0;
        loop {
            let published = fixture.published().await?;
            if first.is_none() && published > 0 {
                first = Some((Instant::now(), published));
            }
            if published >= n as i64 {
                break;
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                let rate = (published - last_count) as f64 / last_report.elapsed().as_secs_f64();
                eprintln!("  {published} published, {rate:.0}/s over the last 10 s");
                (last_report, last_count) = (Instant::now(), published);
            }
            peak = peak.max(rss_kb(child.id(), "VmRSS:"));
            // Counting a million rows costs the database too: poll the big backlog seldom
            // (the drain takes minutes; a second is under 1 % of it).
            tokio::time::sleep(Duration::from_millis(if n > 100_000 { 1000 } else { 50 })).await;
        }
        let (t0, p0) = first.unwrap_or((Instant::now(), 0));
        let rate = (n as i64 - p0) as f64 / t0.elapsed().as_secs_f64().max(1e-3);
        peak = peak.max(rss_kb(child.id(), "VmHWM:"));
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let _ = child.wait();
        println!("| {n} | {rate:.0} | {:.1} MB |", peak as f64 / 1024.0);
        results.push(json!({ "backlog": n, "eventsPerSecond": rate, "peakRssKb": peak }));
    }
    let ratio = results[1]["eventsPerSecond"].as_f64().unwrap_or(0.0)
        / results[0]["eventsPerSecond"].as_f64().unwrap_or(1.0);
    println!("\nrate at {big} / rate at {small}: {ratio:.2}\n\nclaim plan at {big} rows:\n{plan}");
    write_json("backlog", &json!({ "results": results, "ratio": ratio, "plan": plan }))?;
    fixture.drop_all().await;
    Ok(())
}
