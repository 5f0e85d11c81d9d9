//! The soak: a steady order rate for many minutes against real processes — `app serve`
//! and `app worker`, the worker's broker traffic through a TCP proxy — with a fault every
//! minute, rotating: SIGKILL of the worker, the database killing the app's connections,
//! the broker connection cut, SIGKILL of the server. At the end every committed event must
//! have been delivered (lost = 0); duplicates are counted; RSS is sampled throughout.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Database, Statement};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::fixture::{
    BoxError, Delivery, Fixture, admin_url, amqp_url, app_token, collect_ids, delivery, rss_kb, unpublished,
    wait_live, write_json,
};

/// A TCP proxy whose connections can all be cut at once.
struct Proxy {
    port: u16,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: (String, u16)) -> Result<Proxy, BoxError> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = connections.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap_or_else(|e| e.into_inner()).push(handle);
            }
        });
        Ok(Proxy { port, connections })
    }

    fn sever(&self) {
        for handle in self.connections.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            handle.abort();
        }
    }
}

struct Processes {
    app: std::path::PathBuf,
    env: Vec<(String, String)>,
    http_port: u16,
    serve: Child,
    worker: Child,
}

impl Processes {
    fn spawn(
        app: &std::path::Path,
        env: &[(String, String)],
        verb: &str,
        port: u16,
    ) -> Result<Child, BoxError> {
        Ok(Command::new(app)
            .arg(verb)
            .envs(env.iter().cloned())
            .env("APP__HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("APP__WORKER__HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("APP__PAYMENT__PROVIDER", "mock")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?)
    }

    fn kill(child: &mut Child) {
        let _ = Command::new("kill").args(["-KILL", &child.id().to_string()]).status();
        let _ = child.wait();
    }

    fn restart_worker(&mut self) -> Result<(), BoxError> {
        Self::kill(&mut self.worker);
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        self.worker = Self::spawn(&self.app, &self.env, "worker", port)?;
        Ok(())
    }

    fn restart_serve(&mut self) -> Result<(), BoxError> {
        Self::kill(&mut self.serve);
        self.serve = Self::spawn(&self.app, &self.env, "serve", self.http_port)?;
        Ok(())
    }
}

pub async fn soak(minutes: u64, rate: u32) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    let app = std::env::current_exe()?.with_file_name("app");
    if !app.exists() {
        return Err(format!("{} not found: run `cargo build --release` first", app.display()).into());
    }
    let (host, port) = fixture.endpoint.host_port();
    let proxy = Proxy::start((host.to_owned(), port)).await?;
    let (user, password) = fixture.endpoint.credentials();
    let proxied = format!(
        "amqp://{user}:{password}@127.0.0.1:{}/{}",
        proxy.port,
        fixture.endpoint.vhost().replace('/', "%2f")
    );
    let env: Vec<(String, String)> = vec![
        ("APP__DATABASE__URL".into(), fixture.db_url.clone()),
        ("APP__BROKER__URL".into(), proxied),
        ("APP__BROKER__EXCHANGE".into(), fixture.exchange.clone()),
        ("APP__BROKER__CONFIRM_TIMEOUT".into(), "5s".into()),
        ("APP__OUTBOX__PROCESSING_TIMEOUT".into(), "10s".into()),
        ("APP__OUTBOX__RECOVERY_INTERVAL".into(), "2s".into()),
        ("APP__OUTBOX__BACKOFF_BASE".into(), "500ms".into()),
        ("APP__OUTBOX__MAX_RETRIES".into(), "20".into()),
        ("APP__SAGA__LEASE".into(), "5s".into()),
        ("APP__PAYMENT__RECONCILIATION__INTERVAL".into(), "1s".into()),
        (
            "APP__AUTH__KEYS".into(),
            r#"[{"kid":"bench","algorithm":"HS256","secret":"bench-secret-bench-secret-bench-secret"}]"#
                .into(),
        ),
        ("RUST_LOG".into(), "error".into()),
    ];
    let http_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let worker_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut procs = Processes {
        app: app.clone(),
        env: env.clone(),
        http_port,
        serve: Processes::spawn(&app, &env, "serve", http_port)?,
        worker: Processes::spawn(&app, &env, "worker", worker_port)?,
    };
    let token = app_token(&app, &env, "soak")?;
    // The consumer: every delivered message id, directly from the broker (not proxied).
    let (consumer, received) = collect_ids(&fixture, "soak").await?;

    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let url = format!("http://127.0.0.1:{http_port}/api/orders");
    wait_live(&client, http_port).await?;

    let stats: Arc<Mutex<(u64, u64, u64)>> = Arc::default(); // created, 503s, other errors
    let started = Instant::now();
    let deadline = started + Duration::from_secs(minutes * 60);
    let load = {
        let (client, url, token, stats) = (client.clone(), url.clone(), token.clone(), stats.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let body =
                json!({ "currency": "KRW", "items": [{ "sku": "SOAK", "quantity": 1, "unitPrice": 100 }] });
            while Instant::now() < deadline {
                tick.tick().await;
                let (client, url, token, body, stats) =
                    (client.clone(), url.clone(), token.clone(), body.clone(), stats.clone());
                tokio::spawn(async move {
                    let status = client
                        .post(&url)
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await
                        .map(|r| r.status().as_u16());
                    let mut s = stats.lock().unwrap_or_else(|e| e.into_inner());
                    match status {
                        Ok(201) => s.0 += 1,
                        Ok(503) => s.1 += 1,
                        _ => s.2 += 1,
                    }
                });
            }
        })
    };

    println!("soak: {rate} orders/s for {minutes} min, a fault every minute");
    println!(
        "| minute | fault | created | 503 | other errors | worker RSS | serve RSS |\n|---:|---|---:|---:|---:|---:|---:|"
    );
    let faults =
        ["SIGKILL worker", "database kills the app's connections", "broker connection cut", "SIGKILL serve"];
    let admin = Database::connect(admin_url()).await?;
    let db_name = fixture.db_url.rsplit('/').next().unwrap_or_default().to_owned();
    let mut timeline = Vec::new();
    for minute in 1..=minutes {
        tokio::time::sleep_until((started + Duration::from_secs(minute * 60 - 30)).into()).await;
        let fault = faults[((minute - 1) % faults.len() as u64) as usize];
        match fault {
            "SIGKILL worker" => procs.restart_worker()?,
            "database kills the app's connections" => {
                let sql = format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db_name}' AND pid <> pg_backend_pid()"
                );
                admin.execute_unprepared(&sql).await?;
            }
            "broker connection cut" => proxy.sever(),
            _ => procs.restart_serve()?,
        }
        tokio::time::sleep_until((started + Duration::from_secs(minute * 60)).into()).await;
        let (created, unavailable, other) = *stats.lock().unwrap_or_else(|e| e.into_inner());
        let worker_rss = rss_kb(procs.worker.id(), "VmRSS:") as f64 / 1024.0;
        let serve_rss = rss_kb(procs.serve.id(), "VmRSS:") as f64 / 1024.0;
        println!(
            "| {minute} | {fault} | {created} | {unavailable} | {other} | {worker_rss:.1} MB | {serve_rss:.1} MB |"
        );
        timeline
            .push(json!({ "minute": minute, "fault": fault, "created": created, "unavailable": unavailable,
            "otherErrors": other, "workerRssMb": worker_rss, "serveRssMb": serve_rss }));
    }
    load.await?;
    // Drain: every row published.
    let drain_started = Instant::now();
    let count = |sql: &'static str| {
        let db = fixture.db.clone();
        async move {
            let row = db.query_one_raw(Statement::from_string(db.get_database_backend(), sql)).await?;
            Ok::<i64, BoxError>(row.and_then(|r| r.try_get::<i64>("", "n").ok()).unwrap_or(0))
        }
    };
    while unpublished(&fixture.db).await? > 0
        || count("SELECT COUNT(*) AS n FROM orders WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')")
            .await?
            > 0
    {
        if drain_started.elapsed() > Duration::from_secs(180) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let recovered_in = drain_started.elapsed();
    let Delivery { events, delivered, lost, duplicated } = delivery(&fixture.db, &received).await?;
    let unfinished =
        count("SELECT COUNT(*) AS n FROM orders WHERE status NOT IN ('COMPLETED', 'FAILED', 'CANCELLED')")
            .await?;
    let (created, unavailable, other) = *stats.lock().unwrap_or_else(|e| e.into_inner());
    println!(
        "\nevents {} | delivered {} | lost {lost} | duplicated {duplicated} | orders created {created} | unfinished {unfinished} | 503 {unavailable} | other errors {other} | drained {:.1} s after the load stopped",
        events,
        delivered,
        recovered_in.as_secs_f64()
    );
    write_json(
        "soak",
        &json!({ "minutes": minutes, "rate": rate, "timeline": timeline, "events": events, "delivered": delivered,
            "lost": lost, "duplicated": duplicated, "ordersCreated": created, "unfinished": unfinished,
            "unavailable": unavailable, "otherErrors": other, "drainSeconds": recovered_in.as_secs_f64() }),
    )?;
    Processes::kill(&mut procs.worker);
    Processes::kill(&mut procs.serve);
    let _ = consumer.close().await;
    fixture.drop_all().await;
    let _ = amqp_url();
    Ok(())
}
