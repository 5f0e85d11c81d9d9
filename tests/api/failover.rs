//! The database server going away under load and coming back (docs/scaling.md, "The
//! database fails over"): a PostgreSQL server of the test's own (initdb in a temporary
//! directory, its own port — the machine's server is never touched) is stopped with
//! `pg_ctl -m immediate` (a crash: every connection cut, no checkpoint) while orders arrive,
//! kept down for a moment, and started again at the same address, which is what the
//! service's pool sees of a primary that fails over behind a DNS name or a virtual IP.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::StatusCode;

use crate::faults::no_half_applied_step;
use crate::helpers::{TestApp, TestDb, service_missing, until_within};

/// A PostgreSQL server in a temporary directory, stopped and deleted when dropped.
struct PgServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Server settings beyond the harness's own (`-c name=value ...`).
    settings: String,
}

/// Runs a PostgreSQL program as the `postgres` user when we are root (initdb refuses root).
fn pg_command(bin: &Path, program: &str) -> Command {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let path = bin.join(program);
    if root {
        let mut cmd = Command::new("runuser");
        cmd.args(["-u", "postgres", "--"]).arg(path);
        cmd
    } else {
        Command::new(path)
    }
}

fn run(mut cmd: Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl PgServer {
    /// Installed PostgreSQL's programs (the newest version under /usr/lib/postgresql).
    fn bin() -> Option<PathBuf> {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .flatten()
            .map(|e| e.path().join("bin"))
            .filter(|b| b.join("initdb").exists())
            .collect();
        versions.sort();
        versions.pop()
    }

    fn start() -> Option<PgServer> {
        Self::start_with("")
    }

    fn start_with(settings: &str) -> Option<PgServer> {
        let Some(bin) = Self::bin() else {
            service_missing(
                "PostgreSQL's server programs (initdb, pg_ctl)",
                "none under /usr/lib/postgresql",
            );
            return None;
        };
        let dir = std::env::temp_dir().join(format!("orchestrator-pg-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("server directory");
        let _ = Command::new("chown").args(["postgres:postgres"]).arg(&dir).status();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let server = PgServer { bin, dir, port, settings: settings.to_owned() };
        let mut initdb = pg_command(&server.bin, "initdb");
        initdb.args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"]).arg(server.dir.join("data"));
        run(initdb, "initdb");
        server.pg_ctl_start();
        Some(server)
    }

    fn pg_ctl_start(&self) {
        let mut start = pg_command(&self.bin, "pg_ctl");
        start
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("server.log"))
            .arg("-o")
            .arg(format!(
                "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c max_connections=50 {}",
                self.port,
                self.dir.display(),
                self.settings
            ))
            .args(["-w", "start"]);
        run(start, "pg_ctl start");
    }

    /// A crash: the postmaster and every backend stop at once, connections are cut.
    fn crash(&self) {
        let mut stop = pg_command(&self.bin, "pg_ctl");
        stop.arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "-w", "stop"]);
        run(stop, "pg_ctl stop -m immediate");
    }

    fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Waits until the server accepts connections again (after a crash's recovery).
    fn wait_ready(&self) {
        let started = Instant::now();
        loop {
            let mut ready = pg_command(&self.bin, "pg_isready");
            ready.args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()]);
            if ready.status().is_ok_and(|s| s.success()) {
                return;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the server did not come back");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Sends `signal` (`STOP`, `KILL`) to process `pid`.
fn signal(pid: i32, signal: &str) {
    let mut kill = Command::new("kill");
    kill.arg(format!("-{signal}")).arg(pid.to_string());
    run(kill, &format!("kill -{signal} {pid}"));
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let mut stop = pg_command(&self.bin, "pg_ctl");
        stop.arg("-D").arg(self.dir.join("data")).args(["-m", "immediate", "-w", "stop"]);
        let _ = stop.output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Orders arrive continuously; the server crashes and stays down ~2 s, then comes back.
/// Every answer is a 201 or a 503 problem+json (never a 500, never a hang): a request whose
/// connection is cut is refused with 503, one that waits for a connection (up to the pool's
/// 10 s) is served once the server is back. The service recovers by itself, and no step is
/// half applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_server_crashes_and_returns_under_load() {
    let Some(server) = PgServer::start() else { return };
    let Some(test_db) = TestDb::create_on(&server.admin_url()).await else { return };
    // A saga run cut off by the crash holds its order's lease until it expires: short here.
    let env = [("APP__DATABASE__CONNECT_TIMEOUT", "1s"), ("APP__SAGA__LEASE", "2s")];
    let app = TestApp::spawn_on_database(test_db, &env, None).await;
    let token = app.token("alice");
    let (mut created, mut unavailable) = (0u32, 0u32);
    let mut slowest_refusal = Duration::ZERO;
    let mut slowest = Duration::ZERO;
    // The server crashes once the load is flowing (ten orders created) and is started again
    // once a request sent after the crash has been answered: the outage is seen, by
    // construction, with no fixed delay either way.
    let gap: Arc<Mutex<(Option<Instant>, Option<Instant>)>> = Arc::default();
    let progress = Arc::new((AtomicU32::new(0), AtomicU32::new(0))); // (created, answered in the gap)
    let outage = {
        let (gap, progress) = (gap.clone(), progress.clone());
        tokio::task::spawn_blocking(move || {
            let wait_for = |what: &str, done: &dyn Fn() -> bool| {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !done() {
                    assert!(Instant::now() < deadline, "no {what} within 60 s");
                    std::thread::sleep(Duration::from_millis(10));
                }
            };
            wait_for("orders before the crash", &|| progress.0.load(Ordering::SeqCst) >= 10);
            server.crash();
            gap.lock().unwrap().0 = Some(Instant::now());
            wait_for("answer during the outage", &|| progress.1.load(Ordering::SeqCst) >= 1);
            server.pg_ctl_start();
            gap.lock().unwrap().1 = Some(Instant::now());
            server
        })
    };
    let mut during_gap = 0u32;
    let started = Instant::now();
    while !outage.is_finished() || started.elapsed() < Duration::from_secs(8) {
        assert!(started.elapsed() < Duration::from_secs(90), "the outage never ended");
        let sent = Instant::now();
        let response = tokio::time::timeout(
            Duration::from_secs(20),
            app.post("/api/orders", &token).json(&crate::helpers::order_body()).send(),
        )
        .await
        .expect("an answer while the database is down, not a hang")
        .unwrap();
        let (down, up) = *gap.lock().unwrap();
        if down.is_some_and(|down| Instant::now() > down) && up.is_none_or(|up| sent < up) {
            during_gap += 1;
        }
        if down.is_some_and(|down| sent > down) && up.is_none() {
            progress.1.fetch_add(1, Ordering::SeqCst);
        }
        slowest = slowest.max(sent.elapsed());
        match response.status() {
            StatusCode::CREATED => {
                created += 1;
                progress.0.store(created, Ordering::SeqCst);
            }
            StatusCode::SERVICE_UNAVAILABLE => {
                slowest_refusal = slowest_refusal.max(sent.elapsed());
                assert_eq!(response.headers().get("content-type").unwrap(), "application/problem+json");
                let body: serde_json::Value = response.json().await.unwrap();
                assert_eq!(body["code"], "SERVICE_UNAVAILABLE");
                unavailable += 1;
            }
            other => panic!(
                "only 201 or 503 while the database is down, got {other}: {}",
                response.text().await.unwrap()
            ),
        }
    }
    let _server = outage.await.expect("the server was crashed and restarted during the load");
    assert!(during_gap > 0, "requests were in flight while the server was down");
    let recovered = Instant::now();
    until_within("recovery", Duration::from_secs(30), || async {
        app.post("/api/orders", &token).json(&crate::helpers::order_body()).send().await.unwrap().status()
            == StatusCode::CREATED
    })
    .await;
    let recovered_in = recovered.elapsed();
    let ready = app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap();
    assert_eq!(ready.status(), StatusCode::OK, "ready again");
    let resumed = no_half_applied_step(&app).await;
    eprintln!(
        "RELIABILITY db-restart created={created} unavailable={unavailable} in_flight_during_gap={during_gap} slowest_answer_ms={} slowest_refusal_ms={} resumed={resumed} lost=0 first_order_after_the_load_ms={}",
        slowest.as_millis(),
        slowest_refusal.as_millis(),
        recovered_in.as_millis()
    );
    // The app's database goes while its server runs (see above).
    drop(app);
}

/// A database crash must not let the relay skip an event (docs/decisions.md, "The fast
/// path's records stay synchronous"). A relay's in-memory cursor counts as done every
/// transaction id below its snapshot's `xmax`. A rolled-back producer transaction is not
/// flushed: when it is the newest to complete as a fill takes its snapshot and the server
/// crashes before its WAL is written, recovery hands its id out again — here to the next
/// event's transaction, which the cursor kept across the crash would take as already done.
/// A batch read before the crash and recorded after it would write such a snapshot
/// durably. After a crash the relay reads its lanes again from their records, and a record
/// of a batch read before the crash is refused: the event is delivered (its lane's batch
/// read before the crash is sent again: a duplicate, never a loss).
///
/// The crash is made deterministic: the WAL writer is stopped (`SIGSTOP`) so that the
/// rollback's WAL stays in shared memory, then killed, which makes the postmaster crash and
/// recover every process (its start time unchanged, as in any backend's crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_crash_never_lets_the_relay_skip_an_event() {
    use chrono::Utc;
    use orchestrator::adapters::persistence::{SeaOrmOutboxStore, SeaOrmStore};
    use orchestrator::application::ports::{Changes, FastRecord, RelayStore, UnitOfWork};
    use orchestrator::domain::outbox::lanes::lane_of;
    use sea_orm::{ConnectionTrait, Statement, TransactionTrait};

    // Nothing but the test writes WAL or flushes it: no autovacuum, no timed checkpoint.
    let Some(server) = PgServer::start_with("-c autovacuum=off -c checkpoint_timeout=1h") else { return };
    let Some(test_db) = TestDb::create_on(&server.admin_url()).await else { return };
    let conn = test_db.connect().await;
    let wake = Arc::new(tokio::sync::Notify::new());
    let outbox = SeaOrmOutboxStore::new(conn.clone(), wake.clone());
    let orders = SeaOrmStore::new(conn.clone(), wake);
    let event = outbox_event;
    let one = |sql: &str| Statement::from_string(conn.get_database_backend(), sql.to_owned());
    // Two aggregates in different lanes: `b`'s batch is read before the crash and recorded
    // after it; `a`'s lane has its difference read empty just before the crash.
    let a = "agg-a";
    let b = (0..)
        .map(|i| format!("agg-b-{i}"))
        .find(|b| lane_of("order", b, 16) != lane_of("order", a, 16))
        .unwrap();
    let t = Utc::now();
    let held = outbox.lease_lanes("w", 16, t, t + chrono::Duration::minutes(10)).await.unwrap();
    let record =
        |token| FastRecord { batches: vec![token], failures: vec![], held_back: vec![], attempted_at: t };

    orders.commit(Changes { outbox: vec![event(a)], ..Default::default() }).await.unwrap();
    let first = outbox.next_batch("w", &held, &[], 64).await.unwrap().expect("the first event");
    assert!(outbox.record_batches("w", &record(first.token), t).await.unwrap().is_empty());
    orders.commit(Changes { outbox: vec![event(&b)], ..Default::default() }).await.unwrap();
    let before = outbox.next_batch("w", &held, &[], 64).await.unwrap().expect("b's event");
    assert_eq!(before.rows.len(), 1);

    let walwriter = walwriter_pid(&conn).await;
    signal(walwriter, "STOP");
    // A producer's transaction rolls back: its id is the newest completed, its WAL unwritten.
    let txn = conn.begin().await.unwrap();
    let rolled_back: i64 = txn
        .query_one_raw(one("SELECT pg_current_xact_id()::text::bigint AS x"))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "x")
        .unwrap();
    txn.rollback().await.unwrap();
    // The relay reads on: every lane but b's (whose batch is unrecorded) takes a snapshot
    // that counts the rolled-back id as done, and finds nothing new.
    let idle = outbox.next_batch("w", &held, std::slice::from_ref(&before.token), 64).await.unwrap();
    assert!(idle.is_none(), "nothing new before the crash");

    let _server = crash_by_walwriter(server, walwriter, &conn).await;

    // The next event's transaction is given the rolled-back transaction's id.
    orders.commit(Changes { outbox: vec![event(a)], ..Default::default() }).await.unwrap();
    let reused: i64 = conn
        .query_one_raw(one("SELECT MAX(txid::text::bigint) AS x FROM outbox_events"))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "x")
        .unwrap();
    assert_eq!(reused, rolled_back, "the crash handed the rolled-back transaction's id out again");
    // b's batch, read before the crash, is recorded after it: refused.
    let fenced = outbox.record_batches("w", &record(before.token), t).await.unwrap();
    assert!(!fenced.is_empty(), "a batch read before the crash is never recorded after it");

    let seen = delivered(&outbox, &held, t).await;
    assert!(seen.iter().any(|s| s == a), "the event committed after the crash is delivered: {seen:?}");
    assert!(seen.contains(&b), "b's batch, never recorded, is sent again: {seen:?}");
    // The test's database goes while its server runs (dropping it afterwards would wait
    // for a connection until the pool gives up).
    drop(conn);
    drop(test_db);
}

/// A fast-path record whose events all went out commits asynchronously (docs/decisions.md,
/// "The fast path's records commit asynchronously, again"). A crash can lose it after the
/// relay has gone on: the record's own transaction id is then the newest completed one, the
/// next fill's snapshots count it as done, and recovery hands it out again, here to the next
/// event's transaction. The relay must neither skip that event (its cursors were read before
/// the crash) nor lose the lost record's events (they go out again).
///
/// Deterministic as above: the WAL writer is stopped, so the record's commit stays in shared
/// memory (nothing else flushes: no producer commits meanwhile), then killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_asynchronous_record_lost_to_a_crash_never_lets_the_relay_skip_an_event() {
    use chrono::Utc;
    use orchestrator::adapters::persistence::{SeaOrmOutboxStore, SeaOrmStore};
    use orchestrator::application::ports::{Changes, FastRecord, RelayStore, UnitOfWork};
    use sea_orm::{ConnectionTrait, Statement};

    let Some(server) = PgServer::start_with("-c autovacuum=off -c checkpoint_timeout=1h") else { return };
    let Some(test_db) = TestDb::create_on(&server.admin_url()).await else { return };
    let conn = test_db.connect().await;
    let wake = Arc::new(tokio::sync::Notify::new());
    let outbox = SeaOrmOutboxStore::new(conn.clone(), wake.clone());
    let orders = SeaOrmStore::new(conn.clone(), wake);
    let event = outbox_event;
    let one = |sql: &str| Statement::from_string(conn.get_database_backend(), sql.to_owned());
    let number = |sql: &'static str| {
        let conn = conn.clone();
        async move {
            let row = conn.query_one_raw(one(sql)).await.unwrap().unwrap();
            row.try_get::<i64>("", "n").unwrap()
        }
    };
    let t = Utc::now();
    let held = outbox.lease_lanes("w", 16, t, t + chrono::Duration::minutes(10)).await.unwrap();
    let record =
        |token| FastRecord { batches: vec![token], failures: vec![], held_back: vec![], attempted_at: t };

    let walwriter = walwriter_pid(&conn).await;
    // The event commits (synchronously, flushed by its own backend); then the WAL writer stops.
    orders.commit(Changes { outbox: vec![event("agg-a")], ..Default::default() }).await.unwrap();
    signal(walwriter, "STOP");
    let batch = outbox.next_batch("w", &held, &[], 64).await.unwrap().expect("the first event");
    assert!(outbox.record_batches("w", &record(batch.token), t).await.unwrap().is_empty());
    let recorded_by = number("SELECT MAX(xmin::text::bigint) AS n FROM outbox_progress").await;
    let progress_rows = number("SELECT COUNT(*) AS n FROM outbox_progress").await;
    // The relay reads on: every lane's snapshot counts the record's id as done.
    assert!(outbox.next_batch("w", &held, &[], 64).await.unwrap().is_none(), "nothing new before the crash");

    let _server = crash_by_walwriter(server, walwriter, &conn).await;
    assert_eq!(
        number("SELECT COUNT(*) AS n FROM outbox_progress").await,
        progress_rows - 1,
        "the record was asynchronous: the crash lost it"
    );

    // The next event's transaction is given the lost record's id.
    orders.commit(Changes { outbox: vec![event("agg-c")], ..Default::default() }).await.unwrap();
    let reused = number("SELECT MAX(txid::text::bigint) AS n FROM outbox_events").await;
    assert_eq!(reused, recorded_by, "the crash handed the lost record's transaction id out again");

    let seen = delivered(&outbox, &held, t).await;
    assert!(seen.iter().any(|s| s == "agg-c"), "the event committed after the crash is delivered: {seen:?}");
    assert!(seen.iter().any(|s| s == "agg-a"), "the lost record's event is sent again: {seen:?}");
    drop(conn);
    drop(test_db);
}

/// An event of `aggregate` for the crash tests.
fn outbox_event(aggregate: &str) -> orchestrator::application::ports::NewOutboxEvent {
    orchestrator::application::ports::NewOutboxEvent {
        event_id: orchestrator::domain::ids::EventId::new(),
        aggregate_type: "order".into(),
        aggregate_id: aggregate.into(),
        event_type: "order.completed".into(),
        routing_key: "order.completed".into(),
        payload: "{}".into(),
        correlation_id: None,
        created_at: chrono::Utc::now(),
    }
}

/// The pid of the WAL writer of `conn`'s server.
async fn walwriter_pid(conn: &sea_orm::DatabaseConnection) -> i32 {
    use sea_orm::{ConnectionTrait, Statement};
    conn.query_one_raw(Statement::from_string(
        conn.get_database_backend(),
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'",
    ))
    .await
    .unwrap()
    .expect("a WAL writer")
    .try_get("", "pid")
    .unwrap()
}

/// Kills the (stopped) WAL writer: the postmaster crashes and recovers every process. Returns
/// once `conn` answers again.
async fn crash_by_walwriter(
    server: PgServer,
    walwriter: i32,
    conn: &sea_orm::DatabaseConnection,
) -> PgServer {
    use sea_orm::ConnectionTrait;
    let server = tokio::task::spawn_blocking(move || {
        signal(walwriter, "KILL");
        // The postmaster reaps the killed process and begins its crash recovery in the same
        // step: once the process is gone, `wait_ready` waits for the recovered server.
        let deadline = Instant::now() + Duration::from_secs(30);
        while Path::new(&format!("/proc/{walwriter}")).exists() {
            assert!(Instant::now() < deadline, "the killed WAL writer was never reaped");
            std::thread::sleep(Duration::from_millis(5));
        }
        server.wait_ready();
        server
    })
    .await
    .expect("the server crashed and recovered");
    until_within("the database after its crash", Duration::from_secs(30), || async {
        conn.execute_unprepared("SELECT 1").await.is_ok()
    })
    .await;
    server
}

/// Four rounds of worker `w` reading and recording its lanes after a crash: the aggregates of
/// the events delivered. The relay learns of the crash at its first read (which fails), and
/// reads its lanes again.
async fn delivered(
    outbox: &orchestrator::adapters::persistence::SeaOrmOutboxStore,
    held: &[orchestrator::application::ports::HeldLane],
    t: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    use orchestrator::application::ports::{FastRecord, RelayStore};
    let mut seen = Vec::new();
    for _ in 0..4 {
        match outbox.next_batch("w", held, &[], 64).await {
            Ok(Some(batch)) => {
                seen.extend(batch.rows.iter().map(|r| r.aggregate_id.clone()));
                let record = FastRecord {
                    batches: vec![batch.token],
                    failures: vec![],
                    held_back: vec![],
                    attempted_at: t,
                };
                assert!(outbox.record_batches("w", &record, t).await.unwrap().is_empty());
            }
            Ok(None) => {}
            Err(err) => eprintln!("read after the crash: {err}"),
        }
    }
    seen
}
