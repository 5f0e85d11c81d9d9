//! `bench backlog`: the drain rate at a large backlog against a small one, and the worker's peak RSS.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::json;

use crate::fixture::*;

pub(crate) async fn backlog_scenario(
    big: usize,
    small: usize,
    batch: usize,
    shape: Shape,
) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let app_bin = std::env::current_exe()?.with_file_name("app");
    if !app_bin.exists() {
        return Err(format!("{} not found: run `cargo build --release` first", app_bin.display()).into());
    }
    println!("backlog: drain by one `app worker` process, batch {batch}, {shape:?} traffic");
    println!("| backlog | events/s | peak RSS of the worker | delivered |\n|---:|---:|---:|---|");
    let mut results = Vec::new();
    let mut plan = String::new();
    for n in [small, big] {
        fixture.reset().await?;
        seed_sql(&fixture.db, n, shape).await?;
        // A backlog builds up over minutes (a broker outage): by the time it drains, the
        // checkpointer has written its pages and autovacuum has been over its rows. Without
        // this, the big run would also pay for writing out a freshly loaded gigabyte and
        // vacuuming it, which the small one does not — the aftermath of the load, not the
        // relay's cost at a backlog.
        fixture.db.execute_unprepared("VACUUM ANALYZE outbox_events").await?;
        fixture.db.execute_unprepared("CHECKPOINT").await?;
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
            ("APP__SETTLEMENT__CHANNEL", "simulated".into()),
            ("APP__NOTIFICATION__CHANNEL", "simulated".into()),
            ("APP__OUTBOX__BATCH_SIZE", batch.to_string()),
            ("APP__NOTIFICATION__RETRY__ENABLED", "false".into()),
            (
                "APP__AUTH__KEYS",
                r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                    .into(),
            ),
            ("RUST_LOG", "warn".into()),
        ];
        // The broker's side is the same at both sizes: a consumer takes every message as it
        // arrives, as the service's own consumers would. Left to fill the bounded queue, the
        // big run's broker would also drop a message from its head for each one published
        // (and compact its message store), which the small run never reaches: the broker's
        // cost at volume, not the relay's (docs/benchmarks.md, "Backlog").
        let (consumer, received) = collect_ids(&fixture, "backlog").await?;
        let spawned = chrono::Utc::now();
        let mut child = std::process::Command::new(&app_bin)
            .arg("worker")
            .envs(settings_env)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        // The clock runs from the first recorded batch to the last, as the progress log dates
        // them; the events of the first batch are not part of the rate. Polling reads only
        // that log (one row per lane and batch): counting a million events each second, as
        // operators' stats do, cost PostgreSQL a third of a core here and slowed the very
        // drain it measured. The exact count runs only once the log stops growing.
        let mut peak = 0;
        let mut last_report = Instant::now();
        let mut seen: Option<(chrono::DateTime<chrono::Utc>, Instant)> = None;
        let (first, last) = loop {
            peak = peak.max(rss_kb(child.id(), "VmRSS:"));
            let (batches, first, last) = progress_span(&fixture.db, spawned).await?;
            if let (Some(first), Some(last)) = (first, last) {
                match seen {
                    Some((at, since)) if at == last => {
                        if since.elapsed() >= Duration::from_millis(1500)
                            && fixture.published().await? >= n as i64
                        {
                            break (first, last);
                        }
                    }
                    _ => seen = Some((last, Instant::now())),
                }
            }
            if last_report.elapsed() >= Duration::from_secs(10) {
                eprintln!("  {batches} lane batches recorded");
                last_report = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let first_batch = first_batch_events(&fixture.db, first).await?;
        let seconds = (last - first).to_std().unwrap_or_default().as_secs_f64().max(1e-3);
        let rate = (n as i64 - first_batch) as f64 / seconds;
        peak = peak.max(rss_kb(child.id(), "VmHWM:"));
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let _ = child.wait();
        // Everything confirmed has reached the consumer by now, or is about to.
        let deadline = Instant::now() + Duration::from_secs(10);
        while received.lock().unwrap_or_else(|e| e.into_inner()).len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let delivered = delivery(&fixture.db, &received).await?;
        let _ = consumer.close().await;
        println!(
            "| {n} | {rate:.0} | {:.1} MB | {} lost, {} duplicated |",
            peak as f64 / 1024.0,
            delivered.lost,
            delivered.duplicated
        );
        results.push(json!({ "backlog": n, "eventsPerSecond": rate, "peakRssKb": peak,
            "lost": delivered.lost, "duplicated": delivered.duplicated }));
    }
    let ratio = results[1]["eventsPerSecond"].as_f64().unwrap_or(0.0)
        / results[0]["eventsPerSecond"].as_f64().unwrap_or(1.0);
    println!("\nrate at {big} / rate at {small}: {ratio:.2}\n\nclaim plan at {big} rows:\n{plan}");
    write_json(
        "backlog",
        &json!({ "shape": format!("{shape:?}"), "results": results, "ratio": ratio, "plan": plan }),
    )?;
    fixture.drop_all().await;
    Ok(())
}

/// The progress log since `since` (the log outlives the bench's `TRUNCATE` of the events):
/// lane batches recorded, the first and the last one's time.
async fn progress_span(
    db: &DatabaseConnection,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<(i64, Option<chrono::DateTime<chrono::Utc>>, Option<chrono::DateTime<chrono::Utc>>), BoxError> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT COUNT(*) AS n, MIN(published_at) AS first, MAX(published_at) AS last FROM outbox_progress \
             WHERE published_at >= $1",
            [since.into()],
        ))
        .await?
        .ok_or("no row")?;
    Ok((row.try_get("", "n")?, row.try_get("", "first")?, row.try_get("", "last")?))
}

/// Events the first recorded batch covered: in a backlog seeded before the worker starts,
/// each lane's first page is its lowest ids up to `upto_id`.
async fn first_batch_events(
    db: &DatabaseConnection,
    first: chrono::DateTime<chrono::Utc>,
) -> Result<i64, BoxError> {
    let row = db
        .query_one_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT COUNT(*) AS n FROM outbox_events o JOIN outbox_progress p ON p.lane = o.lane \
               AND p.published_at = $1 AND o.id <= p.upto_id WHERE NOT o.slow",
            [first.into()],
        ))
        .await?
        .ok_or("no row")?;
    Ok(row.try_get("", "n")?)
}
