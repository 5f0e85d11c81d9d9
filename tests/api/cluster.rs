//! A RabbitMQ cluster that loses a node (docs/scaling.md, "Failover"): three nodes started
//! beside the machine's own broker by `scripts/rabbitmq-cluster`, one cluster per test (its
//! own node names, ports and data directory), stopped and deleted afterwards. The app is
//! given every node in `broker.urls`; queues are quorum queues. The node that holds the
//! queue's leader — and every connection of the app — is killed with SIGKILL mid-stream.
//!
//! When RabbitMQ's scripts are not installed the tests are skipped, except under `CI=true`.

use std::collections::{BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicConsumeArguments, BasicPublishArguments, BasicQosArguments, Channel,
    ConfirmSelectArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, FieldTable, FieldValue, Nack, Return};
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect};
use orchestrator::domain::outbox::OutboxStatus;
use orchestrator::startup::Workers;
use sea_orm::{ConnectionTrait, Statement};

use crate::broker::queue_state;
use crate::cli::{app, temp_dir};
use crate::faults::{LogsOnFailure, seed_events};
use crate::helpers::{
    Backend, Process, TEST_KEYS, TestApp, TestDb, count_where, order_body, outbox_in, outbox_unpublished,
};
use crate::helpers::{service_missing, terminate, until_within};
use crate::meeting::{Meeting, handled, registered};

/// One three-node cluster, stopped (and its data deleted) when dropped.
pub(crate) struct Cluster {
    name: String,
    /// `broker.urls` for the app: node 1 first.
    pub(crate) urls: String,
    endpoints: Vec<AmqpEndpoint>,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/rabbitmq-cluster")
}

fn run_script(args: &[&str]) -> std::process::Output {
    std::process::Command::new(script()).args(args).output().expect("run scripts/rabbitmq-cluster")
}

impl Cluster {
    /// Starts the cluster `{prefix}-{pid}` on ports `base + 1..3`, or `None` (skip) when
    /// RabbitMQ is not installed outside CI.
    pub(crate) async fn start(prefix: &str, base: u16) -> Option<Cluster> {
        let check = run_script(&["check"]);
        if !check.status.success() {
            service_missing("RabbitMQ (for a cluster)", String::from_utf8_lossy(&check.stderr).trim());
            return None;
        }
        let name = format!("{prefix}-{}", std::process::id());
        let base = base.to_string();
        let args = ["start".to_owned(), name.clone(), base];
        let out = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_script(&args)
        })
        .await
        .expect("the start ran");
        assert!(out.status.success(), "the cluster did not start: {}", String::from_utf8_lossy(&out.stderr));
        let urls = String::from_utf8(out.stdout).expect("urls").trim().to_owned();
        let endpoints = urls.split(',').map(|u| AmqpEndpoint::parse(u).expect("a node's url")).collect();
        Some(Cluster { name, urls, endpoints })
    }

    /// Node `i` (1..=3).
    pub(crate) fn endpoint(&self, i: usize) -> &AmqpEndpoint {
        &self.endpoints[i - 1]
    }

    fn run(&self, args: &[&str]) -> String {
        let mut all = vec![args[0], self.name.as_str()];
        all.extend(&args[1..]);
        let out = run_script(&all);
        assert!(out.status.success(), "rabbitmq-cluster {all:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `rabbitmqctl ARGS` against node `i`.
    pub(crate) fn ctl(&self, i: usize, args: &[&str]) -> String {
        let i = i.to_string();
        let mut all = vec!["ctl", i.as_str()];
        all.extend(args);
        self.run(&all)
    }

    /// SIGKILL of node `i`: lost, not stopped.
    pub(crate) fn kill(&self, i: usize) {
        self.run(&["kill", &i.to_string()]);
    }

    /// The OS process of node `i`, to kill it at an exact moment (`kill` asks the node
    /// first, which takes a second).
    pub(crate) fn pid(&self, i: usize) -> u32 {
        let out = self.run(&["ctl", &i.to_string(), "eval", "os:getpid()."]);
        out.trim().trim_matches('"').parse().unwrap_or_else(|_| panic!("pid of node {i}: {out}"))
    }

    /// The node (1..=3) holding the leader of quorum queue `queue`, asked of node `via`.
    pub(crate) fn leader(&self, queue: &str, via: usize) -> usize {
        let out =
            self.run(&["ctl", &via.to_string(), "list_queues", "name", "leader", "--no-table-headers", "-q"]);
        let node = out
            .lines()
            .find_map(|l| {
                l.strip_prefix(queue)?.trim().strip_prefix(&format!("{}-", self.name)).map(str::to_owned)
            })
            .unwrap_or_else(|| panic!("no leader for {queue} in {out}"));
        node.split('@').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("leader node {node}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = run_script(&["stop", &self.name]);
    }
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::new();
    args.insert("x-queue-type".try_into().unwrap(), FieldValue::S("quorum".try_into().unwrap()));
    args
}

/// Reads every message of `queue` until it has seen each of `expected` and the queue stays
/// empty; returns the `message_id`s in arrival order, duplicates included. (Acknowledged in
/// steps of a bounded prefetch: a quorum queue gives an unlimited consumer only 2 000
/// deliveries of credit.)
async fn drain(endpoint: &AmqpEndpoint, queue: &str, expected: &HashSet<String>) -> Vec<String> {
    let connection = connect(endpoint, "test-drain").await.expect("connect to a surviving node");
    let channel = connection.open_channel(None).await.unwrap();
    channel.basic_qos(BasicQosArguments::new(0, 500, false)).await.unwrap();
    let (_, mut rx) = channel
        .basic_consume_rx(BasicConsumeArguments::new(queue, "test-drain").manual_ack(true).finish())
        .await
        .unwrap();
    let mut ids = Vec::new();
    let mut seen = HashSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        match tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
            Ok(Some(message)) => {
                let id = message.basic_properties.and_then(|p| p.message_id().cloned()).unwrap_or_default();
                seen.insert(id.clone());
                ids.push(id);
                if ids.len() % 100 == 0
                    && let Some(deliver) = message.deliver
                {
                    channel.basic_ack(BasicAckArguments::new(deliver.delivery_tag(), true)).await.unwrap();
                }
            }
            Ok(None) => panic!("the drain's channel closed"),
            // Two quiet seconds with everything seen: the queue is empty.
            Err(_) if expected.iter().all(|id| seen.contains(id)) => break,
            Err(_) => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {} events reached the queue",
            expected.iter().filter(|id| seen.contains(*id)).count(),
            expected.len()
        );
    }
    let _ = connection.close().await;
    ids
}

/// The relay drains 20 000 events into a quorum queue; once 2 000 are published, the node
/// holding the queue's leader (and the relay's connection) is killed. The relay moves to
/// the next node; every event arrives, duplicates are only resends of the same
/// `message_id`, and the drain finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_drains_through_the_loss_of_the_quorum_leaders_node() {
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let Some(cluster) = Cluster::start("relay", 5710).await else { return };
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (exchange, queue) = (format!("test.cluster.{id}"), format!("test.cluster.all.{id}"));
    {
        // Declared through node 1, so the queue's leader is there (client-local).
        let setup = connect(cluster.endpoint(1), "test-setup").await.unwrap();
        let channel = setup.open_channel(None).await.unwrap();
        channel
            .exchange_declare(ExchangeDeclareArguments::new(&exchange, "topic").durable(true).finish())
            .await
            .unwrap();
        channel
            .queue_declare(QueueDeclareArguments::new(&queue).durable(true).arguments(quorum()).finish())
            .await
            .unwrap();
        channel.queue_bind(QueueBindArguments::new(&queue, &exchange, "#")).await.unwrap();
        let _ = setup.close().await;
    }
    let conn = db.connect().await;
    let events = seed_events(&conn, 20_000).await;
    let expected: HashSet<String> = events.iter().map(|e| e.event_id.to_string()).collect();
    let dir = temp_dir();
    let _logs = LogsOnFailure(&dir.0);
    let log = std::fs::File::create(dir.0.join("worker.log")).unwrap();
    let mut worker = Process::spawn(
        app(&dir.0)
            .env("APP__DATABASE__URL", &db.url)
            .env("APP__AUTH__KEYS", TEST_KEYS)
            .env("APP__BROKER__URLS", &cluster.urls)
            .env("APP__BROKER__QUEUE_TYPE", "quorum")
            .env("APP__BROKER__EXCHANGE", &exchange)
            .env("APP__BROKER__CONFIRM_TIMEOUT", "5s")
            .env("APP__OUTBOX__BACKOFF_BASE", "1s")
            .env("APP__OUTBOX__RETRY_POLL_INTERVAL", "200ms")
            .env("APP__OUTBOX__POLL_INTERVAL", "200ms")
            .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
            .env("APP__PAYMENT__PROVIDER", "mock")
            .env("APP__SETTLEMENT__CHANNEL", "simulated")
            .env("APP__NOTIFICATION__CHANNEL", "simulated")
            .arg("worker")
            .stdout(std::process::Stdio::null())
            .stderr(log),
    );
    let leader = cluster.leader(&queue, 2);
    let pid = cluster.pid(leader);
    until_within("2 000 events published", Duration::from_secs(120), || async {
        outbox_in(&conn, OutboxStatus::Published).await >= 2_000
    })
    .await;
    let _ = std::process::Command::new("kill").args(["-KILL", &pid.to_string()]).status();
    let published_at_kill = outbox_in(&conn, OutboxStatus::Published).await;
    let killed_at = std::time::Instant::now();
    until_within("every event published", Duration::from_secs(240), || async {
        outbox_in(&conn, OutboxStatus::Published).await == events.len() as i64
    })
    .await;
    let recovered_in = killed_at.elapsed();
    terminate(&mut worker);
    assert_eq!(outbox_unpublished(&conn).await, 0, "nothing failed, dead-lettered or stuck");
    let survivor = if leader == 1 { 2 } else { 1 };
    let received = drain(cluster.endpoint(survivor), &queue, &expected).await;
    let distinct: HashSet<&String> = received.iter().collect();
    assert!(received.iter().all(|id| expected.contains(id)), "only the seeded events, under their own ids");
    assert_eq!(distinct.len(), expected.len(), "0 lost");
    eprintln!(
        "RELIABILITY cluster-relay events={} killed_node={leader} published_at_kill={published_at_kill} lost=0 duplicated={} drained_in_ms_after_kill={}",
        expected.len(),
        received.len() - distinct.len(),
        recovered_in.as_millis()
    );
}

/// Counts the broker's confirms of one publishing channel.
#[derive(Clone, Default)]
struct Confirms(Arc<Mutex<(u64, BTreeSet<u64>, bool)>>);

impl Confirms {
    /// Every tag `1..=n` acknowledged (none nacked).
    fn all(&self, n: u64) -> bool {
        let (upto, single, nacked) = &*self.0.lock().unwrap();
        assert!(!nacked, "the broker refused a registration");
        (1..=n).all(|t| t <= *upto || single.contains(&t))
    }
}

#[async_trait::async_trait]
impl amqprs::callbacks::ChannelCallback for Confirms {
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
        let mut state = self.0.lock().unwrap();
        if ack.mutiple() {
            state.0 = state.0.max(ack.delivery_tag());
        } else {
            state.1.insert(ack.delivery_tag());
        }
    }
    async fn publish_nack(&mut self, _: &Channel, _: Nack) {
        self.0.lock().unwrap().2 = true;
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// The meeting consumers are mid-stream on node 1 when it is killed: they reconnect to the
/// next node, the deliveries they had not acknowledged come again, and every registration
/// becomes exactly one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_whose_node_dies_turns_every_registration_into_one_order() {
    const N: u64 = 500;
    let Some(cluster) = Cluster::start("consumer", 5720).await else { return };
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut env = Meeting::env(&id);
    env.extend([
        ("APP__BROKER__URLS".to_owned(), cluster.urls.clone()),
        ("APP__BROKER__QUEUE_TYPE".to_owned(), "quorum".to_owned()),
        ("APP__BROKER__EXCHANGE".to_owned(), format!("test.cluster.events.{id}")),
    ]);
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(Backend::Postgres, &refs).await else { return };
    let workers = Workers::spawn(&app.services);
    // The meeting service publishes through node 2, which stays up.
    let connection = connect(cluster.endpoint(2), "test-meeting-service").await.unwrap();
    let channel = connection.open_channel(None).await.unwrap();
    let confirms = Confirms::default();
    channel.register_callback(confirms.clone()).await.unwrap();
    channel.confirm_select(ConfirmSelectArguments::default()).await.unwrap();
    let register_queue = format!("test.register.{id}");
    until_within("the consumers attached", Duration::from_secs(60), || async {
        // The deleted queue is the last one the consumers attach to.
        queue_state(&connection, &format!("test.deleted.{id}"))
            .await
            .is_some_and(|(_, consumers)| consumers > 0)
    })
    .await;
    for i in 0..N {
        let body = registered(&format!("ev-{i}"), "m-cluster", &format!("u-{i}"), 1000 + i as i64);
        let mut props = BasicProperties::default();
        props.with_content_type("application/json").with_persistence(true);
        let args =
            BasicPublishArguments::new(&format!("test.meeting.{id}"), "meeting.participant.registered");
        channel.basic_publish(props.finish(), body.into_bytes(), args).await.unwrap();
    }
    until_within("every registration confirmed", Duration::from_secs(60), || async { confirms.all(N) }).await;
    until_within("the consumers mid-stream", Duration::from_secs(60), || async {
        handled(&app, "participant-register").await >= N / 10
    })
    .await;
    let leader = cluster.leader(&register_queue, 2);
    let at_kill = handled(&app, "participant-register").await;
    // Node 1 holds the consumers' connection (the first of `broker.urls`).
    cluster.kill(1);
    let count = |sql: &'static str| {
        let db = app.db.clone();
        async move {
            let row = db
                .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
                .await
                .unwrap()
                .unwrap();
            row.try_get_by_index::<i64>(0).unwrap()
        }
    };
    until_within("an order for every registration", Duration::from_secs(180), || async {
        count("SELECT COUNT(DISTINCT customer_id) FROM orders WHERE meeting_id = 'm-cluster'").await
            == N as i64
    })
    .await;
    // The queue empty and nothing unacknowledged: no delivery is still to come.
    until_within("the register queue drained", Duration::from_secs(60), || async {
        queue_state(&connection, &register_queue).await.is_some_and(|(messages, _)| messages == 0)
            && handled(&app, "participant-register").await >= N
    })
    .await;
    assert_eq!(
        count("SELECT COUNT(*) FROM orders WHERE meeting_id = 'm-cluster'").await,
        N as i64,
        "exactly one order per registration"
    );
    let dlq = queue_state(&connection, &format!("{register_queue}.dlq")).await;
    assert_eq!(dlq.map(|(messages, _)| messages), Some(0), "nothing dead-lettered");
    eprintln!(
        "RELIABILITY cluster-consumer registrations={N} queue_leader_node={leader} killed_node=1 handled_at_kill={at_kill} handled={} orders={N}",
        handled(&app, "participant-register").await
    );
    workers.shutdown(Duration::from_secs(5)).await;
}

/// docs/operations.md, "A broker that blocks publishers": under a memory alarm RabbitMQ stops
/// reading from publishing connections and confirms nothing. The relay's events wait without
/// spending a retry (max_retries 1: a counted timeout would dead-letter them on the second),
/// readiness says the broker is BLOCKED, the metric counts it; once the alarm clears every
/// event is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_under_a_memory_alarm_spends_no_retry_and_readiness_says_blocked() {
    let Some(cluster) = Cluster::start("alarm", 5730).await else { return };
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (exchange, queue) = (format!("test.alarm.{id}"), format!("test.alarm.all.{id}"));
    {
        let setup = connect(cluster.endpoint(1), "test-setup").await.unwrap();
        let channel = setup.open_channel(None).await.unwrap();
        channel
            .exchange_declare(ExchangeDeclareArguments::new(&exchange, "topic").durable(true).finish())
            .await
            .unwrap();
        channel.queue_declare(QueueDeclareArguments::new(&queue).durable(true).finish()).await.unwrap();
        channel.queue_bind(QueueBindArguments::new(&queue, &exchange, "#")).await.unwrap();
        let _ = setup.close().await;
    }
    let env = [
        ("APP__BROKER__URLS", cluster.urls.as_str()),
        ("APP__BROKER__EXCHANGE", exchange.as_str()),
        ("APP__BROKER__CONFIRM_TIMEOUT", "1s"),
        ("APP__OUTBOX__MAX_RETRIES", "1"),
        ("APP__OUTBOX__BACKOFF_BASE", "1s"),
        ("APP__OUTBOX__RETRY_POLL_INTERVAL", "200ms"),
        ("APP__OUTBOX__POLL_INTERVAL", "200ms"),
    ];
    let Some(app) = TestApp::spawn_with(Backend::Sqlite, &env).await else { return };
    let workers = Workers::spawn(&app.services);
    let ready = || async {
        app.client.get(format!("{}/health/ready", app.base)).send().await.unwrap().text().await.unwrap()
    };
    // A process that publishes nothing itself (`serve`): its readiness must say so too
    // (issue 43 item 10), from a probe of its own.
    let Some(serve) = TestApp::spawn_with(Backend::Sqlite, &env).await else { return };
    let serve_ready = || async {
        serve.client.get(format!("{}/health/ready", serve.base)).send().await.unwrap().text().await.unwrap()
    };
    assert!(!serve_ready().await.contains("BLOCKED"));
    cluster.ctl(1, &["set_vm_memory_high_watermark", "0.00001"]);
    let alice = app.token("alice");
    for _ in 0..5 {
        let placed = app.place_order(&alice, &order_body(), None).await;
        assert_eq!(
            placed.status(),
            reqwest::StatusCode::CREATED,
            "serve takes orders while the broker is blocked"
        );
    }
    until_within("readiness to say the broker is blocked", Duration::from_secs(30), || async {
        ready().await.contains("BLOCKED")
    })
    .await;
    until_within("serve's readiness to say the broker is blocked", Duration::from_secs(30), || async {
        serve_ready().await.contains("BLOCKED")
    })
    .await;
    // Several confirm timeouts of a blocked broker (three, counted by the relay itself):
    // nothing spent, nothing dead.
    let unavailable = || async {
        let metrics =
            app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(r#"outbox_confirms_total{outcome="BROKER_UNAVAILABLE"} "#))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    until_within("three confirm timeouts against the blocked broker", Duration::from_secs(30), || async {
        unavailable().await >= 3.0
    })
    .await;
    let spent = count_where(&app.db, "outbox_events", "retry_count > 0").await;
    assert_eq!(spent, 0, "a blocked broker spends no retry");
    assert_eq!(outbox_in(&app.db, OutboxStatus::DeadLetter).await, 0);

    cluster.ctl(1, &["set_vm_memory_high_watermark", "0.4"]);
    until_within("every event published once the alarm clears", Duration::from_secs(60), || async {
        outbox_unpublished(&app.db).await == 0
    })
    .await;
    until_within("readiness to clear", Duration::from_secs(30), || async {
        !ready().await.contains("BLOCKED")
    })
    .await;
    until_within("serve's readiness to clear", Duration::from_secs(30), || async {
        !serve_ready().await.contains("BLOCKED")
    })
    .await;
    assert_eq!(count_where(&app.db, "outbox_events", "retry_count > 0").await, 0);
    let expected: HashSet<String> = crate::helpers::payloads(&app.db, "order.completed")
        .await
        .into_iter()
        .chain(crate::helpers::payloads(&app.db, "payment.approved").await)
        .map(|e| e["eventId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(expected.len(), 10);
    let received = drain(cluster.endpoint(1), &queue, &expected).await;
    let distinct: HashSet<&String> = received.iter().collect();
    assert_eq!(distinct.len(), 10, "every event reached the queue (duplicates of a blocked publish allowed)");
    workers.shutdown(Duration::from_secs(10)).await;
}
