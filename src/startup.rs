//! The composition root: builds adapters from [`Settings`], wraps them as ports, hands
//! them to the services, and runs the HTTP server and the worker loops. Nothing else in
//! the crate sees every layer.

use std::future::Future;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use actix_web::dev::{Server, ServerHandle};
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use chrono::Duration;
use sea_orm::DatabaseConnection;
use sea_orm_migration::MigratorTrait;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::adapters::Secret;
use crate::adapters::clock::SystemClock;
use crate::adapters::http::auth::JwtKeys;
use crate::adapters::http::{self, HttpState};
use crate::adapters::messaging::LogEventPublisher;
use crate::adapters::messaging::amqp::{
    AmqpEventPublisher, AmqpNodes, AmqpPublisherSettings, ConsumerSettings, MeetingConsumers, MeetingTopology,
};
use crate::adapters::messaging::contract::{Broker, Contract, WireView};
use crate::adapters::messaging::kafka::{
    KafkaConnection, KafkaConsumerSettings, KafkaEventPublisher, KafkaMeetingConsumer, KafkaPublisherSettings,
};
use crate::adapters::persistence::{
    self, DatabaseProbe, SeaOrmIdempotencyStore, SeaOrmOutboxStore, SeaOrmStore, SqlMeetingFees,
};
use crate::adapters::providers::{
    EmailNotifier, ExternalPaymentGateway, ExternalProviderSettings, Measured, ProviderCalls,
    SimulatedNotifier, SimulatedPaymentGateway, SimulatedSettlementGateway, TossClient, TossPaymentGateway,
    TossSettings, WebhookClient, WebhookNotifier, WebhookSettlements,
};
use crate::application::health::{HealthProbe, LoopProgress, Readiness, Role};
use crate::application::idempotency::IdempotencyService;
use crate::application::inbound::MeetingEvents;
use crate::application::ledger::{Ledger, LedgerSettings};
use crate::application::notification_retry::{NotificationRetry, NotificationRetrySettings};
use crate::application::orchestration::{CheckoutSettings, Orchestrator, SagaSettings};
use crate::application::outbox::{
    Housekeeping, HousekeepingSettings, OutboxAdmin, OutboxRelay, RelaySettings,
};
use crate::application::payment_methods::PaymentMethods;
use crate::application::ports::Cause;
use crate::application::ports::{
    Clock, EventPublisher, IdempotencyStore, LedgerStore, Notifier, OrderRepository, OutboxStore,
    PaymentGateway, PaymentMethodRepository, PaymentRepository, ProviderCustomers, ProviderLedger,
    ProviderRecords, SagaRuns, SettlementGateway, UnitOfWork,
};
use crate::application::provider_view::ProviderView;
use crate::application::queries::OrderQueries;
use crate::application::recovery::{ReconciliationSettings, Recovery};
use crate::application::refunds::{RefundSettings, Refunds};
use crate::application::settlement_retry::{SettlementRetries, SettlementRetrySettings};
use crate::config::{BrokerKind, FeeSource, NotificationChannel, ProviderKind, Settings, SettlementChannel};
use crate::domain::notification::RetryPolicy;
use crate::domain::outbox::RetrySchedule;

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

type Providers = (
    Arc<dyn PaymentGateway>,
    Arc<dyn SettlementGateway>,
    Arc<dyn Notifier>,
    Option<Arc<ProviderCalls>>,
    Capabilities,
);

/// What a payment provider has beyond charging and cancelling: each present only where it
/// does (Toss has all three; mock and external none).
#[derive(Default)]
struct Capabilities {
    records: Option<Arc<dyn ProviderRecords>>,
    ledger: Option<Arc<dyn ProviderLedger>>,
    customers: Option<Arc<dyn ProviderCustomers>>,
}

/// Makes a publisher for one relay (each relay gets its own broker connection).
pub type PublisherFactory = Arc<dyn Fn(&str) -> Arc<dyn EventPublisher> + Send + Sync>;

/// The event types for which "returned unroutable" counts as published (docs/spec.md §6).
pub const UNROUTABLE_OK: &[&str] = &["payment.refunded"];

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
    pub refunds: Arc<Refunds>,
    /// The provider's ledger, reconciled daily (Toss only).
    pub ledger: Arc<Ledger>,
    pub payment_methods: Arc<PaymentMethods>,
    pub provider_view: Arc<ProviderView>,
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

/// How to reach the Kafka cluster of `broker.kafka`.
fn kafka_connection(settings: &Settings) -> KafkaConnection {
    let k = &settings.broker.kafka;
    KafkaConnection {
        brokers: k.brokers.clone(),
        client_id: k.client_id.clone(),
        properties: k.properties.clone(),
        connect_timeout: k.connect_timeout,
    }
}

/// The wire contract `broker.contract` names (docs/spec.md §12).
fn contract(settings: &Settings) -> Result<Contract, StartupError> {
    Contract::of(settings.broker.contract, settings.broker.cloudevents.clone(), settings.meetings.timezone)
        .map_err(|e| StartupError::Config(format!("`broker.contract`: {e}")))
}

/// The publisher factory and the broker's readiness probe for `broker.kind`.
fn publishers(settings: &Settings) -> Result<(PublisherFactory, Arc<dyn HealthProbe>), StartupError> {
    match settings.broker.kind {
        BrokerKind::Log => {
            let factory: PublisherFactory =
                Arc::new(|_: &str| Arc::new(LogEventPublisher) as Arc<dyn EventPublisher>);
            Ok((factory, Arc::new(LogEventPublisher)))
        }
        BrokerKind::Amqp => {
            let nodes = AmqpNodes::parse(settings.broker.urls.iter().map(Secret::expose))
                .map_err(|e| StartupError::Config(format!("`broker.urls`: {e}")))?;
            let base = AmqpPublisherSettings {
                exchange: settings.broker.exchange.clone(),
                window: settings.outbox.publish_window as usize,
                confirm_timeout: settings.broker.confirm_timeout,
                unroutable_ok: UNROUTABLE_OK.iter().map(|t| t.to_string()).collect(),
                connection_name: "orchestrator-readiness".into(),
                contract: contract(settings)?,
            };
            let probe = Arc::new(AmqpEventPublisher::new(nodes.clone(), base.clone()));
            let factory: PublisherFactory = Arc::new(move |worker: &str| {
                let settings = AmqpPublisherSettings {
                    connection_name: format!("orchestrator-relay-{worker}"),
                    ..base.clone()
                };
                Arc::new(AmqpEventPublisher::new(nodes.clone(), settings)) as Arc<dyn EventPublisher>
            });
            Ok((factory, probe))
        }
        BrokerKind::Kafka => {
            let base = KafkaPublisherSettings {
                connection: kafka_connection(settings),
                topic: settings.broker.kafka.topic.clone(),
                partitions: settings.broker.kafka.partitions,
                window: settings.outbox.publish_window as usize,
                confirm_timeout: settings.broker.confirm_timeout,
                contract: contract(settings)?,
            };
            let probe = Arc::new(
                KafkaEventPublisher::new(base.clone())
                    .map_err(|e| StartupError::Config(format!("`broker.kafka`: {e}")))?,
            );
            let factory: PublisherFactory = Arc::new(move |worker: &str| {
                let settings = KafkaPublisherSettings {
                    connection: KafkaConnection {
                        client_id: format!("{}-relay-{worker}", base.connection.client_id),
                        ..base.connection.clone()
                    },
                    ..base.clone()
                };
                // The probe was made from the same settings (only the client id differs), so
                // the client accepts them; making a client fails on nothing else.
                let publisher = KafkaEventPublisher::new(settings).expect("settings accepted for the probe");
                Arc::new(publisher) as Arc<dyn EventPublisher>
            });
            Ok((factory, probe))
        }
    }
}

/// Installs the process-wide TLS crypto provider (ring) used by HTTP clients. Idempotent.
pub fn install_tls_provider() {
    // Fails only if a provider is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The service's database: reachable within `database.connect_timeout`, bounded sessions,
/// migrated (SQLite) or checked to be (PostgreSQL).
async fn database(settings: &Settings) -> Result<DatabaseConnection, StartupError> {
    persistence::probe(settings.database.url.expose(), settings.database.connect_timeout)
        .await
        .map_err(StartupError::failed)?;
    let db = persistence::connect_limited(
        settings.database.url.expose(),
        settings.database.max_connections,
        session_limits(settings),
    )
    .await
    // `describe`: sqlx's text without its " at line N" noise (the error itself is not kept: a
    // connection error may name the URL it was given).
    .map_err(|e| StartupError::failed(format!("cannot open the database: {}", persistence::describe(&e))))?;
    if settings.database.is_sqlite() {
        persistence::migrate(&db).await.map_err(|e| StartupError::runtime("migration failed", e))?;
    } else {
        let pending = migrations::Migrator::get_pending_migrations(&db)
            .await
            .map_err(|e| StartupError::runtime("cannot read the schema version", e))?;
        if !pending.is_empty() {
            return Err(StartupError::failed(format!(
                "the database has {} pending migration(s); run `app migrate` first",
                pending.len()
            )));
        }
    }
    Ok(db)
}

/// Every session's `lock_timeout` and `statement_timeout` (docs/configuration.md).
fn session_limits(settings: &Settings) -> persistence::SessionLimits {
    persistence::SessionLimits {
        lock_timeout: settings.database.lock_timeout,
        statement_timeout: settings.database.statement_timeout,
    }
}

/// The relay's store: on PostgreSQL two pools of its own, one for its slow path and the
/// operators' queries (custom plans: `persistence::connect_outbox`) and one for the fast
/// path's statements (plans kept: `persistence::connect_fast_path`); SQLite has one writer
/// and shares the one pool.
async fn outbox_store(
    settings: &Settings,
    db: &DatabaseConnection,
    relay_wake: Arc<Notify>,
) -> Result<SeaOrmOutboxStore, StartupError> {
    if settings.database.is_sqlite() {
        return Ok(SeaOrmOutboxStore::new(db.clone(), relay_wake));
    }
    let failed = |e: sea_orm::DbErr| {
        StartupError::failed(format!("cannot open the database: {}", persistence::describe(&e)))
    };
    let (url, size, limits) =
        (settings.database.url.expose(), settings.outbox.max_connections, session_limits(settings));
    let outbox = persistence::connect_outbox(url, size, limits).await.map_err(failed)?;
    let fast = persistence::connect_fast_path(url, size, limits).await.map_err(failed)?;
    Ok(SeaOrmOutboxStore::new(outbox, relay_wake).with_fast_path_pool(fast))
}

/// The payment, settlement and notification providers `payment.provider` names.
fn providers(settings: &Settings) -> Result<Providers, StartupError> {
    Ok(match settings.payment.provider {
        ProviderKind::Mock => {
            let calls = Arc::new(ProviderCalls::default());
            (
                Arc::new(SimulatedPaymentGateway::new(calls.clone())),
                Arc::new(SimulatedSettlementGateway::new(calls.clone())),
                Arc::new(SimulatedNotifier::new(calls.clone())),
                Some(calls),
                Capabilities::default(),
            )
        }
        ProviderKind::External => {
            let p = &settings.payment;
            let gateway = ExternalPaymentGateway::new(ExternalProviderSettings {
                base_url: p.external_base_url.clone().unwrap_or_default(),
                secret_key: p.external_secret_key.clone().unwrap_or_default(),
                timeout: p.external_timeout,
                retries: p.retries,
                retry_backoff: p.retry_backoff,
            })
            .map_err(StartupError::Config)?;
            // Settlement and notification have no external protocol yet: simulated.
            let calls = Arc::new(ProviderCalls::default());
            (
                Arc::new(gateway),
                Arc::new(SimulatedSettlementGateway::new(calls.clone())),
                Arc::new(SimulatedNotifier::new(calls.clone())),
                Some(calls),
                Capabilities::default(),
            )
        }
        ProviderKind::Toss => {
            let t = &settings.payment.toss;
            let client = TossClient::new(TossSettings {
                base_url: t.base_url.clone(),
                secret_key: t.secret_key.clone().unwrap_or_default(),
                timeout: t.timeout,
                ledger_timeout: t.ledger_timeout,
                retries: settings.payment.retries,
                retry_backoff: settings.payment.retry_backoff,
            })
            .map_err(StartupError::Config)?;
            // Settlement and notification have no provider protocol yet: simulated.
            let calls = Arc::new(ProviderCalls::default());
            let gateway = Arc::new(TossPaymentGateway::new(client));
            (
                gateway.clone(),
                Arc::new(SimulatedSettlementGateway::new(calls.clone())),
                Arc::new(SimulatedNotifier::new(calls.clone())),
                Some(calls),
                Capabilities {
                    records: Some(gateway.clone()),
                    ledger: Some(gateway.clone()),
                    customers: Some(gateway),
                },
            )
        }
    })
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

/// Connects, migrates (SQLite) or checks the schema (PostgreSQL), and wires the services.
///
/// # Errors
/// `Config` for unusable keys; `Runtime` when the database cannot be reached or is not
/// migrated.
pub async fn build_services(settings: &Settings) -> Result<Services, StartupError> {
    build_services_with_clock(settings, Arc::new(SystemClock)).await
}

type Channels = (Arc<dyn SettlementGateway>, Arc<dyn Notifier>);

/// The settlement and notification channels `settlement.channel` and
/// `notification.channel` name (docs/spec.md §13), each call timed and counted.
fn channels(
    settings: &Settings,
    settlements: Arc<dyn SettlementGateway>,
    notifier: Arc<dyn Notifier>,
    meter: &crate::application::meter::Meter,
) -> Result<Channels, StartupError> {
    let (settlements, settlement_label): (Arc<dyn SettlementGateway>, &'static str) =
        match &settings.settlement.channel {
            SettlementChannel::Simulated => (settlements, "simulated"),
            SettlementChannel::Webhook(webhook) => (
                Arc::new(WebhookSettlements::new(
                    WebhookClient::new(webhook.clone()).map_err(StartupError::Config)?,
                )),
                "webhook",
            ),
        };
    let settlements: Arc<dyn SettlementGateway> =
        Arc::new(Measured::new(settlements, settlement_label, meter.clone()));
    // docs/spec.md §13: the channel `notification.channel` names.
    let (notifier, notifier_label): (Arc<dyn Notifier>, &'static str) = match &settings.notification.channel {
        NotificationChannel::Simulated => (notifier, "simulated"),
        NotificationChannel::Email(email) => {
            (Arc::new(EmailNotifier::new(email).map_err(StartupError::Config)?), "email")
        }
        NotificationChannel::Webhook(webhook) => (
            Arc::new(WebhookNotifier::new(
                WebhookClient::new(webhook.clone()).map_err(StartupError::Config)?,
            )),
            "webhook",
        ),
    };
    let notifier: Arc<dyn Notifier> = Arc::new(Measured::new(notifier, notifier_label, meter.clone()));
    Ok((settlements, notifier))
}

impl Capabilities {
    /// The ledger's reads and the billing-key issues timed and counted like every provider
    /// call (the support look-up is not).
    fn measured(self, provider: &'static str, meter: &crate::application::meter::Meter) -> Capabilities {
        Capabilities {
            records: self.records,
            ledger: self.ledger.map(|ledger| -> Arc<dyn ProviderLedger> {
                Arc::new(Measured::new(ledger, provider, meter.clone()))
            }),
            customers: self.customers.map(|customers| -> Arc<dyn ProviderCustomers> {
                Arc::new(Measured::new(customers, provider, meter.clone()))
            }),
        }
    }
}

/// The money's use cases beside the saga.
struct Money {
    ledger: Arc<Ledger>,
    provider_view: Arc<ProviderView>,
    payment_methods: Arc<PaymentMethods>,
    refunds: Arc<Refunds>,
}

/// The ledger run, the provider's view, saved cards and refunds, each with the provider's
/// capabilities it needs (absent where the provider has none).
fn money(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    payments: &Arc<dyn PaymentGateway>,
    capabilities: &Capabilities,
    clock: &Arc<dyn Clock>,
) -> Money {
    Money {
        ledger: Arc::new(Ledger::new(
            capabilities.ledger.clone(),
            orders.clone() as Arc<dyn PaymentRepository>,
            orders.clone() as Arc<dyn LedgerStore>,
            clock.clone(),
            ledger_settings(settings),
        )),
        provider_view: Arc::new(ProviderView::new(
            orders.clone() as Arc<dyn PaymentRepository>,
            capabilities.records.clone(),
        )),
        payment_methods: Arc::new(PaymentMethods::new(
            orders.clone() as Arc<dyn PaymentMethodRepository>,
            capabilities.customers.clone(),
            clock.clone(),
        )),
        refunds: Arc::new(Refunds::new(
            orders.clone(),
            orders.clone(),
            orders.clone(),
            orders.clone(),
            payments.clone(),
            clock.clone(),
            refund_settings(settings),
        )),
    }
}

/// Notification retries through the channel the saga sends with.
fn notification_retries(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    notifier: &Arc<dyn Notifier>,
    clock: &Arc<dyn Clock>,
    meter: &crate::application::meter::Meter,
) -> Arc<NotificationRetry> {
    let retry = NotificationRetry::new(
        orders.clone(),
        orders.clone(),
        orders.clone(),
        notifier.clone(),
        clock.clone(),
        notification_settings(settings),
    );
    Arc::new(retry.with_meter(meter.clone()))
}

/// The worker's repairs: reconciliation, compensations and stalled sagas (`Recovery`), and
/// settlement retries.
fn repairs(
    settings: &Settings,
    orchestrator: &Arc<Orchestrator>,
    refunds: &Arc<Refunds>,
    orders: &Arc<SeaOrmStore>,
    clock: &Arc<dyn Clock>,
    meter: crate::application::meter::Meter,
    loops: &Arc<LoopProgress>,
) -> (Arc<Recovery>, Arc<SettlementRetries>) {
    let recovery = Recovery::new(
        orchestrator.clone(),
        refunds.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        orders.clone(),
        clock.clone(),
        reconciliation_settings(settings),
    )
    .with_meter(meter)
    .with_progress(loops.clone());
    let retries = SettlementRetries::new(
        orchestrator.clone(),
        orders.clone(),
        clock.clone(),
        SettlementRetrySettings {
            interval: settings.settlement.retry_interval,
            batch: settings.settlement.retry_batch,
        },
    );
    (Arc::new(recovery), Arc::new(retries))
}

/// The saga, with the provider's customers (Toss's checkout) and, on Toss, saved cards.
#[allow(clippy::too_many_arguments)]
fn saga(
    settings: &Settings,
    orders: &Arc<SeaOrmStore>,
    payments: Arc<dyn PaymentGateway>,
    settlements: Arc<dyn SettlementGateway>,
    notifier: Arc<dyn Notifier>,
    provider_customers: Option<Arc<dyn ProviderCustomers>>,
    clock: &Arc<dyn Clock>,
    meter: &crate::application::meter::Meter,
) -> Arc<Orchestrator> {
    let orchestrator = Orchestrator::new(
        orders.clone() as Arc<dyn OrderRepository>,
        orders.clone() as Arc<dyn SagaRuns>,
        orders.clone() as Arc<dyn UnitOfWork>,
        payments,
        settlements,
        notifier,
        clock.clone(),
        saga_settings(settings),
    )
    .with_meter(meter.clone())
    .with_provider_customers(provider_customers);
    // Only Toss charges registrations with a saved card; elsewhere no saga step reads them.
    Arc::new(if settings.payment.provider == ProviderKind::Toss {
        orchestrator.with_saved_cards(orders.clone() as Arc<dyn PaymentMethodRepository>)
    } else {
        orchestrator
    })
}

/// The meeting service's messages; registrations without an amount charged the meeting's fee
/// from its own database where `meetings.fee_source = sql` (docs/spec.md §12).
async fn meeting_events(
    settings: &Settings,
    orchestrator: &Arc<Orchestrator>,
    refunds: &Arc<Refunds>,
    orders: &Arc<SeaOrmStore>,
    clock: &Arc<dyn Clock>,
) -> Result<Arc<MeetingEvents>, StartupError> {
    let meeting_events = MeetingEvents::new(
        orchestrator.clone(),
        refunds.clone(),
        orders.clone(),
        orders.clone(),
        clock.clone(),
    );
    // docs/spec.md §12: registrations without an amount are charged the meeting's fee.
    let meeting_events = Arc::new(match &settings.meetings.fee_source {
        FeeSource::Message => meeting_events,
        FeeSource::Sql { url, query } => meeting_events.with_fees(Arc::new(
            SqlMeetingFees::new(url.expose(), query).await.map_err(|e| {
                StartupError::Config(format!(
                    "`meetings.fee_sql.url`: {}",
                    crate::application::error::Chain(&e)
                ))
            })?,
        )),
    });
    Ok(meeting_events)
}

/// Readiness: the database, the broker and the worker's loops, with a warning for each
/// simulated part (logged once here).
fn readiness(
    settings: &Settings,
    db: &DatabaseConnection,
    broker_probe: Arc<dyn HealthProbe>,
    loops: &Arc<LoopProgress>,
) -> Arc<Readiness> {
    let simulated = settings.simulated_parts();
    for warning in &simulated {
        tracing::warn!("{warning}");
    }
    Arc::new(
        Readiness::new(vec![Arc::new(DatabaseProbe(db.clone())), broker_probe, loops.clone()])
            .with_warnings(simulated),
    )
}

/// [`build_services`] on `clock` (tests pass a `ManualClock` and drive time by hand).
///
/// # Errors
/// As [`build_services`].
pub async fn build_services_with_clock(
    settings: &Settings,
    clock: Arc<dyn Clock>,
) -> Result<Services, StartupError> {
    install_tls_provider();
    let jwt = Arc::new(
        JwtKeys::from_settings_with_clock(&settings.auth, clock.clone())
            .map_err(|e| StartupError::Config(e.to_string()))?,
    );
    let db = database(settings).await?;
    let relay_wake = Arc::new(Notify::new());
    let orders = Arc::new(SeaOrmStore::new(db.clone(), relay_wake.clone()).with_lanes(settings.outbox.lanes));
    let outbox_store: Arc<dyn OutboxStore> = Arc::new(outbox_store(settings, &db, relay_wake.clone()).await?);
    let idempotency_store: Arc<dyn IdempotencyStore> = Arc::new(SeaOrmIdempotencyStore::new(db.clone()));
    let (payments, settlements, notifier, provider_calls, capabilities) = providers(settings)?;
    let (publishers, broker_probe) = publishers(settings)?;

    let metrics = crate::telemetry::registry();
    let meter = metrics.meter.clone();
    // Every provider call timed and counted, whichever provider it is.
    let payments: Arc<dyn PaymentGateway> =
        Arc::new(Measured::new(payments, payment_provider(settings), meter.clone()));
    let capabilities = capabilities.measured(payment_provider(settings), &meter);
    let (settlements, notifier) = channels(settings, settlements, notifier, &meter)?;
    let shutdown = CancellationToken::new();
    let loops = Arc::new(LoopProgress::new(settings.worker.stuck_after));
    upkeep_metrics(&metrics, shutdown.clone());
    let notifications = notification_retries(settings, &orders, &notifier, &clock, &meter);
    let money = money(settings, &orders, &payments, &capabilities, &clock);
    let orchestrator =
        saga(settings, &orders, payments, settlements, notifier, capabilities.customers, &clock, &meter);
    let meeting_events = meeting_events(settings, &orchestrator, &money.refunds, &orders, &clock).await?;
    let (recovery, settlements) =
        repairs(settings, &orchestrator, &money.refunds, &orders, &clock, meter, &loops);
    let queries = Arc::new(OrderQueries::new(orders.clone(), outbox_store.clone()));
    let outbox_admin = Arc::new(OutboxAdmin::new(outbox_store.clone(), clock.clone()));
    let idempotency = Arc::new(IdempotencyService::new(
        idempotency_store.clone(),
        orders.clone(),
        clock.clone(),
        chrono(settings.worker.saga_lease),
    ));
    let readiness = readiness(settings, &db, broker_probe, &loops);
    let housekeeping = Arc::new(Housekeeping::new(
        outbox_store.clone(),
        idempotency_store.clone(),
        orders.clone(),
        clock.clone(),
        housekeeping_settings(settings),
    ));
    Ok(Services {
        db,
        orchestrator,
        queries,
        idempotency,
        idempotency_store,
        readiness,
        outbox_store,
        outbox_admin,
        notifications,
        settlements,
        refunds: money.refunds,
        ledger: money.ledger,
        payment_methods: money.payment_methods,
        provider_view: money.provider_view,
        recovery,
        meeting_events,
        publishers,
        housekeeping,
        clock,
        jwt,
        provider_calls,
        relay_wake,
        settings: settings.clone(),
        metrics,
        shutdown,
        loops,
    })
}

/// The background loops of `app worker` (and of `app serve` when embedded).
pub struct Workers {
    stop: CancellationToken,
    handles: Vec<JoinHandle<()>>,
    loops: Vec<&'static str>,
}

impl Workers {
    pub fn spawn(services: &Services) -> Workers {
        let stop = services.shutdown.child_token();
        let mut handles = Vec::new();
        let mut loops = vec!["outbox relay", "outbox lease recovery and clean-up"];
        let relay = services.relay();
        let interest = relay.interest();
        let token = stop.clone();
        handles.push(tokio::spawn(async move { relay.run_until_stopped(token).await }));
        let housekeeping = services.housekeeping.clone();
        let token = stop.clone();
        handles.push(tokio::spawn(async move { housekeeping.run_until_stopped(token).await }));
        let settlements = services.settlements.clone();
        let token = stop.clone();
        handles.push(tokio::spawn(async move { settlements.run_until_stopped(token).await }));
        loops.push("settlement retries");
        if services.settings.notification.retry_enabled {
            let notifications = services.notifications.clone();
            let token = stop.clone();
            handles.push(tokio::spawn(async move { notifications.run_until_stopped(token).await }));
            loops.push("notification retries");
        }
        loops.push("payment reconciliation, compensations, stalled sagas and pending refunds");
        let recovery = services.recovery.clone();
        let token = stop.clone();
        handles.push(tokio::spawn(async move { recovery.run_until_stopped(token).await }));
        if services.settings.payment.provider == ProviderKind::Toss {
            let ledger = services.ledger.clone();
            let token = stop.clone();
            handles.push(tokio::spawn(async move { run_ledger(ledger, token).await }));
            loops.push("the provider's ledger, reconciled daily");
        }
        if let Some(consumers) = services.meeting_consumers() {
            let token = stop.clone();
            handles.push(tokio::spawn(consumers.run_until_stopped(token)));
            loops.push("meeting-service consumers");
        }
        if persistence::is_postgres(&services.db) {
            let (db, wake, token) = (services.db.clone(), services.relay_wake.clone(), stop.clone());
            handles.push(tokio::spawn(persistence::wake_on_notify(db, wake, interest, token)));
            loops.push("outbox wake-ups (LISTEN)");
        }
        tracing::info!(loops = %loops.join("; "), "worker loops started");
        Workers { stop, handles, loops }
    }

    /// The loops this worker runs (which ones depends on the configuration).
    pub fn loops(&self) -> &[&'static str] {
        &self.loops
    }

    /// Stops claiming, lets rounds in flight finish (bounded), and returns.
    pub async fn shutdown(self, grace: StdDuration) {
        self.stop.cancel();
        for handle in self.handles {
            if tokio::time::timeout(grace, handle).await.is_err() {
                tracing::warn!("a worker loop did not stop within the grace period");
            }
        }
    }
}

/// The payment provider's name in metrics.
fn payment_provider(settings: &Settings) -> &'static str {
    match settings.payment.provider {
        ProviderKind::Mock => "mock",
        ProviderKind::External => "external",
        ProviderKind::Toss => "toss",
    }
}

/// Drains the metrics' histograms now and then (a scrape does it too; with no scraper they
/// would only grow), until `stop`.
fn upkeep_metrics(metrics: &crate::telemetry::Registry, stop: CancellationToken) {
    let handle = metrics.handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => handle.run_upkeep(),
            }
        }
    });
}

/// How an undelivered settlement is tried again (`settlement.retry.*`).
fn settlement_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy {
        max_attempts: settings.settlement.retry_max_attempts,
        backoff_base: chrono(settings.settlement.retry_backoff_base),
    }
}

/// `notification.retry_*`: how failed notifications are retried.
fn notification_policy(settings: &Settings) -> RetryPolicy {
    RetryPolicy {
        max_attempts: settings.notification.retry_max_attempts,
        backoff_base: chrono(settings.notification.retry_backoff_base),
    }
}

fn notification_settings(settings: &Settings) -> NotificationRetrySettings {
    NotificationRetrySettings {
        policy: notification_policy(settings),
        lease: chrono(settings.notification.retry_lease),
        batch: settings.notification.retry_batch,
        interval: settings.notification.retry_interval,
    }
}

/// The saga's settings; a checkout window only where payments are confirmed by the buyer
/// (Toss).
fn saga_settings(settings: &Settings) -> SagaSettings {
    SagaSettings {
        notification_retry: notification_policy(settings),
        settlement_retry: settlement_policy(settings),
        saga_lease: chrono(settings.worker.saga_lease),
        checkout: (settings.payment.provider == ProviderKind::Toss)
            .then(|| CheckoutSettings { window: chrono(settings.payment.toss.confirm_window) }),
    }
}

fn refund_settings(settings: &Settings) -> RefundSettings {
    RefundSettings {
        lease: chrono(settings.worker.saga_lease),
        max_attempts: settings.payment.reconciliation_max_attempts,
        retry_after: chrono(settings.payment.reconciliation_interval),
    }
}

/// Reconciliation of unknown payments, compensations and stalled sagas.
fn reconciliation_settings(settings: &Settings) -> ReconciliationSettings {
    ReconciliationSettings {
        interval: settings.payment.reconciliation_interval,
        max_attempts: settings.payment.reconciliation_max_attempts,
        retry_after: chrono(settings.payment.reconciliation_interval),
        compensation_max_attempts: settings.payment.reconciliation_max_attempts.max(1) as usize,
        compensation_backoff: chrono(settings.payment.reconciliation_interval),
        stall_after: chrono(settings.worker.saga_lease),
        stall_max_resumes: settings.worker.saga_recovery_max_attempts,
    }
}

/// Lease recovery and clean-up by retention.
fn housekeeping_settings(settings: &Settings) -> HousekeepingSettings {
    HousekeepingSettings {
        recovery_interval: settings.outbox.recovery_interval,
        cleanup_at: settings.outbox.cleanup_at,
        retention_published: chrono(settings.outbox.retention_published),
        retention_dead_letter: chrono(settings.outbox.retention_dead_letter),
        retention_idempotency: chrono(settings.idempotency.retention),
        retention_audit: chrono(settings.audit.retention),
        cleanup_batch: settings.outbox.cleanup_batch,
    }
}

/// The provider's zone and the time its previous day is reconciled (`payment.toss.*`;
/// `config.rs` accepts Asia/Seoul alone).
fn ledger_settings(settings: &Settings) -> LedgerSettings {
    const SEOUL: i32 = 9 * 3600;
    LedgerSettings {
        // Cannot fail: east_opt refuses only offsets of ±24 h or more, and this is +9 h.
        zone: chrono::FixedOffset::east_opt(SEOUL).expect("UTC+09:00 is a valid offset"),
        at: settings.payment.toss.ledger_at,
    }
}

/// The daily ledger loop: every minute, the previous day once it is due (a run that failed
/// is tried again the next minute; a day already run is left alone).
async fn run_ledger(ledger: Arc<Ledger>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(StdDuration::from_secs(60));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tick.tick() => {
                if let Err(err) = ledger.run_due().await {
                    tracing::error!(error = %crate::application::error::Chain(&err), "ledger reconciliation failed");
                }
            }
        }
    }
}

/// The HTTP state shared by handlers.
fn http_state(services: &Services, role: Role) -> web::Data<HttpState> {
    web::Data::new(HttpState {
        orchestrator: services.orchestrator.clone(),
        queries: services.queries.clone(),
        idempotency: services.idempotency.clone(),
        outbox_admin: services.outbox_admin.clone(),
        notifications: services.notifications.clone(),
        settlements: services.settlements.clone(),
        refunds: services.refunds.clone(),
        ledger: services.ledger.clone(),
        payment_methods: services.payment_methods.clone(),
        provider_view: services.provider_view.clone(),
        // Far above what Toss sends for one shop: docs/operations.md, "Toss's webhooks".
        webhook_limits: Arc::new(crate::adapters::http::webhooks::WebhookLimits::default()),
        recovery: services.recovery.clone(),
        webhook_secret: services.settings.payment.external_webhook_secret.clone(),
        readiness: services.readiness.clone(),
        role,
        honour_mock_scenario: services.settings.payment.provider == ProviderKind::Mock,
        metrics: services.metrics.clone(),
        wire: Arc::new(wire_view(&services.settings)),
    })
}

/// Where the configured contract sends events, for the outbox views and `/flow`. A contract
/// this build cannot speak has already stopped the start (`publishers`); native otherwise.
fn wire_view(settings: &Settings) -> WireView {
    let broker = match settings.broker.kind {
        BrokerKind::Log => None,
        BrokerKind::Amqp => Some(Broker::Amqp),
        BrokerKind::Kafka => Some(Broker::Kafka),
    };
    let own = match settings.broker.kind {
        BrokerKind::Kafka => settings.broker.kafka.topic.clone(),
        _ => settings.broker.exchange.clone(),
    };
    WireView { contract: contract(settings).unwrap_or(Contract::Native), broker, own }
}

/// `app worker`'s own HTTP surface: `/health/*` and `/metrics` only, on `worker.http.bind`
/// (never `http.bind`, so `serve` and workers share one environment on one host).
///
/// # Errors
/// The address cannot be bound.
pub fn ops_server(services: &Services) -> Result<(Server, std::net::SocketAddr), StartupError> {
    let bind = services.settings.worker.http_bind;
    let listener = TcpListener::bind(bind)
        .map_err(|e| StartupError::runtime(format!("cannot bind worker.http.bind {bind}"), e))?;
    let local =
        listener.local_addr().map_err(|e| StartupError::runtime("cannot read the bound address", e))?;
    let state = http_state(services, Role::Worker);
    let server = HttpServer::new(move || {
        App::new()
            .wrap(from_fn(http::correlation::correlate))
            .app_data(state.clone())
            .configure(http::ops_routes)
            .default_service(web::to(http::not_found))
    })
    .workers(1)
    .listen(listener)
    .map_err(|e| StartupError::runtime(format!("cannot serve worker.http.bind {bind}"), e))?
    .disable_signals()
    .run();
    Ok((server, local))
}

/// A running `app serve`: the HTTP server and, when embedded, the worker loops.
pub struct Application {
    port: u16,
    server: Server,
    services: Services,
}

impl Application {
    /// Binds `http.bind` (port 0 picks a free one) and builds everything.
    ///
    /// # Errors
    /// As [`build_services`], or the address cannot be bound.
    pub async fn build(settings: Settings) -> Result<Application, StartupError> {
        Self::build_with_clock(settings, Arc::new(SystemClock)).await
    }

    /// [`Application::build`] on `clock` (tests drive time by hand).
    ///
    /// # Errors
    /// As [`Application::build`].
    pub async fn build_with_clock(
        settings: Settings,
        clock: Arc<dyn Clock>,
    ) -> Result<Application, StartupError> {
        settings.require_explicit_production().map_err(|e| StartupError::Config(e.to_string()))?;
        let services = build_services_with_clock(&settings, clock).await?;
        refuse_restored_history(&services).await?;
        // An identity provider down at start is not fatal: the fetch is logged and tried
        // again by the first token that needs it (answered 503 until then).
        let _ = services.jwt.load_key_set().await;
        let listener = TcpListener::bind(settings.http.bind)
            .map_err(|e| StartupError::runtime(format!("cannot bind {}", settings.http.bind), e))?;
        let port = listener
            .local_addr()
            .map_err(|e| StartupError::runtime("cannot read the bound address", e))?
            .port();
        // An embedded worker's loops do not make the broker a need of `serve`: its HTTP
        // accepts orders without one.
        let state = http_state(&services, Role::Serve);
        let jwt = web::Data::from(services.jwt.clone());
        let server = HttpServer::new(move || {
            App::new()
                .wrap(from_fn(http::correlation::correlate))
                .app_data(state.clone())
                .app_data(jwt.clone())
                .configure(http::routes)
                .default_service(web::to(http::not_found))
        })
        .listen(listener)
        .map_err(|e| StartupError::runtime(format!("cannot serve {}", settings.http.bind), e))?
        .disable_signals()
        .shutdown_timeout(10)
        .run();
        Ok(Application { port, server, services })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn services(&self) -> &Services {
        &self.services
    }

    pub fn server_handle(&self) -> ServerHandle {
        self.server.handle()
    }

    /// Serves until `shutdown` resolves, then stops accepting, finishes requests in
    /// flight, stops the worker loops and returns.
    ///
    /// # Errors
    /// The server failed.
    pub async fn run_until_stopped(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let workers = self.services.settings.worker.embedded.then(|| Workers::spawn(&self.services));
        let handle = self.server.handle();
        let mut server = tokio::spawn(self.server);
        let result = tokio::select! {
            result = &mut server => result.unwrap_or_else(|e| Err(std::io::Error::other(e))),
            _ = shutdown => {
                tracing::info!("shutting down: finishing requests in flight");
                handle.stop(true).await;
                server.await.unwrap_or_else(|e| Err(std::io::Error::other(e)))
            }
        };
        if let Some(workers) = workers {
            workers.shutdown(StdDuration::from_secs(30)).await;
        }
        self.services.shutdown.cancel();
        result
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
