//! The meeting service's events over the real RabbitMQ (docs/spec.md §7) and refunds over HTTP
//! (docs/spec.md §5): each consumer's success, business failure, malformed (its DLQ),
//! duplicate-delivery and system-failure paths; a meeting deletion with a mix of
//! refundable, refunded and failing refunds; refund authorization.

use std::time::Duration;

use amqprs::channel::{BasicPublishArguments, Channel, QueueDeclareArguments};
use amqprs::connection::Connection;
use amqprs::{BasicProperties, FieldTable, FieldValue};
use orchestrator::adapters::messaging::amqp::connect;
use orchestrator::startup::Workers;
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};

use crate::broker::{TestBroker, amqp_url, queue_state};
use crate::helpers::{Backend, TestApp, count_where, json, order_body, until};
use crate::on_both_databases;

/// The meeting side of one test: its own exchange, dead-letter exchange and queues.
pub(crate) struct Meeting {
    pub(crate) id: String,
    pub(crate) connection: Connection,
    pub(crate) channel: Channel,
}

impl Meeting {
    pub(crate) fn env(id: &str) -> Vec<(String, String)> {
        vec![
            ("APP__BROKER__MEETING_EXCHANGE".into(), format!("test.meeting.{id}")),
            ("APP__BROKER__DEAD_LETTER_EXCHANGE".into(), format!("test.dlx.{id}")),
            ("APP__BROKER__REGISTER_QUEUE".into(), format!("test.register.{id}")),
            ("APP__BROKER__CANCEL_QUEUE".into(), format!("test.cancel.{id}")),
            ("APP__BROKER__MEETING_DELETED_QUEUE".into(), format!("test.deleted.{id}")),
            ("APP__BROKER__CONSUMER_RETRIES".into(), "2".into()),
            ("APP__BROKER__CONSUMER_RETRY_BACKOFF".into(), "20ms".into()),
        ]
    }

    pub(crate) fn queues(&self) -> Vec<String> {
        ["register", "cancel", "deleted"]
            .iter()
            .flat_map(|q| [format!("test.{q}.{}", self.id), format!("test.{q}.{}.dlq", self.id)])
            .collect()
    }

    /// Waits until the consumers are attached. They consume only after declaring and
    /// binding the whole topology, so from then on a published message is routed; a queue
    /// that merely exists may not be bound yet, and a message published then is dropped.
    pub(crate) async fn wait_for_consumers(&self) {
        // The deleted queue is the last one consumed.
        let queue = format!("test.deleted.{}", self.id);
        until("the consumers attached", || async {
            queue_state(&self.connection, &queue).await.is_some_and(|(_, consumers)| consumers > 0)
        })
        .await;
    }

    pub(crate) async fn publish(&self, routing_key: &str, body: &str, scenario: Option<&str>) {
        let mut props = BasicProperties::default();
        props.with_content_type("application/json").with_persistence(true);
        if let Some(s) = scenario {
            let mut headers = FieldTable::new();
            headers.insert("x-mock-scenario".try_into().unwrap(), FieldValue::S(s.try_into().unwrap()));
            props.with_headers(headers);
        }
        let args = BasicPublishArguments::new(&format!("test.meeting.{}", self.id), routing_key);
        self.channel.basic_publish(props.finish(), body.as_bytes().to_vec(), args).await.unwrap();
    }

    pub(crate) async fn depth(&self, queue: &str) -> u32 {
        let declared = self
            .channel
            .queue_declare(
                QueueDeclareArguments::new(&format!("test.{queue}.{}", self.id)).passive(true).finish(),
            )
            .await
            .unwrap()
            .unwrap();
        declared.1
    }

    /// Messages waiting in a queue's dead-letter queue (`register` → `test.register.<id>.dlq`).
    pub(crate) async fn dlq_depth(&self, queue: &str) -> u32 {
        queue_state(&self.connection, &format!("test.{queue}.{}.dlq", self.id))
            .await
            .expect("the dead-letter queue exists")
            .0
    }

    pub(crate) async fn cleanup(self) {
        drop(self);
    }
}

impl Drop for Meeting {
    fn drop(&mut self) {
        let exchanges = vec![format!("test.meeting.{}", self.id), format!("test.dlx.{}", self.id)];
        let endpoint =
            orchestrator::adapters::messaging::amqp::AmqpEndpoint::parse(&amqp_url()).expect("url");
        crate::broker::delete_objects(endpoint, exchanges, self.queues());
    }
}

/// The app with the relay and consumers running, plus the meeting side, or `None` (skip).
pub(crate) async fn start(
    backend: Backend,
    extra: &[(&str, &str)],
) -> Option<(TestApp, TestBroker, Meeting, Workers)> {
    start_on(crate::helpers::TestDb::create(backend).await?, extra).await
}

/// As [`start`], on a database the test prepared.
pub(crate) async fn start_on(
    test_db: crate::helpers::TestDb,
    extra: &[(&str, &str)],
) -> Option<(TestApp, TestBroker, Meeting, Workers)> {
    let broker = TestBroker::start().await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let mut env = broker.env(&amqp_url());
    env.extend(Meeting::env(&id));
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let app = TestApp::spawn_on_database(test_db, &refs, None).await;
    let workers = Workers::spawn(&app.services);
    let connection = connect(&broker.endpoint, "test-meeting-service").await.unwrap();
    let channel = connection.open_channel(None).await.unwrap();
    let meeting = Meeting { id, connection, channel };
    meeting.wait_for_consumers().await;
    Some((app, broker, meeting, workers))
}

pub(crate) fn registered(event: &str, meeting: &str, user: &str, amount: i64) -> String {
    json!({ "eventId": event, "meetingId": meeting, "userId": user, "amount": amount, "currency": "KRW" })
        .to_string()
}

/// Messages a consumer has finished with (acknowledged or dead-lettered), from the app's
/// `/metrics`: counted after processing, just before the ack — so once it reaches a number,
/// that many deliveries have had every effect they will have.
pub(crate) async fn handled(app: &TestApp, consumer: &str) -> u64 {
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    let label = format!("consumer=\"{consumer}\"");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("consumer_messages_total{") && l.contains(&label) && !l.contains("\"retried\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

pub(crate) async fn orders_of(app: &TestApp, user: &str) -> Vec<Value> {
    let admin = app.admin_token("ops");
    let page = json(
        app.get(&format!("/api/orders?customerId={user}"), &admin).send().await.unwrap(),
        StatusCode::OK,
    )
    .await;
    let mut details = Vec::new();
    for o in page["items"].as_array().unwrap() {
        let id = o["id"].as_str().unwrap();
        details.push(
            json(app.get(&format!("/api/orders/{id}"), &admin).send().await.unwrap(), StatusCode::OK).await,
        );
    }
    details
}

pub(crate) async fn settled(app: &TestApp, user: &str) -> Vec<Value> {
    let mut found = Vec::new();
    until(&format!("{user}'s order"), || {
        let app = &app;
        async move {
            let o = orders_of(app, user).await;
            !o.is_empty() && o.iter().all(|d| d["status"] != "CREATED")
        }
    })
    .await;
    found.extend(orders_of(app, user).await);
    found
}

async fn registrations_run_the_saga_and_announce_the_outcome(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    meeting.publish("meeting.participant.registered", &registered("ev-1", "m-1", "u-ok", 5000), None).await;
    meeting
        .publish(
            "meeting.participant.registered",
            &registered("ev-2", "m-1", "u-declined", 5000),
            Some("payment=decline"),
        )
        .await;
    let ok = settled(&app, "u-ok").await;
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0]["status"], "COMPLETED");
    assert_eq!(ok[0]["source"], "MEETING");
    assert_eq!(ok[0]["meetingId"], "m-1");
    assert_eq!(ok[0]["totalAmount"], 5000);
    let declined = settled(&app, "u-declined").await;
    assert_eq!(declined[0]["status"], "FAILED");
    assert_eq!(declined[0]["payment"]["status"], "DECLINED");
    // The outcomes go out through the outbox, so the meeting service can react.
    until("the events", || async {
        let r = broker.received.lock().unwrap().clone();
        let types: Vec<&str> = r.iter().filter_map(|m| m.message_type.as_deref()).collect();
        types.contains(&"payment.approved")
            && types.contains(&"payment.declined")
            && types.contains(&"order.completed")
    })
    .await;
    let declined_event = broker
        .received
        .lock()
        .unwrap()
        .iter()
        .find(|m| m.message_type.as_deref() == Some("payment.declined"))
        .cloned()
        .unwrap();
    assert_eq!(declined_event.body["payload"]["meetingId"], "m-1");
    assert_eq!(declined_event.body["payload"]["customerId"], "u-declined");
    assert_eq!(meeting.depth("register").await, 0, "both acknowledged");
    assert_eq!(meeting.dlq_depth("register").await, 0, "nothing dead-lettered");
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

async fn malformed_messages_go_to_their_dead_letter_queue_at_once(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    for body in [
        "not json".to_owned(),
        json!({ "eventId": "ev-x", "meetingId": "m", "userId": "u" }).to_string(),
        json!({ "eventId": "ev-y", "meetingId": "m", "userId": "u", "amount": "many", "currency": "KRW" })
            .to_string(),
        registered("ev-z", "m", "u", 5000).replace("KRW", "ZZZ"),
    ] {
        meeting.publish("meeting.participant.registered", &body, None).await;
    }
    meeting.publish("meeting.participant.cancelled", "{}", None).await;
    meeting.publish("meeting.deleted", &json!({ "eventId": 7, "meetingId": "m" }).to_string(), None).await;
    let dlq = |q: &'static str| {
        let meeting = &meeting;
        async move {
            let channel = meeting.connection.open_channel(None).await.unwrap();
            let args =
                QueueDeclareArguments::new(&format!("test.{q}.{}.dlq", meeting.id)).passive(true).finish();
            channel.queue_declare(args).await.unwrap().unwrap().1
        }
    };
    until("dead letters", || async {
        dlq("register").await == 4 && dlq("cancel").await == 1 && dlq("deleted").await == 1
    })
    .await;
    assert_eq!(meeting.depth("register").await, 0, "never requeued");
    assert_eq!(app.count("orders").await, 0, "nothing was created");
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

async fn duplicate_deliveries_create_one_order(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    // A second worker process consuming the same queues.
    let second = Workers::spawn(&app.services);
    for _ in 0..6 {
        meeting
            .publish("meeting.participant.registered", &registered("ev-dup", "m-2", "u-dup", 7000), None)
            .await;
    }
    until("all six deliveries handled", || async { handled(&app, "participant-register").await == 6 }).await;
    assert_eq!(meeting.depth("register").await, 0);
    assert_eq!(count_where(&app.db, "inbox", "event_id = 'ev-dup'").await, 1);
    let orders = settled(&app, "u-dup").await;
    assert_eq!(orders.len(), 1, "one order for one eventId");
    assert_eq!(orders[0]["status"], "COMPLETED");
    let approvals =
        app.services.provider_calls.as_ref().unwrap().approvals.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(approvals, 1, "charged once");
    second.shutdown(Duration::from_secs(10)).await;
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

/// Issue 27 item 6: a reused `eventId` with another body was acked as a duplicate with no
/// trace. The first still wins (one order, at its amount), but the redelivery is audited
/// `INBOUND_CONFLICT` with both bodies' digests and counted apart; the same body with its
/// keys in another order is a plain duplicate.
async fn a_reused_event_id_with_another_body_is_audited_as_a_conflict(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    meeting
        .publish("meeting.participant.registered", &registered("ev-reuse", "m-r", "u-reuse", 15000), None)
        .await;
    until("the first handled", || async { handled(&app, "participant-register").await == 1 }).await;
    let reordered =
        r#"{"currency":"KRW","amount":15000,"userId":"u-reuse","meetingId":"m-r","eventId":"ev-reuse"}"#;
    meeting.publish("meeting.participant.registered", reordered, None).await;
    until("the reordered copy handled", || async { handled(&app, "participant-register").await == 2 }).await;
    assert_eq!(count_where(&app.db, "audit_log", "action = 'INBOUND_CONFLICT'").await, 0, "the same message");
    meeting
        .publish("meeting.participant.registered", &registered("ev-reuse", "m-r", "u-reuse", 1), None)
        .await;
    until("the conflicting copy handled", || async { handled(&app, "participant-register").await == 3 })
        .await;
    let orders = settled(&app, "u-reuse").await;
    assert_eq!(orders.len(), 1);
    assert_eq!(orders[0]["totalAmount"], 15000, "the first wins");
    assert_eq!(
        count_where(&app.db, "audit_log", "action = 'INBOUND_CONFLICT' AND detail LIKE '%sha256%'").await,
        1
    );
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains(r#"outcome="conflicting_duplicate""#), "counted apart");
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

async fn system_failures_are_retried_then_dead_lettered(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    // The database "breaks": the table the inbox lives in disappears.
    app.db.execute_unprepared("ALTER TABLE inbox RENAME TO inbox_away").await.unwrap();
    meeting
        .publish("meeting.participant.registered", &registered("ev-sys", "m-3", "u-sys", 1000), None)
        .await;
    let dlq = || async {
        let channel = meeting.connection.open_channel(None).await.unwrap();
        let args =
            QueueDeclareArguments::new(&format!("test.register.{}.dlq", meeting.id)).passive(true).finish();
        channel.queue_declare(args).await.unwrap().unwrap().1
    };
    until("the dead letter", || async { dlq().await == 1 }).await;
    app.db.execute_unprepared("ALTER TABLE inbox_away RENAME TO inbox").await.unwrap();
    assert_eq!(app.count("orders").await, 0);
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains("consumer_messages_total{consumer=\"participant-register\",outcome=\"retried\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("outcome=\"dead_lettered\"} 1"), "{metrics}");
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

async fn cancellations_refund_when_asked_and_otherwise_just_acknowledge(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    meeting.publish("meeting.participant.registered", &registered("ev-r1", "m-4", "u-c", 3000), None).await;
    assert_eq!(settled(&app, "u-c").await[0]["status"], "COMPLETED");
    let cancel = |event: &str, user: &str, refund: bool| {
        json!({ "eventId": event, "meetingId": "m-4", "userId": user, "refundRequired": refund }).to_string()
    };
    meeting.publish("meeting.participant.cancelled", &cancel("ev-c0", "u-c", false), None).await;
    meeting.publish("meeting.participant.cancelled", &cancel("ev-c1", "u-nobody", true), None).await;
    until("acknowledged", || async {
        count_where(&app.db, "inbox", "consumer = 'participant-cancel'").await == 2
    })
    .await;
    assert_eq!(orders_of(&app, "u-c").await[0]["status"], "COMPLETED", "no refund asked, none made");

    meeting.publish("meeting.participant.cancelled", &cancel("ev-c2", "u-c", true), None).await;
    meeting.publish("meeting.participant.cancelled", &cancel("ev-c2", "u-c", true), None).await;
    until("the refund", || async { orders_of(&app, "u-c").await[0]["status"] == "CANCELLED" }).await;
    let order = &orders_of(&app, "u-c").await[0];
    assert_eq!(order["payment"]["status"], "REFUNDED");
    until("payment.refunded", || async {
        broker.received.lock().unwrap().iter().any(|m| m.message_type.as_deref() == Some("payment.refunded"))
    })
    .await;
    until("both deliveries handled", || async { handled(&app, "participant-cancel").await == 4 }).await;
    let cancels =
        app.services.provider_calls.as_ref().unwrap().cancels.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(cancels, 1, "the duplicate refunded nothing");
    assert_eq!(meeting.dlq_depth("cancel").await, 0, "nothing dead-lettered");

    // The same user may register again afterwards: a new order, history kept.
    meeting.publish("meeting.participant.registered", &registered("ev-r2", "m-4", "u-c", 3000), None).await;
    until("the second order", || async { orders_of(&app, "u-c").await.len() == 2 }).await;
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

async fn a_deleted_meeting_refunds_everyone_it_can(backend: Backend) {
    let Some((app, broker, meeting, workers)) = start(backend, &[]).await else {
        return;
    };
    meeting.publish("meeting.participant.registered", &registered("d-1", "m-5", "u-a", 1000), None).await;
    meeting.publish("meeting.participant.registered", &registered("d-2", "m-5", "u-b", 2000), None).await;
    meeting
        .publish(
            "meeting.participant.registered",
            &registered("d-3", "m-5", "u-fail", 3000),
            Some("refund=fail"),
        )
        .await;
    meeting.publish("meeting.participant.registered", &registered("d-4", "m-other", "u-a", 4000), None).await;
    for user in ["u-a", "u-b", "u-fail"] {
        settled(&app, user).await;
    }
    // u-b already cancelled and was refunded.
    let cancel =
        json!({ "eventId": "d-5", "meetingId": "m-5", "userId": "u-b", "refundRequired": true }).to_string();
    meeting.publish("meeting.participant.cancelled", &cancel, None).await;
    until("u-b refunded", || async { orders_of(&app, "u-b").await[0]["status"] == "CANCELLED" }).await;

    let deleted = json!({ "eventId": "d-6", "meetingId": "m-5" }).to_string();
    meeting.publish("meeting.deleted", &deleted, None).await;
    meeting.publish("meeting.deleted", &deleted, None).await;
    until("the deletion", || async {
        count_where(&app.db, "inbox", "event_id = 'd-6'").await == 1 && meeting.depth("deleted").await == 0
    })
    .await;

    let a = orders_of(&app, "u-a").await;
    let in_m5 = a.iter().find(|o| o["meetingId"] == "m-5").unwrap();
    let elsewhere = a.iter().find(|o| o["meetingId"] == "m-other").unwrap();
    assert_eq!(in_m5["payment"]["status"], "REFUNDED");
    assert_eq!(elsewhere["status"], "COMPLETED", "other meetings are untouched");
    let failing = &orders_of(&app, "u-fail").await[0];
    assert_eq!(failing["status"], "COMPLETED");
    assert_eq!(failing["payment"]["status"], "APPROVED", "a failed refund leaves the payment approved");
    assert!(failing["payment"]["refundFailureReason"].is_string());
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refund_failed'").await, 1);
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refunded'").await, 2);
    assert_eq!(count_where(&app.db, "audit_log", "action = 'MEETING_DELETED'").await, 1);
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

on_both_databases!(
    registrations_run_the_saga_and_announce_the_outcome,
    malformed_messages_go_to_their_dead_letter_queue_at_once,
    duplicate_deliveries_create_one_order,
    a_reused_event_id_with_another_body_is_audited_as_a_conflict,
    system_failures_are_retried_then_dead_lettered,
    cancellations_refund_when_asked_and_otherwise_just_acknowledge,
    a_deleted_meeting_refunds_everyone_it_can,
);

// ---- refunds over HTTP -----------------------------------------------------------

async fn refunds_are_for_the_customer_or_an_admin_and_only_when_completed(backend: Backend) {
    let Some(app) = TestApp::spawn(backend).await else {
        return;
    };
    let alice = app.token("alice");
    let bob = app.token("bob");
    let admin = app.admin_token("ops");
    let order = json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let id = order["id"].as_str().unwrap();
    let refund = |token: &str, id: &str| app.post(&format!("/api/orders/{id}/refund"), token).send();

    let denied = json(refund(&bob, id).await.unwrap(), StatusCode::FORBIDDEN).await;
    assert_eq!(denied["code"], "UNAUTHORIZED_REFUND");
    let declined =
        json(app.place_order(&alice, &order_body(), Some("payment=decline")).await, StatusCode::CREATED)
            .await;
    let not_allowed =
        json(refund(&alice, declined["id"].as_str().unwrap()).await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(not_allowed["code"], "REFUND_NOT_ALLOWED");

    let refunded = json(
        app.post(&format!("/api/orders/{id}/refund"), &alice)
            .json(&json!({ "reason": "changed my mind" }))
            .send()
            .await
            .unwrap(),
        StatusCode::OK,
    )
    .await;
    assert_eq!(refunded["status"], "CANCELLED");
    assert_eq!(refunded["payment"]["status"], "REFUNDED");
    let again = json(refund(&alice, id).await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(again["code"], "REFUND_NOT_ALLOWED");
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refunded'").await, 1);
    assert_eq!(
        count_where(
            &app.db,
            "audit_log",
            "action = 'REFUNDED' AND actor = 'alice' AND detail LIKE '%: changed my mind'"
        )
        .await,
        1
    );
    assert!(
        count_where(&app.db, "audit_log", "action = 'REFUND_REJECTED'").await >= 2,
        "rejections are audited"
    );

    // Refused by the provider: recorded, the payment stays APPROVED.
    let failing =
        json(app.place_order(&alice, &order_body(), Some("refund=fail")).await, StatusCode::CREATED).await;
    let failing_id = failing["id"].as_str().unwrap();
    let failed = json(refund(&admin, failing_id).await.unwrap(), StatusCode::CONFLICT).await;
    assert_eq!(failed["code"], "REFUND_FAILED");
    let detail =
        json(app.get(&format!("/api/orders/{failing_id}"), &alice).send().await.unwrap(), StatusCode::OK)
            .await;
    assert_eq!(detail["status"], "COMPLETED");
    assert_eq!(detail["payment"]["status"], "APPROVED");
    assert!(detail["payment"]["refundFailureReason"].as_str().unwrap().contains("REFUND_REJECTED"));
    assert_eq!(count_where(&app.db, "outbox_events", "event_type = 'payment.refund_failed'").await, 1);

    // An admin may refund anyone's; the customer may order again afterwards.
    let another = json(app.place_order(&bob, &order_body(), None).await, StatusCode::CREATED).await;
    json(refund(&admin, another["id"].as_str().unwrap()).await.unwrap(), StatusCode::OK).await;
    json(app.place_order(&alice, &order_body(), None).await, StatusCode::CREATED).await;
    let missing = refund(&admin, &uuid::Uuid::now_v7().to_string()).await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
}

on_both_databases!(refunds_are_for_the_customer_or_an_admin_and_only_when_completed);

/// `broker.queue_type = quorum`: quorum queues with an explicit delivery limit work the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_queues_with_a_delivery_limit_work_the_same() {
    let env = [("APP__BROKER__QUEUE_TYPE", "quorum"), ("APP__BROKER__DELIVERY_LIMIT", "3")];
    let Some((app, broker, meeting, workers)) = start(Backend::Sqlite, &env).await else {
        return;
    };
    meeting.publish("meeting.participant.registered", &registered("q-1", "m-q", "u-q", 900), None).await;
    assert_eq!(settled(&app, "u-q").await[0]["status"], "COMPLETED");
    meeting.publish("meeting.participant.registered", "garbage", None).await;
    until("the dead letter", || async {
        let channel = meeting.connection.open_channel(None).await.unwrap();
        let args =
            QueueDeclareArguments::new(&format!("test.register.{}.dlq", meeting.id)).passive(true).finish();
        channel.queue_declare(args).await.unwrap().unwrap().1 == 1
    })
    .await;
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}

/// A queue deleted under the consumers (an operator's mistake, or its node gone): the broker
/// cancels the consumer; the session ends, the topology is declared again and consumed, and
/// a registration published afterwards becomes an order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_deleted_under_the_consumers_is_declared_again() {
    let Some((app, broker, meeting, workers)) = start(Backend::Sqlite, &[]).await else {
        return;
    };
    let register = format!("test.register.{}", meeting.id);
    let channel = meeting.connection.open_channel(None).await.unwrap();
    channel.queue_delete(amqprs::channel::QueueDeleteArguments::new(&register)).await.unwrap();
    until("the register queue declared and consumed again", || async {
        queue_state(&meeting.connection, &register).await.is_some_and(|(_, consumers)| consumers > 0)
    })
    .await;
    meeting.publish("meeting.participant.registered", &registered("d-1", "m-d", "u-d", 700), None).await;
    assert_eq!(settled(&app, "u-d").await[0]["status"], "COMPLETED");
    workers.shutdown(Duration::from_secs(10)).await;
    meeting.cleanup().await;
    broker.cleanup().await;
}
