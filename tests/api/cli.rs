//! The `app` binary as an operator uses it: verbs, exit codes, the embedded default.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use chrono::Utc;
use orchestrator::adapters::http::auth::JwtKeys;
use orchestrator::adapters::persistence::{SeaOrmOutboxStore, SeaOrmStore};
use orchestrator::application::ports::{
    Changes, DeliveryFailure, NewOutboxEvent, OrderContext, OutboxOperations, OutboxUpkeep, RelayStore,
    UnitOfWork,
};
use orchestrator::config::Settings;
use orchestrator::domain::ids::{EventId, OrderId};
use orchestrator::domain::order::{NewOrder, NewOrderItem, Order, OrderSource};
use orchestrator::domain::outbox::{FailureCode, FailureOutcome, OutboxStatus};

use crate::helpers::{Backend, Process, TestDb, terminate, until_some, until_within};

/// `app` with a clean `APP_*` environment, run in `dir`.
pub(crate) fn app(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_app"));
    for (key, _) in std::env::vars() {
        if key.starts_with("APP_") {
            cmd.env_remove(key);
        }
    }
    cmd.current_dir(dir).env("RUST_LOG", "info");
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("run app")
}

pub(crate) fn temp_dir() -> tempdir::Dir {
    tempdir::Dir::new()
}

pub(crate) mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            let path =
                std::env::temp_dir().join(format!("orchestrator-cli-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&path).expect("temp dir");
            Dir(path)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The port `app serve` bound (it was given port 0), read from its "serving HTTP" log line.
pub(crate) async fn served_port(log: &Path) -> u16 {
    until_some("the service to start (its \"serving HTTP\" line)", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|line| line["message"] == "serving HTTP")
            .and_then(|line| line["port"].as_u64())
            .and_then(|port| u16::try_from(port).ok())
    })
    .await
}

#[test]
fn help_documents_every_verb() {
    let dir = temp_dir();
    let out = run(app(&dir.0).arg("--help"));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for verb in ["serve", "worker", "migrate", "token", "outbox", "reconcile", "health", "merchant"] {
        assert!(text.contains(verb), "--help lists {verb}: {text}");
    }
    for verb in ["serve", "worker", "migrate", "token", "outbox", "reconcile", "health"] {
        assert!(run(app(&dir.0).args([verb, "--help"])).status.success(), "{verb} --help");
    }
    let out = run(app(&dir.0).arg("frobnicate"));
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[tokio::test]
async fn token_prints_a_verifiable_token_alone_on_stdout() {
    let dir = temp_dir();
    let out = run(app(&dir.0).args(["token", "--sub", "alice", "--role", "admin", "--ttl", "5m"]));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "one line: {stdout}");
    let keys = JwtKeys::from_settings(&Settings::load_from(None, Vec::new()).unwrap().auth).unwrap();
    let actor = keys.verify(stdout.trim()).await.expect("the token verifies with the configured key");
    assert_eq!(actor.subject, "alice");
    assert!(actor.is_admin);
    assert!(!dir.0.join("data").exists(), "minting a token touches no database");
}

#[test]
fn invalid_configuration_exits_2_naming_the_key() {
    let dir = temp_dir();
    let out = run(app(&dir.0).env("APP__OUTBOX__BATCH_SIZE", "0").args(["token", "--sub", "a"]));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("outbox.batch_size"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    let out = run(app(&dir.0).env("APP__DATABASE__URL", "postgres://u:hunter2@127.0.0.1/x").arg("serve"));
    assert_eq!(out.status.code(), Some(2), "the built-in key is refused off SQLite");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("auth.keys") && !stderr.contains("hunter2"), "{stderr}");
    // Issue 57: every key a production start lacks, at once, on one line.
    for key in ["broker.url", "payment.provider", "settlement.channel", "notification.channel"] {
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");

    let missing = dir.0.join("nope.toml");
    let out = run(app(&dir.0).arg("--config").arg(&missing).arg("serve"));
    assert_eq!(out.status.code(), Some(2));
}

/// docs/spec.md §2: off SQLite, `serve` and `worker` refuse to start on an implicit broker or
/// payment provider (exit 2, one line naming the key); an unreachable database is reported
/// within `database.connect_timeout`, naming host and cause.
#[test]
fn production_settings_are_explicit_and_failures_name_their_cause() {
    let dir = temp_dir();
    let pg = |cmd: &mut Command| {
        cmd.env("APP__DATABASE__URL", "postgres://postgres:hunter2@127.0.0.1:1/orders")
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .env("APP__HTTP__BIND", "127.0.0.1:0")
            .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0");
    };
    for verb in ["serve", "worker"] {
        let mut cmd = app(&dir.0);
        pg(&mut cmd);
        let out = run(cmd.arg(verb));
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("broker.url") && stderr.lines().count() == 1, "{verb}: {stderr}");

        let mut cmd = app(&dir.0);
        pg(&mut cmd);
        let out = run(cmd.env("APP__BROKER__KIND", "log").arg(verb));
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("payment.provider"), "{verb}: {stderr}");

        // docs/spec.md §13: the settlement and notification channels too.
        let mut cmd = app(&dir.0);
        pg(&mut cmd);
        let out = run(cmd.env("APP__BROKER__KIND", "log").env("APP__PAYMENT__PROVIDER", "mock").arg(verb));
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("settlement.channel"), "{verb}: {stderr}");
        let mut cmd = app(&dir.0);
        pg(&mut cmd);
        let out = run(cmd
            .env("APP__BROKER__KIND", "log")
            .env("APP__PAYMENT__PROVIDER", "mock")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .arg(verb));
        assert_eq!(out.status.code(), Some(2), "{verb}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("notification.channel"), "{verb}: {stderr}");
    }
    // Explicit choices pass the check; nothing listens on port 1, and the error says so.
    let mut cmd = app(&dir.0);
    pg(&mut cmd);
    let started = Instant::now();
    let out = run(cmd
        .env("APP__BROKER__KIND", "log")
        .env("APP__PAYMENT__PROVIDER", "mock")
        .env("APP__SETTLEMENT__CHANNEL", "simulated")
        .env("APP__NOTIFICATION__CHANNEL", "simulated")
        .arg("serve"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("127.0.0.1:1") && last.to_lowercase().contains("refused"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "no secret in errors: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(8), "reported within the connect timeout");
    // `app migrate` needs no broker or provider, and reports the same way.
    let mut cmd = app(&dir.0);
    pg(&mut cmd);
    let out = run(cmd.arg("migrate"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"));
}

/// `serve` and `worker` side by side on one host with one environment: the worker serves
/// its health and metrics on `worker.http.bind`, never on `http.bind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_worker_run_side_by_side_with_one_environment() {
    let Some(db) = crate::helpers::TestDb::create(crate::helpers::Backend::Postgres).await else {
        return;
    };
    db.connect().await; // migrated
    let dir = temp_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let env = |cmd: &mut Command| {
        cmd.env("APP__DATABASE__URL", &db.url)
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .env("APP__BROKER__KIND", "log")
            .env("APP__PAYMENT__PROVIDER", "mock")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .env("APP__HTTP__BIND", format!("127.0.0.1:{port}"))
            .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
            .env("APP__LOG__FORMAT", "json");
    };
    let serve_log = std::fs::File::create(dir.0.join("serve.log")).unwrap();
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    let _serve = Process::spawn(cmd.arg("serve").stdout(Stdio::null()).stderr(serve_log));
    assert_eq!(served_port(&dir.0.join("serve.log")).await, port);
    wait_ready(port).await;
    let ready: serde_json::Value =
        reqwest::get(format!("http://127.0.0.1:{port}/health/ready")).await.unwrap().json().await.unwrap();
    // Payments, settlement, notification and the broker: each simulated part is shown.
    assert_eq!(ready["warnings"].as_array().map(Vec::len), Some(4), "simulated parts are shown: {ready}");
    for part in ["payment.provider", "settlement.channel", "notification.channel", "broker.kind"] {
        assert!(ready["warnings"].to_string().contains(part), "{part}: {ready}");
    }
    // The container health check: `app health` asks this host's serve.
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    let out = run(cmd.arg("health"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    let out = run(cmd.env("APP__HTTP__BIND", "127.0.0.1:1").arg("health"));
    assert_eq!(out.status.code(), Some(1), "nothing answers there");

    let worker_log = std::fs::File::create(dir.0.join("worker.log")).unwrap();
    let mut cmd = app(&dir.0);
    env(&mut cmd);
    let _worker = Process::spawn(cmd.arg("worker").stdout(Stdio::null()).stderr(worker_log));
    let health = until_some("the worker to start (its health URL)", Duration::from_secs(30), || async {
        let text = std::fs::read_to_string(dir.0.join("worker.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find_map(|l| l["health"].as_str().map(str::to_owned))
    })
    .await;
    assert!(!health.contains(&format!(":{port}/")), "not on http.bind: {health}");
    let answer = reqwest::get(&health).await.unwrap();
    assert!(answer.status().is_success());
}

#[test]
fn migrate_reports_and_applies_the_schema() {
    let dir = temp_dir();
    let url = format!("sqlite://{}/m.db?mode=rwc", dir.0.display());
    let status = |dir: &Path| {
        let out = run(app(dir).env("APP__DATABASE__URL", &url).args(["migrate", "status"]));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // A read-only verb never creates a database: a missing file is an error naming it.
    let missing = run(app(&dir.0).env("APP__DATABASE__URL", &url).args(["migrate", "status"]));
    assert_eq!(missing.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains(&format!("{}/m.db", dir.0.display())), "{stderr}");
    assert!(!dir.0.join("m.db").exists(), "not created");
    let migrated = run(app(&dir.0).env("APP__DATABASE__URL", &url).arg("migrate"));
    assert!(migrated.status.success());
    let summary = String::from_utf8_lossy(&migrated.stdout);
    assert!(summary.starts_with("migrated: "), "one line says what happened: {summary}");
    let text = status(&dir.0);
    assert!(text.starts_with("applied") && !text.contains("pending"), "{text}");
    assert!(run(app(&dir.0).env("APP__DATABASE__URL", &url).args(["migrate", "down"])).status.success());
    let text = status(&dir.0);
    let pending = text.lines().filter(|l| l.starts_with("pending")).count();
    assert_eq!(pending, 1, "down reverts the last migration only: {text}");
    assert!(run(app(&dir.0).env("APP__DATABASE__URL", &url).args(["migrate", "fresh"])).status.success());
    assert!(status(&dir.0).starts_with("applied"));
}

pub(crate) async fn wait_ready(port: u16) {
    orchestrator::startup::install_tls_provider();
    let client = reqwest::Client::new();
    until_within("the service to become ready", Duration::from_secs(30), || async {
        let response = client.get(format!("http://127.0.0.1:{port}/health/ready")).send().await;
        response.is_ok_and(|r| r.status().is_success())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_runs_the_whole_flow_with_no_configuration() {
    let dir = temp_dir();
    let log = std::fs::File::create(dir.0.join("serve.log")).unwrap();
    // Only the port differs from the defaults: 8080 may be taken on a machine running tests.
    let mut child = Process::spawn(
        app(&dir.0).env("APP__HTTP__BIND", "127.0.0.1:0").arg("serve").stdout(Stdio::null()).stderr(log),
    );
    let port = served_port(&dir.0.join("serve.log")).await;
    wait_ready(port).await;
    assert!(dir.0.join("data/app.db").exists(), "the SQLite file is created");

    let token = String::from_utf8(run(app(&dir.0).args(["token", "--sub", "alice"])).stdout).unwrap();
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/api/orders"))
        .bearer_auth(token.trim())
        .json(&crate::helpers::order_body())
        .send()
        .await
        .unwrap();
    let detail = crate::helpers::json(response, reqwest::StatusCode::CREATED).await;
    assert_eq!(detail["status"], "COMPLETED");

    // The embedded relay "publishes" both events as log lines within moments.
    until_within("both events published as log lines", Duration::from_secs(20), || async {
        std::fs::read_to_string(dir.0.join("serve.log")).unwrap().matches("event published").count() >= 2
    })
    .await;
    let text = std::fs::read_to_string(dir.0.join("serve.log")).unwrap();
    assert!(text.contains("order.completed") && text.contains("payment.approved"));
    let status = terminate(&mut child);
    assert!(status.success(), "SIGTERM ends serve with exit 0, got {status}");
}

fn new_order() -> Order {
    let order = Order::place(
        OrderId::new(),
        NewOrder {
            customer_id: "alice".into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency: "EUR".into(),
            items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 100 }],
        },
        Utc::now(),
    )
    .unwrap();
    Order { number: crate::repository_contract::next_number(), ..order }
}

fn event(order: &Order, event_type: &str) -> NewOutboxEvent {
    NewOutboxEvent {
        event_id: EventId::new(),
        aggregate_type: "order".into(),
        aggregate_id: order.id.to_string(),
        event_type: event_type.into(),
        routing_key: event_type.into(),
        payload: "{}".into(),
        correlation_id: None,
        created_at: Utc::now(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_drains_the_outbox_and_replay_repairs_a_dead_letter() {
    let dir = temp_dir();
    let Some(db) = TestDb::create(Backend::Sqlite).await else {
        return;
    };
    let conn = db.connect().await;
    let repo = SeaOrmStore::new(conn.clone(), Default::default());
    let store = SeaOrmOutboxStore::new(conn.clone(), std::sync::Arc::new(tokio::sync::Notify::new()));
    let mut order = new_order();
    let mut changes = Changes::default();
    changes.insert_order(&mut order, OrderContext::default());
    changes.outbox = (0..5).map(|i| event(&order, &format!("test.e{i}"))).collect();
    repo.commit(changes).await.unwrap();
    // A second aggregate with a dead letter.
    let mut other = new_order();
    let mut changes = Changes::default();
    changes.insert_order(&mut other, OrderContext::default());
    changes.outbox = vec![event(&other, "test.poison")];
    repo.commit(changes).await.unwrap();
    crate::helpers::on_the_slow_path(&conn).await;
    let now = Utc::now();
    let poison = crate::helpers::claim_as(&store, "test", 10, now, now)
        .await
        .into_iter()
        .find(|e| e.event_type == "test.poison")
        .unwrap();
    let dead = DeliveryFailure {
        id: poison.id,
        outcome: FailureOutcome::DeadLetter { retry_count: 4 },
        code: FailureCode::Nacked,
        reason: "x".into(),
    };
    store.mark_failed(&[dead], "test", now).await.unwrap();
    store.recover_expired(now + chrono::Duration::seconds(1)).await.unwrap();

    // Port 0: the worker's health port is not used here, and a free port picked in
    // advance could be taken by another test before the worker binds it.
    let mut worker = Process::spawn(
        app(&dir.0)
            .env("APP__DATABASE__URL", &db.url)
            .env("APP__OUTBOX__POLL_INTERVAL", "100ms")
            .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
            .env("APP__PAYMENT__PROVIDER", "mock")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .env("APP__BROKER__KIND", "log")
            .arg("worker")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    until_within("the worker to drain the outbox", Duration::from_secs(30), || async {
        let events = store.for_aggregate("order", &order.id.to_string()).await.unwrap();
        events.iter().all(|e| e.status == OutboxStatus::Published)
    })
    .await;
    assert!(terminate(&mut worker).success(), "SIGTERM ends the worker with exit 0");

    let stats = run(app(&dir.0).env("APP__DATABASE__URL", &db.url).args(["outbox", "stats"]));
    assert!(stats.status.success());
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["byStatus"]["DEAD_LETTER"], 1);
    assert_eq!(stats["byStatus"]["PUBLISHED"], 5);

    let replay = run(app(&dir.0).env("APP__DATABASE__URL", &db.url).args([
        "outbox",
        "replay",
        "--id",
        &poison.id.to_string(),
    ]));
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    let row = store.for_aggregate("order", &other.id.to_string()).await.unwrap();
    assert_eq!(row[0].status, OutboxStatus::Ready);
    let again = run(app(&dir.0).env("APP__DATABASE__URL", &db.url).args([
        "outbox",
        "replay",
        "--id",
        &poison.id.to_string(),
    ]));
    assert_eq!(again.status.code(), Some(1), "replaying a row that is not a dead letter fails");

    // A database that was not restored from another server's dump: nothing to rebase.
    let rebase = run(app(&dir.0).env("APP__DATABASE__URL", &db.url).args(["outbox", "rebase"]));
    assert!(rebase.status.success(), "{}", String::from_utf8_lossy(&rebase.stderr));
    assert!(String::from_utf8_lossy(&rebase.stdout).contains("nothing to do"));
}

/// `app worker` on `db`, publishing to `broker`'s exchange, its ops port free.
fn broker_worker(dir: &Path, db: &TestDb, broker: &crate::broker::TestBroker) -> Command {
    let mut cmd = app(dir);
    cmd.env("APP__DATABASE__URL", &db.url)
        .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
        .env("APP__BROKER__URL", crate::broker::amqp_url())
        .env("APP__BROKER__EXCHANGE", &broker.exchange)
        .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
        .env("APP__PAYMENT__PROVIDER", "mock")
        .env("APP__SETTLEMENT__CHANNEL", "simulated")
        .env("APP__NOTIFICATION__CHANNEL", "simulated")
        .arg("worker")
        .stdout(Stdio::null());
    cmd
}

/// SIGTERM while draining: the worker stops claiming, finishes the batch in flight (its
/// confirms awaited and marked), and exits 0 — nothing is left to the lease timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_publishes_and_leaves_no_claim_behind() {
    let Some(broker) = crate::broker::TestBroker::start().await else {
        return;
    };
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let conn = db.connect().await;
    let repo = SeaOrmStore::new(conn.clone(), Default::default());
    for _ in 0..20 {
        let mut order = new_order();
        let mut changes = Changes::default();
        changes.insert_order(&mut order, OrderContext::default());
        changes.outbox = (0..250).map(|i| event(&order, &format!("test.e{i}"))).collect();
        // One aggregate per event, so that whole batches are claimable at once.
        for (i, e) in changes.outbox.iter_mut().enumerate() {
            e.aggregate_id = format!("{}-{i}", order.id);
        }
        repo.commit(changes).await.unwrap();
    }
    let dir = temp_dir();
    let mut worker = Process::spawn(
        broker_worker(&dir.0, &db, &broker).env("APP__OUTBOX__BATCH_SIZE", "100").stderr(Stdio::null()),
    );
    broker.wait_for(500, Duration::from_secs(30)).await;
    let status = terminate(&mut worker);
    assert!(status.success(), "exit 0 after SIGTERM, got {status}");
    let processing =
        crate::helpers::outbox_in(&conn, orchestrator::domain::outbox::OutboxStatus::Processing).await;
    assert_eq!(processing, 0, "no claim is left to the lease timeout");
    let published =
        crate::helpers::outbox_in(&conn, orchestrator::domain::outbox::OutboxStatus::Published).await;
    assert!(published >= 500, "published before the stop: {published}");
    // Every row marked PUBLISHED was really delivered.
    broker.barrier().await;
    assert!(broker.count() as i64 >= published);
    drop(conn);
    broker.cleanup().await;
}

/// A worker's first scrape shows every event it published since it started (counters
/// exist from process start, not from the first scrape).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_first_scrape_counts_everything_it_published() {
    orchestrator::startup::install_tls_provider();
    let Some(broker) = crate::broker::TestBroker::start().await else {
        return;
    };
    let Some(db) = TestDb::create(Backend::Postgres).await else {
        return;
    };
    let conn = db.connect().await;
    let repo = SeaOrmStore::new(conn.clone(), Default::default());
    let mut order = new_order();
    let mut changes = Changes::default();
    changes.insert_order(&mut order, OrderContext::default());
    changes.outbox = (0..6).map(|i| event(&order, &format!("test.e{i}"))).collect();
    repo.commit(changes).await.unwrap();
    let dir = temp_dir();
    let log = std::fs::File::create(dir.0.join("worker.log")).unwrap();
    let _worker =
        Process::spawn(broker_worker(&dir.0, &db, &broker).env("APP__LOG__FORMAT", "json").stderr(log));
    assert_eq!(broker.wait_for(6, Duration::from_secs(30)).await.len(), 6);
    crate::helpers::until("all six recorded", || async {
        crate::helpers::outbox_in(&conn, OutboxStatus::Published).await == 6
    })
    .await;
    let text = std::fs::read_to_string(dir.0.join("worker.log")).unwrap_or_default();
    let health = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|l| l["health"].as_str().map(str::to_owned))
        .expect("the worker logs its health URL");
    let metrics =
        reqwest::get(health.replace("/health/ready", "/metrics")).await.unwrap().text().await.unwrap();
    let published: f64 = metrics
        .lines()
        .find(|l| l.starts_with("outbox_published_total"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no outbox_published_total in the first scrape:\n{metrics}"));
    assert_eq!(published, 6.0, "{metrics}");
}

/// `app merchant …` on the service's database: each verb prints what it made as the API
/// answers it, the key once; a code that names nothing is a usage error (exit 2).
#[test]
fn merchant_verbs_manage_merchants_keys_and_members() {
    let dir = temp_dir();
    let url = format!("sqlite://{}/m.db?mode=rwc", dir.0.display());
    let run_json = |args: &[&str]| -> serde_json::Value {
        let out = run(app(&dir.0).env("APP__DATABASE__URL", &url).args(args));
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("{args:?}: {}", String::from_utf8_lossy(&out.stdout)))
    };
    assert!(run(app(&dir.0).env("APP__DATABASE__URL", &url).arg("migrate")).status.success());
    let merchant = run_json(&[
        "merchant",
        "create",
        "--code",
        "franchise",
        "--name",
        "Franchise",
        "--timezone",
        "Asia/Seoul",
    ]);
    assert_eq!((merchant["code"].as_str(), merchant["status"].as_str()), (Some("FRANCHISE"), Some("ACTIVE")));
    let key = run_json(&["merchant", "key", "create", "franchise", "--name", "pos", "--role", "orders"]);
    assert!(key["key"].as_str().unwrap().starts_with("mk_"), "{key}");
    let member =
        run_json(&["merchant", "member", "set", "franchise", "--subject", "carol", "--role", "VIEWER"]);
    assert_eq!(member["role"], "VIEWER");
    let revoked = run_json(&["merchant", "key", "revoke", "franchise", "--id", key["id"].as_str().unwrap()]);
    assert!(revoked["revokedAt"].is_string());
    let suspended =
        run_json(&["merchant", "suspend", merchant["id"].as_str().unwrap(), "--reason", "unpaid"]);
    assert_eq!(suspended["status"], "SUSPENDED");
    let again = run(app(&dir.0).env("APP__DATABASE__URL", &url).args(["merchant", "suspend", "franchise"]));
    assert_eq!(again.status.code(), Some(2), "already suspended: {}", String::from_utf8_lossy(&again.stderr));
    let nothing = run(app(&dir.0).env("APP__DATABASE__URL", &url).args(["merchant", "resume", "nobody"]));
    assert_eq!(nothing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("no merchant"));
}
