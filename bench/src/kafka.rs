//! `bench relay --broker kafka`: the relay publishing to Kafka against a bare idempotent
//! producer sending the same records (key, value, headers) to the same topic, with the
//! same producer settings and the same window of records awaiting their delivery report.
//! The broker is `BENCH_KAFKA_BROKERS` (default 127.0.0.1:9092; `scripts/kafka-broker`
//! starts Tansu there); each run has its own 16-partition topic, deleted at the end.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use orchestrator::adapters::messaging::kafka::{KafkaConnection, producer_config, record_headers};
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseRecord, ProducerContext, ThreadedProducer};
use serde_json::json;
use tokio::sync::Semaphore;

use crate::fixture::*;

fn brokers() -> String {
    std::env::var("BENCH_KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

fn connection() -> KafkaConnection {
    KafkaConnection {
        brokers: brokers(),
        client_id: "bench".into(),
        properties: Vec::new(),
        connect_timeout: Duration::from_secs(5),
    }
}

/// Delivery reports of the bare producer: each frees a place in the window.
struct Window {
    permits: Arc<Semaphore>,
    settled: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl ClientContext for Window {}

impl ProducerContext for Window {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        self.settled.fetch_add(1, Ordering::SeqCst);
        self.permits.add_permits(1);
    }
}

/// The baseline: the relay's records, straight to the topic, `window` awaiting their report.
/// Its rate, and the CPU spent from the first send to the last report (as
/// `relay::bare_publisher`'s).
async fn bare_producer(
    topic: &str,
    shape: Shape,
    n: usize,
    window: usize,
) -> Result<(f64, String), BoxError> {
    let permits = Arc::new(Semaphore::new(window));
    let settled = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let producer: ThreadedProducer<Window> = producer_config(&connection(), window, Duration::from_secs(30))
        .set("client.id", "bench-bare")
        .create_with_context(Window {
            permits: permits.clone(),
            settled: settled.clone(),
            failed: failed.clone(),
        })?;
    let events: Vec<_> = traffic(shape, n).into_iter().flatten().collect();
    let cpu = Cpu::now();
    let started = Instant::now();
    for e in &events {
        permits.acquire().await?.forget();
        let id = e.event_id.to_string();
        let headers = record_headers(&id, &e.event_type, e.correlation_id.as_deref(), None);
        producer
            .send(
                BaseRecord::to(topic)
                    .key(e.aggregate_id.as_str())
                    .payload(e.payload.as_str())
                    .headers(headers),
            )
            .map_err(|(e, _)| e)?;
    }
    while settled.load(Ordering::SeqCst) < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu = Cpu::now().per_thousand(&cpu, n);
    if failed.load(Ordering::SeqCst) > 0 {
        return Err(format!("{} records failed", failed.load(Ordering::SeqCst)).into());
    }
    drop(producer);
    Ok((rate, cpu))
}

/// As the AMQP scenario (`relay::relay_scenario`): the relay with 1 and 4 workers, each run
/// bracketed by bare runs, compared with their mean.
pub(crate) async fn relay_scenario(
    fixture: &mut Fixture,
    events: usize,
    workers: &str,
    window: usize,
    batch: usize,
    shape: Shape,
) -> Result<(), BoxError> {
    let topic = format!("bench.{}", fixture.id);
    connection().ensure_topics(&[&topic], 16).await?;
    fixture.kafka = Some((brokers(), topic.clone()));
    let sample: Vec<_> = traffic(shape, 11).into_iter().flatten().collect();
    let size = sample.iter().map(|e| e.payload.len()).sum::<usize>() / sample.len().max(1);
    println!(
        "relay (kafka, topic {topic}, 16 partitions): {events} events of ~{size} B, {shape:?} traffic, window {window}"
    );
    let bare =
        async || -> Result<(f64, String), BoxError> { bare_producer(&topic, shape, events, window).await };
    let label = format!("bare idempotent producer, window {window}");
    let (results, cpu_lines) =
        crate::relay::bracketed(fixture, events, workers, window, batch, shape, &label, bare).await?;
    println!("\nCPU per 1 000 events (2 cores = 2 000 ms of CPU per second; broker = tansu):");
    for line in &cpu_lines {
        println!("  {line}");
    }
    write_json(
        "relay-kafka",
        &json!({ "events": events, "shape": format!("{shape:?}"), "window": window, "batch": batch, "results": results, "cpu": cpu_lines }),
    )?;
    let admin: AdminClient<DefaultClientContext> =
        rdkafka::ClientConfig::new().set("bootstrap.servers", brokers()).create()?;
    let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
    Ok(())
}
