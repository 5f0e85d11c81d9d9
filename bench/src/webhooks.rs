//! `bench webhooks`: the saga's commits and the relay with and without merchants' webhooks
//! (docs/spec.md §16), in one run. Each phase: saga-shaped commits (the service's own
//! envelopes, 2.2 events per order, `fixture::saga_commits`) at a steady event rate through
//! the unit of work, the worker's loops running (relay to RabbitMQ, fan-out, deliveries), a
//! consumer on the queue. Without: no endpoint (the fan-out reads and finds nobody). With:
//! `endpoints` endpoints taking every event — all but two on fast local receivers, one
//! answering after `slow_ms`, one dead (a closed port). Measured per phase: the commits'
//! latency (the saga's own writes), commit -> consume (the relay), the relay's rate, and the
//! webhooks delivered, made and still due.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::channel::BasicConsumeArguments;
use orchestrator::adapters::messaging::amqp::connect;
use orchestrator::adapters::persistence::SeaOrmStore;
use orchestrator::application::Actor;
use orchestrator::application::ports::{Changes, UnitOfWork};
use orchestrator::application::webhooks::NewEndpoint;
use orchestrator::domain::merchant::{Need, default_merchant_id};
use orchestrator::startup;
use sea_orm::ConnectionTrait;
use serde_json::json;

use crate::fixture::*;

const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

struct Phase {
    events: usize,
    commit: Vec<f64>,
    consume: Vec<f64>,
    relay_rate: f64,
    delivered: u64,
    messages: i64,
    due: i64,
}

/// The endpoints' receivers: every URL, and the counts of the fast ones.
async fn receivers(endpoints: usize, slow: Duration) -> Result<(Vec<String>, Arc<AtomicU64>), BoxError> {
    let fast = Arc::new(AtomicU64::new(0));
    let port = crate::orders::receiver(Duration::ZERO, fast.clone()).await?;
    let slow_port = crate::orders::receiver(slow, Arc::default()).await?;
    let mut urls: Vec<String> =
        (0..endpoints.saturating_sub(2)).map(|i| format!("http://127.0.0.1:{port}/e{i}")).collect();
    urls.push(format!("http://127.0.0.1:{slow_port}/slow"));
    // Nothing listens on port 9 (discard) here: every attempt is refused.
    urls.push("http://127.0.0.1:9/dead".to_owned());
    Ok((urls, fast))
}

async fn count(db: &sea_orm::DatabaseConnection, sql: &str) -> Result<i64, BoxError> {
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(db.get_database_backend(), sql))
        .await?
        .ok_or("no row")?;
    Ok(row.try_get("", "n")?)
}

/// What one run measures: `rate` events a second for `seconds`, to `endpoints` (the slow
/// one answering after `slow_ms`), with `webhooks.max_rate` `max_rate`.
#[derive(Clone, Copy)]
pub(crate) struct Shape {
    pub rate: u32,
    pub seconds: u64,
    pub endpoints: usize,
    pub slow_ms: u64,
    pub max_rate: u32,
}

async fn phase(
    rate: u32,
    seconds: u64,
    endpoints: usize,
    slow: Duration,
    max_rate: u32,
) -> Result<Phase, BoxError> {
    let fixture = Fixture::create().await?;
    let result = async {
        let max_rate = max_rate.to_string();
        let env = [
            ("APP__OUTBOX__POLL_INTERVAL", "1s"),
            ("APP__SECRETS__KEY", SECRETS_KEY),
            ("APP__WEBHOOKS__ALLOW_HTTP", "true"),
            ("APP__WEBHOOKS__ALLOW_PRIVATE_NETWORKS", "true"),
            ("APP__WEBHOOKS__MAX_RATE", max_rate.as_str()),
        ];
        let services = startup::build_services(&fixture.settings(&env)?).await.map_err(|e| e.to_string())?;
        let (urls, fast) = receivers(endpoints, slow).await?;
        if endpoints > 0 {
            let actor = Actor::system("bench");
            let auth = services.merchants.authorize(&actor, default_merchant_id(), Need::Write).await?;
            for url in &urls {
                let new = NewEndpoint { url: url.clone(), description: None, event_types: vec!["*".into()] };
                services.webhooks.endpoints.create(&auth, new).await?;
            }
        }
        let workers = startup::Workers::spawn(&services);
        let arrivals: Arc<Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
        let consumer = connect(&fixture.endpoint, "bench-consumer").await?;
        let channel = consumer.open_channel(None).await?;
        let (_, mut rx) = channel
            .basic_consume_rx(BasicConsumeArguments::new(&fixture.queue, "bench").manual_ack(false).finish())
            .await?;
        let sink = arrivals.clone();
        tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                if let Some(id) = msg.basic_properties.and_then(|p| p.message_id().cloned()) {
                    sink.lock().unwrap_or_else(|e| e.into_inner()).insert(id, Instant::now());
                }
            }
        });
        // Producers: one saga commit per tick (2.2 commits and 2.2 events per order: one
        // event per commit on average), 16 of them (a commit takes 2-5 ms here).
        let committed: Arc<Mutex<Vec<(String, Instant, f64)>>> = Arc::default();
        let producers = 16usize;
        let commits_per_s = f64::from(rate);
        let per_task = Duration::from_secs_f64(producers as f64 / commits_per_s);
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let cpu = Cpu::now();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for p in 0..producers {
            let uow = SeaOrmStore::new(fixture.db.clone(), services.relay_wake.clone());
            let committed = committed.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(per_task);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut i = p;
                while Instant::now() < deadline {
                    for commit in saga_commits(i) {
                        tick.tick().await;
                        let ids: Vec<String> = commit.iter().map(|e| e.event_id.to_string()).collect();
                        let before = Instant::now();
                        if uow.commit(Changes { outbox: commit, ..Default::default() }).await.is_ok() {
                            let took = before.elapsed().as_secs_f64() * 1000.0;
                            let at = Instant::now();
                            let mut c = committed.lock().unwrap_or_else(|e| e.into_inner());
                            c.extend(ids.into_iter().map(|id| (id, at, took)));
                        }
                    }
                    i += producers;
                }
            }));
        }
        for t in tasks {
            t.await?;
        }
        let window = started.elapsed().as_secs_f64();
        let delivered = fast.load(Ordering::Relaxed);
        let events = committed.lock().unwrap_or_else(|e| e.into_inner()).len();
        let cpu = Cpu::now().per_thousand(&cpu, events);
        let drain = Instant::now() + Duration::from_secs(30);
        while arrivals.lock().unwrap_or_else(|e| e.into_inner()).len() < events && Instant::now() < drain {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let consumed_by_end = arrivals.lock().unwrap_or_else(|e| e.into_inner()).len();
        let relay_rate = consumed_by_end as f64 / started.elapsed().as_secs_f64();
        let messages = count(&fixture.db, "SELECT COUNT(*)::bigint AS n FROM webhook_messages").await?;
        let due = count(&fixture.db, "SELECT COUNT(*)::bigint AS n FROM webhook_messages WHERE status = 'PENDING'").await?;
        workers.shutdown(Duration::from_secs(20)).await;
        let _ = consumer.close().await;
        let committed = std::mem::take(&mut *committed.lock().unwrap_or_else(|e| e.into_inner()));
        let arrivals = arrivals.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut commit: Vec<f64> = committed.iter().map(|(_, _, took)| *took).collect();
        commit.sort_by(f64::total_cmp);
        let mut consume: Vec<f64> = committed
            .iter()
            .filter_map(|(id, at, _)| arrivals.get(id).map(|a| a.saturating_duration_since(*at).as_secs_f64() * 1000.0))
            .collect();
        consume.sort_by(f64::total_cmp);
        println!(
            "  {} endpoints: {events} events in {window:.1}s ({:.0}/s), {} consumed, {delivered} webhooks delivered to the fast receivers, {messages} messages made, {due} still due; CPU per 1 000 events: {cpu}",
            endpoints,
            events as f64 / window,
            consume.len()
        );
        Ok::<Phase, BoxError>(Phase { events, commit, consume, relay_rate, delivered, messages, due })
    }
    .await;
    fixture.drop_all().await;
    result
}

/// The ratios with / without of one round: commit p50, commit p99, commit -> consume p99,
/// relay rate.
type Ratios = [f64; 4];

async fn round(shape: Shape) -> Result<Ratios, BoxError> {
    let Shape { rate, seconds, endpoints, slow_ms, max_rate } = shape;
    let slow = Duration::from_millis(slow_ms);
    let without = phase(rate, seconds, 0, slow, max_rate).await?;
    let with = phase(rate, seconds, endpoints, slow, max_rate).await?;
    println!(
        "\n| phase | events | commit p50 ms | commit p99 ms | commit -> consume p50 ms | p99 ms | relay events/s | webhooks delivered | messages made | still due |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, p) in [("without endpoints", &without), (&*format!("{endpoints} endpoints"), &with)] {
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | {} |",
            p.events,
            percentile(&p.commit, 50.0),
            percentile(&p.commit, 99.0),
            percentile(&p.consume, 50.0),
            percentile(&p.consume, 99.0),
            p.relay_rate,
            p.delivered,
            p.messages,
            p.due
        );
    }
    let ratio = |a: f64, b: f64| b / a;
    let ratios = [
        ratio(percentile(&without.commit, 50.0), percentile(&with.commit, 50.0)),
        ratio(percentile(&without.commit, 99.0), percentile(&with.commit, 99.0)),
        ratio(percentile(&without.consume, 99.0), percentile(&with.consume, 99.0)),
        ratio(without.relay_rate, with.relay_rate),
    ];
    let [commit_p50, commit_p99, consume_p99, relay] = ratios;
    println!(
        "\nwith / without: commit p50 {commit_p50:.2}, commit p99 {commit_p99:.2}, commit -> consume p99 {consume_p99:.2}, relay rate {relay:.2}"
    );
    let summary = |v: &[f64]| json!({ "p50": percentile(v, 50.0), "p99": percentile(v, 99.0) });
    let phase_json = |p: &Phase| {
        json!({ "events": p.events, "commitMs": summary(&p.commit), "commitToConsumeMs": summary(&p.consume),
            "relayRate": p.relay_rate, "delivered": p.delivered, "messages": p.messages, "due": p.due })
    };
    write_json(
        "webhooks",
        &json!({ "rate": rate, "seconds": seconds, "endpoints": endpoints, "slowMs": slow_ms, "maxRate": max_rate,
            "without": phase_json(&without), "with": phase_json(&with),
            "ratios": { "commitP50": commit_p50, "commitP99": commit_p99, "consumeP99": consume_p99, "relayRate": relay } }),
    )?;
    Ok(ratios)
}

pub(crate) async fn webhooks_scenario(shape: Shape, rounds: usize) -> Result<(), BoxError> {
    let Shape { rate, seconds, endpoints, slow_ms, max_rate } = shape;
    println!(
        "webhooks: {rate} events/s of saga commits for {seconds}s, PostgreSQL and RabbitMQ, the worker's loops in-process; \
         without endpoints, then with {endpoints} (one answering after {slow_ms} ms, one dead); webhooks.max_rate {max_rate}; {rounds} round(s)"
    );
    let mut all = Vec::new();
    for _ in 0..rounds.max(1) {
        all.push(round(shape).await?);
    }
    if all.len() > 1 {
        let median = |i: usize| {
            let mut v: Vec<f64> = all.iter().map(|r| r[i]).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "\nmedian of {} rounds, with / without: commit p50 {:.2}, commit p99 {:.2}, commit -> consume p99 {:.2}, relay rate {:.2}",
            all.len(),
            median(0),
            median(1),
            median(2),
            median(3)
        );
    }
    Ok(())
}
