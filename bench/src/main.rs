//! The bench harness: `cargo run --release -p bench -- <scenario>` (docs/benchmarks.md).
//!
//! Runs against the machine's PostgreSQL (`BENCH_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; a `bench_<uuid>` database is created and
//! dropped) and RabbitMQ (`BENCH_AMQP_URL`, default `amqp://guest:guest@127.0.0.1:5672/%2f`;
//! a `bench.<uuid>` exchange and queue are created and deleted). Each scenario measures its
//! baseline in the same run, prints a table and writes JSON to `target/bench/<scenario>.json`.
//!
//! Scenarios, one module each:
//! - `relay` (`relay.rs`): N outbox rows drained by 1 and by 4 relays (several relays share
//!   the lanes before the run, as running workers do), against a bare amqprs publisher
//!   sending the same messages with a sliding confirm window; CPU per 1 000 events of the
//!   broker, PostgreSQL and the harness, and the events each relay published. Saga-shaped traffic by default (the service's
//!   own envelopes, 2-3 per order in commit order, from 8 producers); `--shape synthetic`
//!   for one ~560 B event per aggregate. `--broker kafka`: the same against a bare
//!   idempotent Kafka producer sending the same records to the same topic (`kafka.rs`).
//! - `latency` (`latency.rs`): a steady commit rate with the relay running; commit-to-confirm
//!   (the commit's return -> `published_at`; also from the stored `created_at`) and
//!   commit-to-consume percentiles, beside two baselines of the same run (the producer's
//!   commit itself, a bare publisher's publish -> confirm at the same rate); `--runs` and
//!   `--max-p99-ms` make it a gate.
//! - `horizon` (`latency.rs`): the latency run without and with a REPEATABLE READ
//!   transaction held open; rate, p99 and dead tuples of the outbox's tables.
//! - `orders` (`orders.rs`): HTTP `POST /api/orders` at rising concurrency and an open loop
//!   at half of saturation, against pgbench on the same server.
//! - `backlog` (`backlog.rs`): the drain rate with a large backlog against a small one, the
//!   fast path's plan, and the peak RSS of an `app worker` process.
//! - `soak` (`soak.rs`): a steady order rate for many minutes with a fault every minute;
//!   lost and duplicated events, RSS.
//! - `scale` (`scale.rs`): 2 `serve` + 3 `worker` processes under HTTP orders and AMQP
//!   registrations for minutes: throughput, p99, outbox backlog, CPU, commits and events
//!   per order, nothing lost (docs/scaling.md starts from it).
//!
//! - `merchants` (`merchants.rs`): orders through a merchant API key against the native
//!   token path, then beside 1 000 merchants of 10 keys each; the key table's updates.
//! - `webhooks` (`webhooks.rs`): saga-shaped commits at a steady event rate with the relay,
//!   without and with merchants' webhook endpoints (one slow, one dead): the commits'
//!   latency, commit -> consume and the relay's rate in the same run.
//!
//! `fixture.rs` holds what they share: the per-run database and broker objects, seeding,
//! CPU accounting from `/proc`, percentiles and the JSON results.

mod backlog;
mod dialect;
mod fixture;
mod kafka;
mod latency;
mod merchants;
mod orders;
mod payouts;
mod relay;
mod scale;
mod soak;
mod toss;
mod webhooks;

use clap::{Parser, Subcommand};
use orchestrator::startup;

use crate::fixture::BoxError;

/// The `app` binary's allocator: the relays, the services and the bare publishers measured
/// here run in this process, and allocate as they do in `app`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "bench", about = "Benchmarks against the real PostgreSQL and RabbitMQ")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Drain rate of the relay (1 and 4 workers) vs a bare confirming publisher.
    Relay {
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        /// Relay counts to measure, comma-separated; `N:contract` measures N relays under
        /// that wire contract (`1:cloudevents`, `1:cloudevents/structured`; docs/spec.md §12),
        /// native otherwise.
        #[arg(long, default_value = "1,4")]
        workers: String,
        #[arg(long, default_value_t = 256)]
        window: usize,
        /// Rows claimed per relay round (`outbox.batch_size`).
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// The traffic: the saga's own events, 2-3 per order in its commit order (`saga`),
        /// or one synthetic event per aggregate (`synthetic`, the first measurements').
        #[arg(long, value_enum, default_value = "saga")]
        shape: fixture::Shape,
        /// The broker: RabbitMQ (`amqp`), or Kafka (`kafka`: the relay against a bare
        /// idempotent producer, on `BENCH_KAFKA_BROKERS`, default 127.0.0.1:9092 —
        /// `scripts/kafka-broker` starts one).
        #[arg(long, value_enum, default_value = "amqp")]
        broker: relay::Broker,
        /// Bracketed runs (RabbitMQ): each prints its table, then the median ratio of each
        /// worker count over all of them (a single run's baseline varies by ±20 % here).
        #[arg(long, default_value_t = 1)]
        runs: u32,
    },
    /// HTTP `POST /api/orders` at rising concurrency, then at half of saturation; baseline
    /// pgbench (TPC-B-like) on the same server.
    Orders {
        /// Concurrency levels, comma-separated.
        #[arg(long, default_value = "1,4,16,64")]
        levels: String,
        /// Seconds per level.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Compare settlement and notification channels in one run instead (docs/spec.md
        /// §13): `simulated,webhook` runs the levels once per channel, webhooks going to a
        /// local receiver that answers `204` at once.
        #[arg(long)]
        channels: Option<String>,
    },
    /// Orders through Toss's checkout against the fake Toss API beside mock mode, in one run
    /// (needs `cargo build --release -p fake-toss`).
    Toss {
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Orders through the commerce dialect (create + orchestrate, docs/dialects.md) against
    /// the native API (one `POST /api/orders`), in one run on one server and database.
    Dialect {
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Orders through a merchant API key against the native token path in one run, then the
    /// key beside 1 000 merchants of 10 keys each (docs/merchants.md).
    Merchants {
        #[arg(long, default_value_t = 16)]
        clients: usize,
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
    /// Saga commits and the relay with and without merchants' webhook endpoints (one slow,
    /// one dead), in one run (docs/spec.md §16).
    Webhooks {
        /// Events per second (saga-shaped commits).
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        #[arg(long, default_value_t = 10)]
        endpoints: usize,
        /// How long the slow endpoint takes to answer.
        #[arg(long, default_value_t = 14_000)]
        slow_ms: u64,
        /// `webhooks.max_rate` (0: no bound).
        #[arg(long, default_value_t = 0)]
        max_rate: u32,
        /// Without and with, alternately, this many times (the ratios' median is reported).
        #[arg(long, default_value_t = 1)]
        rounds: usize,
    },
    /// The daily ledger run of a day of `rows` Toss settlements (pages of 5 000), as
    /// `app reconcile ledger` runs it: its peak RSS and time (needs `cargo build --release`).
    Payouts {
        #[arg(long, default_value_t = 12_000)]
        rows: u32,
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Drain rate with a large backlog against a small one, the claim's plan, and the peak
    /// RSS of an `app worker` process (needs `cargo build --release` for `app`).
    Backlog {
        #[arg(long, default_value_t = 1_000_000)]
        big: usize,
        #[arg(long, default_value_t = 10_000)]
        small: usize,
        #[arg(long, default_value_t = 1024)]
        batch: usize,
        /// Two events per order (`saga`, in blocks of 100 orders) or one per aggregate.
        #[arg(long, value_enum, default_value = "saga")]
        shape: fixture::Shape,
    },
    /// A steady order rate for many minutes with a fault every minute (worker SIGKILL,
    /// database connections killed, broker connection cut, server SIGKILL); counts lost and
    /// duplicated events and samples RSS (needs `cargo build --release` for `app`).
    Soak {
        #[arg(long, default_value_t = 10)]
        minutes: u64,
        /// Orders per second.
        #[arg(long, default_value_t = 100)]
        rate: u32,
    },
    /// 2 `serve` + 3 `worker` processes under a sustained mixed load (HTTP orders and AMQP
    /// registrations): throughput, p99, outbox backlog, CPU and commits per order, 0 lost
    /// (needs `cargo build --release` for `app`).
    Scale {
        #[arg(long, default_value_t = 180)]
        seconds: u64,
        /// HTTP orders per second.
        #[arg(long, default_value_t = 100)]
        rate: u32,
        /// Meeting registrations per second (AMQP).
        #[arg(long, default_value_t = 50)]
        registrations: u32,
        #[arg(long, default_value_t = 2)]
        serves: usize,
        #[arg(long, default_value_t = 3)]
        workers: usize,
    },
    /// The latency run twice, the second with a REPEATABLE READ transaction held open
    /// throughout: relay rate, p99 and dead tuples on the outbox's tables.
    Horizon {
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        /// How long the transaction is held (the length of each run).
        #[arg(long, default_value_t = 120)]
        seconds: u64,
    },
    /// Commit-to-confirm and commit-to-consume latency at a steady commit rate.
    Latency {
        /// Commits (one event each) per second.
        #[arg(long, default_value_t = 1000)]
        rate: u32,
        #[arg(long, default_value_t = 20)]
        seconds: u64,
        /// Runs, each on a fresh database (a stall showed in 7 of 12 runs before the fix).
        #[arg(long, default_value_t = 1)]
        runs: u32,
        /// Gate: exit 1 when any run's commit -> confirm p99 (from the commit's return) exceeds this, or an event is
        /// still unconsumed when the drain window closes.
        #[arg(long)]
        max_p99_ms: Option<f64>,
    },
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let cli = Cli::parse();
    startup::install_tls_provider();
    match cli.scenario {
        Scenario::Relay { events, workers, window, batch, shape, broker: relay::Broker::Kafka, .. } => {
            let mut fixture = fixture::Fixture::create().await?;
            let result = kafka::relay_scenario(&mut fixture, events, &workers, window, batch, shape).await;
            fixture.drop_all().await;
            result
        }
        Scenario::Relay { events, workers, window, batch, shape, runs, .. } => {
            relay::relay_scenario(events, &workers, window, batch, shape, runs).await
        }
        Scenario::Latency { rate, seconds, runs, max_p99_ms } => {
            latency::latency_gate(rate, seconds, runs, max_p99_ms).await
        }
        Scenario::Orders { levels, seconds, channels: None } => {
            orders::orders_scenario(&levels, seconds).await
        }
        Scenario::Orders { levels, seconds, channels: Some(channels) } => {
            orders::channels_scenario(&levels, seconds, &channels).await
        }
        Scenario::Toss { clients, seconds } => toss::toss_scenario(clients, seconds).await,
        Scenario::Dialect { clients, seconds } => dialect::dialect_scenario(clients, seconds).await,
        Scenario::Merchants { clients, seconds } => merchants::merchants_scenario(clients, seconds).await,
        Scenario::Webhooks { rate, seconds, endpoints, slow_ms, max_rate, rounds } => {
            let shape = webhooks::Shape { rate, seconds, endpoints, slow_ms, max_rate };
            webhooks::webhooks_scenario(shape, rounds).await
        }
        Scenario::Payouts { rows, runs } => payouts::payouts_scenario(rows, runs).await,
        Scenario::Horizon { rate, seconds } => latency::horizon_scenario(rate, seconds).await,
        Scenario::Soak { minutes, rate } => soak::soak(minutes, rate).await,
        Scenario::Backlog { big, small, batch, shape } => {
            backlog::backlog_scenario(big, small, batch, shape).await
        }
        Scenario::Scale { seconds, rate, registrations, serves, workers } => {
            scale::scale_scenario(seconds, rate, registrations, serves, workers).await
        }
    }
}
