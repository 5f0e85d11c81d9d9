//! Traces end to end (`telemetry.otlp_endpoint`): an order placed over HTTP with a
//! `traceparent` yields one trace — the HTTP span, the saga steps, the provider calls and the
//! outbox publish — whose context reaches RabbitMQ in the message's `traceparent` header; a
//! meeting-service message with a `traceparent` continues its trace through the consumer
//! and the saga. The app runs as a process (the tracer is process-global) and exports to an
//! in-process OTLP/HTTP receiver (wiremock) whose protobuf bodies the test decodes.

use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;

use amqprs::channel::BasicPublishArguments;
use amqprs::{BasicProperties, FieldTable, FieldValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use orchestrator::adapters::messaging::amqp::connect;
use prost::Message;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::broker::{TestBroker, amqp_url};
use crate::cli::{app, served_port, temp_dir, wait_ready};
use crate::helpers::{Backend, Process, TestDb, terminate, until};
use crate::meeting::{Meeting, registered};

/// Span names (`otel.name`) by trace id (hex), from every export the receiver got.
async fn exported(server: &MockServer) -> HashMap<String, BTreeSet<String>> {
    let mut traces: HashMap<String, BTreeSet<String>> = HashMap::new();
    for request in server.received_requests().await.unwrap_or_default() {
        let export = ExportTraceServiceRequest::decode(request.body.as_slice()).expect("OTLP protobuf");
        for resource in export.resource_spans {
            for scope in resource.scope_spans {
                for span in scope.spans {
                    let id: String = span.trace_id.iter().map(|b| format!("{b:02x}")).collect();
                    traces.entry(id).or_default().insert(span.name);
                }
            }
        }
    }
    traces
}

async fn one_trace_per_order_through_the_outbox_and_the_consumer(backend: Backend) {
    traced_run(backend, None).await
}

/// At `RUST_LOG=warn` (as many operators run production) spans are exported and the
/// `traceparent` reaches the broker all the same: the log filter is the log layer's own.
/// Only the line that says which port was bound is let through, for the test to find it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_are_exported_when_the_logs_say_only_warnings() {
    traced_run(Backend::Postgres, Some("warn,app=info")).await
}

async fn traced_run(backend: Backend, rust_log: Option<&str>) {
    orchestrator::startup::install_tls_provider();
    let Some(broker) = TestBroker::start().await else {
        return;
    };
    let Some(db) = TestDb::create(backend).await else {
        return;
    };
    let otlp = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/traces"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&otlp)
        .await;
    let dir = temp_dir();
    if backend == Backend::Postgres {
        let migrated = app(&dir.0)
            .env("APP__DATABASE__URL", &db.url)
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .arg("migrate")
            .output()
            .unwrap();
        assert!(migrated.status.success(), "{}", String::from_utf8_lossy(&migrated.stderr));
    }
    let id = uuid::Uuid::new_v4().simple().to_string();
    let log = std::fs::File::create(dir.0.join("serve.log")).unwrap();
    let mut cmd = app(&dir.0);
    cmd.env("APP__DATABASE__URL", &db.url)
        .env("APP__HTTP__BIND", "127.0.0.1:0")
        .env("APP__WORKER__HTTP__BIND", "127.0.0.1:0")
        .env("APP__WORKER__EMBEDDED", "true")
        .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
        .env("APP__PAYMENT__PROVIDER", "mock")
        .env("APP__SETTLEMENT__CHANNEL", "simulated")
        .env("APP__NOTIFICATION__CHANNEL", "simulated")
        .env("APP__LOG__FORMAT", "json")
        .env("APP__TELEMETRY__OTLP_ENDPOINT", otlp.uri());
    if let Some(filter) = rust_log {
        cmd.env("RUST_LOG", filter);
    }
    for (k, v) in broker.env(&amqp_url()).into_iter().chain(Meeting::env(&id)) {
        cmd.env(k, v);
    }
    let mut serve = Process::spawn(cmd.arg("serve").stdout(Stdio::null()).stderr(log));
    let port = served_port(&dir.0.join("serve.log")).await;
    wait_ready(port).await;

    // An order over HTTP, in a trace the caller started.
    let http_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let token = String::from_utf8(
        app(&dir.0)
            .env("APP__AUTH__KEYS", crate::helpers::TEST_KEYS)
            .args(["token", "--sub", "alice"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let response = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/api/orders"))
        .bearer_auth(token.trim())
        .header("traceparent", format!("00-{http_trace}-00f067aa0ba902b7-01"))
        .json(&crate::helpers::order_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), reqwest::StatusCode::CREATED);
    until("order.completed on the broker", || async {
        broker.received.lock().unwrap().iter().any(|m| m.routing_key == "order.completed")
    })
    .await;
    let completed =
        broker.received.lock().unwrap().iter().find(|m| m.routing_key == "order.completed").cloned().unwrap();
    let header = completed.traceparent.expect("the message carries a traceparent");
    assert!(
        header.starts_with(&format!("00-{http_trace}-")),
        "the order's trace reaches the broker: {header}"
    );

    // A registration from the meeting service, in its own trace.
    let meeting_trace = "0af7651916cd43dd8448eb211c80319c";
    let connection = connect(&broker.endpoint, "test-meeting-trace").await.unwrap();
    let channel = connection.open_channel(None).await.unwrap();
    let mut headers = FieldTable::new();
    headers.insert(
        "traceparent".try_into().unwrap(),
        FieldValue::S(format!("00-{meeting_trace}-b7ad6b7169203331-01").as_str().try_into().unwrap()),
    );
    let mut props = BasicProperties::default();
    props.with_content_type("application/json").with_persistence(true).with_headers(headers);
    // The consumers declared the topology at start (the service is ready).
    channel
        .basic_publish(
            props.finish(),
            registered("ev-trace", "m-trace", "u-trace", 1000).into_bytes(),
            BasicPublishArguments::new(&format!("test.meeting.{id}"), "meeting.participant.registered"),
        )
        .await
        .unwrap();
    until("the registration's order completed", || async {
        broker.received.lock().unwrap().iter().filter(|m| m.routing_key == "order.completed").count() >= 2
    })
    .await;
    let _ = channel.close().await;
    let _ = connection.close().await;

    // A graceful stop flushes the spans still buffered.
    assert!(terminate(&mut serve).success());
    let traces = exported(&otlp).await;
    let order = traces.get(http_trace).cloned().unwrap_or_default();
    for name in [
        "POST /api/orders",
        "saga payment",
        "saga settlement",
        "saga notification",
        "mock approve",
        "simulated settle",
        "simulated send",
        "order.completed publish",
    ] {
        assert!(order.contains(name), "`{name}` missing from the order's trace: {order:?}\nall: {traces:?}");
    }
    let logs = std::fs::read_to_string(dir.0.join("serve.log")).unwrap();
    if rust_log.is_none() {
        // The logs of the request carry its trace id beside its correlation id.
        assert!(
            logs.lines()
                .any(|l| l.contains(&format!(r#""trace_id":"{http_trace}""#)) && l.contains("correlation_id")),
            "no log line of the request carries its trace id"
        );
    } else {
        // The log filter held: no info line of a request or a saga step was written.
        assert!(
            !logs.lines().any(|l| l.contains(r#""level":"INFO""#) && l.contains("correlation_id")),
            "{logs}"
        );
    }
    let meeting = traces.get(meeting_trace).cloned().unwrap_or_default();
    for name in ["participant-register process", "saga payment", "mock approve", "order.completed publish"] {
        assert!(meeting.contains(name), "`{name}` missing from the message's trace: {meeting:?}");
    }
    let exchanges = vec![format!("test.meeting.{id}"), format!("test.dlx.{id}")];
    let queues = ["register", "cancel", "deleted"]
        .iter()
        .flat_map(|q| [format!("test.{q}.{id}"), format!("test.{q}.{id}.dlq")])
        .collect();
    crate::broker::delete_objects(broker.endpoint.clone(), exchanges, queues);
}

crate::on_both_databases!(one_trace_per_order_through_the_outbox_and_the_consumer);
