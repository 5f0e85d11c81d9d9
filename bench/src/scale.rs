//! The scale run (docs/scaling.md): the service as it is deployed — 2 `app serve` and 3
//! `app worker` processes (each worker relaying outbox lanes and consuming the meeting
//! queues) on one PostgreSQL and one RabbitMQ — under a sustained mixed load: HTTP orders
//! at a fixed rate spread over both servers, and meeting registrations over AMQP. It
//! reports throughput, HTTP latency, the outbox's backlog, CPU and database commits per
//! order, events per order, and checks that nothing was lost: every outbox event reached
//! the broker, every registration became exactly one order. On a RabbitMQ cluster:
//! `BENCH_AMQP_URL` (a node, for the harness), `BENCH_AMQP_URLS` (every node, for the app)
//! and `BENCH_QUEUE_TYPE=quorum`.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::BasicProperties;
use amqprs::channel::{BasicPublishArguments, QueueDeclareArguments};
use orchestrator::adapters::messaging::amqp::connect;
use sea_orm::{ConnectionTrait, DatabaseConnection, Statement};
use serde_json::json;

use crate::fixture::{
    BoxError, Delivery, Fixture, HARNESS_APPLICATION_NAME, amqp_url, app_token, collect_ids, command,
    cpu_seconds, delivery, percentile, unpublished, wait_live, write_json,
};

/// CPU seconds (user + system) of the given processes, PostgreSQL's and the broker's.
fn cpu(pids: &[u32]) -> (f64, f64, f64) {
    let (mut app, mut postgres, mut broker) = (0.0, 0.0, 0.0);
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if pids.contains(&pid) {
            app += cpu_seconds(&stat);
        } else if command(&stat).starts_with("postgres") {
            postgres += cpu_seconds(&stat);
        } else if command(&stat).starts_with("beam") {
            broker += cpu_seconds(&stat);
        }
    }
    (app, postgres, broker)
}

/// CPU seconds of the harness's own PostgreSQL sessions (its backlog samples, counts and
/// this very look-up), which name themselves [`HARNESS_APPLICATION_NAME`]. What the harness
/// asks is not the service's cost.
async fn harness_cpu(db: &DatabaseConnection) -> Result<f64, BoxError> {
    let rows = db
        .query_all_raw(Statement::from_sql_and_values(
            db.get_database_backend(),
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            [HARNESS_APPLICATION_NAME.into()],
        ))
        .await?;
    let mut seconds = 0.0;
    for pid in rows.iter().filter_map(|r| r.try_get_by_index::<i32>(0).ok()) {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            seconds += cpu_seconds(&stat);
        }
    }
    Ok(seconds)
}

async fn scalar(db: &DatabaseConnection, sql: &str) -> Result<i64, BoxError> {
    let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await?;
    Ok(row.and_then(|r| r.try_get_by_index::<i64>(0).ok()).unwrap_or(0))
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub async fn scale_scenario(
    seconds: u64,
    rate: u32,
    registrations: u32,
    serves: usize,
    workers: usize,
) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let app = std::env::current_exe()?.with_file_name("app");
    if !app.exists() {
        return Err(format!("{} not found: run `cargo build --release` first", app.display()).into());
    }
    let id = fixture.id.clone();
    let meeting_exchange = format!("bench.meeting.{id}");
    let register_queue = format!("bench.register.{id}");
    // A cluster: `BENCH_AMQP_URLS` (all its nodes, for the app; `BENCH_AMQP_URL` is the node
    // the harness itself uses) and `BENCH_QUEUE_TYPE=quorum`.
    let broker = match std::env::var("BENCH_AMQP_URLS") {
        Ok(urls) => ("APP__BROKER__URLS".to_owned(), urls),
        Err(_) => ("APP__BROKER__URL".to_owned(), amqp_url()),
    };
    let queue_type = std::env::var("BENCH_QUEUE_TYPE").unwrap_or_else(|_| "classic".into());
    let logs = std::env::var("BENCH_LOGS").ok().filter(|d| !d.is_empty());
    if let Some(dir) = &logs {
        std::fs::create_dir_all(dir)?;
    }
    let env: Vec<(String, String)> = vec![
        ("APP__DATABASE__URL".into(), fixture.db_url.clone()),
        broker,
        ("APP__BROKER__QUEUE_TYPE".into(), queue_type.clone()),
        ("APP__BROKER__EXCHANGE".into(), fixture.exchange.clone()),
        ("APP__BROKER__MEETING_EXCHANGE".into(), meeting_exchange.clone()),
        ("APP__BROKER__DEAD_LETTER_EXCHANGE".into(), format!("bench.dlx.{id}")),
        ("APP__BROKER__REGISTER_QUEUE".into(), register_queue.clone()),
        ("APP__BROKER__CANCEL_QUEUE".into(), format!("bench.cancel.{id}")),
        ("APP__BROKER__MEETING_DELETED_QUEUE".into(), format!("bench.deleted.{id}")),
        ("APP__PAYMENT__PROVIDER".into(), "mock".into()),
        ("APP__SETTLEMENT__CHANNEL".into(), "simulated".into()),
        ("APP__NOTIFICATION__CHANNEL".into(), "simulated".into()),
        (
            "APP__AUTH__KEYS".into(),
            r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                .into(),
        ),
        ("RUST_LOG".into(), if logs.is_some() { "warn" } else { "error" }.into()),
    ];
    let mut spawned = 0usize;
    let mut spawn = |verb: &str, port: u16| -> Result<Child, BoxError> {
        spawned += 1;
        // `BENCH_LOGS=DIR`: each process's WARN lines in DIR/<verb>-<n>.log (what a run's
        // duplicates or errors came from); otherwise nothing is kept.
        let stderr = match &logs {
            Some(dir) => Stdio::from(std::fs::File::create(format!("{dir}/{verb}-{spawned}.log"))?),
            None => Stdio::null(),
        };
        Ok(Command::new(&app)
            .arg(verb)
            .envs(env.iter().cloned())
            .env("APP__HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("APP__WORKER__HTTP__BIND", format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()?)
    };
    let free_port =
        || -> Result<u16, BoxError> { Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()) };
    let mut children = Killed(Vec::new());
    let mut http_ports = Vec::new();
    for _ in 0..serves {
        let port = free_port()?;
        children.0.push(spawn("serve", port)?);
        http_ports.push(port);
    }
    let mut worker_ports = Vec::new();
    for _ in 0..workers {
        let port = free_port()?;
        children.0.push(spawn("worker", port)?);
        worker_ports.push(port);
    }
    let pids: Vec<u32> = children.0.iter().map(Child::id).collect();
    let token = app_token(&app, &env, "scale")?;
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    for port in &http_ports {
        wait_live(&client, *port).await?;
    }
    // Every event the relays deliver, straight from the broker.
    let (consumer, received) = collect_ids(&fixture, "scale").await?;
    // The meeting service: waits for the workers' consumers, then publishes.
    let meeting = connect(&fixture.endpoint, "scale-meeting-service").await?;
    let ready = Instant::now();
    loop {
        let probe = meeting.open_channel(None).await?;
        let state =
            probe.queue_declare(QueueDeclareArguments::new(&register_queue).passive(true).finish()).await;
        let _ = probe.close().await;
        if matches!(state, Ok(Some((_, _, consumers))) if consumers as usize >= workers) {
            break;
        }
        if ready.elapsed() > Duration::from_secs(30) {
            return Err("the workers' meeting consumers did not attach".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let publisher = meeting.open_channel(None).await?;

    let commits = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    // The idle baseline: what the five processes, PostgreSQL and the broker spend with no
    // load (workers' polls, lease renewals, recovery loops), per second.
    let idle_seconds = 10.0;
    let (idle_cpu_before, idle_commits_before) = (cpu(&pids), scalar(&fixture.db, commits).await?);
    tokio::time::sleep(Duration::from_secs_f64(idle_seconds)).await;
    let (idle_cpu_after, idle_commits_after) = (cpu(&pids), scalar(&fixture.db, commits).await?);
    let idle = (
        (idle_cpu_after.0 - idle_cpu_before.0) / idle_seconds,
        (idle_cpu_after.1 - idle_cpu_before.1) / idle_seconds,
        (idle_cpu_after.2 - idle_cpu_before.2) / idle_seconds,
        (idle_commits_after - idle_commits_before) as f64 / idle_seconds,
    );
    let commits_before = scalar(&fixture.db, commits).await?;
    let cpu_before = cpu(&pids);
    let harness_before = harness_cpu(&fixture.db).await?;
    let latencies: Arc<Mutex<Vec<f64>>> = Arc::default();
    let stats: Arc<Mutex<(u64, u64, u64)>> = Arc::default(); // created, 503, other
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let http_load = {
        let (client, token, stats, latencies) =
            (client.clone(), token.clone(), stats.clone(), latencies.clone());
        let ports = http_ports.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate.max(1))));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let body =
                json!({ "currency": "KRW", "items": [{ "sku": "SCALE", "quantity": 1, "unitPrice": 100 }] });
            let mut n = 0usize;
            let mut inflight = Vec::new();
            while Instant::now() < deadline {
                tick.tick().await;
                let url = format!("http://127.0.0.1:{}/api/orders", ports[n % ports.len()]);
                n += 1;
                let (client, token, body, stats, latencies) =
                    (client.clone(), token.clone(), body.clone(), stats.clone(), latencies.clone());
                inflight.push(tokio::spawn(async move {
                    let sent = Instant::now();
                    let status = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    let ms = sent.elapsed().as_secs_f64() * 1000.0;
                    let mut s = stats.lock().unwrap_or_else(|e| e.into_inner());
                    match status {
                        Ok(201) => {
                            s.0 += 1;
                            latencies.lock().unwrap_or_else(|e| e.into_inner()).push(ms);
                        }
                        Ok(503) => s.1 += 1,
                        _ => s.2 += 1,
                    }
                }));
            }
            for request in inflight {
                let _ = request.await;
            }
        })
    };
    let mut published_registrations = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(registrations.max(1))));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut max_backlog = 0i64;
    let mut last_sample = Instant::now();
    while registrations > 0 && Instant::now() < deadline {
        tick.tick().await;
        let i = published_registrations;
        let body = json!({ "eventId": format!("scale-{i}"), "meetingId": format!("m-{}", i / 50),
            "userId": format!("u-{i}"), "amount": 1000, "currency": "KRW" });
        let mut props = BasicProperties::default();
        props.with_content_type("application/json").with_persistence(true);
        publisher
            .basic_publish(
                props.finish(),
                body.to_string().into_bytes(),
                BasicPublishArguments::new(&meeting_exchange, "meeting.participant.registered"),
            )
            .await?;
        published_registrations += 1;
        if last_sample.elapsed() > Duration::from_secs(2) {
            max_backlog = max_backlog.max(unpublished(&fixture.db).await?);
            last_sample = Instant::now();
        }
    }
    while Instant::now() < deadline {
        max_backlog = max_backlog.max(unpublished(&fixture.db).await?);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    http_load.await?;
    let load_seconds = started.elapsed().as_secs_f64();
    // Drain: every order finished, every registration an order, every event published.
    let drain_started = Instant::now();
    let unfinished = "SELECT COUNT(*) FROM orders WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')";
    let meeting_orders = "SELECT COUNT(*) FROM orders WHERE meeting_id LIKE 'm-%'";
    while unpublished(&fixture.db).await? > 0
        || scalar(&fixture.db, unfinished).await? > 0
        || scalar(&fixture.db, meeting_orders).await? < published_registrations as i64
    {
        if drain_started.elapsed() > Duration::from_secs(180) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let drained_in = drain_started.elapsed().as_secs_f64();
    let measured_seconds = started.elapsed().as_secs_f64();
    let harness_after = harness_cpu(&fixture.db).await?;
    let cpu_after = cpu(&pids);
    let commits_after = scalar(&fixture.db, commits).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let Delivery { events, delivered, lost, duplicated } = delivery(&fixture.db, &received).await?;
    // What the workers counted as sent again (`outbox_resent_total`, by cause): every
    // duplicate above should be among them (docs/reliability.md).
    let mut resent: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    for port in &worker_ports {
        let text = client.get(format!("http://127.0.0.1:{port}/metrics")).send().await?.text().await?;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("outbox_resent_total{cause=\"") else { continue };
            let Some((cause, value)) = rest.split_once('"') else { continue };
            let n: f64 = value.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0);
            *resent.entry(cause.to_owned()).or_default() += n;
        }
    }
    let resent_total = resent.values().fold(0.0, |sum, n| sum + n);
    let (created, unavailable, other) = *stats.lock().unwrap_or_else(|e| e.into_inner());
    let orders = scalar(&fixture.db, "SELECT COUNT(*) FROM orders").await?;
    let meeting_made = scalar(&fixture.db, meeting_orders).await?;
    let doubled = scalar(
        &fixture.db,
        "SELECT COUNT(*) FROM (SELECT customer_id FROM orders WHERE meeting_id LIKE 'm-%' \
         GROUP BY meeting_id, customer_id HAVING COUNT(*) > 1) d",
    )
    .await?;
    let left = scalar(&fixture.db, unfinished).await?;
    let mut sorted = latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    sorted.sort_by(f64::total_cmp);
    let per_order = |seconds: f64| seconds * 1000.0 / orders.max(1) as f64;
    let (app_cpu, pg_cpu, broker_cpu) =
        (cpu_after.0 - cpu_before.0, cpu_after.1 - cpu_before.1, cpu_after.2 - cpu_before.2);
    let pg_service = pg_cpu - (harness_after - harness_before);
    // Marginal: what the load added on top of the idle baseline.
    let (app_marginal, pg_marginal, broker_marginal) = (
        app_cpu - idle.0 * measured_seconds,
        pg_cpu - idle.1 * measured_seconds,
        broker_cpu - idle.2 * measured_seconds,
    );
    let events_per_order = events as f64 / orders.max(1) as f64;
    let commits_per_order = (commits_after - commits_before) as f64 / orders.max(1) as f64;
    let marginal_commits_per_order =
        ((commits_after - commits_before) as f64 - idle.3 * measured_seconds) / orders.max(1) as f64;
    println!(
        "scale: {serves} serve + {workers} worker processes, {rate} HTTP orders/s + {registrations} registrations/s for {seconds} s, {queue_type} queues"
    );
    println!("| measure | value |\n|---|---:|");
    for (k, v) in [
        ("HTTP orders created", format!("{created} ({:.0}/s)", created as f64 / load_seconds)),
        ("HTTP 503 / other errors", format!("{unavailable} / {other}")),
        (
            "registrations published",
            format!("{published_registrations} ({:.0}/s)", published_registrations as f64 / load_seconds),
        ),
        ("orders from registrations", format!("{meeting_made} (duplicates: {doubled})")),
        ("HTTP p50 / p99", format!("{:.1} / {:.1} ms", percentile(&sorted, 50.0), percentile(&sorted, 99.0))),
        ("outbox backlog, max sampled", format!("{max_backlog} events")),
        ("drained after the load", format!("{drained_in:.1} s")),
        (
            "events / delivered / lost / duplicated",
            format!("{} / {} / {lost} / {duplicated}", events, delivered),
        ),
        (
            "events sent again, counted by the workers (outbox_resent_total)",
            format!("{resent_total:.0} {resent:?}"),
        ),
        ("orders unfinished", left.to_string()),
        ("events per order", format!("{events_per_order:.2}")),
        (
            "database transactions per order (xact_commit, read-only included): all / above idle",
            format!("{commits_per_order:.1} / {marginal_commits_per_order:.1}"),
        ),
        (
            "idle: CPU of app / PostgreSQL / RabbitMQ per second, transactions per second",
            format!(
                "{:.0} / {:.0} / {:.0} ms, {:.0}",
                idle.0 * 1000.0,
                idle.1 * 1000.0,
                idle.2 * 1000.0,
                idle.3
            ),
        ),
        (
            "CPU per order, all: app / PostgreSQL / RabbitMQ",
            format!("{:.2} / {:.2} / {:.2} ms", per_order(app_cpu), per_order(pg_cpu), per_order(broker_cpu)),
        ),
        (
            "PostgreSQL CPU per order without the harness's own sessions",
            format!("{:.2} ms", per_order(pg_service)),
        ),
        (
            "CPU per order above idle: app / PostgreSQL / RabbitMQ",
            format!(
                "{:.2} / {:.2} / {:.2} ms",
                per_order(app_marginal),
                per_order(pg_marginal),
                per_order(broker_marginal)
            ),
        ),
    ] {
        println!("| {k} | {v} |");
    }
    write_json(
        "scale",
        &json!({ "serves": serves, "workers": workers, "rate": rate, "registrationsRate": registrations,
            "seconds": seconds, "queueType": queue_type, "created": created, "unavailable": unavailable, "otherErrors": other,
            "registrations": published_registrations, "meetingOrders": meeting_made, "duplicateOrders": doubled,
            "p50Ms": percentile(&sorted, 50.0), "p99Ms": percentile(&sorted, 99.0), "maxBacklog": max_backlog,
            "drainSeconds": drained_in, "events": events, "delivered": delivered, "lost": lost,
            "duplicated": duplicated, "resent": resent_total, "resentByCause": resent, "unfinished": left, "eventsPerOrder": events_per_order,
            "commitsPerOrder": commits_per_order, "marginalCommitsPerOrder": marginal_commits_per_order,
            "idle": { "appCpuMsPerSecond": idle.0 * 1000.0, "postgresCpuMsPerSecond": idle.1 * 1000.0,
            "brokerCpuMsPerSecond": idle.2 * 1000.0, "transactionsPerSecond": idle.3 },
            "cpuMsPerOrder": { "app": per_order(app_cpu), "postgres": per_order(pg_cpu), "broker": per_order(broker_cpu) },
            "postgresCpuMsPerOrderWithoutHarness": per_order(pg_service),
            "marginalCpuMsPerOrder": { "app": per_order(app_marginal), "postgres": per_order(pg_marginal),
            "broker": per_order(broker_marginal) } }),
    )?;
    drop(children);
    let _ = consumer.close().await;
    // The meeting side's objects (the workers declared them).
    for q in ["register", "cancel", "deleted"] {
        for name in [format!("bench.{q}.{id}"), format!("bench.{q}.{id}.dlq")] {
            let _ = publisher.queue_delete(amqprs::channel::QueueDeleteArguments::new(&name)).await;
        }
    }
    for name in [meeting_exchange.clone(), format!("bench.dlx.{id}")] {
        let _ = publisher.exchange_delete(amqprs::channel::ExchangeDeleteArguments::new(&name)).await;
    }
    let _ = meeting.close().await;
    fixture.drop_all().await;
    if lost > 0 || doubled > 0 || left > 0 || meeting_made < published_registrations as i64 {
        return Err(format!(
            "not whole: lost {lost}, doubled orders {doubled}, unfinished {left}, registrations {published_registrations} -> orders {meeting_made}"
        )
        .into());
    }
    Ok(())
}
