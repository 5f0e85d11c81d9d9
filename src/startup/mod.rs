//! The composition root: builds adapters from [`Settings`], wraps them as ports, hands
//! them to the services, and runs the HTTP server and the worker loops. Nothing else in
//! the crate sees every layer.

mod adapters;
mod run;
mod services;
mod settings;
mod webhooks;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::adapters::Secret;
use crate::adapters::http::auth::JwtKeys;
use crate::adapters::messaging::amqp::{AmqpNodes, ConsumerSettings, MeetingConsumers};
use crate::adapters::messaging::contract::topology::MeetingTopology;
use crate::adapters::messaging::kafka::{KafkaConsumerSettings, KafkaMeetingConsumer};
use crate::adapters::providers::ProviderCalls;
use crate::application::health::{LoopProgress, Readiness};
use crate::application::idempotency::IdempotencyService;
use crate::application::inbound::MeetingEvents;
use crate::application::notification_retry::NotificationRetry;
use crate::application::orchestration::Orchestrator;
use crate::application::outbox::{Housekeeping, OutboxAdmin, OutboxRelay, RelaySettings};
use crate::application::ports::Cause;
use crate::application::ports::{
    CardKeyIn, Clock, EventPublisher, IdempotencyStore, OutboxStore, PaymentGateway, ProviderCustomers,
    ProviderLedger, ProviderRecords,
};
use crate::application::queries::OrderQueries;
use crate::application::recovery::Recovery;
use crate::application::settlement_retry::SettlementRetries;
use crate::config::{BrokerKind, ProviderKind, Settings};
use crate::domain::outbox::RetrySchedule;

pub use crate::adapters::http_client::install_tls_provider;
use adapters::*;
use run::*;
pub use run::{Application, Workers, ops_server, shutdown_signal};
pub use services::{Money, build_services, build_services_with_clock};
use settings::*;
pub use webhooks::Webhooks;

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// Bad configuration (exit code 2).
    #[error("{0}")]
    Config(String),
    /// A dependency failed (exit code 1): what could not be done, and the error underneath
    /// when there is one (`Chain` prints both).
    #[error("{context}")]
    Runtime {
        context: String,
        #[source]
        cause: Option<Cause>,
    },
}

impl StartupError {
    /// `context` failed because of `cause`.
    pub fn runtime(
        context: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        StartupError::Runtime { context: context.into(), cause: Some(Cause::new(cause)) }
    }

    /// A failure told in words, with no error underneath.
    pub fn failed(context: impl Into<String>) -> Self {
        StartupError::Runtime { context: context.into(), cause: None }
    }
}

fn chrono(d: StdDuration) -> Duration {
    Duration::from_std(d).unwrap_or(Duration::MAX)
}

/// A name for this process's claims: host, pid and a random suffix, unique per relay.
pub fn worker_id() -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
    format!("{host}-{}-{:04x}", std::process::id(), fastrand::u16(..))
}

type Providers = (Arc<dyn PaymentGateway>, Capabilities);

/// What a payment provider has beyond charging and cancelling: each present only where it
/// does (Toss has all of them, key-in only with a test secret key; mock and external none).
#[derive(Default)]
struct Capabilities {
    records: Option<Arc<dyn ProviderRecords>>,
    ledger: Option<Arc<dyn ProviderLedger>>,
    customers: Option<Arc<dyn ProviderCustomers>>,
    /// Key-in (Toss with a test secret key only).
    key_in: Option<Arc<dyn CardKeyIn>>,
}

/// Makes a publisher for one relay (each relay gets its own broker connection).
pub type PublisherFactory = Arc<dyn Fn(&str) -> Arc<dyn EventPublisher> + Send + Sync>;

/// The event types for which "returned unroutable" counts as published (docs/spec.md §6).
pub const UNROUTABLE_OK: &[&str] = &["payment.refunded"];

/// The merchants of the doors that name one (`None`: `DEFAULT`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Owners {
    pub meetings: Option<crate::domain::ids::MerchantId>,
    pub commerce: Option<crate::domain::ids::MerchantId>,
}

/// Every service of the application, wired.
#[derive(Clone)]
pub struct Services {
    pub db: DatabaseConnection,
    pub orchestrator: Arc<Orchestrator>,
    pub queries: Arc<OrderQueries>,
    pub idempotency: Arc<IdempotencyService>,
    pub idempotency_store: Arc<dyn IdempotencyStore>,
    pub readiness: Arc<Readiness>,
    pub outbox_store: Arc<dyn OutboxStore>,
    pub outbox_admin: Arc<OutboxAdmin>,
    pub notifications: Arc<NotificationRetry>,
    /// Undelivered settlements: the retry processor and the operator's repairs.
    pub settlements: Arc<SettlementRetries>,
    /// The money's use cases beside the saga.
    pub money: Money,
    /// The momo dialect's key-in.
    pub key_in: Arc<crate::application::money::key_in::KeyIn>,
    /// Merchants, their stores, people and keys (docs/spec.md §15).
    pub merchants: Arc<crate::application::merchants::Merchants>,
    /// The merchants the doors' orders are (`meetings.merchant`,
    /// `http.dialects.commerce.merchant`), found when the service starts.
    pub owners: Owners,
    /// Merchants' webhooks (docs/spec.md §16).
    pub webhooks: Webhooks,
    pub recovery: Arc<Recovery>,
    pub meeting_events: Arc<MeetingEvents>,
    pub publishers: PublisherFactory,
    pub housekeeping: Arc<Housekeeping>,
    pub clock: Arc<dyn Clock>,
    pub jwt: Arc<JwtKeys>,
    /// Call counters of the simulated providers (mock mode).
    pub provider_calls: Option<Arc<ProviderCalls>>,
    /// Woken after each commit that appended outbox events.
    pub relay_wake: Arc<Notify>,
    pub settings: Settings,
    /// This app's metrics registry: what its services record and `/metrics` renders.
    pub metrics: crate::telemetry::Registry,
    /// Stops the services' own background tasks (the metrics upkeep) and, as the parent of
    /// their tokens, the worker loops.
    pub shutdown: CancellationToken,
    /// Whether the worker loops make progress (the worker's readiness).
    pub loops: Arc<LoopProgress>,
}

impl Services {
    /// The consumers of the meeting service's events: over AMQP or Kafka (none with `log`).
    pub fn meeting_consumers(&self) -> Option<MeetingConsumer> {
        let b = &self.settings.broker;
        match b.kind {
            BrokerKind::Log => return None,
            BrokerKind::Amqp => {}
            BrokerKind::Kafka => {
                let settings = KafkaConsumerSettings {
                    connection: kafka_connection(&self.settings),
                    topics: b.kafka.inbound.clone(),
                    group: b.kafka.group.clone(),
                    partitions: b.kafka.partitions,
                    retries: b.consumer_retries,
                    retry_backoff: b.consumer_retry_backoff,
                    honour_mock_scenario: self.settings.payment.provider == ProviderKind::Mock,
                    contract: contract(&self.settings).ok()?,
                    meetings_currency: self.settings.meetings.currency.clone(),
                };
                return Some(MeetingConsumer::Kafka(Arc::new(
                    KafkaMeetingConsumer::new(settings, self.meeting_events.clone())
                        .with_meter(self.metrics.meter.clone())
                        .with_progress(self.loops.clone()),
                )));
            }
        }
        let nodes = AmqpNodes::parse(b.urls.iter().map(Secret::expose)).ok()?;
        let settings = ConsumerSettings {
            topology: MeetingTopology {
                exchange: b.meeting_exchange.clone(),
                dead_letter_exchange: b.dead_letter_exchange.clone(),
                register_queue: b.register_queue.clone(),
                cancel_queue: b.cancel_queue.clone(),
                deleted_queue: b.meeting_deleted_queue.clone(),
                queue_type: b.queue_type,
                delivery_limit: b.delivery_limit,
            },
            prefetch: b.prefetch,
            retries: b.consumer_retries,
            retry_backoff: b.consumer_retry_backoff,
            honour_mock_scenario: self.settings.payment.provider == ProviderKind::Mock,
            contract: contract(&self.settings).ok()?,
            meetings_currency: self.settings.meetings.currency.clone(),
        };
        Some(MeetingConsumer::Amqp(Arc::new(
            MeetingConsumers::new(nodes, settings, self.meeting_events.clone())
                .with_meter(self.metrics.meter.clone()),
        )))
    }

    /// A relay with its own worker id and publisher, sharing this process's wake-up signal.
    pub fn relay(&self) -> OutboxRelay {
        let o = &self.settings.outbox;
        let worker_id = worker_id();
        OutboxRelay::new(
            self.outbox_store.clone(),
            (self.publishers)(&worker_id),
            self.clock.clone(),
            RelaySettings {
                worker_id,
                lanes: o.lanes,
                retry_poll_interval: o.retry_poll_interval,
                trickle_wait: o.trickle_wait,
                batch_size: o.batch_size,
                lease: chrono(o.processing_timeout),
                poll_interval: o.poll_interval,
                schedule: RetrySchedule {
                    max_retries: o.max_retries,
                    backoff_base: chrono(o.backoff_base),
                    backoff_cap: chrono(o.backoff_cap),
                },
                // A send waits at most the confirm timeout; a lease shorter than four of those
                // (tests, small deployments) keeps a quarter of itself as the margin.
                send_margin: self.settings.broker.confirm_timeout.min(o.processing_timeout / 4),
            },
            self.relay_wake.clone(),
        )
        .with_meter(self.metrics.meter.clone())
        .with_progress(self.loops.clone())
    }
}

/// The meeting service's consumers on the configured broker.
pub enum MeetingConsumer {
    Amqp(Arc<MeetingConsumers>),
    Kafka(Arc<KafkaMeetingConsumer>),
}

impl MeetingConsumer {
    /// Consumes until `stop`.
    pub async fn run_until_stopped(self, stop: CancellationToken) {
        match self {
            MeetingConsumer::Amqp(c) => c.run_until_stopped(stop).await,
            MeetingConsumer::Kafka(c) => c.run_until_stopped(stop).await,
        }
    }
}

/// `serve` and `worker` refuse a database whose outbox holds another server's history (a
/// restore from a logical dump): relayed as it is, its progress log would count new events
/// as sent. `app outbox rebase` makes it this server's own (docs/operations.md).
///
/// # Errors
/// `Runtime` naming the repair, or when the database cannot be asked.
pub async fn refuse_restored_history(services: &Services) -> Result<(), StartupError> {
    let restored = services
        .housekeeping
        .restored_history()
        .await
        .map_err(|e| StartupError::runtime("cannot read the outbox's history", e))?;
    if restored {
        return Err(StartupError::Runtime {
            context: "the outbox holds transaction ids this database server has not reached: it was \
                      restored from a logical dump (pg_dump); run `app outbox rebase` once, then start \
                      again (docs/operations.md, \"Restored from a logical dump\")"
                .into(),
            cause: None,
        });
    }
    Ok(())
}
