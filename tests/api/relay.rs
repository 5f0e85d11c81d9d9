//! The outbox relay against the real RabbitMQ and both databases (docs/spec.md §6): what is
//! RabbitMQ's own (unroutable and allow-listed events), wake-ups, lanes shared by relays
//! joining and leaving, lease recovery, stats and clean-up. What every broker must do
//! (exactly once, in order, refusals, dead letters, cuts, crashes) is in `outbox_contract`,
//! run against RabbitMQ and Kafka.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use orchestrator::adapters::persistence::{self, SeaOrmStore};
use orchestrator::application::ports::{Changes, NewOutboxEvent, UnitOfWork};
use orchestrator::domain::ids::EventId;
use orchestrator::domain::outbox::{FailureCode, OutboxStatus};
use orchestrator::startup::Workers;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::broker::{TestBroker, amqp_url};
use crate::helpers::{Backend, TestApp, count_where, until};
use crate::on_both_databases;

pub(crate) fn event(aggregate: &str, seq: usize, routing_key: &str, event_type: &str) -> NewOutboxEvent {
    let event_id = EventId::new();
    NewOutboxEvent {
        event_id,
        aggregate_type: "order".into(),
        aggregate_id: aggregate.into(),
        event_type: event_type.into(),
        routing_key: routing_key.into(),
        payload: json!({ "eventId": event_id.to_string(), "aggregateId": aggregate, "seq": seq }).to_string(),
        correlation_id: Some(format!("corr-{aggregate}")),
        created_at: Utc::now(),
    }
}

/// Commits `per_aggregate` events for each of `aggregates` aggregates, one transaction each.
pub(crate) async fn seed(
    uow: &dyn UnitOfWork,
    aggregates: usize,
    per_aggregate: usize,
) -> Vec<NewOutboxEvent> {
    let mut all = Vec::new();
    for a in 0..aggregates {
        let aggregate = format!("agg-{a}-{}", uuid::Uuid::new_v4().simple());
        let events: Vec<_> =
            (0..per_aggregate).map(|s| event(&aggregate, s, "test.seq", "test.seq")).collect();
        all.extend(events.clone());
        uow.commit(Changes { outbox: events, ..Default::default() }).await.expect("seed");
    }
    all
}

pub(crate) fn repo(app: &TestApp) -> SeaOrmStore {
    SeaOrmStore::new(app.db.clone(), app.services.relay_wake.clone())
}

async fn spawn_app(
    backend: Backend,
    broker: &TestBroker,
    url: &str,
    extra: &[(&str, &str)],
) -> Option<TestApp> {
    let mut env = broker.env(url);
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    TestApp::spawn_with(backend, &refs).await
}

/// [`spawn_app`] on the manual clock: backoffs, leases and retention pass when the test
/// advances time.
async fn spawn_app_manual(backend: Backend, broker: &TestBroker, extra: &[(&str, &str)]) -> Option<TestApp> {
    let mut env = broker.env(&amqp_url());
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    TestApp::spawn_on_manual_clock(backend, &refs).await
}

async fn published(app: &TestApp) -> i64 {
    crate::helpers::outbox_in(&app.db, OutboxStatus::Published).await
}

async fn unroutable_events_retry_then_dead_letter_but_allow_listed_ones_publish(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let env = [
        ("APP__OUTBOX__MAX_RETRIES", "1"),
        ("APP__OUTBOX__BACKOFF_BASE", "50ms"),
        ("APP__OUTBOX__BACKOFF_CAP", "50ms"),
    ];
    let Some(app) = spawn_app_manual(backend, &broker, &env).await else {
        return;
    };
    let uow = repo(&app);
    let lost = event("agg-lost", 0, "nobody.listens", "order.lost");
    let refunded = event("agg-refund", 0, "nobody.refunds", "payment.refunded");
    let routable = event("agg-ok", 0, "test.ok", "test.ok");
    uow.commit(Changes {
        outbox: vec![lost.clone(), refunded.clone(), routable.clone()],
        ..Default::default()
    })
    .await
    .unwrap();
    let relay = app.services.relay();
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.claimed, report.published, report.retried), (3, 2, 1));

    let filter = orchestrator::application::ports::OutboxFilter { limit: 100, ..Default::default() };
    let rows = app.services.outbox_store.list(&filter).await.unwrap();
    let find = |e: &NewOutboxEvent| rows.iter().find(|r| r.event_id == e.event_id).unwrap().clone();
    assert_eq!(find(&refunded).status, OutboxStatus::Published, "payment.refunded may be unroutable");
    assert_eq!(find(&routable).status, OutboxStatus::Published);
    let retry = find(&lost);
    assert_eq!(retry.status, OutboxStatus::RetryWait);
    assert_eq!(retry.failure_code, Some(FailureCode::Unroutable));
    assert_eq!(retry.retry_count, 1);
    let wait = retry.next_attempt_at.unwrap() - retry.last_attempt_at.unwrap();
    assert!(wait >= chrono::Duration::milliseconds(50), "backoff respected: {wait}");
    assert!(wait <= chrono::Duration::milliseconds(50 * 12 / 10 + 1000), "jitter is bounded: {wait}");

    // Not due yet: nothing is claimed.
    assert_eq!(relay.run_once().await.unwrap().claimed, 0);
    app.advance(Duration::from_secs(2));
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.claimed, report.dead_lettered), (1, 1));
    let dead = app.services.outbox_store.get(retry.id).await.unwrap().unwrap();
    assert_eq!(dead.status, OutboxStatus::DeadLetter);
    assert_eq!(dead.retry_count, 2);
    assert!(dead.dead_lettered_at.is_some());
    assert!(dead.failure_reason.unwrap().contains("NO_ROUTE"), "the broker's reason is kept");
    broker.barrier().await;
    let received = broker.received();
    assert_eq!(received.len(), 1, "only the routable one reached a queue");
    broker.cleanup().await;
}

async fn expired_claims_are_recovered_and_published(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let Some(app) = spawn_app_manual(backend, &broker, &[]).await else {
        return;
    };
    let events = seed(&repo(&app), 3, 1).await;
    crate::helpers::on_the_slow_path(&app.db).await;
    // A worker claims (on the slow path) and dies.
    let now = app.services.clock.now();
    let ghost = crate::helpers::claim_as(&*app.services.outbox_store, "ghost", 10, now, now).await;
    assert_eq!(ghost.len(), 3);
    let relay = app.services.relay();
    assert_eq!(relay.run_once().await.unwrap().claimed, 0, "claimed rows are not anyone else's");
    assert_eq!(app.services.housekeeping.recover_leases().await.unwrap(), 0, "its lease has not run out");
    app.advance(Duration::from_secs(1));
    assert_eq!(app.services.housekeeping.recover_leases().await.unwrap(), 3);
    assert_eq!(relay.run_once().await.unwrap().published, 3);
    assert_eq!(broker.wait_for(events.len(), Duration::from_secs(10)).await.len(), 3);
    // The ghost's late mark changes nothing.
    let ids: Vec<i64> = ghost.iter().map(|e| e.id).collect();
    assert_eq!(app.services.outbox_store.mark_published(&ids, "ghost", Utc::now()).await.unwrap(), 0);
    broker.cleanup().await;
}

async fn clean_up_deletes_by_retention(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let env = [("APP__OUTBOX__RETENTION_PUBLISHED", "7d")];
    let Some(app) = spawn_app_manual(backend, &broker, &env).await else {
        return;
    };
    seed(&repo(&app), 5, 1).await;
    app.services.relay().run_once().await.unwrap();
    assert_eq!(app.services.housekeeping.clean_up().await.unwrap(), 0, "kept for its retention");
    app.advance(Duration::from_secs(8 * 24 * 3600));
    seed(&repo(&app), 2, 1).await; // unpublished rows are never cleaned
    assert!(app.services.housekeeping.clean_up().await.unwrap() >= 5);
    assert_eq!(app.count("outbox_events").await, 2);
    broker.cleanup().await;
}

async fn relays_joining_and_leaving_share_the_lanes_and_lose_nothing(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    // A 3 s lease renews every second, so rebalancing takes seconds.
    let env = [("APP__OUTBOX__BATCH_SIZE", "16"), ("APP__OUTBOX__PROCESSING_TIMEOUT", "3s")];
    let Some(app) = spawn_app(backend, &broker, &amqp_url(), &env).await else {
        return;
    };
    let owners = || async {
        count_where(&app.db, "(SELECT DISTINCT owner FROM outbox_lanes WHERE owner IS NOT NULL) o", "1 = 1")
            .await
    };
    let start = |relays: &mut Vec<(CancellationToken, tokio::task::JoinHandle<()>)>| {
        let relay = app.services.relay();
        let stop = CancellationToken::new();
        let token = stop.clone();
        relays.push((stop, tokio::spawn(async move { relay.run_until_stopped(token).await })));
    };
    let mut relays = Vec::new();
    let mut events = seed(&repo(&app), 100, 3).await;
    start(&mut relays);
    crate::helpers::until("one relay holds every lane", || async { owners().await == 1 }).await;
    for _ in 0..3 {
        start(&mut relays);
    }
    events.extend(seed(&repo(&app), 100, 3).await);
    crate::helpers::until("four relays share the lanes", || async { owners().await == 4 }).await;
    events.extend(seed(&repo(&app), 100, 3).await);
    for (stop, handle) in relays.drain(2..) {
        stop.cancel();
        handle.await.unwrap();
    }
    crate::helpers::until("two relays share the lanes", || async { owners().await == 2 }).await;
    events.extend(seed(&repo(&app), 100, 3).await);
    broker.wait_for(events.len(), Duration::from_secs(90)).await;
    for (stop, handle) in relays {
        stop.cancel();
        handle.await.unwrap();
    }
    // Anything sent twice arrived before this.
    broker.barrier().await;
    let received = broker.received.lock().unwrap().clone();
    let ids: HashSet<&str> = received.iter().map(|r| r.message_id.as_str()).collect();
    assert_eq!((received.len(), ids.len()), (events.len(), events.len()), "every event exactly once");
    let mut last: HashMap<String, i64> = HashMap::new();
    for r in &received {
        let aggregate = r.body["aggregateId"].as_str().unwrap().to_owned();
        let seq = r.body["seq"].as_i64().unwrap();
        let previous = last.insert(aggregate.clone(), seq).unwrap_or(-1);
        assert_eq!(seq, previous + 1, "aggregate {aggregate} out of order");
    }
    assert_eq!(owners().await, 0, "stopped relays give their lanes back");
    broker.cleanup().await;
}

/// The relay's lag lane by lane (`outbox_lane_oldest_ready_age_seconds`): a lane with an
/// event waiting reports its age, every other lane — and that one once it is published — 0.
async fn stats_report_each_lanes_oldest_waiting_event(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let Some(app) = spawn_app_manual(backend, &broker, &[]).await else {
        return;
    };
    // Lanes exist once a relay has leased them.
    let relay = app.services.relay();
    assert_eq!(relay.run_once().await.unwrap().published, 0);
    // Written 90 s ago (its age is what the gauge shows).
    let mut waiting = event(&format!("agg-lag-{}", uuid::Uuid::new_v4().simple()), 0, "test.seq", "test.seq");
    waiting.created_at = Utc::now() - chrono::Duration::seconds(90);
    repo(&app).commit(Changes { outbox: vec![waiting.clone()], ..Default::default() }).await.unwrap();
    let lane = orchestrator::domain::outbox::lanes::lane_of("order", &waiting.aggregate_id, 16);
    let stats = app.services.outbox_store.stats().await.unwrap();
    assert_eq!(stats.oldest_ready_by_lane.len(), 16, "every lane is reported");
    for (l, at) in &stats.oldest_ready_by_lane {
        assert_eq!(at.is_some(), *l == lane, "lane {l}");
    }
    let admin = app.admin_token("ops");
    let metrics = app.get("/metrics", &admin).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(&format!("outbox_lane_oldest_ready_age_seconds{{lane=\"{lane}\"}} 9"))),
        "the waiting lane's age: {metrics}"
    );
    assert_eq!(relay.run_once().await.unwrap().published, 1);
    let stats = app.services.outbox_store.stats().await.unwrap();
    assert!(stats.oldest_ready_by_lane.iter().all(|(_, at)| at.is_none()), "{stats:?}");
    broker.cleanup().await;
}

/// A backlog drains in one `drain`, whatever the database: batches are read ahead of their
/// confirms on SQLite too. (On SQLite a lane was filled with one batch's ids only, so the
/// read-ahead found nothing, the drain ended after one batch and the rest waited for the
/// next wake-up or poll: a 2 000-event backlog took over 90 s with one relay.)
async fn a_backlog_drains_in_one_drain(backend: Backend) {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let Some(app) = spawn_app(backend, &broker, &amqp_url(), &[("APP__OUTBOX__BATCH_SIZE", "64")]).await
    else {
        return;
    };
    let events = seed(&repo(&app), 500, 2).await;
    let relay = app.services.relay();
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, events.len() as u64, "{report:?}");
    assert_eq!(published(&app).await, events.len() as i64);
    broker.cleanup().await;
}

on_both_databases!(
    a_backlog_drains_in_one_drain,
    stats_report_each_lanes_oldest_waiting_event,
    relays_joining_and_leaving_share_the_lanes_and_lose_nothing,
    unroutable_events_retry_then_dead_letter_but_allow_listed_ones_publish,
    expired_claims_are_recovered_and_published,
    clean_up_deletes_by_retention,
);

/// Another process's commit wakes this process's relay through `LISTEN/NOTIFY`: the poll
/// interval is an hour, so nothing else could.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_in_another_process_wakes_the_relay_on_postgres() {
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let env = [("APP__OUTBOX__POLL_INTERVAL", "1h")];
    let Some(app) = spawn_app(Backend::Postgres, &broker, &amqp_url(), &env).await else {
        return;
    };
    let workers = Workers::spawn(&app.services);
    // The listener has subscribed: its session's last statement is the LISTEN.
    crate::helpers::until("the relay listening for NOTIFY", || async {
        count_where(
            &app.db,
            "pg_stat_activity",
            "datname = current_database() AND query LIKE 'LISTEN %' AND pid <> pg_backend_pid()",
        )
        .await
            == 1
    })
    .await;
    let other_process = SeaOrmStore::new(app.db.clone(), Arc::new(Notify::new()));
    assert!(persistence::is_postgres(&app.db));
    let events = seed(&other_process, 1, 1).await;
    let received = broker.wait_for(1, Duration::from_secs(20)).await;
    assert_eq!(received.len(), 1, "woken by NOTIFY, not by polling");
    assert_eq!(received[0].message_id, events[0].event_id.to_string());
    // And an in-process commit wakes it directly.
    seed(&repo(&app), 1, 1).await;
    assert_eq!(broker.wait_for(2, Duration::from_secs(20)).await.len(), 2);
    workers.shutdown(Duration::from_secs(10)).await;
    broker.cleanup().await;
}

/// The visibility trap (docs/relay-design.md): ids are drawn when rows are inserted, not
/// when they commit. An event whose transaction takes the lower id and commits after a
/// later one must be neither skipped (a watermark past it would) nor sent before it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_later_ones_is_never_skipped_on_postgres() {
    use orchestrator::domain::outbox::lanes::lane_of;
    use sea_orm::{ConnectionTrait, TransactionTrait};
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    let lane = lane_of("order", "late", 16);
    // Another aggregate in the same lane.
    let early = (0..).map(|i| format!("early-{i}")).find(|id| lane_of("order", id, 16) == lane).unwrap();
    let open = app.db.begin().await.unwrap();
    open.execute_unprepared(&format!(
        "INSERT INTO outbox_events (event_id, aggregate_type, aggregate_id, event_type, routing_key, payload, \
           status, retry_count, created_at, version, lane, slow) \
         VALUES ('{}', 'order', 'late', 'test.late', 'test.late', '{{}}', 'READY', 0, now(), 1, {lane}, FALSE)",
        uuid::Uuid::new_v4()
    ))
    .await
    .unwrap();
    repo(&app)
        .commit(Changes { outbox: vec![event(&early, 0, "test.seq", "test.seq")], ..Default::default() })
        .await
        .unwrap();
    let relay = app.services.relay();
    assert_eq!(relay.run_once().await.unwrap().published, 1, "only the committed event goes out");
    let store = &app.services.outbox_store;
    let published = store.for_aggregate("order", &early).await.unwrap();
    assert_eq!(published[0].status, OutboxStatus::Published);
    assert_eq!(relay.run_once().await.unwrap().claimed, 0, "nothing else is visible yet");

    open.commit().await.unwrap();
    assert_eq!(relay.run_once().await.unwrap().published, 1, "the late event goes out once committed");
    let late = store.for_aggregate("order", "late").await.unwrap();
    assert_eq!(late[0].status, OutboxStatus::Published);
    assert!(late[0].id < published[0].id, "it had the lower id all along");
    assert!(late[0].published_at.is_some());
    assert_eq!(relay.run_once().await.unwrap().claimed, 0, "and it is sent once");
}

/// docs/spec.md §6's cost contract: publishing writes no row version per event. Every event row
/// keeps its physical version (`ctid`, which any UPDATE changes, HOT or not) from insert to
/// published, so the success path leaves no dead tuple behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_rewrites_no_event_row_on_postgres() {
    use sea_orm::ConnectionTrait;
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    let events = seed(&repo(&app), 100, 5).await;
    let ctids = || async {
        let rows = app
            .db
            .query_all_raw(sea_orm::Statement::from_string(
                app.db.get_database_backend(),
                "SELECT id, ctid::text AS ctid FROM outbox_events ORDER BY id",
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.try_get::<i64>("", "id").unwrap(), r.try_get::<String>("", "ctid").unwrap()))
            .collect::<Vec<_>>()
    };
    let before = ctids().await;
    assert_eq!(before.len(), events.len());
    let relay = app.services.relay();
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, events.len() as u64);
    assert_eq!(crate::helpers::outbox_in(&app.db, OutboxStatus::Published).await, events.len() as i64);
    assert_eq!(ctids().await, before, "no event row was rewritten");
}

/// No hot statement's plan is left to the table's statistics (docs/decisions.md): on a table
/// PostgreSQL has not analyzed yet — truncated or restored, autovacuum not round yet —
/// reading a batch by its ids once chose a `BitmapAnd` with the whole of
/// `idx_outbox_fast` (to check `NOT slow`), reading every fast-path index entry for every
/// batch: ~7 ms a batch at 100 000 rows, two thirds of the relay's database CPU in `bench
/// relay`. Counted by PostgreSQL itself: index entries read per event published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_read_by_its_ids_even_before_the_table_is_analyzed_on_postgres() {
    use sea_orm::ConnectionTrait;
    const EVENTS: usize = 6_000;
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    // A truncated table has no size estimate (`reltuples = -1`) until it is analyzed, and
    // statistics must not arrive in the middle of the test.
    app.db.execute_unprepared("TRUNCATE outbox_events").await.unwrap();
    app.db.execute_unprepared("ALTER TABLE outbox_events SET (autovacuum_enabled = false)").await.unwrap();
    let uow = repo(&app);
    for _ in 0..EVENTS / 1000 {
        // Envelopes of a real order event's size (~560 B): the planner's guess of the row
        // count of a table without statistics comes from its pages.
        let outbox = (0..1000)
            .map(|s| {
                let mut e =
                    event(&format!("agg-{}", uuid::Uuid::new_v4().simple()), s, "test.seq", "test.seq");
                e.payload = json!({ "eventId": e.event_id.to_string(), "pad": "x".repeat(480) }).to_string();
                e
            })
            .collect();
        uow.commit(Changes { outbox, ..Default::default() }).await.unwrap();
    }
    let relay = app.services.relay();
    let mut published = 0;
    for _ in 0..100 {
        published += relay.drain(&CancellationToken::new()).await.unwrap().published;
        if published >= EVENTS as u64 {
            break;
        }
    }
    assert_eq!(published, EVENTS as u64);
    // A session reports its counters when it goes idle, at most a second later — and at
    // once when it ends. So end every other session of the database and wait until they are
    // gone: then every read they made is counted (no time-based settling).
    // On one connection held throughout (its own session is never among those ended).
    use sea_orm::sqlx::Row;
    let mut own = app.db.get_postgres_connection_pool().acquire().await.unwrap();
    let ended: HashSet<i32> = sea_orm::sqlx::query(
        "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .fetch_all(&mut *own)
    .await
    .unwrap()
    .iter()
    .map(|r| r.get::<i32, _>("pid"))
    .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let alive: i64 =
            sea_orm::sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
                .bind(ended.iter().copied().collect::<Vec<i32>>())
                .fetch_one(&mut *own)
                .await
                .unwrap();
        if alive == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the relay's sessions did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reads: i64 = sea_orm::sqlx::query_scalar(
        "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = 'idx_outbox_fast'",
    )
    .fetch_one(&mut *own)
    .await
    .unwrap();
    assert!(reads >= EVENTS as i64, "every event's entry was read at least once: {reads}");
    // The snapshot difference reads each event's entry once; a batch read through the index
    // would read all of them again for each of the ~24 batches.
    assert!(reads <= 2 * EVENTS as i64, "{reads} index entries read to publish {EVENTS} events");
}

/// A commit's notification names the lanes of its events (PostgreSQL), so that only the
/// workers holding them wake: the lanes notified for an order's saga are exactly the lanes
/// its events were stored in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_notifies_the_lanes_of_its_events() {
    let Some(app) = TestApp::spawn(Backend::Postgres).await else { return };
    let pool = app.db.get_postgres_connection_pool().clone();
    let mut listener = sea_orm::sqlx::postgres::PgListener::connect_with(&pool).await.unwrap();
    listener.listen(persistence::OUTBOX_CHANNEL).await.unwrap();
    let token = app.token("lanes");
    for _ in 0..3 {
        let r = app.post("/api/orders", &token).json(&crate::helpers::order_body()).send().await.unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::CREATED);
    }
    let stored: HashSet<i16> = {
        use sea_orm::ConnectionTrait;
        let rows = app
            .db
            .query_all_raw(sea_orm::Statement::from_string(
                app.db.get_database_backend(),
                "SELECT DISTINCT lane FROM outbox_events",
            ))
            .await
            .unwrap();
        rows.iter().map(|r| r.try_get_by_index::<i16>(0).unwrap()).collect()
    };
    let mut notified = HashSet::new();
    while notified.len() < stored.len() {
        let n = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("a notification for every lane written")
            .unwrap();
        let lanes = persistence::notified_lanes(n.payload());
        assert!(!lanes.is_empty(), "a commit names its lanes: {:?}", n.payload());
        for lane in lanes {
            assert!(stored.contains(&lane), "lane {lane} notified but holds no event");
            notified.insert(lane);
        }
    }
    assert_eq!(notified, stored);
}

fn record(id: i64, routing_key: &str) -> orchestrator::application::ports::OutboxRecord {
    let event = event(&format!("agg-{id}"), 0, routing_key, "test.seq");
    orchestrator::application::ports::OutboxRecord {
        id,
        event_id: event.event_id,
        aggregate_type: event.aggregate_type,
        aggregate_id: event.aggregate_id,
        event_type: event.event_type,
        routing_key: event.routing_key,
        payload: event.payload,
        correlation_id: event.correlation_id,
        status: OutboxStatus::Ready,
        retry_count: 0,
        failure_code: None,
        failure_reason: None,
        next_attempt_at: None,
        last_attempt_at: None,
        claimed_by: None,
        claimed_until: None,
        created_at: event.created_at,
        published_at: None,
        dead_lettered_at: None,
        version: 1,
        lane: 0,
        traceparent: None,
    }
}

/// The relay's pipeline sends a batch while the one before it still awaits its confirms, on
/// one channel and one window: each batch resolves to its own verdicts, in its own order,
/// whichever is awaited first — here the first batch's unroutable message is returned, the
/// second batch (sent while the window was still full of the first) is confirmed whole.
#[tokio::test]
async fn a_batch_sent_before_the_one_before_it_is_confirmed_gets_its_own_verdicts() {
    use orchestrator::adapters::messaging::amqp::{AmqpEventPublisher, AmqpNodes, AmqpPublisherSettings};
    use orchestrator::application::ports::{EventPublisher, PublishOutcome};
    let Some(broker) = TestBroker::start().await else { return };
    let publisher = AmqpEventPublisher::new(
        AmqpNodes::parse([amqp_url().as_str()]).expect("the test broker's URL"),
        AmqpPublisherSettings {
            exchange: broker.exchange.clone(),
            window: 4,
            confirm_timeout: Duration::from_secs(10),
            unroutable_ok: vec![],
            connection_name: "test-overlapping-batches".into(),
            contract: orchestrator::adapters::messaging::contract::Contract::Native,
            meter: Default::default(),
        },
    );
    let first: Vec<_> =
        (1..=6).map(|i| Arc::new(record(i, if i == 3 { "nobody.lost" } else { "test.seq" }))).collect();
    let second: Vec<_> = (7..=11).map(|i| Arc::new(record(i, "test.seq"))).collect();
    let first_verdicts = publisher.send(&first).await;
    let second_verdicts = publisher.send(&second).await;
    let second_outcomes = second_verdicts.await;
    let first_outcomes = first_verdicts.await;
    assert_eq!(second_outcomes, vec![PublishOutcome::Confirmed; 5]);
    assert_eq!(first_outcomes.len(), 6);
    for (i, outcome) in first_outcomes.iter().enumerate() {
        match (i, outcome) {
            (2, PublishOutcome::Failed { code: FailureCode::Unroutable, .. }) => {}
            (2, other) => panic!("the unroutable message: {other:?}"),
            (_, other) => assert_eq!(other, &PublishOutcome::Confirmed, "message {i}"),
        }
    }
    let received = broker.wait_for(10, Duration::from_secs(10)).await;
    let ids: Vec<String> = received.iter().map(|r| r.message_id.clone()).collect();
    let expected: Vec<String> =
        first.iter().chain(&second).filter(|r| r.id != 3).map(|r| r.event_id.to_string()).collect();
    assert_eq!(ids, expected, "every routable message, in the order sent");
    publisher.close().await;
    broker.cleanup().await;
}

/// A publisher that confirms everything and remembers what it was sent; the confirms of its
/// first batch arrive only after `pause` (the worker stopped between two waves).
struct PausingPublisher {
    sent: std::sync::Mutex<Vec<EventId>>,
    pause: Duration,
    first: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl orchestrator::application::ports::EventPublisher for PausingPublisher {
    async fn ready(&self) -> Result<(), orchestrator::application::ports::BrokerUnavailable> {
        Ok(())
    }

    async fn publish(
        &self,
        batch: &[Arc<orchestrator::application::ports::OutboxRecord>],
    ) -> Vec<orchestrator::application::ports::PublishOutcome> {
        self.sent.lock().unwrap().extend(batch.iter().map(|r| r.event_id));
        if self.first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            tokio::time::sleep(self.pause).await;
        }
        vec![orchestrator::application::ports::PublishOutcome::Confirmed; batch.len()]
    }
}

fn relay_with(
    app: &TestApp,
    worker: &str,
    publisher: Arc<PausingPublisher>,
) -> orchestrator::application::outbox::OutboxRelay {
    use orchestrator::application::outbox::{OutboxRelay, RelaySettings};
    use orchestrator::domain::outbox::RetrySchedule;
    OutboxRelay::new(
        app.services.outbox_store.clone(),
        publisher,
        app.services.clock.clone(),
        RelaySettings {
            worker_id: worker.into(),
            lanes: 16,
            batch_size: 256,
            lease: chrono::Duration::seconds(1),
            poll_interval: Duration::from_secs(10),
            retry_poll_interval: Duration::from_secs(30),
            trickle_wait: Duration::ZERO,
            schedule: RetrySchedule {
                max_retries: 3,
                backoff_base: chrono::Duration::seconds(10),
                backoff_cap: chrono::Duration::seconds(300),
            },
            send_margin: Duration::from_millis(100),
        },
        Arc::new(Notify::new()),
    )
}

/// Issue 28: a worker whose lease lapsed between two waves of one batch (its first wave's
/// confirms come 1.5 s late on a 1 s lease, and meanwhile another worker takes its lanes and
/// publishes everything) sends no further wave when it resumes, and records nothing.
async fn a_worker_whose_lease_lapsed_mid_batch_sends_no_further_wave(backend: Backend) {
    let Some(app) = TestApp::spawn_on_manual_clock(backend, &[]).await else {
        return;
    };
    // Three aggregates of two events: two waves.
    let events = seed(&repo(&app), 3, 2).await;
    let paused = Arc::new(PausingPublisher {
        sent: Default::default(),
        pause: Duration::from_millis(1500),
        first: true.into(),
    });
    let stop = CancellationToken::new();
    let worker = relay_with(&app, "paused-worker", paused.clone());
    let paused_run = {
        let stop = stop.clone();
        tokio::spawn(async move { worker.drain(&stop).await })
    };
    until("the first wave sent", || async { !paused.sent.lock().unwrap().is_empty() }).await;

    // While it waits, its lanes' lease runs out; another worker takes them and sends all.
    app.advance(Duration::from_secs(2));
    let next =
        Arc::new(PausingPublisher { sent: Default::default(), pause: Duration::ZERO, first: false.into() });
    let report = relay_with(&app, "next-owner", next.clone()).drain(&stop).await.unwrap();
    assert_eq!(report.published, 6, "{report:?}");
    let order = next.sent.lock().unwrap().clone();
    for aggregate in events.chunks(2) {
        let at = |e: &NewOutboxEvent| order.iter().position(|id| *id == e.event_id).unwrap();
        assert!(at(&aggregate[0]) < at(&aggregate[1]), "per-aggregate order");
    }

    // The paused worker resumes: nothing it had not sent before the pause goes out.
    let report = paused_run.await.unwrap().unwrap();
    let first_wave: HashSet<EventId> =
        events.iter().filter(|e| e.payload.contains(r#""seq":0"#)).map(|e| e.event_id).collect();
    let sent: HashSet<EventId> = paused.sent.lock().unwrap().iter().copied().collect();
    assert_eq!(sent, first_wave, "only the wave sent before the pause went out");
    assert_eq!(paused.sent.lock().unwrap().len(), 3, "and once");
    assert_eq!((report.published, report.lost_claims), (0, 6), "{report:?}");
    assert_eq!(published(&app).await, 6, "the next owner's record stands");
}

on_both_databases!(a_worker_whose_lease_lapsed_mid_batch_sends_no_further_wave);
