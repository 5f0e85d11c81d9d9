//! The meetup platform (`momo-spring-project/momo-backend`, docs/spec.md §12 `momo`), judged
//! by its own declarations: its payment module's queues declared first, as Spring AMQP
//! declares them from its `PaymentQueueConfig` (Java strings as AMQP long strings, the DLQ's
//! `x-message-ttl` a Java `Integer`, which the Java client writes as a signed 32-bit int),
//! then ours — equivalent, so no 406. The names are the platform's own, fixed: each test
//! runs in a RabbitMQ vhost of its own, deleted afterwards.

use std::process::Command;

use amqprs::channel::{Channel, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};
use orchestrator::adapters::messaging::amqp::{AmqpEndpoint, connect, declare};
use orchestrator::adapters::messaging::contract::momo::topology::topology;
use orchestrator::startup::Workers;
use sea_orm::ConnectionTrait;

use crate::helpers::{Backend, TestApp, count_where, service_missing, until, until_within};
use crate::on_both_databases;

/// A vhost of its own (`rabbitmqctl`), guest allowed; deleted when dropped.
struct Vhost(String);

impl Vhost {
    fn create() -> Option<Vhost> {
        let name = format!("test-momo-{}", uuid::Uuid::new_v4().simple());
        let ctl =
            |args: &[&str]| Command::new("rabbitmqctl").args(args).output().is_ok_and(|o| o.status.success());
        if !ctl(&["add_vhost", &name]) || !ctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]) {
            service_missing("rabbitmqctl (a vhost per test)", "rabbitmqctl add_vhost failed");
            return None;
        }
        Some(Vhost(name))
    }

    async fn channel(&self) -> (amqprs::connection::Connection, Channel) {
        let endpoint = AmqpEndpoint::parse(&format!("amqp://guest:guest@127.0.0.1:5672/{}", self.0)).unwrap();
        let connection = connect(&endpoint, "test-momo").await.unwrap();
        let channel = connection.open_channel(None).await.unwrap();
        (connection, channel)
    }
}

impl Drop for Vhost {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl").args(["delete_vhost", &self.0]).output();
    }
}

/// A durable queue as the platform's `QueueBuilder` makes one: dead-lettered to
/// `(exchange, routing key)`, with exactly those two arguments, bound to `bound`.
async fn declare_dead_lettered(
    channel: &Channel,
    queue: &str,
    dead_letters: (&str, &str),
    bound: (&str, &str),
) -> Result<(), amqprs::error::Error> {
    let s = |v: &str| FieldValue::S(v.try_into().unwrap());
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange".try_into().unwrap(), s(dead_letters.0));
    args.insert("x-dead-letter-routing-key".try_into().unwrap(), s(dead_letters.1));
    channel.queue_declare(QueueDeclareArguments::new(queue).durable(true).arguments(args).finish()).await?;
    channel.queue_bind(QueueBindArguments::new(queue, bound.0, bound.1)).await?;
    Ok(())
}

/// The platform's own declarations, as its Spring configuration makes them.
async fn declare_as_the_platform(channel: &Channel, ttl: FieldValue) -> Result<(), amqprs::error::Error> {
    for (exchange, kind) in [
        ("momo.payment.events", "topic"),
        ("momo.dlx.payment", "direct"),
        ("momo.participant.events", "topic"),
        ("momo.meeting.events", "topic"),
    ] {
        channel
            .exchange_declare(ExchangeDeclareArguments::new(exchange, kind).durable(true).finish())
            .await?;
    }
    for (queue, exchange, key) in [
        ("payment.participant.registered.queue", "momo.participant.events", "participant.registered.key"),
        ("payment.participant.canceled.queue", "momo.participant.events", "participant.canceled.key"),
        ("payment.meeting.deleted.queue", "momo.meeting.events", "meeting.deleted.key"),
    ] {
        declare_dead_lettered(channel, queue, ("momo.dlx.payment", "payment.dlq"), (exchange, key)).await?;
    }
    let mut args = FieldTable::new();
    args.insert("x-message-ttl".try_into().unwrap(), ttl);
    channel
        .queue_declare(QueueDeclareArguments::new("payment.dlq.queue").durable(true).arguments(args).finish())
        .await?;
    channel
        .queue_bind(QueueBindArguments::new("payment.dlq.queue", "momo.dlx.payment", "payment.dlq"))
        .await?;
    Ok(())
}

/// The meeting service's reply queues (`QueueNames`): `payment.completed.key` and
/// `payment.failed.key` land there; the platform has no queue for `payment.refunded.key`.
const REPLY_QUEUES: [&str; 2] = ["participant.payment.succeed.queue", "participant.payment.canceled.queue"];

/// The meeting service's side, as its `MeetingExchangeConfig` and `MeetingQueueConfig`
/// declare it: its DLX, its two reply queues bound to `momo.payment.events` and its DLQ.
async fn declare_the_meeting_side(channel: &Channel) -> Result<(), amqprs::error::Error> {
    channel
        .exchange_declare(ExchangeDeclareArguments::new("participant.dlx", "direct").durable(true).finish())
        .await?;
    for (queue, key) in REPLY_QUEUES.into_iter().zip(["payment.completed.key", "payment.failed.key"]) {
        declare_dead_lettered(
            channel,
            queue,
            ("participant.dlx", "participant.dlq"),
            ("momo.payment.events", key),
        )
        .await?;
    }
    let mut args = FieldTable::new();
    args.insert("x-message-ttl".try_into().unwrap(), FieldValue::I(604_800_000));
    channel
        .queue_declare(
            QueueDeclareArguments::new("participant.dlq.queue").durable(true).arguments(args).finish(),
        )
        .await?;
    channel
        .queue_bind(QueueBindArguments::new("participant.dlq.queue", "participant.dlx", "participant.dlq"))
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_payment_topology_is_the_platforms_whoever_declares_first() {
    // The platform first, then us.
    let Some(vhost) = Vhost::create() else { return };
    let (_c, channel) = vhost.channel().await;
    declare_as_the_platform(&channel, FieldValue::I(604_800_000)).await.expect("the platform's declarations");
    declare(&channel, &topology()).await.expect("ours, equivalent: no 406");
    // Us first, then the platform (a redeploy of its payment module beside us).
    let Some(second) = Vhost::create() else { return };
    let (_c2, channel) = second.channel().await;
    declare(&channel, &topology()).await.unwrap();
    declare_as_the_platform(&channel, FieldValue::I(604_800_000))
        .await
        .expect("the platform after us: no 406");
}

// ---- the platform end to end ---------------------------------------------------------------

/// The platform's database on MariaDB, with its `meetings` table as its Flyway migration
/// `V6__Create_meetings_table.sql` creates it; dropped afterwards.
struct PlatformDb(String);

const MEETINGS_TABLE: &str = "CREATE TABLE meetings (
    id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    category_id int DEFAULT NULL,
    current_participants_count int NOT NULL,
    is_deleted tinyint(1) NOT NULL,
    latitude double NOT NULL,
    longitude double NOT NULL,
    max_participants_count int NOT NULL,
    min_enter_score double NOT NULL,
    participation_fee int NOT NULL,
    version int DEFAULT NULL,
    created_at datetime DEFAULT NULL,
    deleted_at datetime DEFAULT NULL,
    host_user_id bigint NOT NULL,
    meeting_date datetime NOT NULL,
    meeting_end_date datetime NOT NULL,
    updated_at datetime DEFAULT NULL,
    description varchar(255) NOT NULL,
    location_name varchar(255) NOT NULL,
    title varchar(255) NOT NULL,
    status enum ('FINISHED','IN_PROGRESS') NOT NULL,
    INDEX idx_meeting_deleted_category_status_date (is_deleted, category_id, status, meeting_date)
)";

fn mariadb(sql: &str) -> Result<(), String> {
    let out = Command::new("mariadb")
        .args(["-uroot", "-h127.0.0.1", "-P3306", "-e", sql])
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&out.stderr).into_owned()) }
}

impl PlatformDb {
    /// Meetings `(id, participation_fee)`.
    fn create(meetings: &[(i64, i64)]) -> Option<PlatformDb> {
        let name = format!("momo_{}", uuid::Uuid::new_v4().simple());
        if let Err(why) = mariadb(&format!("CREATE DATABASE {name}")) {
            service_missing("MariaDB", why);
            return None;
        }
        let db = PlatformDb(name);
        let rows: Vec<String> = meetings
            .iter()
            .map(|(id, fee)| {
                format!(
                    "({id}, 0, 0, 0, 37.5, 127.0, 10, 0, {fee}, 0, 3, '2026-12-24 19:00:00', \
                     '2026-12-24 21:00:00', 'a meeting', 'Seoul', 'meeting {id}', 'IN_PROGRESS')"
                )
            })
            .collect();
        mariadb(&format!(
            "USE {0}; {MEETINGS_TABLE}; INSERT INTO meetings (id, category_id, current_participants_count, \
             is_deleted, latitude, longitude, max_participants_count, min_enter_score, participation_fee, \
             version, host_user_id, meeting_date, meeting_end_date, description, location_name, title, status) \
             VALUES {1}",
            db.0,
            rows.join(", ")
        ))
        .expect("the platform's meetings table");
        Some(db)
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:3306/{}", self.0)
    }
}

impl Drop for PlatformDb {
    fn drop(&mut self) {
        let _ = mariadb(&format!("DROP DATABASE IF EXISTS {}", self.0));
    }
}

/// A reply as the platform's meeting service receives it.
#[derive(Debug, Clone)]
struct Reply {
    routing_key: String,
    props: amqprs::BasicProperties,
    body: Vec<u8>,
}

/// What the meeting service's `MeetingEventConsumer` makes of a reply, read to its rules:
/// Spring's `Jackson2JsonMessageConverter` takes the body only with a JSON content type;
/// `EventWrapper(uuId, type, data)` and `PaymentEventMessages`' records take exactly their
/// fields (names as written), `Long` ids and `Integer` amounts as JSON integers, and
/// `occurredAt` as a `LocalDateTime` — no offset; the producer's callbacks parse
/// `message_id` as a `Long`; `__TypeId__` names the wrapper class.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Read {
    pub uu_id: String,
    pub kind: String,
    pub data: serde_json::Map<String, serde_json::Value>,
}

fn platform_reads(reply: &Reply) -> Read {
    let p = &reply.props;
    assert_eq!(p.content_type().map(String::as_str), Some("application/json"), "content type");
    assert_eq!(p.content_encoding().map(String::as_str), Some("UTF-8"));
    assert_eq!(p.delivery_mode(), Some(2), "persistent");
    let outbox_id: i64 = p.message_id().expect("message_id").parse().expect("Long.valueOf(messageId)");
    let headers = p.headers().expect("headers");
    let header = |name: &str| headers.get(&name.try_into().unwrap()).cloned();
    assert_eq!(
        header("__TypeId__"),
        Some(FieldValue::S("com.example.momo.global.rabbitmq.dto.common.EventWrapper".try_into().unwrap()))
    );
    assert_eq!(header("x-outbox-id"), Some(FieldValue::l(outbox_id)), "x-outbox-id: the outbox id, a long");
    let wrapper: serde_json::Value = serde_json::from_slice(&reply.body).expect("JSON");
    let wrapper = wrapper.as_object().expect("an object");
    let mut keys: Vec<&str> = wrapper.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["data", "type", "uuId"], "EventWrapper's fields");
    let uu_id = wrapper["uuId"].as_str().expect("uuId: a String").to_owned();
    assert_eq!(header("x-correlation-id"), Some(FieldValue::S(uu_id.as_str().try_into().unwrap())));
    let kind = wrapper["type"].as_str().expect("type: a String").to_owned();
    assert_eq!(reply.routing_key, format!("{kind}.key"));
    let data = wrapper["data"].as_object().expect("data: an object").clone();
    let (fields, longs, ints): (&[&str], &[&str], &[&str]) = match kind.as_str() {
        "payment.completed" => (
            &["paymentId", "userId", "meetingId", "amount", "orderId", "outboxId", "occurredAt"],
            &["paymentId", "userId", "meetingId"],
            &["amount"],
        ),
        "payment.failed" => (
            &["paymentId", "userId", "meetingId", "failReason", "outboxId", "occurredAt"],
            &["userId", "meetingId"],
            &[],
        ),
        "payment.refunded" => (
            &["paymentId", "userId", "meetingId", "amount", "refundReason", "outboxId", "occurredAt"],
            &["paymentId", "userId", "meetingId"],
            &["amount"],
        ),
        other => panic!("the meeting service knows no {other}"),
    };
    let mut sorted: Vec<&str> = data.keys().map(String::as_str).collect();
    sorted.sort_unstable();
    let mut expected = fields.to_vec();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "{kind}'s record components");
    for long in longs {
        assert!(data[*long].is_i64(), "{long}: a Long, got {}", data[*long]);
    }
    for int in ints {
        assert!(data[*int].as_i64().is_some_and(|n| i32::try_from(n).is_ok()), "{int}: an Integer");
    }
    assert!(data["paymentId"].is_null() || data["paymentId"].is_i64());
    assert!(data["outboxId"].is_null() || data["outboxId"].is_i64());
    let at = data["occurredAt"].as_str().expect("occurredAt: text");
    chrono::NaiveDateTime::parse_from_str(at, "%Y-%m-%dT%H:%M:%S%.f")
        .unwrap_or_else(|e| panic!("occurredAt {at} is no LocalDateTime: {e}"));
    assert!(!at.ends_with('Z') && !at[10..].contains('+') && !at[10..].contains('-'), "no offset: {at}");
    Read { uu_id, kind, data }
}

/// The platform's side of one test: its vhost (every name is the platform's), its
/// database, the meeting service's reply queue, and a channel to send as it sends.
pub(crate) struct Platform {
    vhost: Vhost,
    _db: PlatformDb,
    connection: amqprs::connection::Connection,
    channel: Channel,
    replies: std::sync::Arc<std::sync::Mutex<Vec<Reply>>>,
    /// How many messages the platform sent the app.
    sent: std::sync::atomic::AtomicUsize,
}

impl Platform {
    pub(crate) async fn start(meetings: &[(i64, i64)]) -> Option<Platform> {
        let db = PlatformDb::create(meetings)?;
        let vhost = Vhost::create()?;
        let (connection, channel) = vhost.channel().await;
        // The whole platform is running: its payment module's declarations and its meeting
        // service's (`MeetingExchangeConfig`, `MeetingQueueConfig`), nothing else. Nothing
        // binds `commerce.events` and nothing binds `payment.refunded.key`.
        declare_as_the_platform(&channel, FieldValue::I(604_800_000)).await.unwrap();
        declare_the_meeting_side(&channel).await.unwrap();
        let replies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        for queue in REPLY_QUEUES {
            let (_, mut rx) = channel
                .basic_consume_rx(
                    amqprs::channel::BasicConsumeArguments::new(queue, &format!("meeting-service-{queue}"))
                        .manual_ack(false)
                        .finish(),
                )
                .await
                .unwrap();
            let sink = replies.clone();
            tokio::spawn(async move {
                while let Some(m) = rx.recv().await {
                    if let (Some(deliver), Some(props), Some(body)) =
                        (m.deliver, m.basic_properties, m.content)
                    {
                        sink.lock().unwrap().push(Reply {
                            routing_key: deliver.routing_key().clone(),
                            props,
                            body,
                        });
                    }
                }
            });
        }
        Some(Platform { vhost, _db: db, connection, channel, replies, sent: Default::default() })
    }

    fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:5672/{}", self.vhost.0)
    }

    /// Where the platform's meetings are (`meetings.fee_sql.url`).
    pub(crate) fn fees_url(&self) -> String {
        self._db.url()
    }

    /// Changes the platform's meetings as its meeting service would (`UPDATE meetings ...`).
    pub(crate) fn meetings_sql(&self, sql: &str) {
        mariadb(&format!("USE {}; {sql}", self._db.0)).expect("the platform's meetings changed");
    }

    /// The app under `momo` on this platform, its fees read at `fees`, with its workers
    /// running and its consumers attached to the platform's queues.
    async fn serve(&self, backend: Backend, fees: &str) -> Option<(TestApp, Workers)> {
        self.serve_with(backend, fees, &[]).await
    }

    /// [`Self::serve`] with `extra` settings.
    pub(crate) async fn serve_with(
        &self,
        backend: Backend,
        fees: &str,
        extra: &[(&str, &str)],
    ) -> Option<(TestApp, Workers)> {
        let url = self.url();
        let mut env = vec![
            ("APP__BROKER__URL", url.as_str()),
            ("APP__BROKER__CONTRACT", "momo"),
            ("APP__BROKER__CONSUMER_RETRIES", "1"),
            ("APP__BROKER__CONSUMER_RETRY_BACKOFF", "20ms"),
            ("APP__MEETINGS__FEE_SOURCE", "sql"),
            ("APP__MEETINGS__FEE_SQL__URL", fees),
        ];
        env.extend_from_slice(extra);
        let app = TestApp::spawn_with(backend, &env).await?;
        let workers = Workers::spawn(&app.services);
        // The deleted queue is the last one consumed: from then on every queue is.
        until("our consumers on the platform's queues", || async {
            crate::broker::queue_state(&self.connection, "payment.meeting.deleted.queue")
                .await
                .is_some_and(|(_, consumers)| consumers > 0)
        })
        .await;
        Some((app, workers))
    }

    /// `EventWrapper.of(type, data)` as its meeting service sends it: through Spring's
    /// `Jackson2JsonMessageConverter` (content type and encoding, `__TypeId__`, persistent).
    async fn send(&self, exchange: &str, routing_key: &str, body: &str, scenario: Option<&str>) {
        let mut headers = FieldTable::new();
        headers.insert(
            "__TypeId__".try_into().unwrap(),
            FieldValue::S("com.example.momo.global.rabbitmq.dto.common.EventWrapper".try_into().unwrap()),
        );
        if let Some(s) = scenario {
            headers.insert("x-mock-scenario".try_into().unwrap(), FieldValue::S(s.try_into().unwrap()));
        }
        let mut props = amqprs::BasicProperties::default();
        props
            .with_content_type("application/json")
            .with_content_encoding("UTF-8")
            .with_delivery_mode(2)
            .with_priority(0)
            .with_headers(headers);
        self.channel
            .basic_publish(
                props.finish(),
                body.as_bytes().to_vec(),
                amqprs::channel::BasicPublishArguments::new(exchange, routing_key),
            )
            .await
            .unwrap();
        self.sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    pub(crate) async fn register(&self, uu_id: &str, meeting: i64, user: i64, scenario: Option<&str>) {
        let body = format!(
            r#"{{"uuId":"{uu_id}","type":"meeting.participant.register","data":{{"meetingId":{meeting},"userId":{user}}}}}"#
        );
        self.send("momo.participant.events", "participant.registered.key", &body, scenario).await;
    }

    async fn cancel(&self, uu_id: &str, meeting: i64, user: i64, refund: bool) {
        let body = format!(
            r#"{{"uuId":"{uu_id}","type":"meeting.participant.cancel","data":{{"meetingId":{meeting},"userId":{user},"hostUserId":3,"participantNickname":"민수","refundRequired":{refund},"amount":15000}}}}"#
        );
        self.send("momo.participant.events", "participant.canceled.key", &body, None).await;
    }

    fn replies(&self) -> Vec<Reply> {
        self.replies.lock().unwrap().clone()
    }

    /// Waits until `n` replies came and no other can come: every message the platform sent
    /// has been handled by the app (its consumers count each final verdict), every event
    /// the app committed is published, and a marker the platform puts on the reply queue
    /// after them has come back — a queue delivers in order, so every reply before it has
    /// been taken. No time is waited on.
    pub(crate) async fn replies_after(&self, app: &TestApp, n: usize) -> Vec<Read> {
        let within = std::time::Duration::from_secs(30);
        until_within("the platform's replies", within, || async { self.replies.lock().unwrap().len() >= n })
            .await;
        let sent = self.sent.load(std::sync::atomic::Ordering::SeqCst);
        until_within("every message handled and every event published", within, || async {
            handled(app).await >= sent && {
                let stats = app.services.outbox_store.stats().await.unwrap();
                stats.oldest_ready_created_at.is_none()
                    && stats.oldest_ready_by_lane.iter().all(|(_, at)| at.is_none())
            }
        })
        .await;
        // A marker on each reply queue: a queue delivers in order, so every reply put on it
        // before its marker has been taken once the marker is.
        let markers: Vec<Vec<u8>> = REPLY_QUEUES
            .iter()
            .map(|queue| format!("marker-{queue}-{}", uuid::Uuid::new_v4().simple()).into_bytes())
            .collect();
        for (queue, marker) in REPLY_QUEUES.iter().zip(&markers) {
            self.channel
                .basic_publish(
                    amqprs::BasicProperties::default(),
                    marker.clone(),
                    amqprs::channel::BasicPublishArguments::new("", queue),
                )
                .await
                .unwrap();
        }
        until_within("the markers behind the replies", within, || async {
            let replies = self.replies.lock().unwrap();
            markers.iter().all(|marker| replies.iter().any(|r| &r.body == marker))
        })
        .await;
        self.replies.lock().unwrap().retain(|r| !markers.contains(&r.body));
        self.replies().iter().map(platform_reads).collect()
    }

    async fn depth(&self, queue: &str) -> u32 {
        crate::broker::queue_state(&self.connection, queue).await.map_or(0, |(n, _)| n)
    }
}

/// How many inbound messages the app's consumers brought to a final verdict (processed,
/// a duplicate, refused, dead-lettered): every outcome of `consumer_messages_total` but a
/// retry.
async fn handled(app: &TestApp) -> usize {
    let metrics = app.get("/metrics", &app.admin_token("ops")).send().await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .filter(|l| l.starts_with("consumer_messages_total{") && !l.contains(r#"outcome="retried""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

async fn the_platform_plugs_in_unchanged(backend: Backend) {
    // Meeting 12 costs 15 000, 13 is free, 15 is the one deleted; 99 does not exist.
    let Some(platform) = Platform::start(&[(12, 15_000), (13, 0), (14, 5_000), (15, 20_000)]).await else {
        return;
    };
    let fees = platform._db.url();
    let Some((app, _workers)) = platform.serve(backend, &fees).await else { return };

    // A registration that completes: charged the meeting's fee, answered by its uuId.
    platform.register("reg-1", 12, 7, None).await;
    let read = platform.replies_after(&app, 1).await;
    let number: i64 = app
        .db
        .query_one_raw(sea_orm::Statement::from_string(
            app.db.get_database_backend(),
            "SELECT p.number FROM payments p JOIN orders o ON o.id = p.order_id WHERE o.customer_id = '7'",
        ))
        .await
        .unwrap()
        .expect("a payment of user 7")
        .try_get_by_index(0)
        .unwrap();
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!((read[0].uu_id.as_str(), read[0].kind.as_str()), ("reg-1", "payment.completed"));
    assert_eq!(read[0].data["paymentId"], number);
    assert_eq!((read[0].data["userId"].clone(), read[0].data["meetingId"].clone()), (7.into(), 12.into()));
    assert_eq!(read[0].data["amount"], 15_000);
    assert!(read[0].data["orderId"].is_string() && read[0].data["outboxId"].is_null());
    // Operators see where each event went (`/flow`, docs/spec.md §12).
    let order_id = read[0].data["orderId"].as_str().unwrap();
    let flow = crate::helpers::json(
        app.get(&format!("/api/orders/{order_id}/flow"), &app.admin_token("ops")).send().await.unwrap(),
        reqwest::StatusCode::OK,
    )
    .await;
    let to = |event_type: &str| {
        flow["events"].as_array().unwrap().iter().find(|e| e["eventType"] == event_type).unwrap()["destinations"]
            .clone()
    };
    assert_eq!(
        to("order.completed"),
        serde_json::json!([{ "destination": "momo.payment.events", "key": "payment.completed.key" }])
    );
    assert_eq!(
        to("payment.approved"),
        serde_json::json!([{ "destination": "commerce.events", "key": "payment.approved" }])
    );

    // The same message again (the platform's outbox re-sends): once.
    platform.register("reg-1", 12, 7, None).await;
    // Declined; already registered; a free meeting; a meeting the platform does not have.
    platform.register("reg-2", 12, 8, Some("payment=decline")).await;
    platform.register("reg-3", 12, 7, None).await;
    platform.register("reg-4", 13, 9, None).await;
    platform.register("reg-5", 99, 9, None).await;
    let read = platform.replies_after(&app, 4).await;
    assert_eq!(read.len(), 4, "one answer each, none for the duplicates: {read:?}");
    let failed = |uu_id: &str| {
        let reply = read.iter().find(|r| r.uu_id == uu_id).unwrap_or_else(|| panic!("no reply to {uu_id}"));
        assert_eq!(reply.kind, "payment.failed");
        reply.data["failReason"].as_str().unwrap().to_owned()
    };
    assert!(failed("reg-2").starts_with("결제 실패 ("), "{}", failed("reg-2"));
    // Already registered: the platform sends nothing for a duplicate (its `ALREADY_PAID`,
    // "이벤트/아웃박스 미발행"); the pair's live order is the one answer (docs/dialects.md).
    assert!(read.iter().all(|r| r.uu_id != "reg-3"), "{read:?}");
    assert_eq!(
        count_where(&app.db, "audit_log", "action = 'REGISTRATION_REJECTED' AND detail LIKE '%reg-3%'").await,
        1,
        "refused and audited all the same"
    );
    assert_eq!(failed("reg-4"), "무료 모임 (FREE_MEETING)");
    assert_eq!(failed("reg-5"), "모임 없음 (MEETING_NOT_FOUND)");
    assert_eq!(count_where(&app.db, "orders", "customer_id = '9'").await, 0, "no order without a fee");

    // A cancellation without a refund: nothing to answer; with one: a refund whose
    // `payment.refunded` goes to `momo.payment.events`, where the platform binds nothing —
    // returned unroutable, it counts as published and holds nothing back.
    platform.register("reg-6", 14, 10, None).await;
    platform.replies_after(&app, 5).await;
    platform.cancel("cancel-1", 14, 10, false).await;
    platform.cancel("cancel-2", 12, 7, true).await;
    let read = platform.replies_after(&app, 5).await;
    assert_eq!(read.len(), 5, "no reply of the platform's binds a refund: {read:?}");
    let order = crate::helpers::json(
        app.get(&format!("/api/orders/{order_id}"), &app.admin_token("ops")).send().await.unwrap(),
        reqwest::StatusCode::OK,
    )
    .await;
    assert_eq!(order["refunds"][0]["amount"], 15_000);
    // The platform's own text (its `PaymentEventConsumer`), which the reply's `refundReason`
    // and Toss's `cancelReason` carry.
    assert_eq!(order["refunds"][0]["reason"], "사용자 민수님의 참가 취소");
    assert_eq!(count_where(&app.db, "orders", "customer_id = '10' AND status = 'COMPLETED'").await, 1);

    // A meeting deleted with three paid participants: three refunds, the platform's second
    // shape of the same deletion refunds nothing more; the registrations after the refunds
    // are answered all the same.
    for user in [21, 22, 23] {
        platform.register(&format!("reg-15-{user}"), 15, user, None).await;
    }
    platform.replies_after(&app, 8).await;
    let delete = |uu_id: &str, host: bool| {
        let host = if host { r#""hostUserId":3,"# } else { "" };
        format!(
            r#"{{"uuId":"{uu_id}","type":"meeting.delete","data":{{{host}"meetingId":15,"meetingName":"송년회","userIdList":[21,22,23]}}}}"#
        )
    };
    platform.send("momo.meeting.events", "meeting.deleted.key", &delete("del-1", true), None).await;
    platform.send("momo.meeting.events", "meeting.deleted.key", &delete("del-2", false), None).await;
    platform.register("reg-after", 14, 11, None).await;
    let read = platform.replies_after(&app, 9).await;
    assert_eq!(read.len(), 9, "the registration after the refunds answered, nothing for a refund: {read:?}");
    assert_eq!((read[8].uu_id.as_str(), read[8].kind.as_str()), ("reg-after", "payment.completed"));
    assert_eq!(
        count_where(
            &app.db,
            "refunds",
            "reason = '모임 ''송년회'' 삭제로 인한 자동 환불' AND amount = 20000"
        )
        .await,
        3
    );
    // Every refund and every native event published, none dead-lettered; the returns counted.
    let stats = app.services.outbox_store.stats().await.unwrap();
    assert!(stats.dead_letters_by_type.is_empty(), "{stats:?}");
    assert_eq!(stats.blocked_aggregates, 0);
    let metrics = app.get("/metrics", &app.admin_token("ops")).send().await.unwrap().text().await.unwrap();
    let unroutable = |event_type: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("outbox_unroutable_total{{event_type=\"{event_type}\"}}")))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    assert_eq!(unroutable("payment.refunded"), 4.0, "{metrics}");
    // One per charge: reg-1, reg-6, the three of meeting 15 and reg-after.
    assert_eq!(unroutable("payment.approved"), 6.0, "{metrics}");

    // Poison, each to the platform's DLQ at once: a wrong type, no userId, not JSON.
    let dlq_before = platform.depth("payment.dlq.queue").await;
    platform
        .send(
            "momo.participant.events",
            "participant.registered.key",
            r#"{"uuId":"p-1","type":"meeting.participant.cancel","data":{"meetingId":12,"userId":1}}"#,
            None,
        )
        .await;
    platform
        .send(
            "momo.participant.events",
            "participant.registered.key",
            r#"{"uuId":"p-2","type":"meeting.participant.register","data":{"meetingId":12}}"#,
            None,
        )
        .await;
    platform.send("momo.participant.events", "participant.registered.key", "{not json", None).await;
    until("three dead letters", || async { platform.depth("payment.dlq.queue").await >= dlq_before + 3 })
        .await;
    // A null data is dropped, as the platform drops it: no reply, no dead letter.
    platform
        .send(
            "momo.participant.events",
            "participant.registered.key",
            r#"{"uuId":"p-3","type":"meeting.participant.register","data":null}"#,
            None,
        )
        .await;
    let read = platform.replies_after(&app, 9).await;
    assert_eq!(read.len(), 9);
    assert_eq!(platform.depth("payment.dlq.queue").await, dlq_before + 3);
    assert_eq!(count_where(&app.db, "inbox", "event_id LIKE 'p-%'").await, 0);
}

on_both_databases!(the_platform_plugs_in_unchanged);

/// docs/spec.md §12: what cannot work with the platform is refused at start, naming the key.
#[test]
fn what_the_platform_cannot_work_with_is_refused_at_start() {
    let amqp = ("APP__BROKER__URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let refused = |extra: &[(&str, &str)]| crate::helpers::try_settings(extra).unwrap_err().to_string();
    // Its registrations carry no amount: the fee must come from its database.
    let why = refused(&[amqp, ("APP__BROKER__CONTRACT", "momo")]);
    assert!(why.contains("meetings.fee_source"), "{why}");
    let sql = [
        ("APP__MEETINGS__FEE_SOURCE", "sql"),
        ("APP__MEETINGS__FEE_SQL__URL", "mysql://root@127.0.0.1/momo"),
    ];
    let momo = [amqp, ("APP__BROKER__CONTRACT", "momo"), sql[0], sql[1]];
    assert!(crate::helpers::try_settings(&momo).is_ok());
    let why = refused(&[momo.as_slice(), &[("APP__BROKER__QUEUE_TYPE", "quorum")]].concat());
    assert!(why.contains("broker.queue_type"), "{why}");
    let why = refused(&[
        ("APP__BROKER__KIND", "kafka"),
        ("APP__BROKER__KAFKA__BROKERS", "127.0.0.1:9092"),
        ("APP__BROKER__CONTRACT", "momo"),
    ]);
    assert!(why.contains("broker.contract") && why.contains("kafka"), "{why}");
    let why = refused(&[momo.as_slice(), &[("APP__MEETINGS__FEE_SQL__URL", "redis://127.0.0.1")]].concat());
    assert!(why.contains("meetings.fee_sql.url"), "{why}");
    let why = refused(&[momo.as_slice(), &[("APP__MEETINGS__TIMEZONE", "Mars/Olympus")]].concat());
    assert!(why.contains("meetings.timezone"), "{why}");
    let why = refused(&[momo.as_slice(), &[("APP__MEETINGS__FEE_SQL__QUERY", "SELECT 1")]].concat());
    assert!(why.contains("meetings.fee_sql.query"), "{why}");
}

/// The fee's source down is a system failure: retried, then the platform's DLQ — never an
/// order at a made-up price, never a reply.
async fn a_fee_that_cannot_be_read_is_retried_then_dead_lettered(backend: Backend) {
    let Some(platform) = Platform::start(&[(12, 15_000)]).await else { return };
    // Nothing listens on port 1.
    let Some((app, _workers)) = platform.serve(backend, "mysql://root@127.0.0.1:1/momo").await else {
        return;
    };
    platform.register("reg-down", 12, 7, None).await;
    until("the registration dead-lettered", || async { platform.depth("payment.dlq.queue").await == 1 })
        .await;
    assert_eq!(app.count("orders").await, 0);
    assert!(platform.replies().is_empty());
    assert_eq!(
        count_where(&app.db, "inbox", "event_id = 'reg-down'").await,
        0,
        "a redelivery may still succeed"
    );
}

on_both_databases!(a_fee_that_cannot_be_read_is_retried_then_dead_lettered);

/// Switching a running deployment's database to `momo` loses nothing: a registration taken
/// and completed under `native`, its events not yet published, goes out as the platform's
/// `payment.completed`, answering the registration's id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_under_native_go_out_as_the_platforms_once_switched() {
    use orchestrator::application::inbound::{Handled, ParticipantRegistered};
    let Some(platform) = Platform::start(&[(12, 15_000)]).await else { return };
    let Some(test_db) = crate::helpers::TestDb::create(Backend::Sqlite).await else { return };
    let url = test_db.url.clone();
    let broker = platform.url();
    // Under `native`, no relay running: the order completes, its events stay in the outbox.
    let first = TestApp::spawn_on_database(test_db, &[("APP__BROKER__URL", broker.as_str())], None).await;
    let registered = ParticipantRegistered {
        event_id: "native-reg-1".into(),
        meeting_id: "12".into(),
        user_id: "7".into(),
        amount: 15_000,
        currency: "KRW".into(),
        digest: "d".into(),
    };
    let handled =
        first.services.meeting_events.participant_registered(registered, Default::default(), None).await;
    assert_eq!(handled.unwrap(), Handled::Processed);
    assert!(platform.replies().is_empty());
    // The same database under `momo`.
    let fees = platform._db.url();
    let settings = crate::helpers::settings_for_url(
        &url,
        &[
            ("APP__BROKER__URL", broker.as_str()),
            ("APP__BROKER__CONTRACT", "momo"),
            ("APP__MEETINGS__FEE_SOURCE", "sql"),
            ("APP__MEETINGS__FEE_SQL__URL", fees.as_str()),
        ],
    );
    let second = orchestrator::startup::Application::build(settings).await.expect("build");
    while second.services().relay().run_once().await.unwrap().claimed > 0 {}
    let read = platform.replies_after(&first, 1).await;
    assert_eq!(read.len(), 1, "{read:?}");
    assert_eq!((read[0].uu_id.as_str(), read[0].kind.as_str()), ("native-reg-1", "payment.completed"));
    assert_eq!((read[0].data["userId"].clone(), read[0].data["amount"].clone()), (7.into(), 15_000.into()));
}
