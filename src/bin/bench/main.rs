//! The bench harness: `cargo run --release --bin bench -- <scenario>`.
//!
//! Runs against the machine's PostgreSQL (`BENCH_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; a `bench_<uuid>` database is created and
//! dropped) and RabbitMQ (`BENCH_AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`;
//! a `bench.<uuid>` exchange and queue are created and deleted). Each scenario measures its
//! baseline in the same run, prints a table and writes JSON to `target/bench/<scenario>.json`.
//!
//! Scenarios:
//! - `relay`: N outbox rows (~500 B envelopes) drained by 1 and by 4 relays, against a bare
//!   amqprs publisher with a sliding confirm window.
//! - `latency`: a steady commit rate with the relay running; commit-to-confirm (stored
//!   `created_at` -> `published_at`) and commit-to-consume percentiles.
//! - `horizon`: the latency run without and with a REPEATABLE READ transaction held open;
//!   rate, p99 and dead tuples of the outbox's tables.
//! - `orders`, `backlog`, `soak`: see `bench --help`.

mod soak;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::channel::{
    BasicConsumeArguments, BasicPublishArguments, Channel, ConfirmSelectArguments, ExchangeDeclareArguments,
    ExchangeDeleteArguments, QueueBindArguments, QueueDeclareArguments, QueueDeleteArguments,
    QueuePurgeArguments,
};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use chrono::Utc;
use clap::{Parser, Subcommand};
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect};
use orchestrator::adapters::persistence::{self, SeaOrmOrderRepository};
use orchestrator::application::ports::{Changes, NewOutboxEvent, OutboxStore, UnitOfWork};
use orchestrator::config::Settings;
use orchestrator::domain::ids::EventId;
use orchestrator::domain::outbox::OutboxStatus;
use orchestrator::startup;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::json;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
#[command(name = "bench", about = "Benchmarks against the real PostgreSQL and RabbitMQ")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Drain rate of the relay (1 and 4 workers) vs a bare confirming publisher.
    Relay {
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        /// Relay counts to measure, comma-separated.
        #[arg(long, default_value = "1,4")]
        workers: String,
        #[arg(long, default_value_t = 256)]
        window: usize,
        /// Rows claimed per relay round (`outbox.batch_size`).
        #[arg(long, default_value_t = 256)]
        batch: usize,
    },
    /// HTTP `POST /api/orders` at rising concurrency, then at half of saturation; baseline
    /// pgbench (TPC-B-like) on the same server.
    Orders {
        /// Concurrency levels, comma-separated.
        #[arg(long, default_value = "1,4,16,64")]
        levels: String,
        /// Seconds per level.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Drain rate with a large backlog against a small one, the claim's plan, and the peak
    /// RSS of an `app worker` process (needs `cargo build --release` for `app`).
    Backlog {
        #[arg(long, default_value_t = 1_000_000)]
        big: usize,
        #[arg(long, default_value_t = 10_000)]
        small: usize,
        #[arg(long, default_value_t = 1024)]
        batch: usize,
    },
    /// A steady order rate for many minutes with a fault every minute (worker SIGKILL,
    /// database connections killed, broker connection cut, server SIGKILL); counts lost and
    /// duplicated events and samples RSS (needs `cargo build --release` for `app`).
    Soak {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// Orders per second.
        #[arg(long, default_value_t = 100)]
        rate: u32,
    },
    /// The latency run twice, the second with a REPEATABLE READ transaction held open
    /// throughout: relay rate, p99 and dead tuples on the outbox's tables.
    Horizon {
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// How long the transaction is held (the length of each run).
        #[arg(long, default_value_t = 120)]
        seconds: u64,
    },
    /// Commit-to-confirm and commit-to-consume latency at a steady commit rate.
    Latency {
        /// Commits (one event each) per second.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Runs, each on a fresh database (a stall showed in 7 of 12 runs before the fix).
        #[arg(long, default_value_t = 1)]
        runs: u32,
        /// Gate: exit 1 when any run's commit -> confirm p99 exceeds this, or an event is
        /// still unconsumed when the drain window closes.
        #[arg(long)]
        max_p99_ms: Option<f64>,
    },
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn admin_url() -> String {
    std::env::var("BENCH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn amqp_url() -> String {
    std::env::var("BENCH_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A database and broker objects that exist for one run.
struct Fixture {
    id: String,
    db_url: String,
    db: DatabaseConnection,
    exchange: String,
    queue: String,
    endpoint: AmqpEndpoint,
    channel: Channel,
    _connection: amqprs::connection::Connection,
}

impl Fixture {
    async fn create() -> Result<Fixture, BoxError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let admin = Database::connect(admin_url()).await?;
        admin.execute_unprepared(&format!("CREATE DATABASE bench_{id}")).await?;
        admin.close().await?;
        let base = admin_url();
        let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s).to_owned();
        let db_url = format!("{server}/bench_{id}");
        let db = persistence::connect(&db_url, 16).await?;
        persistence::migrate(&db).await?;
        let endpoint = AmqpEndpoint::parse(&amqp_url())?;
        let connection = connect(&endpoint, "bench-setup").await?;
        let channel = connection.open_channel(None).await?;
        let exchange = format!("bench.{id}");
        let queue = format!("bench.{id}");
        channel
            .exchange_declare(ExchangeDeclareArguments::new(&exchange, "topic").durable(true).finish())
            .await?;
        // Bounded (oldest dropped): a million messages piling up in one queue would measure
        // the broker's paging, not the publisher. Both sides of every comparison share it.
        let mut args = amqprs::FieldTable::new();
        args.insert("x-max-length".try_into()?, amqprs::FieldValue::l(50_000));
        channel
            .queue_declare(QueueDeclareArguments::new(&queue).durable(true).arguments(args).finish())
            .await?;
        channel.queue_bind(QueueBindArguments::new(&queue, &exchange, "#")).await?;
        Ok(Fixture { id, db_url, db, exchange, queue, endpoint, channel, _connection: connection })
    }

    fn settings(&self, extra: &[(&str, &str)]) -> Result<Settings, BoxError> {
        let mut env: Vec<(String, String)> = vec![
            ("APP__DATABASE__URL".into(), self.db_url.clone()),
            ("APP__DATABASE__MAX_CONNECTIONS".into(), "16".into()),
            ("APP__BROKER__URL".into(), amqp_url()),
            ("APP__BROKER__EXCHANGE".into(), self.exchange.clone()),
            ("APP__WORKER__EMBEDDED".into(), "false".into()),
            ("APP__HTTP__BIND".into(), "127.0.0.1:0".into()),
            ("APP__WORKER__HTTP__BIND".into(), "127.0.0.1:0".into()),
            ("APP__PAYMENT__PROVIDER".into(), "mock".into()),
            (
                "APP__AUTH__KEYS".into(),
                r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                    .into(),
            ),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Ok(Settings::load_from(None, env)?)
    }

    async fn published(&self) -> Result<i64, BoxError> {
        Ok(outbox_counts(&self.db).await?.get(&OutboxStatus::Published).copied().unwrap_or(0))
    }

    async fn reset(&self) -> Result<(), BoxError> {
        self.db.execute_unprepared("TRUNCATE outbox_events").await?;
        self.channel.queue_purge(QueuePurgeArguments::new(&self.queue)).await?;
        Ok(())
    }

    async fn drop_all(self) {
        let _ = self.channel.queue_delete(QueueDeleteArguments::new(&self.queue)).await;
        let _ = self.channel.exchange_delete(ExchangeDeleteArguments::new(&self.exchange)).await;
        let _ = self.db.close().await;
        if let Ok(admin) = Database::connect(admin_url()).await {
            let _ = admin
                .execute_unprepared(&format!("DROP DATABASE IF EXISTS bench_{} WITH (FORCE)", self.id))
                .await;
        }
    }
}

/// Outbox rows per status as operators see them (a published event keeps no per-row
/// status: it comes from its lane's progress).
async fn outbox_counts(db: &DatabaseConnection) -> Result<HashMap<OutboxStatus, i64>, BoxError> {
    let store = persistence::SeaOrmOutboxStore::new(db.clone(), Arc::new(Notify::new()));
    Ok(store.stats().await?.by_status.into_iter().collect())
}

/// Outbox rows not yet published.
pub(crate) async fn unpublished(db: &DatabaseConnection) -> Result<i64, BoxError> {
    Ok(outbox_counts(db)
        .await?
        .into_iter()
        .filter(|(s, _)| *s != OutboxStatus::Published)
        .map(|(_, n)| n)
        .sum())
}

/// An envelope of about 500 bytes, like a real order event.
fn envelope(event_id: EventId, aggregate: &str) -> String {
    json!({
        "eventId": event_id.to_string(),
        "eventType": "order.completed",
        "aggregateType": "order",
        "aggregateId": aggregate,
        "correlationId": uuid::Uuid::new_v4().to_string(),
        "occurredAt": Utc::now().to_rfc3339(),
        "payload": {
            "orderId": aggregate, "customerId": "customer-0042", "source": "API", "meetingId": null,
            "currency": "KRW", "totalAmount": 30000, "orderStatus": "COMPLETED",
            "paymentId": uuid::Uuid::new_v4().to_string(), "providerTransactionId": "sim-0123456789abcdef0123456789abcdef",
            "note": "x".repeat(60),
        }
    })
    .to_string()
}

fn new_event(aggregate: &str) -> NewOutboxEvent {
    let event_id = EventId::new();
    NewOutboxEvent {
        event_id,
        aggregate_type: "order".into(),
        aggregate_id: aggregate.into(),
        event_type: "order.completed".into(),
        routing_key: "order.completed".into(),
        payload: envelope(event_id, aggregate),
        correlation_id: None,
        created_at: Utc::now(),
    }
}

async fn seed(db: &DatabaseConnection, n: usize) -> Result<(), BoxError> {
    let uow = SeaOrmOrderRepository::new(db.clone(), Arc::new(Notify::new()));
    let mut left = n;
    while left > 0 {
        let chunk = left.min(1000);
        let outbox = (0..chunk).map(|_| new_event(&uuid::Uuid::now_v7().to_string())).collect();
        uow.commit(Changes { outbox, ..Default::default() }).await?;
        left -= chunk;
    }
    Ok(())
}

/// Confirm callback of the bare publisher: releases one window slot per confirmed tag.
struct WindowCallback {
    window: Arc<Semaphore>,
    settled: Arc<AtomicU64>,
    last_tag: u64,
}

#[async_trait::async_trait]
impl amqprs::callbacks::ChannelCallback for WindowCallback {
    async fn close(&mut self, _: &Channel, _: CloseChannel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn cancel(&mut self, _: &Channel, _: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }
    async fn flow(&mut self, _: &Channel, _: bool) -> Result<bool, amqprs::error::Error> {
        Ok(true)
    }
    async fn publish_ack(&mut self, _: &Channel, ack: Ack) {
        let n = if ack.mutiple() { ack.delivery_tag() - self.last_tag } else { 1 };
        self.last_tag = self.last_tag.max(ack.delivery_tag());
        self.settled.fetch_add(n, Ordering::SeqCst);
        self.window.add_permits(n as usize);
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        let n = if nack.multiple() { nack.delivery_tag() - self.last_tag } else { 1 };
        self.last_tag = self.last_tag.max(nack.delivery_tag());
        self.settled.fetch_add(n, Ordering::SeqCst);
        self.window.add_permits(n as usize);
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// The baseline: the same messages straight to the broker, sliding confirm window.
async fn bare_publisher(fixture: &Fixture, n: usize, window: usize) -> Result<f64, BoxError> {
    let connection = connect(&fixture.endpoint, "bench-bare").await?;
    let channel = connection.open_channel(None).await?;
    let permits = Arc::new(Semaphore::new(window));
    let settled = Arc::new(AtomicU64::new(0));
    channel
        .register_callback(WindowCallback { window: permits.clone(), settled: settled.clone(), last_tag: 0 })
        .await?;
    channel.confirm_select(ConfirmSelectArguments::default()).await?;
    let bodies: Vec<(String, String)> = (0..n)
        .map(|_| {
            let e = new_event(&uuid::Uuid::now_v7().to_string());
            (e.event_id.to_string(), e.payload)
        })
        .collect();
    let started = Instant::now();
    for (id, body) in bodies {
        permits.acquire().await?.forget();
        let mut props = BasicProperties::default();
        props.with_message_id(&id).with_message_type("order.completed").with_persistence(true);
        let args = BasicPublishArguments::new(&fixture.exchange, "order.completed").mandatory(true).finish();
        channel.basic_publish(props.finish(), body.into_bytes(), args).await?;
    }
    while settled.load(Ordering::SeqCst) < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let _ = connection.close().await;
    Ok(rate)
}

async fn relay_drain(
    fixture: &Fixture,
    n: usize,
    workers: usize,
    window: usize,
    batch: usize,
) -> Result<f64, BoxError> {
    let (window, batch) = (window.to_string(), batch.to_string());
    let settings =
        fixture.settings(&[("APP__OUTBOX__PUBLISH_WINDOW", &window), ("APP__OUTBOX__BATCH_SIZE", &batch)])?;
    let services = startup::build_services(&settings).await.map_err(|e| e.to_string())?;
    // The relays count what they publish: polling the database for the end would cost it
    // more than the relay does.
    let stop = CancellationToken::new();
    let published = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..workers {
        let relay = services.relay();
        let (stop, published) = (stop.clone(), published.clone());
        handles.push(tokio::spawn(async move {
            while published.load(Ordering::Relaxed) < n as u64 {
                match relay.drain(&stop).await {
                    Ok(r) if r.claimed > 0 => {
                        published.fetch_add(r.published, Ordering::Relaxed);
                    }
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            relay.release().await;
        }));
    }
    for h in handles {
        h.await?;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    if fixture.published().await? < n as i64 {
        return Err("the relays stopped before every event was published".into());
    }
    Ok(rate)
}

/// CPU seconds used so far by the broker, PostgreSQL (all its processes) and this process.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    broker: f64,
    postgres: f64,
    app: f64,
}

impl Cpu {
    fn now() -> Cpu {
        // utime + stime, in clock ticks (100 per second on Linux).
        let ticks = |stat: &str| -> f64 {
            let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
            let fields: Vec<&str> = after.split_whitespace().collect();
            let get = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
            (get(11) + get(12)) / 100.0
        };
        let mut cpu = Cpu::default();
        let me = std::process::id().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let comm =
                stat.split_once('(').and_then(|(_, r)| r.split_once(')')).map(|(c, _)| c).unwrap_or("");
            if name == me {
                cpu.app += ticks(&stat);
            } else if comm.starts_with("beam") {
                cpu.broker += ticks(&stat);
            } else if comm.starts_with("postgres") {
                cpu.postgres += ticks(&stat);
            }
        }
        cpu
    }

    /// CPU milliseconds per 1 000 events since `before`.
    fn per_thousand(&self, before: &Cpu, events: usize) -> String {
        let k = events as f64 / 1000.0;
        format!(
            "broker {:.0} ms, postgres {:.0} ms, app {:.0} ms",
            (self.broker - before.broker) * 1000.0 / k,
            (self.postgres - before.postgres) * 1000.0 / k,
            (self.app - before.app) * 1000.0 / k
        )
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn write_json(name: &str, value: &serde_json::Value) -> Result<(), BoxError> {
    std::fs::create_dir_all("target/bench")?;
    let path = format!("target/bench/{name}.json");
    std::fs::write(&path, serde_json::to_string_pretty(value)?)?;
    println!("\nwritten: {path}");
    Ok(())
}

async fn relay_scenario(events: usize, workers: &str, window: usize, batch: usize) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    println!("relay: {events} events of ~{} B, window {window}", envelope(EventId::new(), "x").len());
    let cpu = Cpu::now();
    let baseline = bare_publisher(&fixture, events, window).await?;
    let bare_cpu = Cpu::now().per_thousand(&cpu, events);
    fixture.reset().await?;
    println!("| publisher | events/s | ratio to baseline |\n|---|---:|---:|");
    println!("| bare amqprs, sliding window {window} | {baseline:.0} | 1.00 |");
    let mut results = vec![json!({ "publisher": "bare", "eventsPerSecond": baseline })];
    let mut cpu_lines = vec![format!("bare: {bare_cpu}")];
    for w in workers.split(',').filter_map(|w| w.trim().parse::<usize>().ok()) {
        seed(&fixture.db, events).await?;
        let cpu = Cpu::now();
        let rate = relay_drain(&fixture, events, w, window, batch).await?;
        cpu_lines.push(format!("relay x{w}: {}", Cpu::now().per_thousand(&cpu, events)));
        println!("| relay, {w} worker(s) | {rate:.0} | {:.2} |", rate / baseline);
        results.push(
            json!({ "publisher": format!("relay x{w}"), "eventsPerSecond": rate, "ratio": rate / baseline }),
        );
        fixture.reset().await?;
    }
    println!("\nCPU per 1 000 events (2 cores = 2 000 ms of CPU per second):");
    for line in &cpu_lines {
        println!("  {line}");
    }
    write_json(
        "relay",
        &json!({ "events": events, "window": window, "batch": batch, "results": results, "cpu": cpu_lines }),
    )?;
    fixture.drop_all().await;
    Ok(())
}

/// Runs the latency scenario `runs` times and applies the gate, if any, to each run.
async fn latency_gate(rate: u32, seconds: u64, runs: u32, max_p99_ms: Option<f64>) -> Result<(), BoxError> {
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
async fn latency_scenario(rate: u32, seconds: u64) -> Result<(f64, usize, usize), BoxError> {
    let run = latency_run(rate, seconds, false).await?;
    Ok((run.confirm_p99, run.committed, run.consumed))
}

/// What one latency run measured.
struct LatencyRun {
    confirm_p99: f64,
    consume_p99: f64,
    committed: usize,
    consumed: usize,
    /// Consumed events per second over the producing window and the drain.
    rate: f64,
    /// `pg_stat_user_tables.n_dead_tup` of the outbox's tables after the run.
    dead_tuples: Vec<(String, i64)>,
}

/// A steady commit rate with the relay running; with `hold`, a REPEATABLE READ transaction
/// is open on the database the whole time (holding back vacuum, as a report, `pg_dump` or
/// a lagging replica with `hot_standby_feedback` does).
async fn latency_run(rate: u32, seconds: u64, hold: bool) -> Result<LatencyRun, BoxError> {
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

    // Producers: one event per commit, spread over 8 tasks to hold the rate.
    let commits: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let producers = 8u32;
    let per_task = Duration::from_secs_f64(producers as f64 / rate as f64);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let uow = SeaOrmOrderRepository::new(fixture.db.clone(), services.relay_wake.clone());
        let commits = commits.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(per_task);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while Instant::now() < deadline {
                tick.tick().await;
                let event = new_event(&uuid::Uuid::now_v7().to_string());
                let id = event.event_id.to_string();
                if uow.commit(Changes { outbox: vec![event], ..Default::default() }).await.is_ok() {
                    commits.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Instant::now());
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
    workers.shutdown(Duration::from_secs(10)).await;

    let commits = commits.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut consume: Vec<f64> = commits
        .iter()
        .filter_map(|(id, at)| {
            arrivals.get(id).map(|a| a.saturating_duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    consume.sort_by(f64::total_cmp);
    let rows = fixture
        .db
        .query_all_raw(Statement::from_string(
            fixture.db.get_database_backend(),
            // A fast-path event's published_at is that of the first progress row of its lane
            // that covers it.
            "SELECT (EXTRACT(EPOCH FROM (f.published_at - o.created_at)) * 1000)::float8 AS ms \
             FROM outbox_events o JOIN LATERAL (SELECT p.published_at FROM outbox_progress p \
               WHERE p.lane = o.lane AND p.published_at >= o.created_at \
                 AND ((p.done IS NOT NULL AND pg_visible_in_snapshot(o.txid, p.done::pg_snapshot)) \
                   OR (p.cur IS NOT NULL AND o.id <= p.upto_id AND pg_visible_in_snapshot(o.txid, p.cur::pg_snapshot))) \
               ORDER BY p.published_at LIMIT 1) f ON TRUE WHERE NOT o.slow",
        ))
        .await?;
    let mut confirm: Vec<f64> = rows.iter().filter_map(|r| r.try_get::<f64>("", "ms").ok()).collect();
    confirm.sort_by(f64::total_cmp);
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
    line("commit -> confirm (created_at -> published_at)", &confirm);
    line("commit -> consume", &consume);
    let summary = |v: &[f64]| json!({ "p50": percentile(v, 50.0), "p90": percentile(v, 90.0), "p99": percentile(v, 99.0), "max": v.last() });
    write_json(
        "latency",
        &json!({
            "targetRate": rate, "achievedRate": achieved, "seconds": seconds, "events": committed,
            "commitToConfirmMs": summary(&confirm), "commitToConsumeMs": summary(&consume),
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
        confirm_p99: percentile(&confirm, 99.0),
        consume_p99: percentile(&consume, 99.0),
        committed,
        consumed: consume.len(),
        rate: consume.len() as f64 / elapsed,
        dead_tuples: dead,
    })
}

/// The latency run without and with a REPEATABLE READ transaction held open for the whole
/// run: rate, p99 and the outbox tables' dead tuples side by side.
async fn horizon_scenario(rate: u32, seconds: u64) -> Result<(), BoxError> {
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

/// Runs pgbench's built-in TPC-B-like script against a scratch database; returns tps.
fn pgbench_tps(seconds: u64) -> Result<f64, BoxError> {
    let base = admin_url();
    let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s).to_owned();
    let name = format!("bench_pgbench_{}", uuid::Uuid::new_v4().simple());
    let url = format!("{server}/{name}");
    let run = |args: &[&str], db: &str| -> Result<String, BoxError> {
        let out = std::process::Command::new(args[0]).args(&args[1..]).arg(db).output()?;
        if !out.status.success() {
            return Err(format!("{} failed: {}", args[0], String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    run(&["psql", "-q", "-c", &format!("CREATE DATABASE {name}")], &base)?;
    let result = (|| {
        run(&["pgbench", "-i", "-q", "-s", "10"], &url)?;
        let secs = seconds.to_string();
        let text = run(&["pgbench", "-c", "8", "-j", "2", "-T", &secs], &url)?;
        text.lines()
            .find(|l| l.starts_with("tps = "))
            .and_then(|l| l.trim_start_matches("tps = ").split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .ok_or_else(|| BoxError::from("no tps in pgbench output"))
    })();
    let _ = run(&["psql", "-q", "-c", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")], &base);
    result
}

async fn orders_scenario(levels: &str, seconds: u64) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let settings = fixture.settings(&[("APP__BROKER__KIND", "log"), ("APP__LOG__FORMAT", "json")])?;
    let app = startup::Application::build(settings).await.map_err(|e| e.to_string())?;
    let port = app.port();
    let token = app.services().jwt.mint("bench-customer", &[], Duration::from_secs(3600))?;
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let client = reqwest::Client::builder().pool_max_idle_per_host(256).build()?;
    let url = format!("http://127.0.0.1:{port}/api/orders");
    let body =
        json!({ "currency": "KRW", "items": [{ "sku": "TICKET-STD", "quantity": 2, "unitPrice": 15000 }] });
    let one = |client: reqwest::Client, url: String, token: String, body: serde_json::Value| async move {
        let started = Instant::now();
        let ok = client
            .post(&url)
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .map(|r| r.status() == reqwest::StatusCode::CREATED)
            .unwrap_or(false);
        (ok, started.elapsed().as_secs_f64() * 1000.0)
    };
    // Warm up connections and caches.
    for _ in 0..50 {
        one(client.clone(), url.clone(), token.clone(), body.clone()).await;
    }
    println!("orders: POST /api/orders on PostgreSQL, mock providers, {seconds}s per level");
    println!("| concurrency | orders/s | p50 ms | p99 ms | errors |\n|---:|---:|---:|---:|---:|");
    let mut results = Vec::new();
    let mut saturation = 0.0f64;
    for c in levels.split(',').filter_map(|c| c.trim().parse::<usize>().ok()) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut tasks = Vec::new();
        for _ in 0..c {
            let (client, url, token, body) = (client.clone(), url.clone(), token.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut samples = Vec::new();
                let mut errors = 0;
                while Instant::now() < deadline {
                    let (ok, ms) = one(client.clone(), url.clone(), token.clone(), body.clone()).await;
                    if ok { samples.push(ms) } else { errors += 1 }
                }
                (samples, errors)
            }));
        }
        let (mut all, mut errors) = (Vec::new(), 0);
        for t in tasks {
            let (s, e) = t.await?;
            all.extend(s);
            errors += e;
        }
        all.sort_by(f64::total_cmp);
        let rate = all.len() as f64 / seconds as f64;
        saturation = saturation.max(rate);
        println!(
            "| {c} | {rate:.0} | {:.1} | {:.1} | {errors} |",
            percentile(&all, 50.0),
            percentile(&all, 99.0)
        );
        results.push(json!({ "concurrency": c, "ordersPerSecond": rate, "p50": percentile(&all, 50.0), "p99": percentile(&all, 99.0), "errors": errors }));
    }
    // Open loop at half of saturation: latency when not overloaded.
    let target = (saturation / 2.0).max(1.0);
    let interval = Duration::from_secs_f64(1.0 / target);
    let samples: Arc<Mutex<Vec<f64>>> = Arc::default();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut handles = Vec::new();
    while Instant::now() < deadline {
        tick.tick().await;
        let (client, url, token, body, samples) =
            (client.clone(), url.clone(), token.clone(), body.clone(), samples.clone());
        handles.push(tokio::spawn(async move {
            let (ok, ms) = one(client, url, token, body).await;
            if ok {
                samples.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
            }
        }));
    }
    for h in handles {
        h.await?;
    }
    let mut half = samples.lock().unwrap_or_else(|e| e.into_inner()).clone();
    half.sort_by(f64::total_cmp);
    println!(
        "| open loop at {target:.0}/s (50 % of saturation) | {:.0} | {:.1} | {:.1} | |",
        half.len() as f64 / seconds as f64,
        percentile(&half, 50.0),
        percentile(&half, 99.0)
    );
    let tps = pgbench_tps(seconds)?;
    println!(
        "\npgbench (TPC-B-like, scale 10, 8 clients, {seconds}s): {tps:.0} tps; saturation {saturation:.0} orders/s = {:.3} orders per pgbench transaction",
        saturation / tps
    );
    write_json(
        "orders",
        &json!({
            "levels": results, "saturation": saturation,
            "halfSaturation": { "rate": target, "p50": percentile(&half, 50.0), "p99": percentile(&half, 99.0) },
            "pgbenchTps": tps, "ordersPerPgbenchTps": saturation / tps,
        }),
    )?;
    fixture.drop_all().await;
    Ok(())
}

/// Seeds `n` READY rows straight in SQL (the fast way to build a large backlog).
async fn seed_sql(db: &DatabaseConnection, n: usize) -> Result<(), BoxError> {
    let payload = envelope(EventId::new(), "backlog").replace('\'', "''");
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(100_000);
        db.execute_unprepared(&format!(
            "INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, routing_key, payload, \
               status, retry_count, created_at, version, lane) \
             SELECT gen_random_uuid(), 'order', 'agg-' || g, 'order.completed', 'order.completed', '{payload}', \
               'READY', 0, now(), 1, g % 16 FROM generate_series({}, {}) g",
            done + 1,
            done + chunk
        ))
        .await?;
        done += chunk;
    }
    db.execute_unprepared("ANALYZE outbox_events").await?;
    Ok(())
}

fn rss_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn backlog_scenario(big: usize, small: usize, batch: usize) -> Result<(), BoxError> {
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

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let cli = Cli::parse();
    startup::install_tls_provider();
    match cli.scenario {
        Scenario::Relay { events, workers, window, batch } => {
            relay_scenario(events, &workers, window, batch).await
        }
        Scenario::Latency { rate, seconds, runs, max_p99_ms } => {
            latency_gate(rate, seconds, runs, max_p99_ms).await
        }
        Scenario::Orders { levels, seconds } => orders_scenario(&levels, seconds).await,
        Scenario::Horizon { rate, seconds } => horizon_scenario(rate, seconds).await,
        Scenario::Soak { minutes, rate } => soak::soak(minutes, rate).await,
        Scenario::Backlog { big, small, batch } => backlog_scenario(big, small, batch).await,
    }
}
