//! The raw shape, as the sources give it, and `DEFAULTS`: every fixed default, in one
//! place.

use serde::Deserialize;

use crate::adapters::Secret;
use crate::adapters::http::auth::RawKey;

// ---- raw shape, as the sources give it ------------------------------------------------
//
// Every fixed default is in `DEFAULTS` below, the one place defaults live: a field is an
// `Option` only where being unset means something (a default that depends on another
// key, or a value that is simply absent).

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    pub(super) http: RawHttp,
    pub(super) database: RawDatabase,
    pub(super) broker: RawBroker,
    pub(super) outbox: RawOutbox,
    pub(super) notification: RawNotification,
    pub(super) settlement: RawSettlement,
    pub(super) payment: RawPayment,
    pub(super) worker: RawWorker,
    pub(super) saga: RawSaga,
    pub(super) auth: RawAuth,
    #[serde(default)]
    pub(super) log: RawLog,
    pub(super) audit: RawAudit,
    pub(super) idempotency: RawIdempotency,
    pub(super) telemetry: RawTelemetry,
    pub(super) meetings: RawMeetings,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMeetings {
    pub(super) fee_source: String,
    pub(super) fee_sql: RawFeeSql,
    pub(super) currency: String,
    pub(super) timezone: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFeeSql {
    pub(super) url: Option<Secret>,
    pub(super) query: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    pub(super) retention: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    /// Unset: no traces.
    pub(super) otlp_endpoint: Option<String>,
    pub(super) service_name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) retention: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) bind: String,
    /// Other platforms' HTTP APIs (docs/spec.md §14).
    #[serde(default)]
    pub(super) dialects: RawDialects,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDialects {
    #[serde(default)]
    pub(super) commerce: RawCommerceDialect,
    #[serde(default)]
    pub(super) momo: RawMomoDialect,
}

/// `http.dialects.momo.*`: off while `bind` is unset.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMomoDialect {
    pub(super) bind: Option<String>,
    /// The platform's `jwt.secret.key`: its access tokens are HS256 over its UTF-8 bytes.
    pub(super) jwt_secret: Option<Secret>,
}

/// `http.dialects.commerce.*`: off while `bind` is unset.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCommerceDialect {
    pub(super) bind: Option<String>,
    pub(super) jwt_secret: Option<Secret>,
    /// `POST /api/auth/token` (the platform's demo tokens).
    #[serde(default)]
    pub(super) demo_token: bool,
    /// How long a demo token holds (the platform's `access-token-validity-seconds`).
    pub(super) token_validity: Option<String>,
    /// The demo tokens' `iss` (the platform's `app.security.jwt.issuer`).
    pub(super) issuer: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) url: Secret,
    pub(super) max_connections: u32,
    pub(super) connect_timeout: String,
    pub(super) lock_timeout: String,
    pub(super) statement_timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    /// Unset: `amqp` when `url` or `urls` is set, else `log`.
    pub(super) kind: Option<String>,
    pub(super) url: Option<Secret>,
    /// A cluster's nodes: a list in a file, comma-separated in the environment.
    pub(super) urls: Option<RawList<Secret>>,
    pub(super) queue_type: String,
    pub(super) exchange: String,
    pub(super) confirm_timeout: String,
    pub(super) meeting_exchange: String,
    pub(super) dead_letter_exchange: String,
    pub(super) register_queue: String,
    pub(super) cancel_queue: String,
    pub(super) meeting_deleted_queue: String,
    pub(super) prefetch: u16,
    pub(super) consumer_retries: u32,
    pub(super) consumer_retry_backoff: String,
    pub(super) delivery_limit: u32,
    /// `native` | `cloudevents` | `momo` | `commerce` (docs/spec.md §12).
    pub(super) contract: String,
    pub(super) cloudevents: RawCloudEvents,
    pub(super) kafka: RawKafka,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCloudEvents {
    pub(super) mode: String,
    pub(super) source: String,
    pub(super) type_prefix: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKafka {
    pub(super) brokers: Option<String>,
    pub(super) topic: String,
    pub(super) client_id: String,
    /// A list in a file, comma-separated in the environment.
    pub(super) inbound: RawList<String>,
    pub(super) group: String,
    pub(super) partitions: i32,
    pub(super) connect_timeout: String,
    #[serde(default)]
    pub(super) properties: std::collections::BTreeMap<String, Secret>,
}

/// A list of settings: a list in a file, comma-separated text in the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawList<T> {
    List(Vec<T>),
    Text(T),
}

/// An item of a [`RawList`]: read from, and made of, text.
pub(super) trait ListItem: Sized {
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
    pub(super) fn into_list(self) -> Vec<T> {
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
pub(super) struct RawOutbox {
    pub(super) batch_size: u32,
    pub(super) poll_interval: String,
    pub(super) retry_poll_interval: String,
    pub(super) trickle_wait: String,
    pub(super) max_retries: i32,
    pub(super) backoff_base: String,
    pub(super) backoff_cap: String,
    pub(super) processing_timeout: String,
    pub(super) recovery_interval: String,
    pub(super) cleanup_at: String,
    pub(super) retention_published: String,
    pub(super) retention_dead_letter: String,
    pub(super) publish_window: u32,
    pub(super) lanes: u16,
    pub(super) max_connections: u32,
    pub(super) cleanup_batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotification {
    /// Unset: `simulated` (refused outside the embedded default).
    pub(super) channel: Option<String>,
    pub(super) webhook: RawWebhook,
    pub(super) email: RawEmail,
    pub(super) retry: RawNotificationRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettlement {
    /// Unset: `simulated` (refused outside the embedded default).
    pub(super) channel: Option<String>,
    pub(super) webhook: RawWebhook,
    pub(super) retry: RawSettlementRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSettlementRetry {
    pub(super) max_attempts: i32,
    pub(super) backoff_base: String,
    pub(super) interval: String,
    pub(super) batch: u32,
}

/// `notification.email.*`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmail {
    pub(super) smtp_url: Option<Secret>,
    pub(super) from: Option<String>,
    pub(super) locale: String,
    pub(super) timeout: String,
}

/// `<step>.webhook.*`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) url: Option<Secret>,
    /// `whsec_…` keys: a list in a file, comma- or space-separated in the environment.
    pub(super) secrets: Option<RawList<Secret>>,
    pub(super) timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNotificationRetry {
    /// Unset: on for the embedded SQLite default, off elsewhere.
    pub(super) enabled: Option<bool>,
    pub(super) interval: String,
    pub(super) backoff_base: String,
    pub(super) max_attempts: i32,
    pub(super) lease: String,
    pub(super) batch: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPayment {
    /// Unset: `mock`, which production refuses unless chosen explicitly.
    pub(super) provider: Option<String>,
    pub(super) retries: u32,
    pub(super) retry_backoff: String,
    pub(super) reconciliation: RawReconciliation,
    pub(super) external: RawExternal,
    pub(super) toss: RawToss,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToss {
    pub(super) secret_key: Option<Secret>,
    pub(super) base_url: String,
    pub(super) timeout: String,
    pub(super) confirm_window: String,
    pub(super) timezone: String,
    pub(super) ledger_at: String,
    pub(super) ledger_timeout: String,
    pub(super) settlement_grace: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReconciliation {
    pub(super) interval: String,
    pub(super) max_attempts: i32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawExternal {
    pub(super) base_url: Option<String>,
    pub(super) secret_key: Option<Secret>,
    pub(super) webhook_secret: Option<Secret>,
    pub(super) timeout: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorker {
    /// Unset: on for the embedded SQLite default, off elsewhere.
    pub(super) embedded: Option<bool>,
    pub(super) stuck_after: String,
    pub(super) http: RawWorkerHttp,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorkerHttp {
    pub(super) bind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSaga {
    pub(super) lease: String,
    pub(super) recovery_max_attempts: i32,
}

/// `auth.keys` arrives as a list from a file, or as one JSON string from the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum RawKeys {
    List(Vec<RawKey>),
    Json(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuth {
    /// Unset: the built-in development key, unless an identity provider is configured.
    pub(super) keys: Option<RawKeys>,
    pub(super) issuer: Option<String>,
    pub(super) audience: Option<String>,
    pub(super) roles_claim: String,
    pub(super) jwks_url: Option<String>,
    pub(super) jwks_refresh_interval: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    /// Unset: pretty at a terminal, JSON lines otherwise.
    pub(super) format: Option<String>,
}

/// Every fixed default, in the shape of a configuration file (docs/configuration.md lists
/// them with what each means).
pub(super) const DEFAULTS: &str = r#"
[http]
bind = "127.0.0.1:8080"

[http.dialects.commerce]
demo_token = false
token_validity = "1h"
issuer = "commerce-orchestration-backend"

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
settlement_grace = "7d"

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
