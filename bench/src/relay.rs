//! `bench relay`: the relay's drain rate against a bare confirming publisher.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use orchestrator::adapters::messaging::amqp::{connect, message_properties};
use orchestrator::startup;
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::fixture::*;

/// Which broker `bench relay` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Broker {
    Amqp,
    Kafka,
}

/// Confirm callback of the bare publisher: releases one window slot per confirmed tag.
pub(crate) struct WindowCallback {
    window: Arc<Semaphore>,
    settled: Arc<AtomicU64>,
    confirms: Confirms,
}

/// Which delivery tags the broker has settled. Confirms come out of order — with a consumer
/// on the queue, a message delivered at once is confirmed before older ones still being
/// written — so a `multiple` confirm may cover tags already confirmed singly: counting it as
/// `tag - last tag seen` loses some, and the publisher waits for them forever.
#[derive(Default)]
pub(crate) struct Confirms {
    /// Every tag up to here is settled.
    floor: u64,
    /// Tags above `floor` settled one by one.
    above: std::collections::BTreeSet<u64>,
}

impl Confirms {
    /// Settles `tag` (and every earlier one when `multiple`): how many were new.
    pub(crate) fn settle(&mut self, tag: u64, multiple: bool) -> u64 {
        if tag <= self.floor {
            return 0;
        }
        if !multiple {
            return u64::from(self.above.insert(tag));
        }
        let covered = self.above.range(..=tag).count() as u64;
        self.above = self.above.split_off(&(tag + 1));
        let new = tag - self.floor - covered;
        self.floor = tag;
        new
    }
}

#[async_trait::async_trait]
impl amqprs::callbacks::ChannelCallback for WindowCallback {
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
        let n = self.confirms.settle(ack.delivery_tag(), ack.mutiple());
        self.settled.fetch_add(n, Ordering::SeqCst);
        self.window.add_permits(n as usize);
    }
    async fn publish_nack(&mut self, _: &Channel, nack: Nack) {
        let n = self.confirms.settle(nack.delivery_tag(), nack.multiple());
        self.settled.fetch_add(n, Ordering::SeqCst);
        self.window.add_permits(n as usize);
    }
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// The baseline: the same messages straight to the broker, sliding confirm window. Its rate,
/// and the CPU spent from the first publish to the last confirm (making the messages and
/// connecting are not part of it, as seeding and warming up are not part of the relay's).
pub(crate) async fn bare_publisher(
    fixture: &Fixture,
    shape: Shape,
    n: usize,
    window: usize,
) -> Result<(f64, String), BoxError> {
    let connection = connect(&fixture.endpoint, "bench-bare").await?;
    let channel = connection.open_channel(None).await?;
    let permits = Arc::new(Semaphore::new(window));
    let settled = Arc::new(AtomicU64::new(0));
    channel
        .register_callback(WindowCallback {
            window: permits.clone(),
            settled: settled.clone(),
            confirms: Confirms::default(),
        })
        .await?;
    channel.confirm_select(ConfirmSelectArguments::default()).await?;
    // The same messages the relay sends: the same shape, envelopes, sizes and properties.
    let events: Vec<_> = traffic(shape, n).into_iter().flatten().collect();
    let cpu = Cpu::now();
    let started = Instant::now();
    for e in events {
        permits.acquire().await?.forget();
        // The relay's own properties: `content_type` alone costs RabbitMQ 3.10 ~20 % more
        // CPU per message here, so a baseline without it would flatter the broker.
        let props = message_properties(
            &e.event_id.to_string(),
            &e.event_type,
            e.correlation_id.as_deref(),
            e.created_at,
            None,
        );
        let args = BasicPublishArguments::new(&fixture.exchange, &e.routing_key).mandatory(true).finish();
        channel.basic_publish(props, e.payload.into_bytes(), args).await?;
    }
    while settled.load(Ordering::SeqCst) < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu = Cpu::now().per_thousand(&cpu, n);
    let _ = connection.close().await;
    Ok((rate, cpu))
}

/// Seeds `n` events of `shape` and drains them with `workers` relays: the rate, and the CPU
/// spent from the first claim to the last record (start-up, seeding and the final check are
/// not part of it).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn relay_drain(
    fixture: &Fixture,
    shape: Shape,
    n: usize,
    workers: usize,
    window: usize,
    batch: usize,
    contract: &str,
) -> Result<(f64, String), BoxError> {
    let (window, batch) = (window.to_string(), batch.to_string());
    // `cloudevents/structured`: the contract and its CloudEvents mode.
    let (contract, mode) = contract.split_once('/').unwrap_or((contract, "binary"));
    let mut extra = vec![
        ("APP__OUTBOX__PUBLISH_WINDOW", window.as_str()),
        ("APP__OUTBOX__BATCH_SIZE", batch.as_str()),
        ("APP__BROKER__CONTRACT", contract),
        ("APP__BROKER__CLOUDEVENTS__MODE", mode),
    ];
    // `momo`: the platform's replies go to its exchange, which the fixture's queue takes
    // too; its fee source is required by the settings but never read (the relay places no
    // order; the pool connects when first used).
    let momo_objects = if contract == "momo" {
        extra.push(("APP__MEETINGS__FEE_SOURCE", "sql"));
        extra.push(("APP__MEETINGS__FEE_SQL__URL", "mysql://bench@127.0.0.1:3306/unused"));
        Some(momo_exchange(fixture).await?)
    } else {
        None
    };
    let settings = fixture.settings(&extra)?;
    let services = startup::build_services(&settings).await.map_err(|e| e.to_string())?;
    let relays: Vec<_> = (0..workers).map(|_| services.relay()).collect();
    if workers > 1 {
        // Workers sharing the lanes, as they do once running: relays that lease together
        // find the first of them holding every lane until its next renewal gives its
        // share back (docs/benchmarks.md) — then each holds its own.
        for relay in &relays {
            relay.lanes().await?;
        }
        tokio::time::sleep(relays[0].renewal_interval() + Duration::from_millis(200)).await;
        for relay in &relays {
            relay.lanes().await?;
        }
    }
    // Each relay warm, as a running worker is, and as the bare publisher is connected before
    // its clock starts: a drain of the empty outbox opens its broker connection and leases.
    let stop = CancellationToken::new();
    for relay in &relays {
        relay.drain(&stop).await?;
    }
    seed_shaped(&fixture.db, shape, n, 8).await?;
    // The relays count what they publish: polling the database for the end would cost it
    // more than the relay does.
    let published = Arc::new(AtomicU64::new(0));
    // The relay's sessions so far (those it opens during the run count whole).
    let sessions = relay_sessions_cpu(&fixture.db).await?;
    let cpu = Cpu::now();
    let started = Instant::now();
    let mut handles = Vec::new();
    for relay in relays {
        let (stop, published) = (stop.clone(), published.clone());
        handles.push(tokio::spawn(async move {
            let mut mine = 0;
            while published.load(Ordering::Relaxed) < n as u64 {
                match relay.drain(&stop).await {
                    Ok(r) if r.claimed > 0 => {
                        // What another relay sends again (a lane taken over before its
                        // batch was recorded) counts once: there.
                        let net = r.published.saturating_sub(r.lost_claims);
                        mine += net;
                        published.fetch_add(net, Ordering::Relaxed);
                    }
                    _ => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            relay.release().await;
            mine
        }));
    }
    let mut each = Vec::new();
    for h in handles {
        each.push(h.await?);
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu = format!(
        "{}; of PostgreSQL, the relay's own sessions {:.0} ms; events per relay {each:?}",
        Cpu::now().per_thousand(&cpu, n),
        relay_sessions_ms_per_thousand(&sessions, &relay_sessions_cpu(&fixture.db).await?, n)
    );
    if let Some(created) = momo_objects {
        momo_cleanup(fixture, created).await;
    }
    if fixture.published().await? < n as i64 {
        return Err("the relays stopped before every event was published".into());
    }
    Ok((rate, cpu))
}

/// The platform's objects (docs/spec.md §12, `momo`) in the bench's vhost, its reply
/// exchange bound to the fixture's queue: whether they were made here (then removed after).
async fn momo_exchange(fixture: &Fixture) -> Result<bool, BoxError> {
    use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments};
    use orchestrator::adapters::messaging::amqp::declare;
    use orchestrator::adapters::messaging::contract::momo::topology::{PAYMENT_EVENTS, topology};
    let probe = fixture._connection.open_channel(None).await?;
    let existed = probe
        .exchange_declare(ExchangeDeclareArguments::new(PAYMENT_EVENTS, "topic").passive(true).finish())
        .await
        .is_ok();
    let _ = probe.close().await;
    declare(&fixture.channel, &topology()).await?;
    fixture.channel.queue_bind(QueueBindArguments::new(&fixture.queue, PAYMENT_EVENTS, "#")).await?;
    Ok(!existed)
}

async fn momo_cleanup(fixture: &Fixture, created: bool) {
    use amqprs::channel::{ExchangeDeleteArguments, QueueDeleteArguments};
    use orchestrator::adapters::messaging::contract::momo::topology::topology;
    if !created {
        return;
    }
    let topology = topology();
    for queue in &topology.queues {
        let _ = fixture.channel.queue_delete(QueueDeleteArguments::new(&queue.name)).await;
    }
    for exchange in &topology.exchanges {
        let _ = fixture.channel.exchange_delete(ExchangeDeleteArguments::new(&exchange.name)).await;
    }
}

/// Each relay run (1 and 4 workers, say) between two runs of `bare` (the baseline), the
/// relay compared with their mean; prints the table, returns the JSON rows and the CPU lines.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn bracketed(
    fixture: &Fixture,
    events: usize,
    workers: &str,
    window: usize,
    batch: usize,
    shape: Shape,
    label: &str,
    bare: impl AsyncFn() -> Result<(f64, String), BoxError>,
) -> Result<(Vec<serde_json::Value>, Vec<String>), BoxError> {
    println!("| publisher | events/s | ratio to the bare runs around it |\n|---|---:|---:|");
    let (mut before, bare_cpu) = bare().await?;
    println!("| {label} | {before:.0} | |");
    let mut results = vec![json!({ "publisher": "bare", "eventsPerSecond": before })];
    let mut cpu_lines = vec![format!("bare: {bare_cpu}")];
    // `N` relays, or `N:contract` (docs/spec.md §12: `1:cloudevents`), native by default.
    let runs = workers.split(',').filter_map(|w| {
        let (count, contract) = w.trim().split_once(':').unwrap_or((w.trim(), "native"));
        Some((count.parse::<usize>().ok()?, contract.to_owned()))
    });
    for (w, contract) in runs {
        let (rate, cpu) = relay_drain(fixture, shape, events, w, window, batch, &contract).await?;
        let w = if contract == "native" { w.to_string() } else { format!("{w} {contract}") };
        cpu_lines.push(format!("relay x{w}: {cpu}"));
        fixture.reset().await?;
        let (after, bare_cpu) = bare().await?;
        cpu_lines.push(format!("bare: {bare_cpu}"));
        let ratio = rate / ((before + after) / 2.0);
        println!("| relay, {w} worker(s) | {rate:.0} | **{ratio:.2}** |");
        println!("| {label} | {after:.0} | |");
        results.push(json!({ "publisher": format!("relay x{w}"), "eventsPerSecond": rate, "ratio": ratio }));
        results.push(json!({ "publisher": "bare", "eventsPerSecond": after }));
        before = after;
    }
    Ok((results, cpu_lines))
}

/// The baseline brackets each relay run: a bare run before and one after it, and the relay
/// is compared with their mean — the broker slows down over a run (its message store,
/// purged queues) by up to 15 % here, and a single baseline at the start would count that
/// drift against the relay.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn relay_scenario(
    events: usize,
    workers: &str,
    window: usize,
    batch: usize,
    shape: Shape,
    runs: u32,
) -> Result<(), BoxError> {
    let fixture = Fixture::create().await?;
    // A consumer takes every message as it arrives, for both publishers: an outbox's
    // exchange has consumers, and a queue left to fill up to its bound makes the broker drop
    // a message from its head for every one published — about as much work again per
    // message here, which would hide the relay's own cost behind the broker's
    // (docs/benchmarks.md). Its CPU counts as the harness's ("app") in both.
    let (_consumer, _received) = collect_ids(&fixture, "relay").await?;
    let sample: Vec<_> = traffic(shape, 11).into_iter().flatten().collect();
    let size = sample.iter().map(|e| e.payload.len()).sum::<usize>() / sample.len().max(1);
    println!("relay: {events} events of ~{size} B, {shape:?} traffic, window {window}");
    let bare = async || -> Result<(f64, String), BoxError> {
        let measured = bare_publisher(&fixture, shape, events, window).await?;
        fixture.reset().await?;
        Ok(measured)
    };
    let label = format!("bare amqprs, sliding window {window}");
    let (mut all_results, mut all_cpu) = (Vec::new(), Vec::new());
    for run in 1..=runs.max(1) {
        if runs > 1 {
            println!("\nrun {run}/{runs}");
        }
        let (results, cpu_lines) =
            bracketed(&fixture, events, workers, window, batch, shape, &label, bare).await?;
        println!("\nCPU per 1 000 events (2 cores = 2 000 ms of CPU per second):");
        for line in &cpu_lines {
            println!("  {line}");
        }
        all_results.extend(results);
        all_cpu.extend(cpu_lines);
    }
    let medians = median_ratios(&all_results);
    if runs > 1 {
        println!("\n| relay | ratios, run by run | median |\n|---|---|---:|");
        for (publisher, ratios, median) in &medians {
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            println!("| {publisher} | {} | **{median:.2}** |", each.join(", "));
        }
    }
    let medians: Vec<_> =
        medians.iter().map(|(p, r, m)| json!({ "publisher": p, "ratios": r, "median": m })).collect();
    write_json(
        "relay",
        &json!({ "events": events, "shape": format!("{shape:?}"), "window": window, "batch": batch, "runs": runs, "results": all_results, "medians": medians, "cpu": all_cpu }),
    )?;
    fixture.drop_all().await;
    Ok(())
}

/// Per relay (`relay xN`), in the order first seen: its ratios run by run and their median.
fn median_ratios(results: &[serde_json::Value]) -> Vec<(String, Vec<f64>, f64)> {
    let mut by_relay: Vec<(String, Vec<f64>)> = Vec::new();
    for row in results {
        let (Some(publisher), Some(ratio)) = (row["publisher"].as_str(), row["ratio"].as_f64()) else {
            continue;
        };
        match by_relay.iter_mut().find(|(p, _)| p == publisher) {
            Some((_, ratios)) => ratios.push(ratio),
            None => by_relay.push((publisher.to_owned(), vec![ratio])),
        }
    }
    by_relay
        .into_iter()
        .map(|(publisher, ratios)| {
            let mut sorted = ratios.clone();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len();
            let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
            (publisher, ratios, median)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Confirms, median_ratios};
    use serde_json::json;

    #[test]
    fn the_median_ratio_is_taken_per_relay_over_the_runs() {
        let rows = [
            json!({ "publisher": "bare", "eventsPerSecond": 10.0 }),
            json!({ "publisher": "relay x1", "ratio": 0.9 }),
            json!({ "publisher": "relay x4", "ratio": 0.5 }),
            json!({ "publisher": "relay x1", "ratio": 0.7 }),
            json!({ "publisher": "relay x4", "ratio": 0.6 }),
            json!({ "publisher": "relay x1", "ratio": 0.8 }),
        ];
        let medians = median_ratios(&rows);
        assert_eq!(medians.len(), 2);
        assert_eq!((medians[0].0.as_str(), medians[0].2), ("relay x1", 0.8));
        assert_eq!(medians[0].1, vec![0.9, 0.7, 0.8], "run by run, in order");
        assert!((medians[1].2 - 0.55).abs() < 1e-9, "an even count: the mean of the middle two");
    }

    #[test]
    fn a_multiple_confirm_counts_only_the_tags_not_confirmed_singly() {
        let mut c = Confirms::default();
        assert_eq!(c.settle(3, false), 1);
        assert_eq!(c.settle(5, false), 1);
        assert_eq!(c.settle(5, false), 0, "a tag is counted once");
        // 1, 2, 4 and 6 are new: 3 and 5 were confirmed singly before.
        assert_eq!(c.settle(6, true), 4);
        assert_eq!(c.settle(2, false), 0, "below the floor");
        assert_eq!(c.settle(8, false), 1);
        assert_eq!(c.settle(9, true), 2, "7 and 9");
        assert_eq!(c.settle(9, true), 0);
    }
}
