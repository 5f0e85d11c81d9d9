//! Wire contracts (docs/spec.md §12), judged by the other side: what we send under
//! `cloudevents` is read by the CNCF CloudEvents SDK for Python (`tests/support/
//! cloudevents_parse.py`, pip `cloudevents`), an implementation that is not ours, off the
//! real brokers (RabbitMQ and a Kafka-protocol broker), binary and structured, on both
//! databases; events written under one contract go out in another once it is switched.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::broker::{Received, TestBroker, amqp_url};
use crate::helpers::{Backend, TestApp, json, order_body, service_missing};
use crate::kafka_broker::{Record, TestKafka};
use crate::on_both_databases;

/// Each message parsed by the CloudEvents SDK: `{attributes, data}` or `{error}`.
fn sdk_parse(messages: &[Value]) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/cloudevents_parse.py");
    let probe = Command::new("python3").args(["-c", "import cloudevents"]).status();
    if !probe.is_ok_and(|s| s.success()) {
        service_missing("the CloudEvents SDK for Python", "pip install cloudevents==1.11.0");
        return Vec::new();
    }
    let mut child = Command::new("python3")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        let mut stdin = child.stdin.take().unwrap();
        for m in messages {
            writeln!(stdin, "{m}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn amqp_message(m: &Received) -> Value {
    let headers: serde_json::Map<String, Value> =
        m.headers.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
    json!({ "broker": "amqp", "headers": headers, "content_type": m.content_type,
            "body": String::from_utf8(m.raw.clone()).unwrap() })
}

fn kafka_message(r: &Record) -> Value {
    json!({ "broker": "kafka", "headers": r.headers, "key": r.key, "body": r.body.to_string() })
}

/// What the SDK read of one order's events, checked against what the events are.
/// `datacontenttype`: what the SDK reports it as (its Kafka structured-mode reader takes
/// the record's `content-type` header for it, whatever the event says: docs/decisions.md).
fn assert_cloudevents(parsed: &[Value], order_id: &str, datacontenttype: &str) {
    assert!(!parsed.is_empty());
    let mut types = Vec::new();
    for event in parsed {
        assert!(event.get("error").is_none(), "the SDK refused a message: {event}");
        let a = &event["attributes"];
        assert_eq!(a["specversion"], "1.0", "{event}");
        assert_eq!(a["source"], "/commerce-orchestrator", "{event}");
        assert_eq!(a["subject"], order_id, "{event}");
        assert_eq!(a["datacontenttype"], datacontenttype, "{event}");
        assert!(a["id"].as_str().is_some_and(|id| id.len() == 36), "{event}");
        assert!(chrono::DateTime::parse_from_rfc3339(a["time"].as_str().unwrap()).is_ok(), "{event}");
        assert_eq!(event["data"]["orderId"], order_id, "the data is the event's payload: {event}");
        assert!(event["data"]["orderNumber"].as_i64().is_some_and(|n| n > 0), "{event}");
        types.push(a["type"].as_str().unwrap().to_owned());
    }
    assert!(types.contains(&"io.commerce.payment.approved".to_owned()), "{types:?}");
    assert!(types.contains(&"io.commerce.order.completed".to_owned()), "{types:?}");
}

async fn over_rabbitmq(backend: Backend, mode: &str) {
    let Some(broker) = TestBroker::start().await else { return };
    let mut env = broker.env(&amqp_url());
    env.push(("APP__BROKER__CONTRACT".into(), "cloudevents".into()));
    env.push(("APP__BROKER__CLOUDEVENTS__MODE".into(), mode.into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    let order =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    while app.services.relay().run_once().await.unwrap().claimed > 0 {}
    let received = broker.wait_for(2, Duration::from_secs(20)).await;
    for m in &received {
        assert!(m.persistent);
        match mode {
            "binary" => assert_eq!(m.content_type.as_deref(), Some("application/json")),
            _ => assert_eq!(m.content_type.as_deref(), Some("application/cloudevents+json; charset=UTF-8")),
        }
        assert!(
            m.routing_key.starts_with("order.")
                || m.routing_key.starts_with("payment.")
                || m.routing_key.starts_with("settlement.")
                || m.routing_key.starts_with("notification."),
            "routing keys as native: {}",
            m.routing_key
        );
    }
    let parsed = sdk_parse(&received.iter().map(amqp_message).collect::<Vec<_>>());
    if parsed.is_empty() {
        return;
    }
    assert_cloudevents(&parsed, order["id"].as_str().unwrap(), "application/json");
}

async fn cloudevents_binary_over_rabbitmq(backend: Backend) {
    over_rabbitmq(backend, "binary").await
}

async fn cloudevents_structured_over_rabbitmq(backend: Backend) {
    over_rabbitmq(backend, "structured").await
}

on_both_databases!(cloudevents_binary_over_rabbitmq, cloudevents_structured_over_rabbitmq);

async fn over_kafka(backend: Backend, mode: &str) {
    let Some(kafka) = TestKafka::start().await else { return };
    let topic = "commerce.events";
    let mut env = kafka.env(topic);
    env.push(("APP__BROKER__CONTRACT".into(), "cloudevents".into()));
    env.push(("APP__BROKER__CLOUDEVENTS__MODE".into(), mode.into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    let reader = kafka.read(topic).await;
    let order =
        json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    let id = order["id"].as_str().unwrap();
    while app.services.relay().run_once().await.unwrap().claimed > 0 {}
    let records = reader.wait_for(2, Duration::from_secs(60)).await;
    assert!(records.iter().all(|r| r.key.as_deref() == Some(id)), "keyed by the order as native");
    let parsed = sdk_parse(&records.iter().map(kafka_message).collect::<Vec<_>>());
    if parsed.is_empty() {
        return;
    }
    let datacontenttype = match mode {
        "binary" => "application/json",
        _ => {
            // What the event itself says, in the value.
            assert!(records.iter().all(|r| r.body["datacontenttype"] == "application/json"));
            "application/cloudevents+json; charset=UTF-8"
        }
    };
    assert_cloudevents(&parsed, id, datacontenttype);
}

async fn cloudevents_binary_over_kafka(backend: Backend) {
    over_kafka(backend, "binary").await
}

async fn cloudevents_structured_over_kafka(backend: Backend) {
    over_kafka(backend, "structured").await
}

on_both_databases!(cloudevents_binary_over_kafka, cloudevents_structured_over_kafka);

/// Events written while the deployment spoke `native` go out as CloudEvents once it is
/// switched: the contract is encoding at the broker adapter, never stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_written_before_a_switch_go_out_in_the_new_contract() {
    let Some(broker) = TestBroker::start().await else { return };
    let Some(test_db) = crate::helpers::TestDb::create(Backend::Sqlite).await else { return };
    let url = test_db.url.clone();
    // Written (not published) under `native`: the app has no relay running.
    let native_env = broker.env(&amqp_url());
    let refs: Vec<(&str, &str)> = native_env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let first = TestApp::spawn_on_database(test_db, &refs, None).await;
    let order =
        json(first.place_order(&first.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    assert_eq!(broker.count(), 0);
    // The same database, now under `cloudevents`.
    let mut env = broker.env(&amqp_url());
    env.push(("APP__BROKER__CONTRACT".into(), "cloudevents".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let settings = crate::helpers::settings_for_url(&url, &refs);
    let second = orchestrator::startup::Application::build(settings).await.expect("build");
    while second.services().relay().run_once().await.unwrap().claimed > 0 {}
    let received = broker.wait_for(2, Duration::from_secs(20)).await;
    assert!(
        received.iter().all(|m| m.headers.iter().any(|(k, _)| k == "cloudEvents_specversion")),
        "{received:?}"
    );
    let parsed = sdk_parse(&received.iter().map(amqp_message).collect::<Vec<_>>());
    if !parsed.is_empty() {
        assert_cloudevents(&parsed, order["id"].as_str().unwrap(), "application/json");
    }
}

/// A contract a broker kind does not define is refused at start, naming both.
#[test]
fn a_contract_the_broker_does_not_define_is_refused() {
    let refused = crate::helpers::try_settings(&[
        ("APP__BROKER__KIND", "log"),
        ("APP__BROKER__CONTRACT", "cloudevents"),
    ]);
    let why = refused.expect_err("log speaks native only").to_string();
    assert!(why.contains("broker.contract") && why.contains("log"), "{why}");
    let refused = crate::helpers::try_settings(&[("APP__BROKER__CONTRACT", "soap")]);
    assert!(refused.expect_err("no such contract").to_string().contains("soap"));
}

/// The Java client's `Utils.murmur2` (org.apache.kafka.common.utils), as its default
/// partitioner hashes a key: `toPositive(murmur2(key)) % partitions`.
fn java_murmur2(data: &[u8]) -> i32 {
    let m: i32 = 0x5bd1_e995;
    let mut h: i32 = (0x9747_b28c_u32 as i32) ^ (data.len() as i32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(m);
        k ^= ((k as u32) >> 24) as i32;
        k = k.wrapping_mul(m);
        h = h.wrapping_mul(m);
        h ^= k;
    }
    if tail.len() >= 3 {
        h ^= i32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= i32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= i32::from(tail[0]);
        h = h.wrapping_mul(m);
    }
    h ^= ((h as u32) >> 13) as i32;
    h = h.wrapping_mul(m);
    h ^= ((h as u32) >> 15) as i32;
    h
}

fn java_partition(key: &str, partitions: i32) -> i32 {
    (java_murmur2(key.as_bytes()) & 0x7fff_ffff) % partitions
}

#[test]
fn the_java_murmur2_of_the_test_is_kafkas() {
    // Kafka's own UtilsTest.testMurmur2 vectors.
    for (key, hash) in [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
        ("abc", 479_470_107),
    ] {
        assert_eq!(java_murmur2(key.as_bytes()), hash, "{key}");
    }
}

/// `commerce`: each completed order is the two records the backend's consumers read, in
/// their exact bytes, keyed by the order's number, with no headers, on the partition the
/// Java client would choose for that key; other events stay native on the broker's topic.
async fn commerce_sends_what_the_commerce_backend_reads(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let topic = "commerce.events";
    let mut env = kafka.env(topic);
    env.push(("APP__BROKER__CONTRACT".into(), "commerce".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    let native = kafka.read(topic).await;
    let settlement = kafka.read("commerce.settlement.requested").await;
    let notification = kafka.read("commerce.notification.requested").await;
    let mut numbers = Vec::new();
    for _ in 0..5 {
        let order =
            json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
        numbers.push(order["number"].as_i64().unwrap());
    }
    while app.services.relay().run_once().await.unwrap().claimed > 0 {}
    for (reader, event_type) in
        [(&settlement, "SETTLEMENT_REQUESTED"), (&notification, "NOTIFICATION_REQUESTED")]
    {
        let records = reader.wait_for(5, Duration::from_secs(60)).await;
        let mut keys: Vec<i64> = Vec::new();
        for r in &records {
            let key = r.key.clone().expect("keyed");
            let number: i64 = key.parse().expect("the key is the order number as decimal text");
            assert_eq!(
                String::from_utf8(r.raw.clone()).unwrap(),
                format!(r#"{{"orderId":{number},"eventType":"{event_type}"}}"#)
            );
            assert!(r.headers.is_empty(), "no headers: {:?}", r.headers);
            assert_eq!(r.partition, java_partition(&key, 16), "where the Java client puts key {key}");
            keys.push(number);
        }
        keys.sort_unstable();
        assert_eq!(keys, numbers, "one record per completed order");
    }
    // Operators see where each event went (`/flow`, docs/spec.md §12).
    let first =
        json(app.get("/api/orders?limit=100", &app.admin_token("ops")).send().await.unwrap(), StatusCode::OK)
            .await;
    let order =
        first["items"].as_array().unwrap().iter().find(|o| o["number"] == numbers[0]).unwrap().clone();
    let id = order["id"].as_str().unwrap();
    let flow = json(
        app.get(&format!("/api/orders/{id}/flow"), &app.admin_token("ops")).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let to = |event_type: &str| -> Vec<Value> {
        flow["events"].as_array().unwrap().iter().find(|e| e["eventType"] == event_type).unwrap()["destinations"]
            .as_array()
            .unwrap()
            .clone()
    };
    let key = numbers[0].to_string();
    assert_eq!(
        to("order.completed"),
        [
            json!({ "destination": "commerce.settlement.requested", "key": key }),
            json!({ "destination": "commerce.notification.requested", "key": key }),
        ]
    );
    assert_eq!(to("payment.approved"), [json!({ "destination": topic, "key": id })]);
    // The payment events stay native on the broker's topic; order.completed is the two above.
    let natives = native.wait_for(5, Duration::from_secs(30)).await;
    assert!(
        natives.iter().all(|r| r.header("event_type") == Some("payment.approved")),
        "{:?}",
        natives.iter().map(|r| r.header("event_type")).collect::<Vec<_>>()
    );
}

on_both_databases!(commerce_sends_what_the_commerce_backend_reads);

/// A registration from the meeting service as a CloudEvent (`type` = prefix + the §7 kind,
/// `id` the inbox key, data the §7 body).
fn registration_event(id: &str, user: &str) -> Value {
    json!({ "specversion": "1.0", "id": id, "source": "/meetings", "type": "io.commerce.meeting.participant.registered",
            "correlationid": format!("corr-{id}"), "datacontenttype": "application/json",
            "data": { "meetingId": "m-ce", "userId": user, "amount": 15000, "currency": "KRW" } })
}

/// Inbound under `cloudevents`, RabbitMQ, structured mode: one order per registration (the
/// CloudEvent's id is the inbox key: a redelivery is one order), the correlation id carried
/// on; a CloudEvent of another type on the registration queue goes to its DLQ.
async fn cloudevents_inbound_over_rabbitmq(backend: Backend) {
    use amqprs::BasicProperties;
    use amqprs::channel::BasicPublishArguments;
    let Some((app, _broker, meeting, workers)) =
        crate::meeting::start(backend, &[("APP__BROKER__CONTRACT", "cloudevents")]).await
    else {
        return;
    };
    let send = |body: Value| {
        let mut props = BasicProperties::default();
        props.with_content_type("application/cloudevents+json; charset=UTF-8").with_persistence(true);
        let args = BasicPublishArguments::new(
            &format!("test.meeting.{}", meeting.id),
            "meeting.participant.registered",
        );
        let channel = meeting.channel.clone();
        async move { channel.basic_publish(props.finish(), body.to_string().into_bytes(), args).await.unwrap() }
    };
    for _ in 0..2 {
        send(registration_event("ce-reg-1", "u-ce-1")).await;
    }
    let mut wrong = registration_event("ce-reg-2", "u-ce-2");
    wrong["type"] = json!("io.commerce.meeting.deleted");
    send(wrong).await;
    crate::helpers::until("the registration's order completed", || async {
        crate::helpers::count_where(&app.db, "orders", "status = 'COMPLETED'").await == 1
    })
    .await;
    crate::helpers::until("the wrong type dead-lettered", || async {
        meeting.dlq_depth("register").await == 1
    })
    .await;
    assert_eq!(
        crate::helpers::count_where(&app.db, "orders", "1 = 1").await,
        1,
        "one order for one registration"
    );
    assert_eq!(crate::helpers::count_where(&app.db, "inbox", "event_id = 'ce-reg-1'").await, 1);
    assert_eq!(crate::helpers::count_where(&app.db, "orders", "correlation_id = 'corr-ce-reg-1'").await, 1);
    workers.shutdown(Duration::from_secs(5)).await;
}

on_both_databases!(cloudevents_inbound_over_rabbitmq);

/// Inbound under `cloudevents`, Kafka, binary mode (`ce_` headers, the value is the data).
async fn cloudevents_inbound_over_kafka(backend: Backend) {
    let Some(kafka) = TestKafka::start().await else { return };
    let mut env = kafka.env("commerce.events");
    env.push(("APP__BROKER__CONTRACT".into(), "cloudevents".into()));
    env.push(("APP__BROKER__CONSUMER_RETRIES".into(), "1".into()));
    env.push(("APP__BROKER__CONSUMER_RETRY_BACKOFF".into(), "20ms".into()));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    kafka.create("meeting.events").await;
    let dead = kafka.read("meeting.events.dlq").await;
    let workers = orchestrator::startup::Workers::spawn(&app.services);
    let event = registration_event("ce-k-1", "u-k-1");
    let headers = [
        ("ce_specversion", "1.0"),
        ("ce_id", "ce-k-1"),
        ("ce_source", "/meetings"),
        ("ce_type", "io.commerce.meeting.participant.registered"),
        ("content-type", "application/json"),
    ];
    let data = event["data"].to_string();
    for _ in 0..2 {
        kafka.produce("meeting.events", "m-ce", &headers, data.as_bytes()).await;
    }
    // No specversion: not a CloudEvent.
    kafka.produce("meeting.events", "m-ce", &headers[1..], data.as_bytes()).await;
    let letters = dead.wait_for(1, Duration::from_secs(60)).await;
    assert!(
        letters[0].header("x-dlq-reason").is_some_and(|r| r.contains("specversion")),
        "{:?}",
        letters[0].headers
    );
    crate::helpers::until("the registration's order completed", || async {
        crate::helpers::count_where(&app.db, "orders", "status = 'COMPLETED'").await == 1
    })
    .await;
    assert_eq!(crate::helpers::count_where(&app.db, "orders", "1 = 1").await, 1);
    workers.shutdown(Duration::from_secs(5)).await;
}

on_both_databases!(cloudevents_inbound_over_kafka);

/// Issue 57 item 1, decided per contract (docs/decisions.md, "An event nobody binds"): a
/// subscriber that binds one event type only, as a CloudEvents trigger filters by type.
/// Under `cloudevents` the types nobody subscribes to are returned unroutable, count as
/// published (`outbox_unroutable_total`) and hold nothing back; under `native` a return
/// stays a failure (docs/spec.md §6): the order's later events wait behind the retry.
async fn an_event_nobody_binds(backend: Backend, contract: &str) {
    use amqprs::channel::{
        BasicConsumeArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
    };
    let endpoint = orchestrator::adapters::messaging::amqp::AmqpEndpoint::parse(&amqp_url()).unwrap();
    let connection =
        match orchestrator::adapters::messaging::amqp::connect(&endpoint, "test-subscriber").await {
            Ok(c) => c,
            Err(e) => return service_missing("RabbitMQ", e),
        };
    let channel = connection.open_channel(None).await.unwrap();
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (exchange, queue) = (format!("test.events.{id}"), format!("test.completed.{id}"));
    channel
        .exchange_declare(ExchangeDeclareArguments::new(&exchange, "topic").durable(true).finish())
        .await
        .unwrap();
    channel
        .queue_declare(QueueDeclareArguments::new(&queue).exclusive(true).auto_delete(true).finish())
        .await
        .unwrap();
    channel.queue_bind(QueueBindArguments::new(&queue, &exchange, "order.completed")).await.unwrap();
    let (_, mut rx) = channel
        .basic_consume_rx(BasicConsumeArguments::new(&queue, "subscriber").manual_ack(false).finish())
        .await
        .unwrap();
    let env = [
        ("APP__BROKER__URL", amqp_url()),
        ("APP__BROKER__EXCHANGE", exchange.clone()),
        ("APP__BROKER__CONTRACT", contract.to_owned()),
    ];
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let Some(app) = TestApp::spawn_with(backend, &refs).await else { return };
    json(app.place_order(&app.token("alice"), &order_body(), None).await, StatusCode::CREATED).await;
    while app.services.relay().run_once().await.unwrap().claimed > 0 {}
    let stats = app.services.outbox_store.stats().await.unwrap();
    let waiting =
        |status: &str| stats.by_status.iter().find(|(s, _)| s.as_str() == status).map_or(0, |(_, n)| *n);
    let metrics = app.get("/metrics", &app.admin_token("ops")).send().await.unwrap().text().await.unwrap();
    let counted =
        metrics.lines().any(|l| l.starts_with(r#"outbox_unroutable_total{event_type="payment.approved"}"#));
    if contract == "cloudevents" {
        let delivered = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        let message = delivered.expect("order.completed delivered").expect("a message");
        assert_eq!(message.deliver.unwrap().routing_key(), "order.completed");
        assert_eq!(waiting("RETRY_WAIT") + waiting("READY"), 0, "nothing held back: {stats:?}");
        assert!(counted, "the returns are counted: {metrics}");
    } else {
        assert!(waiting("RETRY_WAIT") >= 1, "the return is a failure under native: {stats:?}");
        assert!(!counted, "{metrics}");
        assert!(rx.try_recv().is_err(), "order.completed waits behind the retry of its order");
    }
    let _ = connection.close().await;
}

async fn under_cloudevents_an_event_nobody_subscribes_to_holds_nothing_back(backend: Backend) {
    an_event_nobody_binds(backend, "cloudevents").await
}

async fn under_native_an_unbound_event_is_retried_and_holds_its_order_back(backend: Backend) {
    an_event_nobody_binds(backend, "native").await
}

on_both_databases!(
    under_cloudevents_an_event_nobody_subscribes_to_holds_nothing_back,
    under_native_an_unbound_event_is_retried_and_holds_its_order_back
);
