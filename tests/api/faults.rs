//! Breaking things for real (docs/spec.md §8): a worker killed with SIGKILL mid-drain and
//! mid-message, the broker connection severed, the database's connections terminated
//! under load, poison messages. Nothing lost, nothing applied twice, everything recovers.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use chrono::Utc;
use orchestrator::adapters::persistence::SeaOrmStore;
use orchestrator::application::ports::{Changes, NewOutboxEvent, UnitOfWork};
use orchestrator::domain::ids::EventId;
use reqwest::StatusCode;
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::json;

use crate::broker::{TestBroker, amqp_url};
use crate::cli::{app, temp_dir};
use crate::helpers::TcpProxy;
use crate::helpers::{Backend, TEST_KEYS, TestApp, TestDb, count_where, order_body};
use crate::helpers::{Process, until};
use crate::meeting::{Meeting, registered, start};

pub(crate) fn kill9(child: &mut Process) {
    let _ = std::process::Command::new("kill").args(["-KILL", &child.id().to_string()]).status();
    let _ = child.wait();
}

/// Prints the workers' logs (`*.log` in the test's directory) when the test fails, so a
/// failure of a separate process can be read from the test's own output.
pub(crate) struct LogsOnFailure<'a>(pub(crate) &'a std::path::Path);

impl Drop for LogsOnFailure<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.0) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(60).collect();
                eprintln!("--- {} (last {} lines)", path.display(), tail.len());
                for line in tail.iter().rev() {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// `app worker` against `db` and the test broker, with short leases so a killed worker's
/// claims come back quickly. Its log goes to `{dir}/{name}.log`.
fn worker(
    dir: &std::path::Path,
    name: &str,
    db: &TestDb,
    broker: &TestBroker,
    extra: &[(String, String)],
) -> Process {
    let on = [
        ("APP__BROKER__URL".to_owned(), amqp_url()),
        ("APP__BROKER__EXCHANGE".to_owned(), broker.exchange.clone()),
    ];
    worker_on(dir, name, db, &on, extra)
}

/// [`worker`] on any broker: `broker` is the environment that chooses it.
pub(crate) fn worker_on(
    dir: &std::path::Path,
    name: &str,
    db: &TestDb,
    broker: &[(String, String)],
    extra: &[(String, String)],
) -> Process {
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("worker log file");
    let mut cmd = app(dir);
    cmd.env("APP__DATABASE__URL", &db.url)
        .env("APP__AUTH__KEYS", TEST_KEYS)
        .envs(broker.iter().cloned())
        .env("APP__OUTBOX__PROCESSING_TIMEOUT", "2s")
        .env("APP__OUTBOX__RECOVERY_INTERVAL", "500ms")
        .env("APP__OUTBOX__BACKOFF_BASE", "100ms")
        .env("APP__OUTBOX__POLL_INTERVAL", "200ms")
        .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
        .env("APP__PAYMENT__PROVIDER", "mock")
        .env("APP__SETTLEMENT__CHANNEL", "simulated")
        .env("APP__NOTIFICATION__CHANNEL", "simulated")
        .envs(extra.iter().cloned())
        .arg("worker")
        .stdout(Stdio::null())
        .stderr(log);
    Process::spawn(&mut cmd)
}

pub(crate) async fn seed_events(db: &DatabaseConnection, n: usize) -> Vec<NewOutboxEvent> {
    let uow = SeaOrmStore::new(db.clone(), Default::default());
    let mut all = Vec::new();
    for chunk in 0..n.div_ceil(500) {
        let events: Vec<NewOutboxEvent> = (0..500.min(n - chunk * 500))
            .map(|i| {
                let event_id = EventId::new();
                let aggregate_id = format!("agg-{chunk}-{i}");
                NewOutboxEvent {
                    event_id,
                    aggregate_type: "order".into(),
                    payload: json!({ "eventId": event_id.to_string(), "aggregateId": aggregate_id })
                        .to_string(),
                    aggregate_id,
                    event_type: "test.crash".into(),
                    routing_key: "test.crash".into(),
                    correlation_id: None,
                    created_at: Utc::now(),
                }
            })
            .collect();
        all.extend(events.clone());
        uow.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
    }
    all
}

/// SIGKILL of a worker consuming registrations: after a restart each message has exactly
/// one effect (one order, one charge).
fn signal(child: &Process, name: &str) {
    let _ = std::process::Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status();
}

/// A worker paused (SIGSTOP) past its lane lease while another takes its lanes over, then
/// resumed (SIGCONT): it must record nothing for lanes it lost, and whatever it still sends
/// is a duplicate with the same message id — never a loss, never a reordering of an
/// aggregate's first deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_past_its_lease_sends_only_duplicates_when_it_resumes() {
    let Some(broker) = TestBroker::start().await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let uow = SeaOrmStore::new(conn.clone(), Default::default());
    let mut events = Vec::new();
    for a in 0..1000 {
        let aggregate = format!("agg-{a}");
        let batch: Vec<NewOutboxEvent> = (0..4)
            .map(|seq| {
                let event_id = EventId::new();
                NewOutboxEvent {
                    event_id,
                    aggregate_type: "order".into(),
                    aggregate_id: aggregate.clone(),
                    event_type: "test.pause".into(),
                    routing_key: "test.pause".into(),
                    payload: json!({ "eventId": event_id.to_string(), "aggregateId": aggregate, "seq": seq })
                        .to_string(),
                    correlation_id: None,
                    created_at: Utc::now(),
                }
            })
            .collect();
        events.extend(batch.clone());
        uow.commit(Changes { outbox: batch, ..Default::default() }).await.unwrap();
    }
    let dir = temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    let mut first = worker(&dir.0, "first", &db, &broker, &[]);
    broker.wait_for(400, Duration::from_secs(60)).await;
    signal(&first, "STOP");
    let mut second = worker(&dir.0, "second", &db, &broker, &[]);
    until("every row published by the second worker", || async {
        crate::helpers::outbox_in(&conn, orchestrator::domain::outbox::OutboxStatus::Published).await
            == events.len() as i64
    })
    .await;
    let owners = count_where(&conn, "outbox_lanes", "owner IS NOT NULL").await;
    signal(&first, "CONT");
    // A graceful stop finishes the round the resumed worker was in (whatever it still
    // sends goes out before it exits); the barrier then has every delivery in.
    crate::helpers::terminate(&mut first);
    crate::helpers::terminate(&mut second);
    broker.barrier().await;
    let received = broker.received.lock().unwrap().clone();
    let ids: HashSet<&str> = received.iter().map(|r| r.message_id.as_str()).collect();
    for e in &events {
        assert!(ids.contains(e.event_id.to_string().as_str()), "event {} lost", e.event_id);
    }
    let mut seen = HashSet::new();
    let mut next: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for r in &received {
        if !seen.insert(r.message_id.clone()) {
            continue; // a duplicate: same message id, dropped by any idempotent consumer
        }
        let aggregate = r.body["aggregateId"].as_str().unwrap().to_owned();
        let seq = r.body["seq"].as_i64().unwrap();
        let expected = next.entry(aggregate.clone()).or_insert(0);
        assert_eq!(seq, *expected, "aggregate {aggregate}: first deliveries out of order");
        *expected += 1;
    }
    let duplicates = received.len() - ids.len();
    // What a paused worker had read and not recorded is sent again by the next owner: at
    // most `UNRECORDED_BATCHES` batches (of `outbox.batch_size`, 256 here).
    let bound = orchestrator::application::outbox::UNRECORDED_BATCHES * 256;
    assert!(
        duplicates <= bound,
        "duplicates only for batches unrecorded at the pause: {duplicates} > {bound}"
    );
    assert_eq!(crate::helpers::outbox_unpublished(&conn).await, 0, "nothing stuck");
    assert_eq!(owners, 16, "the second worker held every lane while the first was paused");
    eprintln!("RELIABILITY pause-relay events={} duplicated={duplicates}", events.len());
    drop(conn);
    broker.cleanup().await;
}

/// `outbox_resent_total` of a worker, by cause, from its `/metrics` (its health URL is in
/// its JSON log).
async fn resent_by_cause(log: &std::path::Path) -> std::collections::BTreeMap<String, f64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let health = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|l| l["health"].as_str().map(str::to_owned))
        .expect("the worker logs its health URL");
    orchestrator::startup::install_tls_provider();
    let metrics =
        reqwest::get(health.replace("/health/ready", "/metrics")).await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("outbox_resent_total{cause=\""))
        .filter_map(|l| {
            let (cause, rest) = l.split_once('"')?;
            Some((cause.to_owned(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Issue 57: workers starved of CPU — each stopped (SIGSTOP) most of the time and let run
/// in short slices, now and then for longer than its lanes' lease (2 s here) — while events
/// commit and drain. Lanes change hands under them mid-drain. Nothing is lost, each
/// aggregate's first deliveries stay in order, and every duplicate is one a worker counted
/// in `outbox_resent_total` (what an operator watches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_starved_workers_lose_nothing_and_count_every_duplicate() {
    let Some(broker) = TestBroker::start().await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let dir = temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    let json_logs = [("APP__LOG__FORMAT".to_owned(), "json".to_owned())];
    let names = ["starved-a", "starved-b"];
    let mut workers: Vec<Process> =
        names.iter().map(|n| worker(&dir.0, n, &db, &broker, &json_logs)).collect();
    // Events commit while the workers starve: 3 000 aggregates of 4 events, 300 a commit.
    let uow = SeaOrmStore::new(conn.clone(), Default::default());
    let committer = tokio::spawn(async move {
        let mut all = Vec::new();
        for chunk in 0..40 {
            let mut batch = Vec::new();
            for a in 0..75 {
                let aggregate = format!("agg-{chunk}-{a}");
                for seq in 0..4 {
                    let event_id = EventId::new();
                    batch.push(NewOutboxEvent {
                        event_id,
                        aggregate_type: "order".into(),
                        aggregate_id: aggregate.clone(),
                        event_type: "test.starved".into(),
                        routing_key: "test.starved".into(),
                        payload:
                            json!({ "eventId": event_id.to_string(), "aggregateId": aggregate, "seq": seq })
                                .to_string(),
                        correlation_id: None,
                        created_at: Utc::now(),
                    });
                }
            }
            all.extend(batch.iter().map(|e| e.event_id));
            uow.commit(Changes { outbox: batch, ..Default::default() }).await.unwrap();
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        all
    });
    // The starvation: slices of 50 ms running, 150–450 ms stopped, and every fifth time
    // 2.5 s stopped (past the lease), each worker on its own rhythm.
    let pids: Vec<u32> = workers.iter().map(|w| w.id()).collect();
    let starving = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut round = 0u32;
        while started.elapsed() < Duration::from_secs(12) {
            round += 1;
            for (i, pid) in pids.iter().enumerate() {
                let stop = if (round + i as u32 * 2).is_multiple_of(5) {
                    2500
                } else {
                    150 + 100 * u64::from((round + i as u32) % 4)
                };
                let pid = pid.to_string();
                tokio::spawn(async move {
                    let _ = std::process::Command::new("kill").args(["-STOP", &pid]).status();
                    tokio::time::sleep(Duration::from_millis(stop)).await;
                    let _ = std::process::Command::new("kill").args(["-CONT", &pid]).status();
                });
            }
            tokio::time::sleep(Duration::from_millis(700)).await;
        }
        tokio::time::sleep(Duration::from_secs(3)).await; // the last stops end
    });
    let events = committer.await.unwrap();
    starving.await.unwrap();
    for w in &workers {
        signal(w, "CONT");
    }
    crate::helpers::until_within(
        "every event published once the starving ends",
        Duration::from_secs(90),
        || async {
            crate::helpers::outbox_in(&conn, orchestrator::domain::outbox::OutboxStatus::Published).await
                == events.len() as i64
        },
    )
    .await;
    // Lanes changed hands under the starved workers: each take-over bumps a lane's epoch,
    // and the two workers' start settles the 16 lanes with epochs summing to 24 at most (one
    // takes all 16, then gives 8 to the other).
    let epochs: i64 =
        crate::helpers::scalar(&conn, "SELECT COALESCE(SUM(epoch), 0)::bigint FROM outbox_lanes").await;
    let takeovers = epochs - 24;
    let mut resent = std::collections::BTreeMap::<String, f64>::new();
    for name in names {
        for (cause, n) in resent_by_cause(&dir.0.join(format!("{name}.log"))).await {
            *resent.entry(cause).or_default() += n;
        }
    }
    for w in &mut workers {
        crate::helpers::terminate(w);
    }
    broker.barrier().await;
    let received = broker.received.lock().unwrap().clone();
    let ids: HashSet<&str> = received.iter().map(|r| r.message_id.as_str()).collect();
    for e in &events {
        assert!(ids.contains(e.to_string().as_str()), "event {e} lost");
    }
    let mut seen = HashSet::new();
    let mut next: std::collections::HashMap<String, i64> = std::collections::HashMap::new();
    for r in &received {
        if !seen.insert(r.message_id.clone()) {
            continue; // a duplicate: same message id
        }
        let aggregate = r.body["aggregateId"].as_str().unwrap().to_owned();
        let seq = r.body["seq"].as_i64().unwrap();
        let expected = next.entry(aggregate.clone()).or_insert(0);
        assert_eq!(seq, *expected, "aggregate {aggregate}: first deliveries out of order");
        *expected += 1;
    }
    let duplicates = received.len() - ids.len();
    let counted = resent.values().fold(0.0, |sum, n| sum + n);
    eprintln!(
        "RELIABILITY starved-relays events={} duplicated={duplicates} counted={counted} by_cause={resent:?} lanes_taken_over={takeovers}",
        events.len()
    );
    assert!(
        takeovers > 0,
        "the starvation made no lane change hands (epochs {epochs}): the test proved nothing"
    );
    assert!(
        duplicates as f64 <= counted,
        "a duplicate no worker counted: {duplicates} delivered twice, {counted} counted ({resent:?})"
    );
    assert_eq!(crate::helpers::outbox_unpublished(&conn).await, 0, "nothing stuck");
    drop(conn);
    broker.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_message_applies_each_message_once() {
    let Some(broker) = TestBroker::start().await else { return };
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut env = Meeting::env(&id);
    // A killed run's saga lease runs out quickly, and the worker looks for stalled sagas often.
    env.push(("APP__SAGA__LEASE".into(), "2s".into()));
    env.push(("APP__PAYMENT__RECONCILIATION__INTERVAL".into(), "300ms".into()));
    let dir = temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    let mut first = worker(&dir.0, "first", &db, &broker, &env);
    let connection =
        orchestrator::adapters::messaging::amqp::connect(&broker.endpoint, "test-meeting").await.unwrap();
    let channel = connection.open_channel(None).await.unwrap();
    let meeting = Meeting { id: id.clone(), connection, channel };
    meeting.wait_for_consumers().await;
    let n = 60;
    for i in 0..n {
        meeting
            .publish(
                "meeting.participant.registered",
                &registered(&format!("crash-{i}"), "m-crash", &format!("u-{i}"), 1000),
                None,
            )
            .await;
    }
    until("some orders", || async { count_where(&conn, "orders", "1 = 1").await >= 10 }).await;
    kill9(&mut first);
    let mut second = worker(&dir.0, "second", &db, &broker, &env);
    until("every registration", || async {
        count_where(&conn, "inbox", "consumer = 'participant-register'").await == n
            && count_where(
                &conn,
                "orders",
                "status = 'CREATED' OR status = 'PAYMENT_APPROVED' OR status = 'SETTLEMENT_REQUESTED'",
            )
            .await
                == 0
    })
    .await;
    crate::helpers::terminate(&mut second);
    assert_eq!(count_where(&conn, "orders", "1 = 1").await, n, "one order per message");
    assert_eq!(count_where(&conn, "payments", "1 = 1").await, n, "one payment per order");
    assert_eq!(count_where(&conn, "orders", "status = 'COMPLETED'").await, n, "every saga finished");
    assert_eq!(meeting.depth(&format!("register.{id}.dlq").replace(&format!(".{id}.dlq"), "")).await, 0);
    eprintln!("RELIABILITY crash-consumer messages={n} lost=0 duplicated=0");
    drop(conn);
    meeting.cleanup().await;
    broker.cleanup().await;
}

/// The consumers' broker connection is cut: they reconnect by themselves and nothing is
/// lost or applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_reconnect_after_the_broker_connection_is_cut() {
    let Some(broker) = TestBroker::start().await else { return };
    let (host, port) = broker.endpoint.host_port();
    let proxy = TcpProxy::start((host.to_owned(), port)).await;
    let url = proxy.url(&broker.endpoint);
    let extra = [("APP__BROKER__URL", url.as_str())];
    let Some((app, app_broker, meeting, workers)) = start(Backend::Sqlite, &extra).await else { return };
    for i in 0..10 {
        meeting
            .publish(
                "meeting.participant.registered",
                &registered(&format!("cut-a-{i}"), "m-cut", &format!("ua-{i}"), 500),
                None,
            )
            .await;
    }
    until("the first half", || async { count_where(&app.db, "inbox", "1 = 1").await == 10 }).await;
    let cut = std::time::Instant::now();
    proxy.sever();
    for i in 0..10 {
        meeting
            .publish(
                "meeting.participant.registered",
                &registered(&format!("cut-b-{i}"), "m-cut", &format!("ub-{i}"), 500),
                None,
            )
            .await;
    }
    until("the second half, after reconnecting", || async {
        count_where(&app.db, "inbox", "1 = 1").await == 20
    })
    .await;
    eprintln!(
        "RELIABILITY broker-cut-consumers messages=20 lost=0 duplicated=0 recovered_in_ms={}",
        cut.elapsed().as_millis()
    );
    assert_eq!(count_where(&app.db, "orders", "1 = 1").await, 20);
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    app_broker.cleanup().await;
    broker.cleanup().await;
}

/// The database kills the app's connections under load: HTTP answers 503 problem+json
/// (never 500) while it lasts, no saga step is half-applied, and everything recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_connections_killed_under_load() {
    // A saga run cut off by a killed connection holds its order's lease until it expires.
    let Some(app) = TestApp::spawn_with(Backend::Postgres, &[("APP__SAGA__LEASE", "2s")]).await else {
        return;
    };
    let token = app.token("alice");
    let db_name: String = {
        let row = app
            .db
            .query_one_raw(sea_orm::Statement::from_string(
                app.db.get_database_backend(),
                "SELECT current_database() AS n",
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get("", "n").unwrap()
    };
    let admin_url = std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let killer = sea_orm::Database::connect(admin_url).await.unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let kills = {
        let stop = stop.clone();
        let db_name = db_name.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while !stop.is_cancelled() {
                let sql = format!(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db_name}' AND pid <> pg_backend_pid()"
                );
                let _ = killer.execute_unprepared(&sql).await;
                n += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
            n
        })
    };
    let (mut created, mut unavailable) = (0, 0);
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let response = app.post("/api/orders", &token).json(&order_body()).send().await.unwrap();
        match response.status() {
            StatusCode::CREATED => created += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(response.headers().get("content-type").unwrap(), "application/problem+json");
                let body: serde_json::Value = response.json().await.unwrap();
                assert_eq!(body["code"], "SERVICE_UNAVAILABLE");
                unavailable += 1;
            }
            other => panic!(
                "only 201 or 503 while the database fails, got {other}: {}",
                response.text().await.unwrap()
            ),
        }
    }
    stop.cancel();
    let kill_rounds = kills.await.unwrap();
    assert!(kill_rounds > 5);
    // Recovery: the next requests succeed.
    let recovered = std::time::Instant::now();
    until("recovery", || async {
        app.post("/api/orders", &token).json(&order_body()).send().await.unwrap().status()
            == StatusCode::CREATED
    })
    .await;
    let recovered_in = recovered.elapsed();
    let resumed = no_half_applied_step(&app).await;
    eprintln!(
        "RELIABILITY db-kill requests={} created={created} unavailable={unavailable} resumed={resumed} lost=0 duplicated=0 recovered_in_ms={}",
        created + unavailable,
        recovered_in.as_millis()
    );
}

/// After a database failure: every order's state matches its rows (no step half applied),
/// each order left part-way resumes to the end, and every committed step's events are in
/// the outbox and get published. Returns how many orders had to be resumed.
pub(crate) async fn no_half_applied_step(app: &TestApp) -> usize {
    let admin = app.admin_token("ops");
    let mut orders = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/api/orders?limit=100&cursor={c}"),
            None => "/api/orders?limit=100".to_owned(),
        };
        let page: serde_json::Value = app.get(&path, &admin).send().await.unwrap().json().await.unwrap();
        orders.extend(page["items"].as_array().unwrap().iter().cloned());
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut resumed = 0;
    for o in &orders {
        let id = o["id"].as_str().unwrap();
        let d: serde_json::Value =
            app.get(&format!("/api/orders/{id}"), &admin).send().await.unwrap().json().await.unwrap();
        match d["status"].as_str().unwrap() {
            "COMPLETED" => {
                assert_eq!(d["payment"]["status"], "APPROVED");
                assert_eq!(d["settlement"]["status"], "SUCCEEDED");
                assert_eq!(d["notification"]["status"], "SENT");
            }
            "CREATED" => assert_eq!(d["payment"], serde_json::Value::Null),
            "PAYMENT_APPROVED" => {
                assert_eq!(d["payment"]["status"], "APPROVED");
                // docs/spec.md §13: the settlement's intent is committed before its call.
                assert!(
                    d["settlement"].is_null() || d["settlement"]["status"] == "REQUESTED",
                    "no settlement, or one asked for and not answered: {d}"
                );
            }
            "SETTLEMENT_REQUESTED" => {
                assert_eq!(d["settlement"]["status"], "SUCCEEDED");
                assert!(d["notification"].is_null() || d["notification"]["status"] == "PENDING", "{d}");
            }
            other => panic!("unexpected state {other}: {d}"),
        }
        if d["status"] != "COMPLETED" {
            resumed += 1;
            // A run cut off by the failure still holds the order's saga lease until it
            // expires (`saga.lease`); resuming before then leaves the order as it is.
            crate::helpers::until_within(
                "a half-way order resumes to the end",
                Duration::from_secs(30),
                || async {
                    let r: serde_json::Value = app
                        .post(&format!("/api/orders/{id}/orchestrate"), &admin)
                        .send()
                        .await
                        .unwrap()
                        .json()
                        .await
                        .unwrap();
                    r["status"] == "COMPLETED"
                },
            )
            .await;
        }
    }
    // Events of every committed step are in the outbox, and the relay publishes them.
    let relay = app.services.relay();
    while relay.run_once().await.unwrap().claimed > 0 {}
    assert_eq!(crate::helpers::outbox_unpublished(&app.db).await, 0);
    let completed = count_where(&app.db, "orders", "status = 'COMPLETED'").await;
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'order.completed'").await, completed);
    resumed
}

/// Poison in the queue — undecodable, oversized, wrong types, another message type — goes
/// to the DLQ without stalling the good messages behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_never_stalls_a_queue() {
    let Some((app, broker, meeting, workers)) = start(Backend::Sqlite, &[]).await else { return };
    let huge = format!("{{\"eventId\":\"big\",\"pad\":\"{}\"}}", "x".repeat(70 * 1024));
    let poison = [
        "\u{0}\u{1}binary".to_owned(),
        huge,
        json!({ "eventId": 5, "meetingId": [], "userId": {}, "amount": "x", "currency": 1 }).to_string(),
        json!({ "eventId": "cx", "meetingId": "m", "userId": "u", "refundRequired": true }).to_string(),
        json!({ "type": "something.else", "data": {} }).to_string(),
    ];
    for (i, p) in poison.iter().enumerate() {
        meeting.publish("meeting.participant.registered", p, None).await;
        meeting
            .publish(
                "meeting.participant.registered",
                &registered(&format!("good-{i}"), "m-p", &format!("up-{i}"), 100),
                None,
            )
            .await;
    }
    until("the good ones", || async { count_where(&app.db, "inbox", "event_id LIKE 'good-%'").await == 5 })
        .await;
    let dlq = || async {
        let channel = meeting.connection.open_channel(None).await.unwrap();
        let args = amqprs::channel::QueueDeclareArguments::new(&format!("test.register.{}.dlq", meeting.id))
            .passive(true)
            .finish();
        channel.queue_declare(args).await.unwrap().unwrap().1
    };
    until("the poison in the DLQ", || async { dlq().await == poison.len() as u32 }).await;
    assert_eq!(meeting.depth("register").await, 0, "nothing left stuck");
    eprintln!(
        "RELIABILITY poison messages={} dead_lettered={} good_processed=5",
        poison.len() * 2,
        poison.len()
    );
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}
