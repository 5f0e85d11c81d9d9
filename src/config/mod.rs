//! Configuration (docs/spec.md §2): built-in defaults < optional file (`--config PATH` or
//! `APP_CONFIG`) < environment `APP__SECTION__KEY`.
//!
//! Every fixed default lives in one place, `DEFAULTS` (checked against
//! docs/configuration.md by a test). Values are read loosely (strings for durations,
//! options only where unset means something) and then resolved section by section
//! (`resolve_*`) into [`Settings`], where every invalid value is reported with the key that
//! holds it. Where an adapter has settings of its own it defines their type (`AuthSettings`,
//! `QueueType`, `LogFormat`, [`Secret`]) and this module builds it.

mod raw;
mod resolve;

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use chrono::NaiveTime;

use crate::adapters::Secret;
use crate::adapters::http::auth::AuthSettings;
use crate::adapters::messaging::contract::topology::QueueType;
use crate::adapters::messaging::contract::{CloudEventsSettings, ContractName};
use crate::adapters::providers::{EmailSettings, WebhookSettings};
use crate::telemetry::{LogFormat, TelemetrySettings};

/// A configuration problem, naming the key.
use raw::*;
use resolve::*;

#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

fn invalid(key: &str, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!("`{key}`: {why}"))
}

/// Every problem of a configuration, gathered so that a refused start names them all on
/// one line instead of one per restart (issue 57).
#[derive(Default)]
struct Problems(Vec<ConfigError>);

impl Problems {
    /// `result`'s value, or `None` with its problem kept.
    fn take<T>(&mut self, result: Result<T, ConfigError>) -> Option<T> {
        result.map_err(|e| self.0.push(e)).ok()
    }

    fn push(&mut self, problem: ConfigError) {
        self.0.push(problem);
    }

    /// One error naming every problem, `; `-separated; `Ok` when there is none.
    fn finish(self) -> Result<(), ConfigError> {
        if self.0.is_empty() {
            return Ok(());
        }
        let all: Vec<String> = self.0.into_iter().map(|e| e.0).collect();
        Err(ConfigError(all.join("; ")))
    }
}

/// A section's value once [`Problems::finish`] found none: then every section resolved.
fn resolved<T>(value: Option<T>) -> Result<T, ConfigError> {
    value.ok_or_else(|| ConfigError("a section did not resolve".into()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Events are written as JSON log lines (embedded default).
    Log,
    Amqp,
    /// Kafka (docs/spec.md §11).
    Kafka,
}

impl BrokerKind {
    /// As `broker.kind` names it.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerKind::Log => "log",
            BrokerKind::Amqp => "amqp",
            BrokerKind::Kafka => "kafka",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Mock,
    External,
    /// Toss Payments' v1 API (docs/spec.md §10).
    Toss,
}

const DEV_SECRET: &str = "dev-only-signing-key-of-the-embedded-default-never-use-in-production";

#[derive(Debug, Clone)]
pub struct Settings {
    pub http: HttpSettings,
    pub database: DatabaseSettings,
    pub broker: BrokerSettings,
    pub outbox: OutboxSettings,
    pub notification: NotificationSettings,
    pub settlement: SettlementSettings,
    pub payment: PaymentSettings,
    pub worker: WorkerSettings,
    pub auth: AuthSettings,
    pub log: LogSettings,
    pub audit: AuditSettings,
    pub idempotency: IdempotencySettings,
    pub telemetry: TelemetrySettings,
    pub meetings: MeetingsSettings,
}

/// Where a registration's fee comes from (`meetings.fee_source`, docs/spec.md §12).
#[derive(Debug, Clone)]
pub enum FeeSource {
    /// The message's `amount` (the native contract's registrations carry it).
    Message,
    /// Read from the meeting's record in the platform's database, read-only.
    Sql { url: Secret, query: String },
}

/// `meetings.*`: what the meetup platform's messages leave to us (docs/spec.md §12).
#[derive(Debug, Clone)]
pub struct MeetingsSettings {
    pub fee_source: FeeSource,
    /// The currency of a fee read from the platform (`meetings.currency`).
    pub currency: String,
    /// The zone of the platform's local times (`meetings.timezone`, IANA).
    pub timezone: chrono_tz::Tz,
}

#[derive(Debug, Clone)]
pub struct IdempotencySettings {
    /// How long an `Idempotency-Key`'s answer is kept (`idempotency.retention`; docs/spec.md
    /// §5: at least 24 h).
    pub retention: Duration,
}

#[derive(Debug, Clone)]
pub struct AuditSettings {
    /// Audit rows older than this are deleted by the daily clean-up (`audit.retention`).
    pub retention: Duration,
}

#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub bind: SocketAddr,
    /// `http.dialects.commerce` (docs/spec.md §14); `None` while its `bind` is unset.
    pub commerce: Option<CommerceDialectSettings>,
    /// `http.dialects.momo` (docs/spec.md §14); `None` while its `bind` is unset.
    pub momo: Option<MomoDialectSettings>,
}

/// The meetup platform's payment endpoints (docs/spec.md §14, docs/dialects.md).
#[derive(Debug, Clone)]
pub struct MomoDialectSettings {
    pub bind: SocketAddr,
    /// The HMAC key of its access tokens (HS256), UTF-8 bytes, at least 32 (`jwt_secret`).
    pub jwt_secret: Secret,
}

/// The commerce backend's HTTP API (docs/spec.md §14, docs/dialects.md).
#[derive(Debug, Clone)]
pub struct CommerceDialectSettings {
    pub bind: SocketAddr,
    /// The HMAC key of its bearer tokens, UTF-8 bytes, at least 32 (`jwt_secret`).
    pub jwt_secret: Secret,
    /// Whether `POST /api/auth/token` mints tokens (only with `payment.provider = mock`).
    pub demo_token: bool,
    pub token_validity: Duration,
    pub issuer: String,
}

#[derive(Debug, Clone)]
pub struct DatabaseSettings {
    pub url: Secret,
    pub max_connections: u32,
    /// How long connecting may take before the start fails naming host and cause
    /// (`database.connect_timeout`).
    pub connect_timeout: Duration,
    /// PostgreSQL: the longest a statement may wait for a lock (`database.lock_timeout`; 0:
    /// no bound). A table locked by an operator's statement then answers `503` in seconds,
    /// not after the caller gave up.
    pub lock_timeout: Duration,
    /// PostgreSQL: the longest a statement may run (`database.statement_timeout`; 0: none).
    pub statement_timeout: Duration,
}

impl DatabaseSettings {
    pub fn is_sqlite(&self) -> bool {
        self.url.expose().starts_with("sqlite:")
    }
}

#[derive(Debug, Clone)]
pub struct BrokerSettings {
    pub kind: BrokerKind,
    /// How events go on the wire and inbound messages are read (docs/spec.md §12).
    pub contract: ContractName,
    /// `broker.cloudevents.*`: used when `contract` is `cloudevents`.
    pub cloudevents: CloudEventsSettings,
    /// Whether the broker was chosen (`broker.url`, `broker.urls` or `broker.kind` set).
    pub explicit: bool,
    /// The broker's nodes: `broker.urls`, or the one `broker.url`; empty with `log`.
    pub urls: Vec<Secret>,
    pub queue_type: QueueType,
    /// The exchange outbox events are published to.
    pub exchange: String,
    /// How long the relay waits for a batch's confirms.
    pub confirm_timeout: Duration,
    /// Inbound topology (docs/spec.md §7); names configurable, defaults as the spec gives them.
    pub meeting_exchange: String,
    pub dead_letter_exchange: String,
    pub register_queue: String,
    pub cancel_queue: String,
    pub meeting_deleted_queue: String,
    /// Unacknowledged deliveries per consumer.
    pub prefetch: u16,
    /// Retries of a system failure before a message is dead-lettered.
    pub consumer_retries: u32,
    /// First retry delay; doubled each time.
    pub consumer_retry_backoff: Duration,
    /// `x-delivery-limit` of quorum queues.
    pub delivery_limit: u32,
    /// `broker.kafka.*`: used when `kind` is `Kafka`.
    pub kafka: KafkaSettings,
}

/// Kafka (docs/spec.md §11, docs/configuration.md).
#[derive(Debug, Clone)]
pub struct KafkaSettings {
    /// The bootstrap list, `host:port[,host:port...]` (`broker.kafka.brokers`).
    pub brokers: String,
    /// Where the outbox publishes, one record per event keyed by its aggregate id.
    pub topic: String,
    pub client_id: String,
    /// The meeting service's topics; each has its `<topic>.dlq`.
    pub inbound: Vec<String>,
    /// The consumer group of the meeting consumers.
    pub group: String,
    /// Partitions of the topics this service creates when they are missing.
    pub partitions: i32,
    /// How long connecting, a metadata request or creating a topic may take.
    pub connect_timeout: Duration,
    /// Security settings passed to the client as they are (`security.*`, `ssl.*`,
    /// `sasl.*`); their values may be secrets.
    pub properties: Vec<(String, Secret)>,
}

#[derive(Debug, Clone)]
pub struct OutboxSettings {
    pub batch_size: u32,
    pub poll_interval: Duration,
    pub retry_poll_interval: Duration,
    /// How long a relay woken by a commit waits for the commits close behind it before it
    /// reads (`outbox.trickle_wait`; zero: none).
    pub trickle_wait: Duration,
    pub max_retries: i32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub processing_timeout: Duration,
    pub recovery_interval: Duration,
    pub cleanup_at: NaiveTime,
    pub retention_published: Duration,
    pub retention_dead_letter: Duration,
    pub publish_window: u32,
    /// The relay's own database pool (`outbox.max_connections`), beside the service's.
    pub max_connections: u32,
    /// Rows deleted per statement by the daily clean-up (`outbox.cleanup_batch`).
    pub cleanup_batch: u32,
    /// Lanes the outbox is split into (`outbox.lanes`); workers share them.
    pub lanes: u16,
}

#[derive(Debug, Clone)]
pub struct NotificationSettings {
    /// Where the customer is told (`notification.channel`, docs/spec.md §13).
    pub channel: NotificationChannel,
    /// Whether `notification.channel` was set (required outside the embedded default).
    pub channel_explicit: bool,
    pub retry_enabled: bool,
    pub retry_interval: Duration,
    pub retry_backoff_base: Duration,
    pub retry_max_attempts: i32,
    /// How long a retry round holds the notifications it claimed (`notification.retry.lease`).
    pub retry_lease: Duration,
    /// Notifications claimed per round (`notification.retry.batch`).
    pub retry_batch: u32,
}

/// `notification.channel` (docs/spec.md §13).
#[derive(Debug, Clone)]
pub enum NotificationChannel {
    Simulated,
    /// Signed webhooks to `notification.webhook.url`.
    Webhook(WebhookSettings),
    /// E-mail over SMTP (`notification.email.*`).
    Email(EmailSettings),
}

/// `settlement.channel` (docs/spec.md §13).
#[derive(Debug, Clone)]
pub enum SettlementChannel {
    Simulated,
    /// Signed webhooks to `settlement.webhook.url`.
    Webhook(WebhookSettings),
}

/// `settlement.*`.
#[derive(Debug, Clone)]
pub struct SettlementSettings {
    pub channel: SettlementChannel,
    /// Whether `settlement.channel` was set (required outside the embedded default).
    pub channel_explicit: bool,
    /// Attempts of an undelivered settlement before it waits for an operator
    /// (`settlement.retry.max_attempts`).
    pub retry_max_attempts: i32,
    /// First retry delay, doubled after each (`settlement.retry.backoff_base`).
    pub retry_backoff_base: Duration,
    /// How often the worker looks for due retries (`settlement.retry.interval`).
    pub retry_interval: Duration,
    /// Due retries taken per round (`settlement.retry.batch`).
    pub retry_batch: u32,
}

#[derive(Debug, Clone)]
pub struct PaymentSettings {
    pub provider: ProviderKind,
    /// Whether `payment.provider` was set (docs/spec.md §2: required outside the embedded default).
    pub provider_explicit: bool,
    /// A provider call that failed in a way its protocol calls temporary is made again this
    /// many times, with the same key (`payment.retries`), `payment.retry_backoff` apart.
    pub retries: u32,
    pub retry_backoff: Duration,
    pub reconciliation_interval: Duration,
    pub reconciliation_max_attempts: i32,
    pub external_base_url: Option<String>,
    pub external_secret_key: Option<Secret>,
    pub external_webhook_secret: Option<Secret>,
    pub external_timeout: Duration,
    pub toss: TossConfig,
}

/// `payment.toss.*` (docs/spec.md §10; docs/configuration.md).
#[derive(Debug, Clone)]
pub struct TossConfig {
    /// `test_sk_…` or `live_sk_…`; required with `payment.provider = toss`.
    pub secret_key: Option<Secret>,
    pub base_url: String,
    pub timeout: Duration,
    /// How long an order may wait `AWAITING_PAYMENT`.
    pub confirm_window: Duration,
    /// The ledger's day is a day in this zone; only `Asia/Seoul` (UTC+09:00, no daylight
    /// saving) is known, Toss's own zone.
    pub timezone: String,
    /// When the worker reconciles the previous day's ledger (`HH:MM` in `timezone`).
    pub ledger_at: NaiveTime,
    /// `GET /v1/transactions`' own timeout: Toss says it may take up to 60 s.
    pub ledger_timeout: Duration,
    /// How long after a transaction Toss may take to list its settlement; past it, a
    /// missing one is `SETTLEMENT_MISSING` (docs/spec.md §13).
    pub settlement_grace: Duration,
}

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub embedded: bool,
    /// A worker loop whose rounds have all failed for this long makes the worker unready
    /// (`worker.stuck_after`).
    pub stuck_after: Duration,
    /// Where `app worker` serves `/health/*` and `/metrics` (`worker.http.bind`), never
    /// `http.bind`, so `serve` and workers run side by side with one environment.
    pub http_bind: SocketAddr,
    /// How long one run holds an order's saga (`saga.lease`); a run that died holding it
    /// is resumed by the worker once this has passed.
    pub saga_lease: Duration,
    /// Resumes of one stalled saga before an operator must look (`saga.recovery_max_attempts`).
    pub saga_recovery_max_attempts: i32,
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
}

impl Settings {
    /// docs/spec.md §2: nothing silent outside the embedded default. `serve` and `worker` on a
    /// PostgreSQL database refuse to start unless the broker and the payment provider were
    /// chosen explicitly (a `broker.url`, or `broker.kind = "log"`; `payment.provider`).
    ///
    /// # Errors
    /// A one-line reason naming the key.
    pub fn require_explicit_production(&self) -> Result<(), ConfigError> {
        if self.database.is_sqlite() {
            return Ok(());
        }
        let mut problems = Problems::default();
        if let Err(problem) = self.require_own_keys() {
            problems.push(problem);
        }
        if !self.broker.explicit {
            problems.push(invalid(
                "broker.url",
                "is required with a PostgreSQL database (or set broker.kind = \"log\" explicitly)",
            ));
        }
        if !self.payment.provider_explicit {
            problems.push(invalid(
                "payment.provider",
                "must be set explicitly with a PostgreSQL database: toss, external, or mock (simulated payments)",
            ));
        }
        if !self.settlement.channel_explicit {
            problems.push(invalid(
                "settlement.channel",
                "must be set explicitly with a PostgreSQL database: webhook, or simulated (nothing is settled)",
            ));
        }
        if !self.notification.channel_explicit {
            problems.push(invalid(
                "notification.channel",
                "must be set explicitly with a PostgreSQL database: webhook, email, or simulated (nobody is told)",
            ));
        }
        problems.finish()
    }

    /// Off SQLite, tokens are signed and verified with keys of the deployment's own: the
    /// built-in development key alone is refused (`serve`, `worker`, `app token`).
    ///
    /// # Errors
    /// The built-in key is the only one, naming `auth.keys`.
    pub fn require_own_keys(&self) -> Result<(), ConfigError> {
        if self.database.is_sqlite() || !self.auth.only_dev_key() {
            return Ok(());
        }
        Err(invalid(
            "auth.keys",
            "the built-in development key is for the embedded SQLite default only: set auth.keys or auth.jwks_url",
        ))
    }

    /// What an operator must know about a non-embedded set-up that runs on simulated
    /// parts (docs/spec.md §2): logged as WARN at start and shown in `/health/ready`.
    pub fn simulated_parts(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if self.database.is_sqlite() {
            return warnings;
        }
        if self.payment.provider == ProviderKind::Mock {
            warnings.push(
                "payment.provider = mock: payments are simulated and X-Mock-Scenario is honoured".to_owned(),
            );
        }
        if matches!(self.settlement.channel, SettlementChannel::Simulated) {
            warnings.push("settlement.channel = simulated: no accounting system hears of a sale".to_owned());
        }
        if matches!(self.notification.channel, NotificationChannel::Simulated) {
            warnings.push("notification.channel = simulated: no customer is told of an order".to_owned());
        }
        if self.broker.kind == BrokerKind::Log {
            warnings.push("broker.kind = log: events are written to the log, not published".to_owned());
        }
        warnings
    }

    /// Loads defaults, then `file` (if given), then the process environment.
    ///
    /// # Errors
    /// A source cannot be read, or a value is invalid; the message names the key.
    pub fn load(file: Option<&Path>) -> Result<Settings, ConfigError> {
        Self::load_from(file, std::env::vars())
    }

    /// As [`Settings::load`], with the environment given explicitly (tests).
    ///
    /// # Errors
    /// As [`Settings::load`].
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Settings, ConfigError> {
        let mut builder =
            config::Config::builder().add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml));
        if let Some(path) = file {
            if !path.exists() {
                return Err(ConfigError(format!("config file {} does not exist", path.display())));
            }
            builder = builder.add_source(config::File::from(path));
        }
        let env: std::collections::HashMap<String, String> =
            env.into_iter().filter(|(k, _)| k.starts_with("APP__")).collect();
        builder = builder.add_source(
            config::Environment::with_prefix("APP")
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true)
                .source(Some(env)),
        );
        let raw: Raw = builder
            .build()
            .and_then(|c| c.try_deserialize())
            .map_err(|e| ConfigError(redact(&e.to_string())))?;
        Self::resolve(raw)
    }

    /// Each section resolved on its own, naming the key of every invalid value at once.
    fn resolve(raw: Raw) -> Result<Settings, ConfigError> {
        let mut p = Problems::default();
        let database = p.take(resolve_database(raw.database));
        let sqlite = database.as_ref().is_none_or(DatabaseSettings::is_sqlite);
        let broker = p.take(resolve_broker(raw.broker));
        // The fee's rules depend on the contract: judged only once the broker resolved.
        let meetings = match &broker {
            Some(broker) => p.take(resolve_meetings(raw.meetings, broker)),
            None => None,
        };
        let http = p.take(address("http.bind", &raw.http.bind));
        let commerce = p.take(resolve_commerce_dialect(raw.http.dialects.commerce, &raw.payment));
        let momo = p.take(resolve_momo_dialect(raw.http.dialects.momo));
        let outbox = p.take(resolve_outbox(raw.outbox));
        let notification = p.take(resolve_notification(raw.notification, sqlite));
        let settlement = p.take(resolve_settlement(raw.settlement));
        let payment = p.take(resolve_payment(raw.payment));
        let worker = p.take(resolve_worker(raw.worker, raw.saga, sqlite));
        let auth = p.take(resolve_auth(raw.auth));
        let log = p.take(resolve_log(raw.log));
        let audit = p.take(duration("audit.retention", &raw.audit.retention));
        let idempotency = p.take(resolve_idempotency(raw.idempotency));
        let telemetry = p.take(resolve_telemetry(raw.telemetry));
        p.finish()?;
        Ok(Settings {
            meetings: resolved(meetings)?,
            http: HttpSettings {
                bind: resolved(http)?,
                commerce: resolved(commerce)?,
                momo: resolved(momo)?,
            },
            database: resolved(database)?,
            broker: resolved(broker)?,
            outbox: resolved(outbox)?,
            notification: resolved(notification)?,
            settlement: resolved(settlement)?,
            payment: resolved(payment)?,
            worker: resolved(worker)?,
            auth: resolved(auth)?,
            log: resolved(log)?,
            audit: AuditSettings { retention: resolved(audit)? },
            idempotency: resolved(idempotency)?,
            telemetry: resolved(telemetry)?,
        })
    }
}

#[cfg(test)]
mod tests;
