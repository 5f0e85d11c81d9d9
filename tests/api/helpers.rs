//! Shared test support: a fresh database per test (a temp file on SQLite, a UUID-named
//! database on PostgreSQL, dropped afterwards) and the app spawned on port 0.
//!
//! PostgreSQL is `TEST_DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`).
//! When it cannot be reached a test is skipped — except under `CI=true`, where it fails.

use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orchestrator::adapters::messaging::amqp::AmqpEndpoint;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use orchestrator::adapters::clock::ManualClock;
use orchestrator::adapters::persistence;
use orchestrator::config::Settings;
use orchestrator::startup::{Application, Services};
use reqwest::{RequestBuilder, Response, StatusCode};
use sea_orm::{ConnectionTrait, Database, DatabaseConnection};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Runs `$name(Backend)` as one test per database: `$name::sqlite` and `$name::postgres`.
#[macro_export]
macro_rules! on_both_databases {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::helpers::Backend::Sqlite).await
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::helpers::Backend::Postgres).await
                }
            }
        )+
    };
}

pub const TEST_SECRET: &str = "test-signing-secret-0123456789-abcdefghijklmnop";
pub const TEST_KEYS: &str =
    r#"[{"kid":"test","algorithm":"HS256","secret":"test-signing-secret-0123456789-abcdefghijklmnop"}]"#;

fn admin_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// Tests skipped in this process because a service was missing.
static SKIPPED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Under `CI=true` a missing service is a failure, never a skip. Outside it the test
/// returns early — and says so where a green run cannot hide it: on the process's real
/// stderr (not the captured test output), with the count of tests skipped so far, and in
/// `target/tmp/skipped-tests.txt` (one line per skipped test, whatever runner ran it).
pub fn service_missing(service: &str, why: impl std::fmt::Display) {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!("{service} is required under CI=true but is not reachable: {why}");
    }
    use std::io::Write;
    let n = SKIPPED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!(
        "SKIPPED ({n} so far): {test}: {service} is not reachable ({why}); set CI=true to make this fail"
    );
    // `std::io::stderr()` written directly is not captured by the test harness.
    let _ = writeln!(std::io::stderr(), "{line}");
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests.txt");
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file) {
        let _ = writeln!(f, "{line}");
    }
}

/// A database that exists for one test.
pub struct TestDb {
    pub url: String,
    /// The server's admin URL the database was created with (and is dropped with).
    admin: String,
    pg_name: Option<String>,
    sqlite_file: Option<std::path::PathBuf>,
}

impl TestDb {
    /// A fresh, empty database (not migrated), or `None` when PostgreSQL is absent.
    pub async fn create(backend: Backend) -> Option<TestDb> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        match backend {
            Backend::Sqlite => {
                let file = std::env::temp_dir().join(format!("orchestrator-test-{id}.db"));
                Some(TestDb {
                    url: format!("sqlite://{}?mode=rwc", file.display()),
                    admin: String::new(),
                    pg_name: None,
                    sqlite_file: Some(file),
                })
            }
            Backend::Postgres => Self::create_on(&admin_url()).await,
        }
    }

    /// A fresh database on the PostgreSQL server of `admin` (a URL to a database there that
    /// may create others), or `None` when that server is absent.
    pub async fn create_on(admin: &str) -> Option<TestDb> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let server = match Database::connect(admin).await {
            Ok(db) => db,
            Err(e) => {
                service_missing("PostgreSQL", e);
                return None;
            }
        };
        let name = format!("orch_test_{id}");
        server
            .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
            .await
            .expect("create test database");
        let _ = server.close().await;
        let base = admin.rsplit_once('/').map_or(admin, |(server, _)| server);
        Some(TestDb {
            url: format!("{base}/{name}"),
            admin: admin.to_owned(),
            pg_name: Some(name),
            sqlite_file: None,
        })
    }

    /// The server's admin URL (a PostgreSQL database's; empty for SQLite).
    pub fn admin_url(&self) -> &str {
        &self.admin
    }

    /// A migrated connection to it.
    pub async fn connect(&self) -> DatabaseConnection {
        let db = persistence::connect(&self.url, 8).await.expect("connect to test database");
        persistence::migrate(&db).await.expect("migrate test database");
        db
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if let Some(name) = self.pg_name.take() {
            // Drop runs inside the test's runtime: use a thread with its own.
            let url = self.admin.clone();
            let _ = std::thread::spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                    return;
                };
                rt.block_on(async move {
                    if let Ok(admin) = Database::connect(url).await {
                        let _ = admin
                            .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                            .await;
                        let _ = admin.close().await;
                    }
                });
            })
            .join();
        }
        if let Some(file) = self.sqlite_file.take() {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
    }
}

/// Settings for a test app on `db`, with `extra` environment on top.
pub fn settings(db: &TestDb, extra: &[(&str, &str)]) -> Settings {
    settings_for_url(&db.url, extra)
}

/// [`settings`] for the database at `url`.
pub fn settings_for_url(url: &str, extra: &[(&str, &str)]) -> Settings {
    try_settings_for_url(url, extra).expect("test settings")
}

/// The settings a test app on a fresh SQLite file would have, or why they are refused.
pub fn try_settings(extra: &[(&str, &str)]) -> Result<Settings, orchestrator::config::ConfigError> {
    let file =
        std::env::temp_dir().join(format!("orchestrator-settings-{}.db", uuid::Uuid::new_v4().simple()));
    try_settings_for_url(&format!("sqlite://{}?mode=rwc", file.display()), extra)
}

fn try_settings_for_url(
    url: &str,
    extra: &[(&str, &str)],
) -> Result<Settings, orchestrator::config::ConfigError> {
    let mut env: Vec<(String, String)> = vec![
        ("APP__DATABASE__URL".into(), url.to_owned()),
        ("APP__DATABASE__MAX_CONNECTIONS".into(), "8".into()),
        ("APP__HTTP__BIND".into(), "127.0.0.1:0".into()),
        ("APP__WORKER__HTTP__BIND".into(), "127.0.0.1:0".into()),
        ("APP__WORKER__EMBEDDED".into(), "false".into()),
        ("APP__AUTH__KEYS".into(), TEST_KEYS.into()),
        // docs/spec.md §2: explicit outside the embedded default; a test's own choice wins.
        ("APP__PAYMENT__PROVIDER".into(), "mock".into()),
    ];
    // docs/spec.md §13: explicit outside the embedded default; a test's own choice wins.
    for key in ["APP__SETTLEMENT__CHANNEL", "APP__NOTIFICATION__CHANNEL"] {
        if !extra.iter().any(|(k, _)| *k == key) {
            env.push((key.into(), "simulated".into()));
        }
    }
    if !extra.iter().any(|(k, _)| ["APP__BROKER__URL", "APP__BROKER__URLS", "APP__BROKER__KIND"].contains(k))
    {
        env.push(("APP__BROKER__KIND".into(), "log".into()));
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Settings::load_from(None, env)
}

pub struct TestApp {
    /// Set when the app runs on a manual clock ([`TestApp::spawn_on_manual_clock`]).
    pub clock: Option<Arc<ManualClock>>,
    pub base: String,
    /// The commerce dialect's base URL, when `APP__HTTP__DIALECTS__COMMERCE__BIND` is set.
    pub commerce: Option<String>,
    /// The momo dialect's base URL, when `APP__HTTP__DIALECTS__MOMO__BIND` is set.
    pub momo: Option<String>,
    pub client: reqwest::Client,
    pub services: Services,
    pub db: DatabaseConnection,
    // Dropped last: the database outlives the app's connections.
    _stop: tokio::sync::oneshot::Sender<()>,
    _test_db: Arc<TestDb>,
}

impl TestApp {
    /// The app on a fresh database, or `None` (skip) when PostgreSQL is absent outside CI.
    pub async fn spawn(backend: Backend) -> Option<TestApp> {
        Self::spawn_with(backend, &[]).await
    }

    pub async fn spawn_with(backend: Backend, extra: &[(&str, &str)]) -> Option<TestApp> {
        Self::spawn_on(backend, extra, None).await
    }

    /// The app with time in the test's hands: nothing is due, no lease runs out and no row
    /// ages until the test calls [`TestApp::advance`]. Loops are driven by their
    /// `run_once`-style calls (the worker is not embedded).
    pub async fn spawn_on_manual_clock(backend: Backend, extra: &[(&str, &str)]) -> Option<TestApp> {
        Self::spawn_on(backend, extra, Some(Arc::new(ManualClock::new()))).await
    }

    /// Moves the manual clock forward.
    pub fn advance(&self, by: std::time::Duration) {
        let clock = self.clock.as_ref().expect("advance needs an app spawned on the manual clock");
        clock.advance(chrono::TimeDelta::from_std(by).expect("a test duration fits"));
    }

    async fn spawn_on(
        backend: Backend,
        extra: &[(&str, &str)],
        clock: Option<Arc<ManualClock>>,
    ) -> Option<TestApp> {
        let test_db = TestDb::create(backend).await?;
        Some(Self::spawn_on_database(test_db, extra, clock).await)
    }

    /// The app on a database the test made (on a server of its own, say).
    pub async fn spawn_on_database(
        test_db: TestDb,
        extra: &[(&str, &str)],
        clock: Option<Arc<ManualClock>>,
    ) -> TestApp {
        orchestrator::startup::install_tls_provider();
        // Migrate explicitly: `serve` on PostgreSQL refuses an unmigrated schema.
        let db = test_db.connect().await;
        let settings = settings(&test_db, extra);
        let app = match &clock {
            Some(clock) => Application::build_with_clock(settings, clock.clone()).await,
            None => Application::build(settings).await,
        }
        .expect("build app");
        let base = format!("http://127.0.0.1:{}", app.port());
        let commerce = app.commerce_port().map(|port| format!("http://127.0.0.1:{port}"));
        let momo = app.momo_port().map(|port| format!("http://127.0.0.1:{port}"));
        let services = app.services().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        TestApp {
            clock,
            base,
            commerce,
            momo,
            client: reqwest::Client::new(),
            services,
            db,
            _stop: stop,
            _test_db: Arc::new(test_db),
        }
    }

    /// The URL of the app's database (for a CLI run against it).
    pub fn database_url(&self) -> &str {
        &self._test_db.url
    }

    pub fn token(&self, sub: &str) -> String {
        self.services.jwt.mint(sub, &[], std::time::Duration::from_secs(600)).expect("mint")
    }

    pub fn admin_token(&self, sub: &str) -> String {
        self.services.jwt.mint(sub, &["admin".to_owned()], std::time::Duration::from_secs(600)).expect("mint")
    }

    pub fn get(&self, path: &str, token: &str) -> RequestBuilder {
        self.client.get(format!("{}{path}", self.base)).bearer_auth(token)
    }

    pub fn post(&self, path: &str, token: &str) -> RequestBuilder {
        self.client.post(format!("{}{path}", self.base)).bearer_auth(token)
    }

    /// `POST /api/orders` with a JSON body and optional scenario.
    pub async fn place_order(&self, token: &str, body: &Value, scenario: Option<&str>) -> Response {
        let mut req = self.post("/api/orders", token).json(body);
        if let Some(s) = scenario {
            req = req.header("X-Mock-Scenario", s);
        }
        req.send().await.expect("request")
    }

    /// Counts rows of `table` (test assertions only).
    pub async fn count(&self, table: &str) -> i64 {
        count(&self.db, table).await
    }
}

pub async fn count(db: &DatabaseConnection, table: &str) -> i64 {
    count_where(db, table, "1 = 1").await
}

/// Counts rows of `table` matching a literal SQL condition (test assertions only).
pub async fn count_where(db: &DatabaseConnection, table: &str, condition: &str) -> i64 {
    scalar(db, &format!("SELECT COUNT(*) AS n FROM {table} WHERE {condition}")).await
}

/// The first column of the one row `sql` answers (test assertions only).
pub async fn scalar<T: sea_orm::TryGetable>(db: &DatabaseConnection, sql: &str) -> T {
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(db.get_database_backend(), sql))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no row"));
    row.try_get_by_index::<T>(0).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The envelopes of the outbox events of one type, oldest first (test assertions only).
pub async fn payloads(db: &DatabaseConnection, event_type: &str) -> Vec<Value> {
    db.query_all_raw(sea_orm::Statement::from_sql_and_values(
        db.get_database_backend(),
        match db.get_database_backend() {
            sea_orm::DatabaseBackend::Postgres => {
                "SELECT payload FROM outbox_events WHERE event_type = $1 ORDER BY id"
            }
            _ => "SELECT payload FROM outbox_events WHERE event_type = ? ORDER BY id",
        },
        [event_type.into()],
    ))
    .await
    .expect("payloads")
    .iter()
    .map(|row| serde_json::from_str(&row.try_get::<String>("", "payload").expect("payload")).expect("JSON"))
    .collect()
}

pub fn order_body() -> Value {
    serde_json::json!({
        "currency": "KRW",
        "items": [{ "sku": "TICKET-STD", "quantity": 2, "unitPrice": 15000 }]
    })
}

/// Reads a JSON body, asserting the status first (with the body in the message).
pub async fn json(response: Response, expected: StatusCode) -> Value {
    let status = response.status();
    let text = response.text().await.expect("body");
    assert_eq!(status, expected, "unexpected status; body: {text}");
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// The `(step, status)` pairs of an order detail, in order.
pub fn steps(detail: &Value) -> Vec<(String, String)> {
    detail["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| (s["step"].as_str().unwrap().to_owned(), s["status"].as_str().unwrap().to_owned()))
        .collect()
}

/// Outbox rows in `status` as operators see them (the fast path keeps no per-row status:
/// a published event's state comes from its lane's progress), through the store's stats.
pub async fn outbox_in(db: &DatabaseConnection, status: orchestrator::domain::outbox::OutboxStatus) -> i64 {
    let store = orchestrator::adapters::persistence::SeaOrmOutboxStore::new(db.clone(), Default::default());
    let stats =
        orchestrator::application::ports::OutboxOperations::stats(&store).await.expect("outbox stats");
    stats.by_status.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n)
}

/// Outbox rows not yet `PUBLISHED` (as operators see them).
pub async fn outbox_unpublished(db: &DatabaseConnection) -> i64 {
    let store = orchestrator::adapters::persistence::SeaOrmOutboxStore::new(db.clone(), Default::default());
    let stats =
        orchestrator::application::ports::OutboxOperations::stats(&store).await.expect("outbox stats");
    stats
        .by_status
        .iter()
        .filter(|(s, _)| *s != orchestrator::domain::outbox::OutboxStatus::Published)
        .map(|(_, n)| n)
        .sum()
}

/// Moves every outbox event to the per-event slow path, where a failure, a held-back
/// event or a migration puts it: tests that stage claims, dead letters and lease
/// recovery start from there.
pub async fn on_the_slow_path(db: &DatabaseConnection) {
    use sea_orm::ConnectionTrait;
    db.execute_unprepared("UPDATE outbox_events SET slow = TRUE WHERE NOT slow").await.expect("slow path");
}

/// Claims up to `limit` due slow-path rows as relay `worker` does: in the lanes it leases
/// (every lane when it is the only live relay), then gives the lanes back, as a relay that
/// claims and stops would. The rows' own lease runs to `until`.
pub async fn claim_as<S: orchestrator::application::ports::RelayStore + ?Sized>(
    store: &S,
    worker: &str,
    limit: u32,
    now: chrono::DateTime<chrono::Utc>,
    until: chrono::DateTime<chrono::Utc>,
) -> Vec<orchestrator::application::ports::OutboxRecord> {
    let held =
        store.lease_lanes(worker, 16, now, now + chrono::Duration::minutes(1)).await.expect("lease lanes");
    let lanes: Vec<i16> = held.iter().map(|h| h.lane).collect();
    let rows = store.claim(worker, &lanes, limit, now, until).await.expect("claim");
    store.release_lanes(worker).await.expect("give the lanes back");
    rows
}

/// Dead-letters every head event the relay would claim now (as `312 NO_ROUTE` after four
/// tries), from the slow path; the rows it dead-lettered.
pub async fn dead_letter_heads(
    app: &TestApp,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<orchestrator::application::ports::OutboxRecord> {
    use orchestrator::application::ports::DeliveryFailure;
    use orchestrator::domain::outbox::{FailureCode, FailureOutcome};
    on_the_slow_path(&app.db).await;
    let claimed = claim_as(&*app.services.outbox_store, "test", 1000, now, now).await;
    let failures: Vec<DeliveryFailure> = claimed
        .iter()
        .map(|e| DeliveryFailure {
            id: e.id,
            outcome: FailureOutcome::DeadLetter { retry_count: 4 },
            code: FailureCode::Unroutable,
            reason: "312 NO_ROUTE".into(),
        })
        .collect();
    app.services.outbox_store.mark_failed(&failures, "test", now).await.expect("dead-lettered");
    claimed
}

// ---- waiting, processes and a severable connection, shared by every test file ----------

/// Waits (polling) until `check` holds; fails the test after 30 s naming `what`.
pub(crate) async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    until_within(what, Duration::from_secs(30), check).await;
}

/// As [`until`], with the test's own limit (a cluster's failover, a long drain).
pub(crate) async fn until_within<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    until_some(what, limit, || {
        let done = check();
        async move { done.await.then_some(()) }
    })
    .await
}

/// Polls `check` until it yields a value (a port read from a log, a URL), failing the test
/// after `limit` naming `what`.
pub(crate) async fn until_some<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A spawned `app` that is killed if the test ends (or fails) while it still runs, so a
/// failing test never leaves a process behind.
pub(crate) struct Process(pub std::process::Child);

impl Process {
    pub(crate) fn spawn(cmd: &mut Command) -> Process {
        Process(cmd.spawn().expect("spawn app"))
    }
}

impl std::ops::Deref for Process {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Sends SIGTERM and waits (at most 30 s) for the process to exit; returns its status.
pub(crate) fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not stop within 30 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP proxy in front of the broker; [`TcpProxy::sever`] cuts every open connection.
pub struct TcpProxy {
    pub port: u16,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _accept: JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: (String, u16)) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let tracked = connections.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let target = target.clone();
                let handle = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                tracked.lock().unwrap().push(handle);
            }
        });
        TcpProxy { port, connections, _accept: accept }
    }

    /// Drops every connection through the proxy (both sides see a reset/EOF).
    pub fn sever(&self) {
        for handle in self.connections.lock().unwrap().drain(..) {
            handle.abort();
        }
    }

    pub fn url(&self, endpoint: &AmqpEndpoint) -> String {
        let (user, password) = endpoint.credentials();
        let vhost = endpoint.vhost().replace('/', "%2f");
        format!("amqp://{user}:{password}@127.0.0.1:{}/{vhost}", self.port)
    }
}

/// What `work` logs at WARN and above, as plain text lines, beside its output. Only `work`'s
/// own polls are captured (its subscriber is set while it is polled, on any thread), so
/// tests running at the same time do not write into it; a task `work` spawns is not.
pub async fn warnings_of<F: std::future::Future>(work: F) -> (F::Output, String) {
    use tracing::instrument::WithSubscriber;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            // A poisoned lock means another capture panicked: the test fails on it anyway.
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let output = work.with_subscriber(subscriber).await;
    let text = String::from_utf8_lossy(&lines.0.lock().unwrap()).into_owned();
    (output, text)
}

/// Each of `names` once: a worker's loops are told apart by name in its readiness.
pub(crate) fn names_are_unique(names: &[&str]) {
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "a name given twice: {names:?}");
}
