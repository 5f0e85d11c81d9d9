//! `bench latency` and `bench horizon`: commit-to-confirm and commit-to-consume latency at a steady rate, with and without a transaction holding back the xmin horizon.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::channel::BasicConsumeArguments;
use orchestrator::adapters::messaging::amqp::connect;
use orchestrator::adapters::persistence::{self, SeaOrmStore};
use orchestrator::application::ports::{Changes, UnitOfWork};
use orchestrator::startup;
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use crate::fixture::*;

/// Runs the latency scenario `runs` times and applies the gate, if any, to each run.
pub(crate) async fn latency_gate(
    rate: u32,
    seconds: u64,
    runs: u32,
    max_p99_ms: Option<f64>,
) -> Result<(), BoxError> {
    let mut failed = Vec::new();
    for run in 1..=runs.max(1) {
        let (p99, committed, consumed) = latency_scenario(rate, seconds).await?;
        println!("run {run}/{runs}: commit -> confirm p99 {p99:.1} ms, {consumed}/{committed} consumed\n");
        if let Some(max) = max_p99_ms
            && (p99.is_nan() || p99 > max || consumed < committed)
        {
            failed.push(format!("run {run}: p99 {p99:.1} ms, {consumed}/{committed} consumed"));
        }
    }
    if let Some(max) = max_p99_ms {
        if !failed.is_empty() {
            return Err(format!(
                "latency gate (p99 <= {max} ms, all consumed) failed: {}",
                failed.join("; ")
            )
            .into());
        }
        println!("latency gate passed: p99 <= {max} ms and every event consumed in each of {runs} run(s)");
    }
    Ok(())
}

/// One latency run: (commit -> confirm p99 in ms, events committed, events consumed).
pub(crate) async fn latency_scenario(rate: u32, seconds: u64) -> Result<(f64, usize, usize), BoxError> {
    let run = latency_run(rate, seconds, false).await?;
    Ok((run.confirm_p99, run.committed, run.consumed))
}

/// What one latency run measured.
pub(crate) struct LatencyRun {
    confirm_p99: f64,
    consume_p99: f64,
    pub(crate) committed: usize,
    pub(crate) consumed: usize,
    /// Consumed events per second over the producing window and the drain.
    pub(crate) rate: f64,
    /// `pg_stat_user_tables.n_dead_tup` of the outbox's tables after the run.
    pub(crate) dead_tuples: Vec<(String, i64)>,
}

/// One producer's commit.
struct Commit {
    /// When it returned.
    at: Instant,
    /// The same, by the clock `published_at` is written with.
    wall: chrono::DateTime<chrono::Utc>,
    /// How long it took, from before the event was made (`created_at`) to its return: part
    /// of `created_at -> confirm`.
    took_ms: f64,
}

/// A steady commit rate with the relay running; with `hold`, a REPEATABLE READ transaction
/// is open on the database the whole time (holding back vacuum, as a report, `pg_dump` or
/// a lagging replica with `hot_standby_feedback` does).
pub(crate) async fn latency_run(rate: u32, seconds: u64, hold: bool) -> Result<LatencyRun, BoxError> {
    let fixture = Fixture::create().await?;
    let holder = if hold {
        let conn = persistence::connect(&fixture.db_url, 1).await?;
        conn.execute_unprepared("BEGIN ISOLATION LEVEL REPEATABLE READ").await?;
        // The snapshot is taken by the first statement and held until COMMIT.
        conn.execute_unprepared("SELECT count(*) FROM outbox_events").await?;
        Some(conn)
    } else {
        None
    };
    let started = Instant::now();
    let settings = fixture.settings(&[("APP__OUTBOX__POLL_INTERVAL", "1s")])?;
    let services = startup::build_services(&settings).await.map_err(|e| e.to_string())?;
    let workers = startup::Workers::spawn(&services);
    let sessions = relay_sessions_cpu(&fixture.db).await?;

    // Consumer: arrival instant per message id.
    let arrivals: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let consumer_conn = connect(&fixture.endpoint, "bench-consumer").await?;
    let consumer_channel = consumer_conn.open_channel(None).await?;
    let (_, mut rx) = consumer_channel
        .basic_consume_rx(BasicConsumeArguments::new(&fixture.queue, "bench").manual_ack(false).finish())
        .await?;
    let sink = arrivals.clone();
    tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            if let Some(id) = msg.basic_properties.and_then(|p| p.message_id().cloned()) {
                sink.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Instant::now());
            }
        }
    });

    // Producers: one event per commit, spread over tasks to hold the rate — 8 up to 1 600
    // commits/s, more above (at most 16, the pool's connections): a commit here takes 2–5
    // ms, so 8 tasks cannot offer 3 000 commits/s however fast the database is.
    let commits: Arc<Mutex<HashMap<String, Commit>>> = Arc::default();
    let producers = (rate / 200).clamp(8, 16);
    let per_task = Duration::from_secs_f64(producers as f64 / rate as f64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let uow = SeaOrmStore::new(fixture.db.clone(), services.relay_wake.clone());
        let commits = commits.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(per_task);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while Instant::now() < deadline {
                tick.tick().await;
                let before = Instant::now();
                let event = new_event(&uuid::Uuid::now_v7().to_string());
                let id = event.event_id.to_string();
                if uow.commit(Changes { outbox: vec![event], ..Default::default() }).await.is_ok() {
                    let commit = Commit {
                        at: Instant::now(),
                        wall: chrono::Utc::now(),
                        took_ms: before.elapsed().as_secs_f64() * 1000.0,
                    };
                    commits.lock().unwrap_or_else(|e| e.into_inner()).insert(id, commit);
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let committed = commits.lock().unwrap_or_else(|e| e.into_inner()).len();
    let drain_deadline = Instant::now() + Duration::from_secs(30);
    while arrivals.lock().unwrap_or_else(|e| e.into_inner()).len() < committed
        && Instant::now() < drain_deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let relay_db_ms = relay_sessions_ms_per_thousand(
        &sessions,
        &relay_sessions_cpu(&fixture.db).await?,
        commits.lock().unwrap_or_else(|e| e.into_inner()).len(),
    );
    workers.shutdown(Duration::from_secs(10)).await;

    let commits = std::mem::take(&mut *commits.lock().unwrap_or_else(|e| e.into_inner()));
    let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut consume: Vec<f64> = commits
        .iter()
        .filter_map(|(id, c)| {
            arrivals.get(id).map(|a| a.saturating_duration_since(c.at).as_secs_f64() * 1000.0)
        })
        .collect();
    consume.sort_by(f64::total_cmp);
    let rows = fixture
        .db
        .query_all_raw(Statement::from_string(
            fixture.db.get_database_backend(),
            // A fast-path event's published_at is that of the first progress row of its lane
            // that covers it.
            "SELECT (EXTRACT(EPOCH FROM (f.published_at - o.created_at)) * 1000)::float8 AS ms, \
               o.event_id::text AS event_id, f.published_at \
             FROM outbox_events o JOIN LATERAL (SELECT p.published_at FROM outbox_progress p \
               WHERE p.lane = o.lane AND p.published_at >= o.created_at \
                 AND ((p.done IS NOT NULL AND pg_visible_in_snapshot(o.txid, p.done::pg_snapshot)) \
                   OR (p.cur IS NOT NULL AND o.id <= p.upto_id AND pg_visible_in_snapshot(o.txid, p.cur::pg_snapshot))) \
               ORDER BY p.published_at LIMIT 1) f ON TRUE WHERE NOT o.slow",
        ))
        .await?;
    let mut confirm: Vec<f64> = rows.iter().filter_map(|r| r.try_get::<f64>("", "ms").ok()).collect();
    confirm.sort_by(f64::total_cmp);
    // From the commit's return: the relay's own latency (`created_at` is taken before the
    // transaction, so the figure above includes the producer's commit).
    let mut relay_ms: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            let id = r.try_get::<String>("", "event_id").ok()?;
            let published = r.try_get::<chrono::DateTime<chrono::Utc>>("", "published_at").ok()?;
            let at = commits.get(&id)?.wall;
            Some(((published - at).num_microseconds()? as f64 / 1000.0).max(0.0))
        })
        .collect();
    relay_ms.sort_by(f64::total_cmp);
    let mut commit_ms: Vec<f64> = commits.values().map(|c| c.took_ms).collect();
    commit_ms.sort_by(f64::total_cmp);
    // The broker alone at the same rate, same queue and consumer: what a confirm costs
    // without the outbox (the floor under commit -> confirm, beside the commit itself).
    let mut bare = bare_confirm_latency(&fixture, rate, seconds.min(5)).await?;
    bare.sort_by(f64::total_cmp);
    let achieved = committed as f64 / seconds as f64;
    println!(
        "latency: target {rate} commits/s for {seconds}s, achieved {achieved:.0}/s, {committed} events, {} consumed",
        consume.len()
    );
    println!("| latency (ms) | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|");
    let line = |name: &str, v: &[f64]| {
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
            percentile(v, 50.0),
            percentile(v, 90.0),
            percentile(v, 99.0),
            v.last().copied().unwrap_or(f64::NAN)
        )
    };
    line("commit -> confirm (commit returned -> published_at)", &relay_ms);
    line("event made -> confirm (created_at, before the transaction -> published_at)", &confirm);
    line("commit -> consume", &consume);
    line("baseline: the commit itself (before the event -> commit returned)", &commit_ms);
    line("baseline: bare publisher, publish -> confirm, same rate and queue", &bare);
    println!("the relay's own PostgreSQL sessions: {relay_db_ms:.0} ms of CPU per 1 000 events");
    let summary = |v: &[f64]| json!({ "p50": percentile(v, 50.0), "p90": percentile(v, 90.0), "p99": percentile(v, 99.0), "max": v.last() });
    write_json(
        "latency",
        &json!({
            "targetRate": rate, "achievedRate": achieved, "seconds": seconds, "events": committed,
            "commitToConfirmMs": summary(&relay_ms), "createdToConfirmMs": summary(&confirm),
            "commitToConsumeMs": summary(&consume),
            "commitMs": summary(&commit_ms), "barePublishToConfirmMs": summary(&bare),
            "relaySessionsCpuMsPerThousand": relay_db_ms,
        }),
    )?;
    let _ = consumer_conn.close().await;
    let elapsed = started.elapsed().as_secs_f64();
    let dead = fixture
        .db
        .query_all_raw(Statement::from_string(
            fixture.db.get_database_backend(),
            "SELECT relname::text AS name, n_dead_tup AS n FROM pg_stat_user_tables \
             WHERE relname IN ('outbox_events', 'outbox_progress', 'outbox_lanes') ORDER BY relname",
        ))
        .await?
        .iter()
        .filter_map(|r| Some((r.try_get::<String>("", "name").ok()?, r.try_get::<i64>("", "n").ok()?)))
        .collect();
    if let Some(conn) = holder {
        conn.execute_unprepared("COMMIT").await?;
        let _ = conn.close().await;
    }
    fixture.drop_all().await;
    Ok(LatencyRun {
        confirm_p99: percentile(&relay_ms, 99.0),
        consume_p99: percentile(&consume, 99.0),
        committed,
        consumed: consume.len(),
        rate: consume.len() as f64 / elapsed,
        dead_tuples: dead,
    })
}

/// The latency run without and with a REPEATABLE READ transaction held open for the whole
/// run: rate, p99 and the outbox tables' dead tuples side by side.
pub(crate) async fn horizon_scenario(rate: u32, seconds: u64) -> Result<(), BoxError> {
    let plain = latency_run(rate, seconds, false).await?;
    // Let the statistics collector catch up between runs.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held = latency_run(rate, seconds, true).await?;
    println!(
        "\nhorizon: {rate} commits/s for {seconds}s, without and with a REPEATABLE READ transaction held open"
    );
    println!("| run | consumed/s | commit -> confirm p99 (ms) | commit -> consume p99 (ms) | dead tuples |");
    println!("|---|---:|---:|---:|---|");
    for (name, r) in [("no transaction held", &plain), ("transaction held", &held)] {
        let dead = r.dead_tuples.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", ");
        println!("| {name} | {:.0} | {:.1} | {:.1} | {dead} |", r.rate, r.confirm_p99, r.consume_p99);
    }
    println!(
        "\nrate held/plain {:.2}, consume p99 held/plain {:.2}; {} of {} events consumed with the transaction held",
        held.rate / plain.rate,
        held.consume_p99 / plain.consume_p99,
        held.consumed,
        held.committed
    );
    let json_run = |r: &LatencyRun| {
        json!({ "rate": r.rate, "confirmP99": r.confirm_p99, "consumeP99": r.consume_p99,
                "committed": r.committed, "consumed": r.consumed,
                "deadTuples": r.dead_tuples.iter().map(|(t, n)| json!({ "table": t, "n": n })).collect::<Vec<_>>() })
    };
    write_json(
        "horizon",
        &json!({ "rate": rate, "seconds": seconds, "plain": json_run(&plain), "held": json_run(&held) }),
    )
}

/// Publishes `rate` messages a second for `seconds`, one at a time as they fall due, each
/// with the relay's properties and an envelope of the same size, on a confirming channel of
/// its own: publish -> confirm of each, in ms.
async fn bare_confirm_latency(fixture: &Fixture, rate: u32, seconds: u64) -> Result<Vec<f64>, BoxError> {
    use amqprs::channel::{BasicPublishArguments, ConfirmSelectArguments};
    use orchestrator::adapters::messaging::amqp::message_properties;

    /// Send instants by delivery tag; confirmed ones move to `done` (ms).
    #[derive(Default)]
    struct Timing {
        sent: std::collections::BTreeMap<u64, Instant>,
        done: Vec<f64>,
    }
    struct Callback(Arc<Mutex<Timing>>);
    #[async_trait::async_trait]
    impl amqprs::callbacks::ChannelCallback for Callback {
        async fn close(
            &mut self,
            _: &amqprs::channel::Channel,
            _: amqprs::CloseChannel,
        ) -> Result<(), amqprs::error::Error> {
            Ok(())
        }
        async fn cancel(
            &mut self,
            _: &amqprs::channel::Channel,
            _: amqprs::Cancel,
        ) -> Result<(), amqprs::error::Error> {
            Ok(())
        }
        async fn flow(
            &mut self,
            _: &amqprs::channel::Channel,
            _: bool,
        ) -> Result<bool, amqprs::error::Error> {
            Ok(true)
        }
        async fn publish_ack(&mut self, _: &amqprs::channel::Channel, ack: amqprs::Ack) {
            let now = Instant::now();
            let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
            let tags: Vec<u64> = if ack.mutiple() {
                t.sent.range(..=ack.delivery_tag()).map(|(tag, _)| *tag).collect()
            } else {
                vec![ack.delivery_tag()]
            };
            for tag in tags {
                if let Some(at) = t.sent.remove(&tag) {
                    t.done.push(now.saturating_duration_since(at).as_secs_f64() * 1000.0);
                }
            }
        }
        async fn publish_nack(&mut self, _: &amqprs::channel::Channel, _: amqprs::Nack) {}
        async fn publish_return(
            &mut self,
            _: &amqprs::channel::Channel,
            _: amqprs::Return,
            _: amqprs::BasicProperties,
            _: Vec<u8>,
        ) {
        }
    }

    let connection = connect(&fixture.endpoint, "bench-bare-latency").await?;
    let channel = connection.open_channel(None).await?;
    let timing: Arc<Mutex<Timing>> = Arc::default();
    channel.register_callback(Callback(timing.clone())).await?;
    channel.confirm_select(ConfirmSelectArguments::default()).await?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let total = u64::from(rate) * seconds;
    for tag in 1..=total {
        tick.tick().await;
        let e = new_event(&uuid::Uuid::now_v7().to_string());
        let props = message_properties(
            &e.event_id.to_string(),
            &e.event_type,
            e.correlation_id.as_deref(),
            e.created_at,
            None,
        );
        let args = BasicPublishArguments::new(&fixture.exchange, &e.routing_key).mandatory(true).finish();
        timing.lock().unwrap_or_else(|e| e.into_inner()).sent.insert(tag, Instant::now());
        channel.basic_publish(props, e.payload.into_bytes(), args).await?;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !timing.lock().unwrap_or_else(|e| e.into_inner()).sent.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = connection.close().await;
    let done = std::mem::take(&mut timing.lock().unwrap_or_else(|e| e.into_inner()).done);
    Ok(done)
}
