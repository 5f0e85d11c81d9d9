//! Shared by every scenario: the per-run database and broker objects, seeding, CPU accounting from /proc, percentiles and the JSON results.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::channel::{
    BasicConsumeArguments, Channel, ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments,
    QueueDeclareArguments, QueueDeleteArguments, QueuePurgeArguments,
};
use chrono::Utc;
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect};
use orchestrator::adapters::persistence::{self, SeaOrmStore};
use orchestrator::application::ports::{Changes, NewOutboxEvent, OutboxOperations, UnitOfWork};
use orchestrator::config::Settings;
use orchestrator::domain::ids::EventId;
use orchestrator::domain::outbox::OutboxStatus;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};
use serde_json::json;
use tokio::sync::Notify;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) fn admin_url() -> String {
    std::env::var("BENCH_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub(crate) fn amqp_url() -> String {
    std::env::var("BENCH_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// `application_name` of the harness's own PostgreSQL sessions.
pub(crate) const HARNESS_APPLICATION_NAME: &str = "bench";

/// A database and broker objects that exist for one run.
pub(crate) struct Fixture {
    pub(crate) id: String,
    pub(crate) db_url: String,
    pub(crate) db: DatabaseConnection,
    pub(crate) exchange: String,
    pub(crate) queue: String,
    pub(crate) endpoint: AmqpEndpoint,
    pub(crate) channel: Channel,
    pub(crate) _connection: amqprs::connection::Connection,
    /// With `--broker kafka`: the bootstrap list and this run's topic (the app publishes
    /// there instead of RabbitMQ).
    pub(crate) kafka: Option<(String, String)>,
}

impl Fixture {
    pub(crate) async fn create() -> Result<Fixture, BoxError> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let admin = Database::connect(admin_url()).await?;
        admin.execute_unprepared(&format!("CREATE DATABASE bench_{id}")).await?;
        admin.close().await?;
        let base = admin_url();
        let server = base.rsplit_once('/').map_or(base.as_str(), |(s, _)| s).to_owned();
        let db_url = format!("{server}/bench_{id}");
        // Named, so that `bench scale` can tell the harness's own sessions from the service's.
        let db = persistence::connect(&format!("{db_url}?application_name={HARNESS_APPLICATION_NAME}"), 16)
            .await?;
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
        Ok(Fixture {
            id,
            db_url,
            db,
            exchange,
            queue,
            endpoint,
            channel,
            _connection: connection,
            kafka: None,
        })
    }

    /// The app's settings for a scenario: `APP__*` variables of the bench's own environment
    /// first (any setting can be measured, e.g. `APP__OUTBOX__TRICKLE_WAIT=0ms`), then the
    /// fixture's database and broker, then the scenario's `extra` (later ones win).
    pub(crate) fn settings(&self, extra: &[(&str, &str)]) -> Result<Settings, BoxError> {
        let mut env: Vec<(String, String)> =
            std::env::vars().filter(|(k, _)| k.starts_with("APP__")).collect();
        env.extend([
            ("APP__DATABASE__URL".into(), self.db_url.clone()),
            ("APP__DATABASE__MAX_CONNECTIONS".into(), "16".into()),
            ("APP__WORKER__EMBEDDED".into(), "false".into()),
            ("APP__HTTP__BIND".into(), "127.0.0.1:0".into()),
            ("APP__WORKER__HTTP__BIND".into(), "127.0.0.1:0".into()),
            ("APP__PAYMENT__PROVIDER".into(), "mock".into()),
            ("APP__SETTLEMENT__CHANNEL".into(), "simulated".into()),
            ("APP__NOTIFICATION__CHANNEL".into(), "simulated".into()),
            (
                "APP__AUTH__KEYS".into(),
                r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                    .into(),
            ),
        ]);
        match &self.kafka {
            None => {
                env.push(("APP__BROKER__URL".into(), amqp_url()));
                env.push(("APP__BROKER__EXCHANGE".into(), self.exchange.clone()));
            }
            Some((brokers, topic)) => {
                env.push(("APP__BROKER__KIND".into(), "kafka".into()));
                env.push(("APP__BROKER__KAFKA__BROKERS".into(), brokers.clone()));
                env.push(("APP__BROKER__KAFKA__TOPIC".into(), topic.clone()));
            }
        }
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        Ok(Settings::load_from(None, env)?)
    }

    pub(crate) async fn published(&self) -> Result<i64, BoxError> {
        Ok(outbox_counts(&self.db).await?.get(&OutboxStatus::Published).copied().unwrap_or(0))
    }

    pub(crate) async fn reset(&self) -> Result<(), BoxError> {
        self.db.execute_unprepared("TRUNCATE outbox_events").await?;
        self.channel.queue_purge(QueuePurgeArguments::new(&self.queue)).await?;
        Ok(())
    }

    pub(crate) async fn drop_all(self) {
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
pub(crate) async fn outbox_counts(db: &DatabaseConnection) -> Result<HashMap<OutboxStatus, i64>, BoxError> {
    let store = persistence::SeaOrmOutboxStore::new(db.clone(), Arc::new(Notify::new()));
    Ok(store.stats().await?.by_status.into_iter().collect())
}

/// An envelope of about 500 bytes, like a real order event.
pub(crate) fn envelope(event_id: EventId, aggregate: &str) -> String {
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

pub(crate) fn new_event(aggregate: &str) -> NewOutboxEvent {
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

/// The traffic a scenario seeds: the saga's own events (the default), or one synthetic
/// ~560 B event per aggregate (how the relay was first measured; kept to compare).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shape {
    /// Envelopes made by the service's event writer, in the saga's commit order: per order
    /// `payment.approved` then `order.completed`, and for one order in five a partial
    /// refund after it (`payment.refunded`): 2.2 events per aggregate on average.
    Saga,
    /// One event per aggregate.
    Synthetic,
}

/// One order's events as its saga commits them, one list per commit, oldest first.
pub(crate) fn saga_commits(i: usize) -> Vec<Vec<NewOutboxEvent>> {
    use orchestrator::application::envelopes::EventWriter;
    use orchestrator::application::ports::{OrderContext, OrderRecord};
    use orchestrator::domain::ids::OrderId;
    use orchestrator::domain::order::{NewOrder, NewOrderItem, Order, OrderSource};
    use orchestrator::domain::payment::Payment;
    let now = Utc::now();
    // A meeting's registration, with the platform's numeric ids: under `momo` every saga's
    // replies are encoded as the platform's messages, not sent native (docs/spec.md §12).
    let new = NewOrder {
        customer_id: format!("{}", 1_000_000 + i % 10_000),
        source: OrderSource::Meeting,
        meeting_id: Some(format!("{}", 100 + i % 1_000)),
        currency: "KRW".into(),
        items: vec![NewOrderItem { sku: "TICKET-STD".into(), quantity: 2, unit_price: 15_000 }],
    };
    // The domain's own transitions make the events; nothing here can be refused (a fixed,
    // valid order): a failure would be a bug in the harness, reported as an empty saga.
    let run = || -> Option<Vec<Vec<NewOutboxEvent>>> {
        let mut order = Order::place(OrderId::new(), new, now).ok()?;
        let correlation = uuid::Uuid::new_v4().to_string();
        let record = |order: &Order, payment: &Payment| OrderRecord {
            order: order.clone(),
            payment: Some(payment.clone()),
            refunds: Vec::new(),
            settlement: None,
            notification: None,
            steps: Vec::new(),
            context: OrderContext {
                scenario: Default::default(),
                correlation_id: Some(correlation.clone()),
                causation_id: Some(correlation.clone()),
                customer_email: None,
                description: None,
            },
        };
        let mut payment = Payment::request(order.id, 1, order.total, now);
        let approved = payment.approve(format!("sim-{}", uuid::Uuid::now_v7().simple()), now).ok()?;
        let order_approved = order.approve_payment(now).ok()?;
        let before = record(&order, &payment);
        let mut first = EventWriter::new(&order, &before, now);
        first.payment(&payment, &approved).order(&order_approved);
        let first = first.finish();
        order.request_settlement(now).ok()?;
        let completed = order.complete(now).ok()?;
        let before = record(&order, &payment);
        let mut second = EventWriter::new(&order, &before, now);
        second.order(&completed);
        let mut commits = vec![first, second.finish()];
        if i.is_multiple_of(5) {
            let mut refund = payment.begin_refund(Some(15_000), "one ticket", "bench", None, now).ok()?;
            let refunded = payment.refund(&mut refund, Some("tk".into()), now).ok()?;
            let before = record(&order, &payment);
            let mut third = EventWriter::new(&order, &before, now);
            third.payment(&payment, &refunded);
            commits.push(third.finish());
        }
        Some(commits)
    };
    run().unwrap_or_default()
}

/// `n` events of `shape`, each list one commit, in an order that keeps every aggregate's
/// commits in its saga's order.
pub(crate) fn traffic(shape: Shape, n: usize) -> Vec<Vec<NewOutboxEvent>> {
    match shape {
        Shape::Synthetic => (0..n).map(|_| vec![new_event(&uuid::Uuid::now_v7().to_string())]).collect(),
        Shape::Saga => {
            let mut commits = Vec::new();
            let mut count = 0;
            let mut i = 0;
            while count < n {
                for commit in saga_commits(i) {
                    if count >= n {
                        break;
                    }
                    let commit: Vec<NewOutboxEvent> = commit.into_iter().take(n - count).collect();
                    count += commit.len();
                    commits.push(commit);
                }
                i += 1;
            }
            commits
        }
    }
}

/// Seeds `n` events of `shape` from `producers` concurrent producers, each committing its
/// orders' saga steps one commit each, in step order (step 1 of 100 orders, then their step
/// 2, ...: distinct commits per aggregate, as the saga makes them, at a seeding rate that
/// keeps a million events within minutes).
pub(crate) async fn seed_shaped(
    db: &DatabaseConnection,
    shape: Shape,
    n: usize,
    producers: usize,
) -> Result<(), BoxError> {
    if shape == Shape::Synthetic {
        return seed(db, n).await;
    }
    let orders: Vec<Vec<Vec<NewOutboxEvent>>> = {
        let mut all = Vec::new();
        let mut count = 0;
        let mut i = 0;
        while count < n {
            let mut saga = saga_commits(i);
            let mut kept = Vec::new();
            for commit in saga.drain(..) {
                if count >= n {
                    break;
                }
                let commit: Vec<NewOutboxEvent> = commit.into_iter().take(n - count).collect();
                count += commit.len();
                kept.push(commit);
            }
            all.push(kept);
            i += 1;
        }
        all
    };
    let per = orders.len().div_ceil(producers.max(1));
    let mut tasks = Vec::new();
    let mut rest = orders;
    while !rest.is_empty() {
        let mine: Vec<Vec<Vec<NewOutboxEvent>>> = rest.drain(..per.min(rest.len())).collect();
        let uow = SeaOrmStore::new(db.clone(), Arc::new(Notify::new()));
        tasks.push(tokio::spawn(async move {
            for group in mine.chunks(100) {
                let steps = group.iter().map(Vec::len).max().unwrap_or(0);
                for step in 0..steps {
                    let outbox: Vec<NewOutboxEvent> =
                        group.iter().filter_map(|saga| saga.get(step)).flatten().cloned().collect();
                    uow.commit(Changes { outbox, ..Default::default() }).await?;
                }
            }
            Ok::<(), orchestrator::application::ports::RepoError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

pub(crate) async fn seed(db: &DatabaseConnection, n: usize) -> Result<(), BoxError> {
    let uow = SeaOrmStore::new(db.clone(), Arc::new(Notify::new()));
    let mut left = n;
    while left > 0 {
        let chunk = left.min(1000);
        let outbox = (0..chunk).map(|_| new_event(&uuid::Uuid::now_v7().to_string())).collect();
        uow.commit(Changes { outbox, ..Default::default() }).await?;
        left -= chunk;
    }
    Ok(())
}

/// CPU seconds (utime + stime, clock ticks of 1/100 s on Linux) of a `/proc/<pid>/stat` line.
pub(crate) fn cpu_seconds(stat: &str) -> f64 {
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let get = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (get(11) + get(12)) / 100.0
}

/// The command name of a `/proc/<pid>/stat` line.
pub(crate) fn command(stat: &str) -> &str {
    stat.split_once('(').and_then(|(_, r)| r.split_once(')')).map(|(c, _)| c).unwrap_or("")
}

/// CPU seconds used so far by the outbox relay's own PostgreSQL sessions on `db`'s database
/// (`application_name` = the relay pool's), per backend pid: what the relay costs the
/// database, apart from the producers' commits and the server's background work.
pub(crate) async fn relay_sessions_cpu(db: &DatabaseConnection) -> Result<HashMap<i32, f64>, BoxError> {
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
            [persistence::OUTBOX_APPLICATION_NAME.into()],
        ))
        .await?;
    let mut cpu = HashMap::new();
    for row in rows {
        let pid: i32 = row.try_get("", "pid")?;
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            cpu.insert(pid, cpu_seconds(&stat));
        }
    }
    Ok(cpu)
}

/// Milliseconds of CPU per 1 000 events the relay's sessions used between two samples of
/// [`relay_sessions_cpu`] (a session opened in between counts whole; one closed in between
/// is lost, which the pool's idle timeout of minutes makes rare).
pub(crate) fn relay_sessions_ms_per_thousand(
    before: &HashMap<i32, f64>,
    after: &HashMap<i32, f64>,
    events: usize,
) -> f64 {
    let used: f64 = after.iter().map(|(pid, s)| s - before.get(pid).copied().unwrap_or(0.0)).sum();
    used * 1000.0 / (events as f64 / 1000.0)
}

/// CPU seconds used so far by the broker (RabbitMQ's `beam`, or Tansu), PostgreSQL (all its processes) and this process.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) broker: f64,
    pub(crate) postgres: f64,
    pub(crate) app: f64,
}

impl Cpu {
    pub(crate) fn now() -> Cpu {
        let mut cpu = Cpu::default();
        let me = std::process::id().to_string();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.chars().all(|c| c.is_ascii_digit()) {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            let seconds = cpu_seconds(&stat);
            if name == me {
                cpu.app += seconds;
            } else if command(&stat).starts_with("beam") || command(&stat).starts_with("tansu") {
                cpu.broker += seconds;
            } else if command(&stat).starts_with("postgres") {
                cpu.postgres += seconds;
            }
        }
        cpu
    }

    /// CPU milliseconds per 1 000 events since `before`.
    pub(crate) fn per_thousand(&self, before: &Cpu, events: usize) -> String {
        let k = events as f64 / 1000.0;
        format!(
            "broker {:.0} ms, postgres {:.0} ms, app {:.0} ms",
            (self.broker - before.broker) * 1000.0 / k,
            (self.postgres - before.postgres) * 1000.0 / k,
            (self.app - before.app) * 1000.0 / k
        )
    }
}

pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

pub(crate) fn write_json(name: &str, value: &serde_json::Value) -> Result<(), BoxError> {
    std::fs::create_dir_all("target/bench")?;
    let path = format!("target/bench/{name}.json");
    std::fs::write(&path, serde_json::to_string_pretty(value)?)?;
    println!("\nwritten: {path}");
    Ok(())
}

/// Seeds `n` READY rows straight in SQL (the fast way to build a large backlog).
/// `n` events inserted by SQL (a large backlog in seconds): `Synthetic`, one per aggregate;
/// `Saga`, two per order (`payment.approved`, then `order.completed`) in blocks of 100 orders
/// — each block's first events, then its second ones, as orders committing side by side
/// leave them — each order's two in one lane.
pub(crate) async fn seed_sql(db: &DatabaseConnection, n: usize, shape: Shape) -> Result<(), BoxError> {
    let payload = envelope(EventId::new(), "backlog").replace('\'', "''");
    let (aggregate, event_type) = match shape {
        Shape::Synthetic => ("g".to_owned(), "'order.completed'".to_owned()),
        Shape::Saga => (
            "(((g - 1) / 200) * 100 + ((g - 1) % 200) % 100)".to_owned(),
            "CASE WHEN (g - 1) % 200 < 100 THEN 'payment.approved' ELSE 'order.completed' END".to_owned(),
        ),
    };
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(100_000);
        db.execute_unprepared(&format!(
            "INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, routing_key, payload, \
               status, retry_count, created_at, version, lane) \
             SELECT gen_random_uuid(), 'order', 'agg-' || {aggregate}, {event_type}, {event_type}, '{payload}', \
               'READY', 0, now(), 1, {aggregate} % 16 FROM generate_series({}, {}) g",
            done + 1,
            done + chunk
        ))
        .await?;
        done += chunk;
    }
    db.execute_unprepared("ANALYZE outbox_events").await?;
    Ok(())
}

pub(crate) fn rss_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with(field)).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
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

/// A token from `app token --sub <sub>` run with `env`.
pub(crate) fn app_token(
    app: &std::path::Path,
    env: &[(String, String)],
    sub: &str,
) -> Result<String, BoxError> {
    let out =
        std::process::Command::new(app).args(["token", "--sub", sub]).envs(env.iter().cloned()).output()?;
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// Waits until `app serve` on `port` answers `/health/live` (30 s at most).
pub(crate) async fn wait_live(client: &reqwest::Client, port: u16) -> Result<(), BoxError> {
    let ready = Instant::now();
    while client.get(format!("http://127.0.0.1:{port}/health/live")).send().await.is_err() {
        if ready.elapsed() > Duration::from_secs(30) {
            return Err("app serve did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Every `message_id` delivered to the fixture's queue from now on, straight from the broker.
/// Keep the connection open while collecting.
pub(crate) async fn collect_ids(
    fixture: &Fixture,
    name: &str,
) -> Result<(amqprs::connection::Connection, Arc<Mutex<Vec<String>>>), BoxError> {
    let received: Arc<Mutex<Vec<String>>> = Arc::default();
    let consumer = connect(&fixture.endpoint, &format!("{name}-consumer")).await?;
    let channel = consumer.open_channel(None).await?;
    let (_, mut rx) = channel
        .basic_consume_rx(BasicConsumeArguments::new(&fixture.queue, name).manual_ack(false).finish())
        .await?;
    let sink = received.clone();
    tokio::spawn(async move {
        let _channel = channel;
        while let Some(m) = rx.recv().await {
            if let Some(id) = m.basic_properties.and_then(|p| p.message_id().cloned()) {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            }
        }
    });
    Ok((consumer, received))
}

/// What reached the broker of every event in the outbox.
pub(crate) struct Delivery {
    pub(crate) events: usize,
    pub(crate) delivered: usize,
    pub(crate) lost: usize,
    pub(crate) duplicated: usize,
}

/// Compares the outbox's events with the ids `received`.
pub(crate) async fn delivery(
    db: &DatabaseConnection,
    received: &Mutex<Vec<String>>,
) -> Result<Delivery, BoxError> {
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT event_id::text FROM outbox_events",
        ))
        .await?;
    let expected: HashSet<String> =
        rows.iter().filter_map(|r| r.try_get_by_index::<String>(0).ok()).collect();
    let got = received.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let unique: HashSet<&String> = got.iter().collect();
    Ok(Delivery {
        events: expected.len(),
        delivered: got.len(),
        lost: expected.iter().filter(|id| !unique.contains(id)).count(),
        duplicated: got.len() - unique.len(),
    })
}

/// The fake Toss API (`fake-toss`, built beside the bench: `cargo build --release -p
/// fake-toss`) started as a process on a free port with `secret`, once it answers: the
/// process and its base URL.
pub(crate) async fn start_fake_toss(secret: &str) -> Result<(std::process::Child, String), BoxError> {
    let fake_bin = std::env::current_exe()?.with_file_name("fake-toss");
    if !fake_bin.exists() {
        return Err(format!("{} is missing: cargo build --release -p fake-toss", fake_bin.display()).into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut fake = std::process::Command::new(&fake_bin)
        .env("FAKE_TOSS_BIND", format!("127.0.0.1:{port}"))
        .env("FAKE_TOSS_SECRET_KEY", secret)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    let fake_url = format!("http://127.0.0.1:{port}");
    let ready = std::time::Instant::now();
    while reqwest::get(format!("{fake_url}/__fake/calls")).await.is_err() {
        if ready.elapsed() > std::time::Duration::from_secs(10) {
            let _ = fake.kill();
            return Err("the fake Toss API did not start".into());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok((fake, fake_url))
}
