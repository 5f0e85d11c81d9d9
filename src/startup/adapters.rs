//! The adapters, built from [`Settings`]: the database and its stores, the broker's
//! publishers and its wire contract, the payment provider.

use std::sync::Arc;

use sea_orm::DatabaseConnection;
use sea_orm_migration::MigratorTrait;
use tokio::sync::Notify;

use super::{Capabilities, Providers, PublisherFactory, StartupError, UNROUTABLE_OK};
use crate::adapters::Secret;
use crate::adapters::messaging::LogEventPublisher;
use crate::adapters::messaging::amqp::{AmqpEventPublisher, AmqpNodes, AmqpPublisherSettings};
use crate::adapters::messaging::contract::Contract;
use crate::adapters::messaging::kafka::{KafkaConnection, KafkaEventPublisher, KafkaPublisherSettings};
use crate::adapters::persistence::{self, SeaOrmOutboxStore};
use crate::adapters::providers::{
    ExternalPaymentGateway, ExternalProviderSettings, ProviderCalls, SimulatedPaymentGateway, TossClient,
    TossPaymentGateway, TossSettings,
};
use crate::application::health::HealthProbe;
use crate::application::meter::Meter;
use crate::application::ports::EventPublisher;
use crate::config::{BrokerKind, ProviderKind, Settings};

/// How to reach the Kafka cluster of `broker.kafka`.
pub(super) fn kafka_connection(settings: &Settings) -> KafkaConnection {
    let k = &settings.broker.kafka;
    KafkaConnection {
        brokers: k.brokers.clone(),
        client_id: k.client_id.clone(),
        properties: k.properties.clone(),
        connect_timeout: k.connect_timeout,
    }
}

/// The wire contract `broker.contract` names (docs/spec.md §12).
pub(super) fn contract(settings: &Settings) -> Result<Contract, StartupError> {
    Contract::of(settings.broker.contract, settings.broker.cloudevents.clone(), settings.meetings.timezone)
        .map_err(|e| StartupError::Config(format!("`broker.contract`: {e}")))
}

/// The publisher factory and the broker's readiness probe for `broker.kind`.
pub(super) fn publishers(settings: &Settings, meter: &Meter) -> Result<Publishers, StartupError> {
    match settings.broker.kind {
        BrokerKind::Log => {
            let factory: PublisherFactory =
                Arc::new(|_: &str| Arc::new(LogEventPublisher) as Arc<dyn EventPublisher>);
            Ok((factory, Arc::new(LogEventPublisher)))
        }
        BrokerKind::Amqp => amqp_publishers(settings, meter),
        BrokerKind::Kafka => kafka_publishers(settings),
    }
}

type Publishers = (PublisherFactory, Arc<dyn HealthProbe>);

/// Each relay's own connection to `broker.urls`' nodes, and one for readiness.
fn amqp_publishers(settings: &Settings, meter: &Meter) -> Result<Publishers, StartupError> {
    let nodes = AmqpNodes::parse(settings.broker.urls.iter().map(Secret::expose))
        .map_err(|e| StartupError::Config(format!("`broker.urls`: {e}")))?;
    let base = AmqpPublisherSettings {
        exchange: settings.broker.exchange.clone(),
        window: settings.outbox.publish_window as usize,
        confirm_timeout: settings.broker.confirm_timeout,
        unroutable_ok: UNROUTABLE_OK.iter().map(|t| t.to_string()).collect(),
        connection_name: "orchestrator-readiness".into(),
        contract: contract(settings)?,
        meter: meter.clone(),
    };
    let probe = Arc::new(AmqpEventPublisher::new(nodes.clone(), base.clone()));
    let factory: PublisherFactory = Arc::new(move |worker: &str| {
        let settings =
            AmqpPublisherSettings { connection_name: format!("orchestrator-relay-{worker}"), ..base.clone() };
        Arc::new(AmqpEventPublisher::new(nodes.clone(), settings)) as Arc<dyn EventPublisher>
    });
    Ok((factory, probe))
}

/// Each relay's own Kafka client (its client id), and one for readiness.
fn kafka_publishers(settings: &Settings) -> Result<Publishers, StartupError> {
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

/// The service's database: reachable within `database.connect_timeout`, bounded sessions,
/// migrated (SQLite) or checked to be (PostgreSQL).
pub(super) async fn database(settings: &Settings) -> Result<DatabaseConnection, StartupError> {
    persistence::probe(settings.database.url.expose(), settings.database.connect_timeout)
        .await
        .map_err(|e| StartupError::failed(e.0))?;
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
pub(super) fn session_limits(settings: &Settings) -> persistence::SessionLimits {
    persistence::SessionLimits {
        lock_timeout: settings.database.lock_timeout,
        statement_timeout: settings.database.statement_timeout,
    }
}

/// The relay's store: on PostgreSQL two pools of its own, one for its slow path and the
/// operators' queries (custom plans: `persistence::connect_outbox`) and one for the fast
/// path's statements (plans kept: `persistence::connect_fast_path`); SQLite has one writer
/// and shares the one pool.
pub(super) async fn outbox_store(
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

/// The payment provider `payment.provider` names, with its capabilities; `calls` is what
/// the simulated parts record (the mock provider shares it with the simulated channels).
pub(super) fn providers(settings: &Settings, calls: &Arc<ProviderCalls>) -> Result<Providers, StartupError> {
    Ok(match settings.payment.provider {
        ProviderKind::Mock => {
            (Arc::new(SimulatedPaymentGateway::new(calls.clone())), Capabilities::default())
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
            .map_err(|e| StartupError::Config(e.to_string()))?;
            (Arc::new(gateway), Capabilities::default())
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
            .map_err(|e| StartupError::Config(e.to_string()))?;
            // The platform's rule: key-in with a test secret key only.
            let test_key = t.secret_key.as_ref().is_some_and(|k| k.expose().starts_with("test_"));
            let gateway = Arc::new(TossPaymentGateway::new(client));
            let capabilities = Capabilities {
                records: Some(gateway.clone()),
                ledger: Some(gateway.clone()),
                customers: Some(gateway.clone()),
                key_in: test_key.then_some(gateway.clone()),
            };
            (gateway, capabilities)
        }
    })
}
