//! Configuration (docs/spec.md §2): built-in defaults < optional file (`--config PATH` or
//! `APP_CONFIG`) < environment `APP__SECTION__KEY`.
//!
//! Every fixed default lives in one place, `DEFAULTS` (checked against
//! docs/configuration.md by a test). Values are read loosely (strings for durations,
//! options only where unset means something) and then resolved section by section
//! (`resolve_*`) into [`Settings`], where every invalid value is reported with the key that
//! holds it. Where an adapter has settings of its own it defines their type (`AuthSettings`,
//! `QueueType`, `LogFormat`, [`Secret`]) and this module builds it.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use chrono::NaiveTime;
use serde::Deserialize;

use crate::adapters::Secret;
use crate::adapters::http::auth::{AuthSettings, DEV_KID, KeyAlgorithm, KeySettings, RawKey};
use crate::adapters::messaging::amqp::QueueType;
use crate::adapters::messaging::contract::{CloudEventsMode, CloudEventsSettings, ContractName};
use crate::adapters::providers::{EmailSettings, Locale, WebhookSecret, WebhookSettings};
use crate::application::input::parse_duration;
use crate::telemetry::{LogFormat, TelemetrySettings};

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

fn invalid(key: &str, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!("`{key}`: {why}"))
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

// ---- raw shape, as the sources give it ------------------------------------------------
//
// Every fixed default is in `DEFAULTS` below, the one place defaults live: a field is an
// `Option` only where being unset means something (a default that depends on another
// key, or a value that is simply absent).

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    http: RawHttp,
    database: RawDatabase,
    broker: RawBroker,
    outbox: RawOutbox,
    notification: RawNotification,
    settlement: RawSettlement,
    payment: RawPayment,
    worker: RawWorker,
    saga: RawSaga,
    auth: RawAuth,
    #[serde(default)]
    log: RawLog,
    audit: RawAudit,
    idempotency: RawIdempotency,
    telemetry: RawTelemetry,
    meetings: RawMeetings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeetings {
    fee_source: String,
    fee_sql: RawFeeSql,
    currency: String,
    timezone: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFeeSql {
    url: Option<Secret>,
    query: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIdempotency {
    retention: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTelemetry {
    /// Unset: no traces.
    otlp_endpoint: Option<String>,
    service_name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    retention: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    bind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    url: Secret,
    max_connections: u32,
    connect_timeout: String,
    lock_timeout: String,
    statement_timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBroker {
    /// Unset: `amqp` when `url` or `urls` is set, else `log`.
    kind: Option<String>,
    url: Option<Secret>,
    /// A cluster's nodes: a list in a file, comma-separated in the environment.
    urls: Option<RawList<Secret>>,
    queue_type: String,
    exchange: String,
    confirm_timeout: String,
    meeting_exchange: String,
    dead_letter_exchange: String,
    register_queue: String,
    cancel_queue: String,
    meeting_deleted_queue: String,
    prefetch: u16,
    consumer_retries: u32,
    consumer_retry_backoff: String,
    delivery_limit: u32,
    /// `native` | `cloudevents` | `momo` | `commerce` (docs/spec.md §12).
    contract: String,
    cloudevents: RawCloudEvents,
    kafka: RawKafka,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCloudEvents {
    mode: String,
    source: String,
    type_prefix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKafka {
    brokers: Option<String>,
    topic: String,
    client_id: String,
    /// A list in a file, comma-separated in the environment.
    inbound: RawList<String>,
    group: String,
    partitions: i32,
    connect_timeout: String,
    #[serde(default)]
    properties: std::collections::BTreeMap<String, Secret>,
}

/// A list of settings: a list in a file, comma-separated text in the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawList<T> {
    List(Vec<T>),
    Text(T),
}

/// An item of a [`RawList`]: read from, and made of, text.
trait ListItem: Sized {
    fn text(&self) -> &str;
    fn of(text: &str) -> Self;
}

impl ListItem for String {
    fn text(&self) -> &str {
        self
    }

    fn of(text: &str) -> Self {
        text.to_owned()
    }
}

impl ListItem for Secret {
    fn text(&self) -> &str {
        self.expose()
    }

    fn of(text: &str) -> Self {
        Secret::new(text)
    }
}

impl<T: ListItem> RawList<T> {
    fn into_list(self) -> Vec<T> {
        match self {
            RawList::List(list) => list,
            RawList::Text(text) => {
                text.text().split(',').map(str::trim).filter(|t| !t.is_empty()).map(T::of).collect()
            }
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutbox {
    batch_size: u32,
    poll_interval: String,
    retry_poll_interval: String,
    trickle_wait: String,
    max_retries: i32,
    backoff_base: String,
    backoff_cap: String,
    processing_timeout: String,
    recovery_interval: String,
    cleanup_at: String,
    retention_published: String,
    retention_dead_letter: String,
    publish_window: u32,
    lanes: u16,
    max_connections: u32,
    cleanup_batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotification {
    /// Unset: `simulated` (refused outside the embedded default).
    channel: Option<String>,
    webhook: RawWebhook,
    email: RawEmail,
    retry: RawNotificationRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettlement {
    /// Unset: `simulated` (refused outside the embedded default).
    channel: Option<String>,
    webhook: RawWebhook,
    retry: RawSettlementRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettlementRetry {
    max_attempts: i32,
    backoff_base: String,
    interval: String,
    batch: u32,
}

/// `notification.email.*`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmail {
    smtp_url: Option<Secret>,
    from: Option<String>,
    locale: String,
    timeout: String,
}

/// `<step>.webhook.*`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    url: Option<Secret>,
    /// `whsec_…` keys: a list in a file, comma- or space-separated in the environment.
    secrets: Option<RawList<Secret>>,
    timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotificationRetry {
    /// Unset: on for the embedded SQLite default, off elsewhere.
    enabled: Option<bool>,
    interval: String,
    backoff_base: String,
    max_attempts: i32,
    lease: String,
    batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayment {
    /// Unset: `mock`, which production refuses unless chosen explicitly.
    provider: Option<String>,
    retries: u32,
    retry_backoff: String,
    reconciliation: RawReconciliation,
    external: RawExternal,
    toss: RawToss,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawToss {
    secret_key: Option<Secret>,
    base_url: String,
    timeout: String,
    confirm_window: String,
    timezone: String,
    ledger_at: String,
    ledger_timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconciliation {
    interval: String,
    max_attempts: i32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExternal {
    base_url: Option<String>,
    secret_key: Option<Secret>,
    webhook_secret: Option<Secret>,
    timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    /// Unset: on for the embedded SQLite default, off elsewhere.
    embedded: Option<bool>,
    stuck_after: String,
    http: RawWorkerHttp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkerHttp {
    bind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSaga {
    lease: String,
    recovery_max_attempts: i32,
}

/// `auth.keys` arrives as a list from a file, or as one JSON string from the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawKeys {
    List(Vec<RawKey>),
    Json(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    /// Unset: the built-in development key, unless an identity provider is configured.
    keys: Option<RawKeys>,
    issuer: Option<String>,
    audience: Option<String>,
    roles_claim: String,
    jwks_url: Option<String>,
    jwks_refresh_interval: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    /// Unset: pretty at a terminal, JSON lines otherwise.
    format: Option<String>,
}

/// Every fixed default, in the shape of a configuration file (docs/configuration.md lists
/// them with what each means).
const DEFAULTS: &str = r#"
[http]
bind = "127.0.0.1:8080"

[database]
url = "sqlite://data/app.db?mode=rwc"
max_connections = 16
connect_timeout = "3s"
lock_timeout = "2s"
statement_timeout = "30s"

[broker]
queue_type = "classic"
exchange = "commerce.events"
confirm_timeout = "30s"
meeting_exchange = "meeting.events"
dead_letter_exchange = "payment.dlx"
register_queue = "payment.participant-register"
cancel_queue = "payment.participant-cancel"
meeting_deleted_queue = "payment.meeting-deleted"
prefetch = 32
consumer_retries = 3
consumer_retry_backoff = "1s"
delivery_limit = 5
contract = "native"

[broker.cloudevents]
mode = "binary"
source = "/commerce-orchestrator"
type_prefix = "io.commerce."

[broker.kafka]
topic = "commerce.events"
client_id = "commerce-orchestrator"
inbound = ["meeting.events"]
group = "commerce-orchestrator"
partitions = 16
connect_timeout = "5s"

[outbox]
batch_size = 256
poll_interval = "10s"
retry_poll_interval = "30s"
trickle_wait = "1ms"
max_retries = 3
backoff_base = "10s"
backoff_cap = "300s"
processing_timeout = "5m"
recovery_interval = "1m"
cleanup_at = "03:00"
retention_published = "30d"
retention_dead_letter = "90d"
publish_window = 256
lanes = 16
max_connections = 4
cleanup_batch = 1000

[notification.webhook]
timeout = "10s"

[notification.email]
locale = "ko"
timeout = "10s"

[settlement.webhook]
timeout = "10s"

[settlement.retry]
max_attempts = 5
backoff_base = "60s"
interval = "30s"
batch = 100

[notification.retry]
interval = "30s"
backoff_base = "60s"
max_attempts = 5
lease = "5m"
batch = 100

[payment]
retries = 2
retry_backoff = "200ms"

[payment.reconciliation]
interval = "30s"
max_attempts = 10

[payment.external]
timeout = "5s"

[payment.toss]
base_url = "https://api.tosspayments.com"
timeout = "5s"
confirm_window = "10m"
timezone = "Asia/Seoul"
ledger_at = "04:00"
ledger_timeout = "60s"

[worker]
stuck_after = "60s"

[worker.http]
bind = "127.0.0.1:8081"

[saga]
lease = "60s"
recovery_max_attempts = 5

[auth]
roles_claim = "roles"
jwks_refresh_interval = "1m"

[audit]
retention = "365d"

[idempotency]
retention = "24h"

[meetings]
fee_source = "message"
currency = "KRW"
timezone = "Asia/Seoul"

[meetings.fee_sql]
query = "SELECT participation_fee FROM meetings WHERE id = ?"

[telemetry]
service_name = "orchestrator"

[log]
"#;

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
        if !self.broker.explicit {
            return Err(invalid(
                "broker.url",
                "is required with a PostgreSQL database (or set broker.kind = \"log\" explicitly)",
            ));
        }
        if !self.payment.provider_explicit {
            return Err(invalid(
                "payment.provider",
                "must be set explicitly with a PostgreSQL database: toss, external, or mock (simulated payments)",
            ));
        }
        if !self.settlement.channel_explicit {
            return Err(invalid(
                "settlement.channel",
                "must be set explicitly with a PostgreSQL database: webhook, or simulated (nothing is settled)",
            ));
        }
        if !self.notification.channel_explicit {
            return Err(invalid(
                "notification.channel",
                "must be set explicitly with a PostgreSQL database: webhook, email, or simulated (nobody is told)",
            ));
        }
        Ok(())
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

    /// Each section resolved on its own, naming the key of any invalid value.
    fn resolve(raw: Raw) -> Result<Settings, ConfigError> {
        let database = resolve_database(raw.database)?;
        let sqlite = database.is_sqlite();
        let broker = resolve_broker(raw.broker)?;
        let meetings = resolve_meetings(raw.meetings, &broker)?;
        Ok(Settings {
            meetings,
            http: HttpSettings { bind: address("http.bind", &raw.http.bind)? },
            database,
            broker,
            outbox: resolve_outbox(raw.outbox)?,
            notification: resolve_notification(raw.notification, sqlite)?,
            settlement: resolve_settlement(raw.settlement)?,
            payment: resolve_payment(raw.payment)?,
            worker: resolve_worker(raw.worker, raw.saga, sqlite)?,
            auth: resolve_auth(raw.auth, sqlite)?,
            log: resolve_log(raw.log)?,
            audit: AuditSettings { retention: duration("audit.retention", &raw.audit.retention)? },
            idempotency: resolve_idempotency(raw.idempotency)?,
            telemetry: resolve_telemetry(raw.telemetry)?,
        })
    }
}

fn resolve_meetings(raw: RawMeetings, broker: &BrokerSettings) -> Result<MeetingsSettings, ConfigError> {
    let momo = broker.contract == ContractName::Momo;
    let fee_source = match raw.fee_source.as_str() {
        "message" if momo => {
            return Err(invalid(
                "meetings.fee_source",
                "must be sql with broker.contract = momo (its registrations carry no amount)",
            ));
        }
        "message" => FeeSource::Message,
        "sql" => {
            let url = raw.fee_sql.url.ok_or_else(|| {
                invalid("meetings.fee_sql.url", "is required when meetings.fee_source = sql")
            })?;
            let scheme = url.expose().split(':').next().unwrap_or_default();
            if !["mysql", "mariadb", "postgres", "postgresql"].contains(&scheme) {
                return Err(invalid(
                    "meetings.fee_sql.url",
                    "expected mysql://..., mariadb://... or postgres://...",
                ));
            }
            let query = raw.fee_sql.query.trim().to_owned();
            if query.matches('?').count() != 1 {
                return Err(invalid("meetings.fee_sql.query", "must take the meeting's id as its one `?`"));
            }
            FeeSource::Sql { url, query }
        }
        other => return Err(invalid("meetings.fee_source", format!("`{other}` is not message or sql"))),
    };
    if raw.currency.parse::<crate::domain::money::Currency>().is_err() {
        return Err(invalid("meetings.currency", format!("`{}` is not a currency we know", raw.currency)));
    }
    let timezone = raw
        .timezone
        .parse::<chrono_tz::Tz>()
        .map_err(|_| invalid("meetings.timezone", format!("`{}` is not an IANA time zone", raw.timezone)))?;
    if momo && broker.queue_type == QueueType::Quorum {
        return Err(invalid(
            "broker.queue_type",
            "quorum is refused with broker.contract = momo (its queues are the platform's, classic)",
        ));
    }
    Ok(MeetingsSettings { fee_source, currency: raw.currency, timezone })
}

fn resolve_idempotency(raw: RawIdempotency) -> Result<IdempotencySettings, ConfigError> {
    let retention = duration("idempotency.retention", &raw.retention)?;
    if retention < Duration::from_secs(24 * 3600) {
        return Err(invalid("idempotency.retention", "must be at least 24h (docs/spec.md §5)"));
    }
    Ok(IdempotencySettings { retention })
}

fn duration(key: &str, text: &str) -> Result<Duration, ConfigError> {
    parse_duration(text).map_err(|e| invalid(key, e))
}

/// A duration that must be greater than zero.
fn positive(key: &str, text: &str) -> Result<Duration, ConfigError> {
    let value = duration(key, text)?;
    if value.is_zero() {
        return Err(invalid(key, "must be greater than zero"));
    }
    Ok(value)
}

fn address(key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    text.parse().map_err(|_| invalid(key, "expected HOST:PORT, e.g. 127.0.0.1:8080"))
}

/// An exchange or queue name.
fn name(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 255 {
        return Err(invalid(key, "must be 1 to 255 characters"));
    }
    Ok(value)
}

fn resolve_database(raw: RawDatabase) -> Result<DatabaseSettings, ConfigError> {
    let url = raw.url.expose();
    if !(url.starts_with("sqlite:") || url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid("database.url", "expected sqlite:... or postgres://..."));
    }
    if raw.max_connections == 0 {
        return Err(invalid("database.max_connections", "must be at least 1"));
    }
    Ok(DatabaseSettings {
        url: raw.url,
        max_connections: raw.max_connections,
        connect_timeout: positive("database.connect_timeout", &raw.connect_timeout)?,
        lock_timeout: duration("database.lock_timeout", &raw.lock_timeout)?,
        statement_timeout: duration("database.statement_timeout", &raw.statement_timeout)?,
    })
}

fn resolve_broker(raw: RawBroker) -> Result<BrokerSettings, ConfigError> {
    // An empty value is no value: `APP__BROKER__URL=` on a command line unsets the URL a
    // shell exported (README's walk-throughs switch brokers so).
    let url = raw.url.filter(|u| !u.expose().trim().is_empty());
    let (urls, key) = match (url, raw.urls) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "broker.urls",
                "set broker.url (one node) or broker.urls (a cluster), not both",
            ));
        }
        (Some(url), None) => (vec![url], "broker.url"),
        (None, Some(urls)) => {
            let urls = urls.into_list();
            if urls.is_empty() {
                return Err(invalid("broker.urls", "lists no node"));
            }
            (urls, "broker.urls")
        }
        (None, None) => (Vec::new(), "broker.url"),
    };
    let kind = match raw.kind.as_deref() {
        None if !urls.is_empty() => BrokerKind::Amqp,
        None | Some("log") => BrokerKind::Log,
        Some("amqp") => BrokerKind::Amqp,
        Some("kafka") => BrokerKind::Kafka,
        Some(other) => return Err(invalid("broker.kind", format!("`{other}` is not log, amqp or kafka"))),
    };
    if kind == BrokerKind::Kafka && !urls.is_empty() {
        return Err(invalid(key, "is for RabbitMQ: with broker.kind = kafka set broker.kafka.brokers"));
    }
    if kind == BrokerKind::Amqp {
        if urls.is_empty() {
            return Err(invalid("broker.url", "is required when broker.kind = amqp"));
        }
        for (i, url) in urls.iter().enumerate() {
            if !(url.expose().starts_with("amqp://") || url.expose().starts_with("amqps://")) {
                let which = if urls.len() > 1 { format!("node {}: ", i + 1) } else { String::new() };
                return Err(invalid(key, format!("{which}expected amqp://...")));
            }
        }
    }
    let queue_type = match raw.queue_type.as_str() {
        "classic" => QueueType::Classic,
        "quorum" => QueueType::Quorum,
        other => return Err(invalid("broker.queue_type", format!("`{other}` is not classic or quorum"))),
    };
    if raw.prefetch == 0 {
        return Err(invalid("broker.prefetch", "must be at least 1"));
    }
    let contract = ContractName::parse(&raw.contract).ok_or_else(|| {
        invalid("broker.contract", format!("`{}` is not native, cloudevents, momo or commerce", raw.contract))
    })?;
    let defined = match contract {
        ContractName::Native => true,
        ContractName::CloudEvents => kind != BrokerKind::Log,
        ContractName::Momo => kind == BrokerKind::Amqp,
        ContractName::Commerce => kind == BrokerKind::Kafka,
    };
    if !defined {
        return Err(invalid(
            "broker.contract",
            format!("`{contract}` is not defined for broker.kind = {}", kind.as_str()),
        ));
    }
    let cloudevents = CloudEventsSettings {
        mode: CloudEventsMode::parse(&raw.cloudevents.mode).ok_or_else(|| {
            invalid(
                "broker.cloudevents.mode",
                format!("`{}` is not binary or structured", raw.cloudevents.mode),
            )
        })?,
        source: cloudevents_attribute("broker.cloudevents.source", raw.cloudevents.source)?,
        type_prefix: cloudevents_attribute("broker.cloudevents.type_prefix", raw.cloudevents.type_prefix)?,
    };
    Ok(BrokerSettings {
        contract,
        cloudevents,
        kind,
        explicit: raw.kind.is_some() || !urls.is_empty(),
        urls,
        queue_type,
        exchange: name("broker.exchange", raw.exchange)?,
        confirm_timeout: positive("broker.confirm_timeout", &raw.confirm_timeout)?,
        meeting_exchange: name("broker.meeting_exchange", raw.meeting_exchange)?,
        dead_letter_exchange: name("broker.dead_letter_exchange", raw.dead_letter_exchange)?,
        register_queue: name("broker.register_queue", raw.register_queue)?,
        cancel_queue: name("broker.cancel_queue", raw.cancel_queue)?,
        meeting_deleted_queue: name("broker.meeting_deleted_queue", raw.meeting_deleted_queue)?,
        prefetch: raw.prefetch,
        consumer_retries: raw.consumer_retries,
        consumer_retry_backoff: duration("broker.consumer_retry_backoff", &raw.consumer_retry_backoff)?,
        delivery_limit: raw.delivery_limit,
        kafka: resolve_kafka(raw.kafka, kind == BrokerKind::Kafka)?,
    })
}

/// A CloudEvents attribute we send: non-empty printable ASCII (it goes in headers).
fn cloudevents_attribute(key: &str, value: String) -> Result<String, ConfigError> {
    if value.is_empty() || value.len() > 200 || !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(invalid(key, "must be 1 to 200 printable ASCII characters"));
    }
    Ok(value)
}

/// Which client settings `broker.kafka.properties` may carry: how to reach and authenticate
/// to the cluster, nothing that would weaken delivery (`acks`, idempotence, timeouts are the
/// service's).
const KAFKA_PASSED_THROUGH: [&str; 3] = ["security.", "ssl.", "sasl."];

fn resolve_kafka(raw: RawKafka, chosen: bool) -> Result<KafkaSettings, ConfigError> {
    let brokers = raw.brokers.map(|b| b.trim().to_owned()).unwrap_or_default();
    if chosen && brokers.is_empty() {
        return Err(invalid("broker.kafka.brokers", "is required when broker.kind = kafka"));
    }
    let inbound = raw.inbound.into_list();
    if inbound.is_empty() {
        return Err(invalid("broker.kafka.inbound", "lists no topic"));
    }
    kafka_topic("broker.kafka.topic", &raw.topic)?;
    for topic in &inbound {
        kafka_topic("broker.kafka.inbound", topic)?;
    }
    if !(1..=10_000).contains(&raw.partitions) {
        return Err(invalid("broker.kafka.partitions", "must be between 1 and 10000"));
    }
    let mut properties = Vec::new();
    for (key, value) in raw.properties {
        // From the environment a key comes lower-cased with `_` for `.`
        // (`APP__BROKER__KAFKA__PROPERTIES__SASL_USERNAME`); librdkafka's names have no `_`.
        let key = key.replace('_', ".");
        if !KAFKA_PASSED_THROUGH.iter().any(|prefix| key.starts_with(prefix)) {
            return Err(invalid(
                &format!("broker.kafka.properties.{key}"),
                "only security.*, ssl.* and sasl.* settings are passed to the client",
            ));
        }
        properties.push((key, value));
    }
    Ok(KafkaSettings {
        brokers,
        topic: raw.topic,
        client_id: name("broker.kafka.client_id", raw.client_id)?,
        inbound,
        group: name("broker.kafka.group", raw.group)?,
        partitions: raw.partitions,
        connect_timeout: positive("broker.kafka.connect_timeout", &raw.connect_timeout)?,
        properties,
    })
}

/// A Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`.
fn kafka_topic(key: &str, topic: &str) -> Result<(), ConfigError> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) || topic == "." || topic == ".." {
        return Err(invalid(key, format!("`{topic}` is not a Kafka topic name")));
    }
    Ok(())
}

fn resolve_outbox(o: RawOutbox) -> Result<OutboxSettings, ConfigError> {
    if o.batch_size == 0 || o.batch_size > 10_000 {
        return Err(invalid("outbox.batch_size", "must be between 1 and 10000"));
    }
    if o.publish_window == 0 || o.publish_window > 10_000 {
        return Err(invalid("outbox.publish_window", "must be between 1 and 10000"));
    }
    if o.max_retries < 0 {
        return Err(invalid("outbox.max_retries", "must not be negative"));
    }
    if o.max_connections == 0 || o.max_connections > 1000 {
        return Err(invalid("outbox.max_connections", "must be between 1 and 1000"));
    }
    if o.cleanup_batch == 0 || o.cleanup_batch > 100_000 {
        return Err(invalid("outbox.cleanup_batch", "must be between 1 and 100000"));
    }
    let max_lanes = crate::domain::outbox::lanes::MAX_LANES;
    if o.lanes == 0 || o.lanes > max_lanes {
        return Err(invalid("outbox.lanes", format!("must be between 1 and {max_lanes}")));
    }
    let trickle_wait = duration("outbox.trickle_wait", &o.trickle_wait)?;
    if trickle_wait > Duration::from_secs(1) {
        return Err(invalid("outbox.trickle_wait", "must be at most 1s: every event waits it"));
    }
    let cleanup_at = NaiveTime::parse_from_str(&o.cleanup_at, "%H:%M")
        .map_err(|_| invalid("outbox.cleanup_at", "expected HH:MM (UTC), e.g. 03:00"))?;
    Ok(OutboxSettings {
        batch_size: o.batch_size,
        poll_interval: positive("outbox.poll_interval", &o.poll_interval)?,
        retry_poll_interval: duration("outbox.retry_poll_interval", &o.retry_poll_interval)?,
        trickle_wait,
        max_retries: o.max_retries,
        backoff_base: duration("outbox.backoff_base", &o.backoff_base)?,
        backoff_cap: duration("outbox.backoff_cap", &o.backoff_cap)?,
        processing_timeout: positive("outbox.processing_timeout", &o.processing_timeout)?,
        recovery_interval: positive("outbox.recovery_interval", &o.recovery_interval)?,
        cleanup_at,
        retention_published: duration("outbox.retention_published", &o.retention_published)?,
        retention_dead_letter: duration("outbox.retention_dead_letter", &o.retention_dead_letter)?,
        publish_window: o.publish_window,
        lanes: o.lanes,
        max_connections: o.max_connections,
        cleanup_batch: o.cleanup_batch,
    })
}

/// `<step>.webhook.*`, required when the step's channel is `webhook`.
fn resolve_webhook(step: &str, raw: RawWebhook) -> Result<WebhookSettings, ConfigError> {
    let key = |name: &str| format!("{step}.webhook.{name}");
    let url =
        raw.url.ok_or_else(|| invalid(&key("url"), format!("is required when {step}.channel = webhook")))?;
    let parsed = reqwest::Url::parse(url.expose()).map_err(|_| invalid(&key("url"), "is not a URL"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(&key("url"), "must be http:// or https://"));
    }
    let secrets: Vec<Secret> = match raw.secrets {
        None => Vec::new(),
        // Several during a rotation: space- or comma-separated in the environment.
        Some(list) => list
            .into_list()
            .into_iter()
            .flat_map(|s| s.expose().split_whitespace().map(Secret::new).collect::<Vec<_>>())
            .collect(),
    };
    if secrets.is_empty() {
        return Err(invalid(
            &key("secrets"),
            format!("at least one whsec_ secret is required when {step}.channel = webhook"),
        ));
    }
    let secrets = secrets
        .iter()
        .map(|s| WebhookSecret::parse(s.expose()).map_err(|e| invalid(&key("secrets"), e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WebhookSettings { url, secrets, timeout: positive(&key("timeout"), &raw.timeout)? })
}

fn resolve_email(raw: RawEmail) -> Result<EmailSettings, ConfigError> {
    let smtp_url = raw.smtp_url.ok_or_else(|| {
        invalid("notification.email.smtp_url", "is required when notification.channel = email")
    })?;
    let scheme = smtp_url.expose().split("://").next().unwrap_or_default();
    if !["smtp", "smtps"].contains(&scheme) || !smtp_url.expose().contains("://") {
        return Err(invalid(
            "notification.email.smtp_url",
            "must be smtp://host[:port] or smtps://host[:port]",
        ));
    }
    let from = raw
        .from
        .ok_or_else(|| invalid("notification.email.from", "is required when notification.channel = email"))?;
    let locale = Locale::parse(&raw.locale)
        .ok_or_else(|| invalid("notification.email.locale", format!("`{}` is not ko or en", raw.locale)))?;
    let settings = EmailSettings {
        smtp_url,
        from,
        locale,
        timeout: positive("notification.email.timeout", &raw.timeout)?,
    };
    // Built once here so that a bad URL or sender stops the start, naming the key.
    crate::adapters::providers::EmailNotifier::new(&settings)
        .map_err(|e| invalid("notification.email", e))?;
    Ok(settings)
}

fn resolve_settlement(raw: RawSettlement) -> Result<SettlementSettings, ConfigError> {
    let channel = match raw.channel.as_deref() {
        None | Some("simulated") => SettlementChannel::Simulated,
        Some("webhook") => SettlementChannel::Webhook(resolve_webhook("settlement", raw.webhook)?),
        Some(other) => {
            return Err(invalid("settlement.channel", format!("`{other}` is not simulated or webhook")));
        }
    };
    let r = raw.retry;
    if r.max_attempts < 1 {
        return Err(invalid("settlement.retry.max_attempts", "must be at least 1"));
    }
    if r.batch == 0 || r.batch > 10_000 {
        return Err(invalid("settlement.retry.batch", "must be between 1 and 10000"));
    }
    Ok(SettlementSettings {
        channel,
        channel_explicit: raw.channel.is_some(),
        retry_max_attempts: r.max_attempts,
        retry_backoff_base: positive("settlement.retry.backoff_base", &r.backoff_base)?,
        retry_interval: positive("settlement.retry.interval", &r.interval)?,
        retry_batch: r.batch,
    })
}

fn resolve_notification(raw: RawNotification, sqlite: bool) -> Result<NotificationSettings, ConfigError> {
    let channel = match raw.channel.as_deref() {
        None | Some("simulated") => NotificationChannel::Simulated,
        Some("webhook") => NotificationChannel::Webhook(resolve_webhook("notification", raw.webhook)?),
        Some("email") => NotificationChannel::Email(resolve_email(raw.email)?),
        Some(other) => {
            return Err(invalid(
                "notification.channel",
                format!("`{other}` is not simulated, webhook or email"),
            ));
        }
    };
    let channel_explicit = raw.channel.is_some();
    let r = raw.retry;
    if r.max_attempts < 1 {
        return Err(invalid("notification.retry.max_attempts", "must be at least 1"));
    }
    if r.batch == 0 || r.batch > 10_000 {
        return Err(invalid("notification.retry.batch", "must be between 1 and 10000"));
    }
    Ok(NotificationSettings {
        channel,
        channel_explicit,
        retry_enabled: r.enabled.unwrap_or(sqlite),
        retry_interval: duration("notification.retry.interval", &r.interval)?,
        retry_backoff_base: duration("notification.retry.backoff_base", &r.backoff_base)?,
        retry_max_attempts: r.max_attempts,
        retry_lease: positive("notification.retry.lease", &r.lease)?,
        retry_batch: r.batch,
    })
}

fn resolve_payment(p: RawPayment) -> Result<PaymentSettings, ConfigError> {
    let provider = match p.provider.as_deref() {
        None | Some("mock") => ProviderKind::Mock,
        Some("external") => ProviderKind::External,
        Some("toss") => ProviderKind::Toss,
        Some(other) => {
            return Err(invalid("payment.provider", format!("`{other}` is not mock, toss or external")));
        }
    };
    if provider == ProviderKind::Toss {
        match &p.toss.secret_key {
            None => {
                return Err(invalid("payment.toss.secret_key", "is required when payment.provider = toss"));
            }
            Some(key) if !(key.expose().starts_with("test_sk_") || key.expose().starts_with("live_sk_")) => {
                // Never the key itself in the message.
                return Err(invalid(
                    "payment.toss.secret_key",
                    "must be a secret key, test_sk_... or live_sk_...",
                ));
            }
            Some(_) => {}
        }
    }
    if !(p.toss.base_url.starts_with("http://") || p.toss.base_url.starts_with("https://")) {
        return Err(invalid("payment.toss.base_url", "expected http(s)://..."));
    }
    if p.toss.timezone != "Asia/Seoul" {
        return Err(invalid("payment.toss.timezone", "only Asia/Seoul (Toss's zone) is supported"));
    }
    let ledger_at = NaiveTime::parse_from_str(&p.toss.ledger_at, "%H:%M")
        .map_err(|_| invalid("payment.toss.ledger_at", "expected HH:MM"))?;
    if provider == ProviderKind::External {
        for (key, present) in [
            ("payment.external.base_url", p.external.base_url.is_some()),
            ("payment.external.secret_key", p.external.secret_key.is_some()),
            ("payment.external.webhook_secret", p.external.webhook_secret.is_some()),
        ] {
            if !present {
                return Err(invalid(key, "is required when payment.provider = external"));
            }
        }
    }
    if p.retries > 10 {
        return Err(invalid("payment.retries", "must be at most 10"));
    }
    if p.reconciliation.max_attempts < 1 {
        return Err(invalid("payment.reconciliation.max_attempts", "must be at least 1"));
    }
    let bad_url = |u: &String| !(u.starts_with("http://") || u.starts_with("https://"));
    if p.external.base_url.as_ref().is_some_and(bad_url) {
        return Err(invalid("payment.external.base_url", "expected http(s)://..."));
    }
    Ok(PaymentSettings {
        provider,
        provider_explicit: p.provider.is_some(),
        retries: p.retries,
        retry_backoff: duration("payment.retry_backoff", &p.retry_backoff)?,
        reconciliation_interval: duration("payment.reconciliation.interval", &p.reconciliation.interval)?,
        reconciliation_max_attempts: p.reconciliation.max_attempts,
        external_base_url: p.external.base_url,
        external_secret_key: p.external.secret_key,
        external_webhook_secret: p.external.webhook_secret,
        external_timeout: duration("payment.external.timeout", &p.external.timeout)?,
        toss: TossConfig {
            secret_key: p.toss.secret_key,
            base_url: p.toss.base_url,
            timeout: positive("payment.toss.timeout", &p.toss.timeout)?,
            confirm_window: positive("payment.toss.confirm_window", &p.toss.confirm_window)?,
            timezone: p.toss.timezone,
            ledger_at,
            ledger_timeout: positive("payment.toss.ledger_timeout", &p.toss.ledger_timeout)?,
        },
    })
}

fn resolve_worker(raw: RawWorker, saga: RawSaga, sqlite: bool) -> Result<WorkerSettings, ConfigError> {
    let saga_lease = duration("saga.lease", &saga.lease)?;
    if saga_lease < Duration::from_secs(1) {
        return Err(invalid("saga.lease", "must be at least 1s"));
    }
    if saga.recovery_max_attempts < 1 {
        return Err(invalid("saga.recovery_max_attempts", "must be at least 1"));
    }
    Ok(WorkerSettings {
        http_bind: address("worker.http.bind", &raw.http.bind)?,
        embedded: raw.embedded.unwrap_or(sqlite),
        stuck_after: positive("worker.stuck_after", &raw.stuck_after)?,
        saga_lease,
        saga_recovery_max_attempts: saga.recovery_max_attempts,
    })
}

fn resolve_auth(raw: RawAuth, sqlite: bool) -> Result<AuthSettings, ConfigError> {
    let raw_keys: Vec<RawKey> = match raw.keys {
        // With an identity provider, tokens are verified with its keys only.
        None if raw.jwks_url.is_some() => Vec::new(),
        None => vec![RawKey {
            kid: DEV_KID.into(),
            algorithm: "HS256".into(),
            secret: Some(Secret::new(DEV_SECRET)),
            public_key: None,
            private_key: None,
        }],
        Some(RawKeys::List(keys)) => keys,
        Some(RawKeys::Json(json)) => serde_json::from_str(&json).map_err(|e| {
            invalid("auth.keys", format!("not a JSON array of keys: {}", redact(&e.to_string())))
        })?,
    };
    if raw_keys.is_empty() && raw.jwks_url.is_none() {
        return Err(invalid("auth.keys", "must hold at least one key (or set auth.jwks_url)"));
    }
    let keys = raw_keys.into_iter().enumerate().map(|(i, k)| resolve_key(i, k)).collect::<Result<_, _>>()?;
    if let Some(url) = &raw.jwks_url
        && !(url.starts_with("https://") || url.starts_with("http://"))
    {
        return Err(invalid("auth.jwks_url", "must be an http:// or https:// URL"));
    }
    if raw.roles_claim.is_empty() || raw.roles_claim.split('.').any(str::is_empty) {
        return Err(invalid(
            "auth.roles_claim",
            "must be a claim name or a dotted path such as realm_access.roles",
        ));
    }
    if raw.audience.as_deref().is_some_and(str::is_empty) {
        return Err(invalid("auth.audience", "must not be empty"));
    }
    let auth = AuthSettings {
        keys,
        issuer: raw.issuer,
        audience: raw.audience,
        roles_claim: raw.roles_claim,
        jwks_url: raw.jwks_url,
        jwks_refresh_interval: duration("auth.jwks_refresh_interval", &raw.jwks_refresh_interval)?,
    };
    if !sqlite && auth.only_dev_key() {
        return Err(invalid(
            "auth.keys",
            "the built-in development key is for the embedded SQLite default only; configure your own keys",
        ));
    }
    Ok(auth)
}

fn resolve_telemetry(raw: RawTelemetry) -> Result<TelemetrySettings, ConfigError> {
    if let Some(url) = &raw.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid("telemetry.otlp_endpoint", "expected http(s)://host:4318"));
    }
    if raw.service_name.is_empty() {
        return Err(invalid("telemetry.service_name", "must not be empty"));
    }
    Ok(TelemetrySettings { otlp_endpoint: raw.otlp_endpoint, service_name: raw.service_name })
}

fn resolve_log(raw: RawLog) -> Result<LogSettings, ConfigError> {
    let format = match raw.format.as_deref() {
        // Unset: pretty for a person at a terminal, JSON lines for a collector.
        None if std::io::IsTerminal::is_terminal(&std::io::stderr()) => LogFormat::Pretty,
        None | Some("json") => LogFormat::Json,
        Some("pretty") => LogFormat::Pretty,
        Some(other) => return Err(invalid("log.format", format!("`{other}` is not json or pretty"))),
    };
    Ok(LogSettings { format })
}

/// Error messages from the config crate may quote values; never let one carry a secret.
/// One static key, its algorithm parsed once and its material checked for presence.
fn resolve_key(i: usize, key: RawKey) -> Result<KeySettings, ConfigError> {
    let name = format!("auth.keys[{i}]");
    let algorithm = KeyAlgorithm::parse(&key.algorithm).ok_or_else(|| {
        invalid(
            &format!("{name}.algorithm"),
            format!("`{}` is not HS256, RS256, ES256 or EdDSA", key.algorithm),
        )
    })?;
    if algorithm.is_asymmetric() && key.public_key.is_none() {
        return Err(invalid(&format!("{name}.public_key"), "is required for RS256, ES256 and EdDSA"));
    }
    if !algorithm.is_asymmetric() && key.secret.as_ref().is_none_or(|s| s.expose().len() < 32) {
        return Err(invalid(&format!("{name}.secret"), "HS256 needs a secret of at least 32 bytes"));
    }
    if key.kid.is_empty() {
        return Err(invalid(&format!("{name}.kid"), "must not be empty"));
    }
    Ok(KeySettings {
        kid: key.kid,
        algorithm,
        secret: key.secret,
        public_key: key.public_key,
        private_key: key.private_key,
    })
}

fn redact(message: &str) -> String {
    // The config crate quotes offending values in backticks or quotes; URLs may carry
    // passwords. Drop any `user:password@` part of a URL-looking token.
    message
        .split(' ')
        .map(|word| match (word.find("://"), word.find('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}://***{}", &word[..scheme], &word[at..])
            }
            _ => word.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::load_from(None, env.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_are_the_embedded_mode() {
        let s = load(&[]).unwrap();
        assert!(s.database.is_sqlite());
        assert_eq!(s.http.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(s.broker.kind, BrokerKind::Log);
        assert!(s.worker.embedded);
        assert!(s.notification.retry_enabled);
        assert_eq!(s.outbox.batch_size, 256);
        assert_eq!(s.outbox.processing_timeout, Duration::from_secs(300));
        assert_eq!(s.outbox.retention_published, Duration::from_secs(30 * 86_400));
        assert_eq!(s.auth.keys[0].kid, DEV_KID);
    }

    #[test]
    fn environment_overrides_defaults() {
        let s = load(&[
            ("APP__OUTBOX__BATCH_SIZE", "64"),
            ("APP__OUTBOX__POLL_INTERVAL", "250ms"),
            ("APP__NOTIFICATION__RETRY__ENABLED", "false"),
            ("APP__BROKER__URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
        ])
        .unwrap();
        assert_eq!(s.outbox.batch_size, 64);
        assert_eq!(s.outbox.poll_interval, Duration::from_millis(250));
        assert!(!s.notification.retry_enabled);
        assert_eq!(s.broker.kind, BrokerKind::Amqp, "a broker url implies amqp");
    }

    #[test]
    fn a_cluster_is_a_list_of_urls() {
        let s =
            load(&[("APP__BROKER__URLS", "amqp://u:p@r1:5672/%2f, amqp://u:p@r2:5672/%2f,amqp://u:p@r3")])
                .unwrap();
        assert_eq!(s.broker.kind, BrokerKind::Amqp, "urls imply amqp");
        assert!(s.broker.explicit);
        let urls: Vec<&str> = s.broker.urls.iter().map(Secret::expose).collect();
        assert_eq!(urls, ["amqp://u:p@r1:5672/%2f", "amqp://u:p@r2:5672/%2f", "amqp://u:p@r3"]);

        let dir = std::env::temp_dir().join(format!("cfg-urls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("app.toml");
        std::fs::write(&file, "[broker]\nurls = [\"amqp://a\", \"amqp://b\"]\n").unwrap();
        let s = Settings::load_from(Some(&file), std::iter::empty()).unwrap();
        assert_eq!(s.broker.urls.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();

        for (env, key) in [
            (vec![("APP__BROKER__URLS", "amqp://a,http://b")], "broker.urls"),
            (vec![("APP__BROKER__URLS", " , ")], "broker.urls"),
            (vec![("APP__BROKER__URL", "amqp://a"), ("APP__BROKER__URLS", "amqp://b")], "broker.urls"),
        ] {
            let err = load(&env).unwrap_err().to_string();
            assert!(err.contains(key), "{env:?}: {err}");
            assert!(!err.contains("://a") && !err.contains("://b"), "no url (secrets) in {err}");
        }
    }

    #[test]
    fn keys_come_from_one_json_array_in_the_environment() {
        let s = load(&[(
            "APP__AUTH__KEYS",
            r#"[{"kid":"k1","algorithm":"HS256","secret":"0123456789abcdef0123456789abcdef"}]"#,
        )])
        .unwrap();
        assert_eq!(s.auth.keys[0].kid, "k1");
        assert!(!format!("{:?}", s.auth).contains("0123456789abcdef"), "secrets never print");
    }

    #[test]
    fn kafka_is_chosen_with_its_brokers_and_passes_security_settings_through() {
        let s = load(&[
            ("APP__BROKER__KIND", "kafka"),
            ("APP__BROKER__KAFKA__BROKERS", "k1:9092,k2:9092"),
            ("APP__BROKER__KAFKA__INBOUND", "meeting.events, other.events"),
            ("APP__BROKER__KAFKA__PROPERTIES__SECURITY_PROTOCOL", "SASL_SSL"),
            ("APP__BROKER__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2-kafka"),
        ])
        .unwrap();
        assert_eq!(s.broker.kind, BrokerKind::Kafka);
        assert!(s.broker.explicit);
        let k = &s.broker.kafka;
        assert_eq!(k.brokers, "k1:9092,k2:9092");
        assert_eq!((k.topic.as_str(), k.group.as_str()), ("commerce.events", "commerce-orchestrator"));
        assert_eq!(k.inbound, ["meeting.events", "other.events"]);
        let keys: Vec<&str> = k.properties.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, ["sasl.password", "security.protocol"]);
        assert!(!format!("{:?}", s.broker).contains("hunter2-kafka"), "secrets never print");
        let err = load(&[("APP__BROKER__KIND", "kafka"), ("APP__BROKER__URL", "amqp://x")]).unwrap_err();
        assert!(err.to_string().contains("broker.url"), "{err}");
        // An empty URL (a shell's `APP__BROKER__URL=` override) is no URL.
        let s = load(&[
            ("APP__BROKER__KIND", "kafka"),
            ("APP__BROKER__URL", ""),
            ("APP__BROKER__KAFKA__BROKERS", "k1:9092"),
        ])
        .unwrap();
        assert_eq!(s.broker.kind, BrokerKind::Kafka);
    }

    #[test]
    fn invalid_values_name_their_key() {
        for (key, value, named) in [
            ("APP__OUTBOX__POLL_INTERVAL", "soon", "outbox.poll_interval"),
            ("APP__OUTBOX__BATCH_SIZE", "0", "outbox.batch_size"),
            ("APP__HTTP__BIND", "nowhere", "http.bind"),
            ("APP__BROKER__KIND", "kafka", "broker.kafka.brokers"),
            ("APP__BROKER__KIND", "nats", "broker.kind"),
            ("APP__BROKER__KAFKA__INBOUND", "meeting events", "broker.kafka.inbound"),
            ("APP__BROKER__KAFKA__PARTITIONS", "0", "broker.kafka.partitions"),
            ("APP__BROKER__KAFKA__PROPERTIES__ACKS", "1", "broker.kafka.properties.acks"),
            ("APP__PAYMENT__PROVIDER", "external", "payment.external.base_url"),
            ("APP__PAYMENT__PROVIDER", "toss", "payment.toss.secret_key"),
            ("APP__PAYMENT__PROVIDER", "paypal", "payment.provider"),
            ("APP__PAYMENT__TOSS__TIMEZONE", "Europe/Paris", "payment.toss.timezone"),
            ("APP__PAYMENT__TOSS__LEDGER_AT", "4am", "payment.toss.ledger_at"),
            ("APP__PAYMENT__TOSS__CONFIRM_WINDOW", "0s", "payment.toss.confirm_window"),
            ("APP__LOG__FORMAT", "xml", "log.format"),
            ("APP__OUTBOX__CLEANUP_AT", "3am", "outbox.cleanup_at"),
            ("APP__OUTBOX__TRICKLE_WAIT", "2s", "outbox.trickle_wait"),
            ("APP__OUTBOX__TRICKLE_WAIT", "1", "outbox.trickle_wait"),
        ] {
            let err = load(&[(key, value)]).unwrap_err().to_string();
            assert!(err.contains(named), "{key}={value}: {err}");
        }
        let err = load(&[("APP__OUTBOX__BATCH_SIZE", "many")]).unwrap_err().to_string();
        assert!(err.contains("batch_size"), "{err}");
    }

    #[test]
    fn a_toss_key_that_is_no_secret_key_is_refused_without_being_printed() {
        for key in ["test_ck_client_key_0000", "live_gck_widget", "sk_live_stripe"] {
            let err = load(&[("APP__PAYMENT__PROVIDER", "toss"), ("APP__PAYMENT__TOSS__SECRET_KEY", key)])
                .unwrap_err()
                .to_string();
            assert!(err.contains("payment.toss.secret_key") && !err.contains(key), "{err}");
        }
        let s =
            load(&[("APP__PAYMENT__PROVIDER", "toss"), ("APP__PAYMENT__TOSS__SECRET_KEY", "test_sk_abc")])
                .unwrap();
        assert_eq!(s.payment.provider, ProviderKind::Toss);
        assert_eq!(s.payment.toss.confirm_window, Duration::from_secs(600));
        assert!(!format!("{:?}", s.payment).contains("test_sk_abc"), "secrets never print");
    }

    #[test]
    fn production_refuses_the_built_in_key() {
        let err = load(&[("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app")]).unwrap_err();
        assert!(err.to_string().contains("auth.keys"), "{err}");
    }

    #[test]
    fn an_identity_provider_replaces_the_built_in_key() {
        let jwks = ("APP__AUTH__JWKS_URL", "https://idp.example/certs");
        let s = load(&[jwks]).expect("SQLite with an identity provider");
        assert!(s.auth.keys.is_empty(), "no built-in key beside an identity provider");
        assert_eq!(s.auth.roles_claim, "roles");
        assert_eq!(s.auth.jwks_refresh_interval, Duration::from_secs(60));
        let s =
            load(&[jwks, ("APP__DATABASE__URL", "postgres://postgres@127.0.0.1/app")]).expect("production");
        assert!(!s.auth.only_dev_key());
        for (key, value, named) in [
            ("APP__AUTH__JWKS_URL", "idp.example/certs", "auth.jwks_url"),
            ("APP__AUTH__ROLES_CLAIM", "realm_access..roles", "auth.roles_claim"),
            ("APP__AUTH__AUDIENCE", "", "auth.audience"),
            ("APP__AUTH__JWKS_REFRESH_INTERVAL", "often", "auth.jwks_refresh_interval"),
        ] {
            let err = load(&[jwks, (key, value)]).unwrap_err().to_string();
            assert!(err.contains(named), "{key}={value}: {err}");
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("30d").unwrap(), Duration::from_secs(30 * 86_400));
        for bad in ["", "10", "s", "1.5s", "-1s", "10 minutes"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn redaction_hides_url_credentials() {
        assert_eq!(redact("bad amqp://guest:secret@host/vhost"), "bad amqp://***@host/vhost");
    }

    #[test]
    fn the_documented_defaults_are_the_defaults() {
        // docs/configuration.md's table and `DEFAULTS` must not drift apart: every key whose
        // documented default is a plain value has exactly that value in `DEFAULTS`, and
        // every key of `DEFAULTS` is documented.
        let defaults = config::Config::builder()
            .add_source(config::File::from_str(DEFAULTS, config::FileFormat::Toml))
            .build()
            .unwrap();
        let doc = include_str!("../docs/configuration.md");
        let mut documented = Vec::new();
        for row in doc.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = row.split(" | ").collect();
            let key = cells[0].trim_start_matches("| ").trim_matches('`');
            documented.push(key.to_owned());
            let default = cells[1];
            // Plain values only: `—` (none) and prose (mode-dependent) are not literals.
            if default.matches('`').count() == 2 && default.starts_with('`') && default.ends_with('`') {
                let value = default.trim_matches('`');
                assert_eq!(defaults.get_string(key).ok().as_deref(), Some(value), "{key}");
            }
        }
        fn keys(prefix: &str, table: config::Map<String, config::Value>, out: &mut Vec<String>) {
            for (k, v) in table {
                let key = if prefix.is_empty() { k } else { format!("{prefix}.{k}") };
                match v.kind {
                    config::ValueKind::Table(t) => keys(&key, t, out),
                    _ => out.push(key),
                }
            }
        }
        let mut all = Vec::new();
        keys("", defaults.clone().try_deserialize().unwrap(), &mut all);
        for key in all {
            assert!(documented.contains(&key), "`{key}` has a default but is not in docs/configuration.md");
        }
    }
}
