//! Configuration (docs/spec.md §2): built-in defaults < optional file (`--config PATH` or
//! `APP_CONFIG`) < environment `APP__SECTION__KEY`.
//!
//! Values are read loosely (strings for durations, options for defaults that depend on
//! other keys) and then resolved into [`Settings`], where every invalid value is reported
//! with the key that holds it. Secrets are wrapped in [`Secret`], which never prints.

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use chrono::NaiveTime;
use serde::Deserialize;

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

fn invalid(key: &str, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!("`{key}`: {why}"))
}

/// A value that must never reach logs, errors or metrics.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Parses `250ms`, `10s`, `5m`, `1h`, `30d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 =
        digits.parse().map_err(|_| format!("`{text}` is not a duration like 250ms, 10s, 5m, 1h or 30d"))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => None,
    }
    .ok_or_else(|| format!("`{text}` is not a duration like 250ms, 10s, 5m, 1h or 30d"))?;
    Ok(Duration::from_millis(ms))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    /// Events are written as JSON log lines (embedded default).
    Log,
    Amqp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    Classic,
    Quorum,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Mock,
    External,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Pretty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Hs256,
    Rs256,
    EdDsa,
}

/// One JWT key; the first configured key signs, all verify.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KeySettings {
    pub kid: String,
    pub algorithm: String,
    #[serde(default)]
    pub secret: Option<Secret>,
    #[serde(default)]
    pub public_key: Option<Secret>,
    #[serde(default)]
    pub private_key: Option<Secret>,
}

/// The built-in signing key's id. It exists for the embedded default only.
pub const DEV_KID: &str = "dev";
const DEV_SECRET: &str = "dev-only-signing-key-of-the-embedded-default-never-use-in-production";

#[derive(Debug, Clone)]
pub struct Settings {
    pub http: HttpSettings,
    pub database: DatabaseSettings,
    pub broker: BrokerSettings,
    pub outbox: OutboxSettings,
    pub notification: NotificationSettings,
    pub payment: PaymentSettings,
    pub worker: WorkerSettings,
    pub auth: AuthSettings,
    pub log: LogSettings,
    pub audit: AuditSettings,
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
}

impl DatabaseSettings {
    pub fn is_sqlite(&self) -> bool {
        self.url.expose().starts_with("sqlite:")
    }
}

#[derive(Debug, Clone)]
pub struct BrokerSettings {
    pub kind: BrokerKind,
    /// Whether the broker was chosen (`broker.url` or `broker.kind` set).
    pub explicit: bool,
    pub url: Option<Secret>,
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
}

#[derive(Debug, Clone)]
pub struct OutboxSettings {
    pub batch_size: u32,
    pub poll_interval: Duration,
    pub retry_poll_interval: Duration,
    pub max_retries: i32,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub processing_timeout: Duration,
    pub recovery_interval: Duration,
    pub cleanup_at: NaiveTime,
    pub retention_published: Duration,
    pub retention_dead_letter: Duration,
    pub publish_window: u32,
    /// Lanes the outbox is split into (`outbox.lanes`); workers share them.
    pub lanes: u16,
}

#[derive(Debug, Clone)]
pub struct NotificationSettings {
    pub retry_enabled: bool,
    pub retry_interval: Duration,
    pub retry_backoff_base: Duration,
    pub retry_max_attempts: i32,
}

#[derive(Debug, Clone)]
pub struct PaymentSettings {
    pub provider: ProviderKind,
    /// Whether `payment.provider` was set (docs/spec.md §2: required outside the embedded default).
    pub provider_explicit: bool,
    pub reconciliation_interval: Duration,
    pub reconciliation_max_attempts: i32,
    pub external_base_url: Option<String>,
    pub external_secret_key: Option<Secret>,
    pub external_webhook_secret: Option<Secret>,
    pub external_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub embedded: bool,
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
pub struct AuthSettings {
    /// Static keys (`auth.keys`); none when only an identity provider's key set is used.
    pub keys: Vec<KeySettings>,
    pub issuer: Option<String>,
    /// Required `aud` of every token (`auth.audience`); unchecked when unset.
    pub audience: Option<String>,
    /// Where the roles are in a token (`auth.roles_claim` \[roles\]): a claim name, or a dotted
    /// path such as `realm_access.roles`.
    pub roles_claim: String,
    /// An identity provider's published key set (`auth.jwks_url`).
    pub jwks_url: Option<String>,
    /// The least time between two fetches of the key set (`auth.jwks_refresh_interval` \[1m\]).
    pub jwks_refresh_interval: Duration,
}

impl AuthSettings {
    /// Whether the only key is the built-in development key.
    pub fn only_dev_key(&self) -> bool {
        self.jwks_url.is_none() && self.keys.iter().all(|k| k.kid == DEV_KID)
    }
}

#[derive(Debug, Clone)]
pub struct LogSettings {
    pub format: LogFormat,
}

// ---- raw shape, as the sources give it ------------------------------------------------

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    http: RawHttp,
    database: RawDatabase,
    #[serde(default)]
    broker: RawBroker,
    outbox: RawOutbox,
    notification: RawNotification,
    payment: RawPayment,
    #[serde(default)]
    worker: RawWorker,
    #[serde(default)]
    saga: RawSaga,
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    audit: RawAudit,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    retention: Option<String>,
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
    connect_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBroker {
    kind: Option<String>,
    url: Option<Secret>,
    queue_type: Option<String>,
    exchange: Option<String>,
    confirm_timeout: Option<String>,
    meeting_exchange: Option<String>,
    dead_letter_exchange: Option<String>,
    register_queue: Option<String>,
    cancel_queue: Option<String>,
    meeting_deleted_queue: Option<String>,
    prefetch: Option<u16>,
    consumer_retries: Option<u32>,
    consumer_retry_backoff: Option<String>,
    delivery_limit: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutbox {
    batch_size: u32,
    poll_interval: String,
    retry_poll_interval: String,
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotification {
    retry: RawNotificationRetry,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNotificationRetry {
    enabled: Option<bool>,
    interval: String,
    backoff_base: String,
    max_attempts: i32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPayment {
    provider: Option<String>,
    reconciliation: RawReconciliation,
    #[serde(default)]
    external: RawExternal,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconciliation {
    interval: String,
    max_attempts: i32,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawExternal {
    base_url: Option<String>,
    secret_key: Option<Secret>,
    webhook_secret: Option<Secret>,
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorker {
    embedded: Option<bool>,
    http: Option<RawWorkerHttp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWorkerHttp {
    bind: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSaga {
    lease: Option<String>,
    recovery_max_attempts: Option<i32>,
}

/// `auth.keys` arrives as a list from a file, or as one JSON string from the environment.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum RawKeys {
    List(Vec<KeySettings>),
    Json(String),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    keys: Option<RawKeys>,
    issuer: Option<String>,
    audience: Option<String>,
    roles_claim: Option<String>,
    jwks_url: Option<String>,
    jwks_refresh_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLog {
    format: Option<String>,
}

const DEFAULTS: &str = r#"
[http]
bind = "127.0.0.1:8080"

[database]
url = "sqlite://data/app.db?mode=rwc"
max_connections = 16

[outbox]
batch_size = 256
poll_interval = "10s"
retry_poll_interval = "30s"
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

[notification.retry]
interval = "30s"
backoff_base = "60s"
max_attempts = 5

[payment]

[payment.reconciliation]
interval = "30s"
max_attempts = 10

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
                "must be set explicitly with a PostgreSQL database: external, or mock (simulated payments)",
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

    fn resolve(raw: Raw) -> Result<Settings, ConfigError> {
        let dur = |key: &str, text: &str| parse_duration(text).map_err(|e| invalid(key, e));
        let bind: SocketAddr = raw
            .http
            .bind
            .parse()
            .map_err(|_| invalid("http.bind", "expected HOST:PORT, e.g. 127.0.0.1:8080"))?;
        let connect_timeout =
            dur("database.connect_timeout", raw.database.connect_timeout.as_deref().unwrap_or("3s"))?;
        if connect_timeout.is_zero() {
            return Err(invalid("database.connect_timeout", "must be greater than zero"));
        }
        let database = DatabaseSettings {
            url: raw.database.url,
            max_connections: raw.database.max_connections,
            connect_timeout,
        };
        let db_url = database.url.expose();
        if !(db_url.starts_with("sqlite:")
            || db_url.starts_with("postgres://")
            || db_url.starts_with("postgresql://"))
        {
            return Err(invalid("database.url", "expected sqlite:... or postgres://..."));
        }
        if database.max_connections == 0 {
            return Err(invalid("database.max_connections", "must be at least 1"));
        }
        let sqlite = database.is_sqlite();

        let broker_kind = match raw.broker.kind.as_deref() {
            None if raw.broker.url.is_some() => BrokerKind::Amqp,
            None | Some("log") => BrokerKind::Log,
            Some("amqp") => BrokerKind::Amqp,
            Some(other) => {
                return Err(invalid("broker.kind", format!("`{other}` is not log or amqp")));
            }
        };
        if broker_kind == BrokerKind::Amqp {
            match &raw.broker.url {
                Some(url) if url.expose().starts_with("amqp://") || url.expose().starts_with("amqps://") => {}
                Some(_) => return Err(invalid("broker.url", "expected amqp://...")),
                None => return Err(invalid("broker.url", "is required when broker.kind = amqp")),
            }
        }
        let queue_type = match raw.broker.queue_type.as_deref() {
            None | Some("classic") => QueueType::Classic,
            Some("quorum") => QueueType::Quorum,
            Some(other) => {
                return Err(invalid("broker.queue_type", format!("`{other}` is not classic or quorum")));
            }
        };

        let o = raw.outbox;
        if o.batch_size == 0 || o.batch_size > 10_000 {
            return Err(invalid("outbox.batch_size", "must be between 1 and 10000"));
        }
        if o.publish_window == 0 || o.publish_window > 10_000 {
            return Err(invalid("outbox.publish_window", "must be between 1 and 10000"));
        }
        if o.max_retries < 0 {
            return Err(invalid("outbox.max_retries", "must not be negative"));
        }
        if o.lanes == 0 || o.lanes > crate::domain::outbox::lanes::MAX_LANES {
            return Err(invalid(
                "outbox.lanes",
                format!("must be between 1 and {}", crate::domain::outbox::lanes::MAX_LANES),
            ));
        }
        let cleanup_at = NaiveTime::parse_from_str(&o.cleanup_at, "%H:%M")
            .map_err(|_| invalid("outbox.cleanup_at", "expected HH:MM (UTC), e.g. 03:00"))?;
        let outbox = OutboxSettings {
            batch_size: o.batch_size,
            poll_interval: dur("outbox.poll_interval", &o.poll_interval)?,
            retry_poll_interval: dur("outbox.retry_poll_interval", &o.retry_poll_interval)?,
            max_retries: o.max_retries,
            backoff_base: dur("outbox.backoff_base", &o.backoff_base)?,
            backoff_cap: dur("outbox.backoff_cap", &o.backoff_cap)?,
            processing_timeout: dur("outbox.processing_timeout", &o.processing_timeout)?,
            recovery_interval: dur("outbox.recovery_interval", &o.recovery_interval)?,
            cleanup_at,
            retention_published: dur("outbox.retention_published", &o.retention_published)?,
            retention_dead_letter: dur("outbox.retention_dead_letter", &o.retention_dead_letter)?,
            publish_window: o.publish_window,
            lanes: o.lanes,
        };
        for (key, value) in [
            ("outbox.poll_interval", outbox.poll_interval),
            ("outbox.processing_timeout", outbox.processing_timeout),
            ("outbox.recovery_interval", outbox.recovery_interval),
        ] {
            if value.is_zero() {
                return Err(invalid(key, "must be greater than zero"));
            }
        }

        let r = raw.notification.retry;
        if r.max_attempts < 1 {
            return Err(invalid("notification.retry.max_attempts", "must be at least 1"));
        }
        let notification = NotificationSettings {
            retry_enabled: r.enabled.unwrap_or(sqlite),
            retry_interval: dur("notification.retry.interval", &r.interval)?,
            retry_backoff_base: dur("notification.retry.backoff_base", &r.backoff_base)?,
            retry_max_attempts: r.max_attempts,
        };

        let p = raw.payment;
        let provider = match p.provider.as_deref() {
            None | Some("mock") => ProviderKind::Mock,
            Some("external") => ProviderKind::External,
            Some(other) => {
                return Err(invalid("payment.provider", format!("`{other}` is not mock or external")));
            }
        };
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
        if p.reconciliation.max_attempts < 1 {
            return Err(invalid("payment.reconciliation.max_attempts", "must be at least 1"));
        }
        let bad_url = |u: &String| !(u.starts_with("http://") || u.starts_with("https://"));
        if p.external.base_url.as_ref().is_some_and(bad_url) {
            return Err(invalid("payment.external.base_url", "expected http(s)://..."));
        }
        let payment = PaymentSettings {
            provider,
            provider_explicit: p.provider.is_some(),
            reconciliation_interval: dur("payment.reconciliation.interval", &p.reconciliation.interval)?,
            reconciliation_max_attempts: p.reconciliation.max_attempts,
            external_base_url: p.external.base_url,
            external_secret_key: p.external.secret_key,
            external_webhook_secret: p.external.webhook_secret,
            external_timeout: dur("payment.external.timeout", p.external.timeout.as_deref().unwrap_or("5s"))?,
        };

        let keys = match raw.auth.keys {
            // With an identity provider, tokens are verified with its keys only.
            None if raw.auth.jwks_url.is_some() => Vec::new(),
            None => vec![KeySettings {
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
        if keys.is_empty() && raw.auth.jwks_url.is_none() {
            return Err(invalid("auth.keys", "must hold at least one key (or set auth.jwks_url)"));
        }
        if let Some(url) = &raw.auth.jwks_url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            return Err(invalid("auth.jwks_url", "must be an http:// or https:// URL"));
        }
        let roles_claim = raw.auth.roles_claim.unwrap_or_else(|| "roles".into());
        if roles_claim.is_empty() || roles_claim.split('.').any(str::is_empty) {
            return Err(invalid(
                "auth.roles_claim",
                "must be a claim name or a dotted path such as realm_access.roles",
            ));
        }
        if raw.auth.audience.as_deref().is_some_and(str::is_empty) {
            return Err(invalid("auth.audience", "must not be empty"));
        }
        let jwks_refresh_interval =
            dur("auth.jwks_refresh_interval", raw.auth.jwks_refresh_interval.as_deref().unwrap_or("1m"))?;
        for (i, key) in keys.iter().enumerate() {
            let name = format!("auth.keys[{i}]");
            match key.algorithm.as_str() {
                "HS256" if key.secret.as_ref().is_some_and(|s| s.expose().len() >= 32) => {}
                "HS256" => {
                    return Err(invalid(
                        &format!("{name}.secret"),
                        "HS256 needs a secret of at least 32 bytes",
                    ));
                }
                "RS256" | "ES256" | "EdDSA" if key.public_key.is_some() => {}
                "RS256" | "ES256" | "EdDSA" => {
                    return Err(invalid(
                        &format!("{name}.public_key"),
                        "is required for RS256, ES256 and EdDSA",
                    ));
                }
                other => {
                    return Err(invalid(
                        &format!("{name}.algorithm"),
                        format!("`{other}` is not HS256, RS256, ES256 or EdDSA"),
                    ));
                }
            }
            if key.kid.is_empty() {
                return Err(invalid(&format!("{name}.kid"), "must not be empty"));
            }
        }
        let auth = AuthSettings {
            keys,
            issuer: raw.auth.issuer,
            audience: raw.auth.audience,
            roles_claim,
            jwks_url: raw.auth.jwks_url,
            jwks_refresh_interval,
        };
        if !sqlite && auth.only_dev_key() {
            return Err(invalid(
                "auth.keys",
                "the built-in development key is for the embedded SQLite default only; configure your own keys",
            ));
        }

        let log = LogSettings {
            format: match raw.log.format.as_deref() {
                // Unset: pretty for a person at a terminal, JSON lines for a collector.
                None if std::io::IsTerminal::is_terminal(&std::io::stderr()) => LogFormat::Pretty,
                None | Some("json") => LogFormat::Json,
                Some("pretty") => LogFormat::Pretty,
                Some(other) => {
                    return Err(invalid("log.format", format!("`{other}` is not json or pretty")));
                }
            },
        };

        let saga_lease = dur("saga.lease", raw.saga.lease.as_deref().unwrap_or("60s"))?;
        if saga_lease < Duration::from_secs(1) {
            return Err(invalid("saga.lease", "must be at least 1s"));
        }
        let saga_recovery_max_attempts = raw.saga.recovery_max_attempts.unwrap_or(5);
        if saga_recovery_max_attempts < 1 {
            return Err(invalid("saga.recovery_max_attempts", "must be at least 1"));
        }
        let confirm_timeout =
            dur("broker.confirm_timeout", raw.broker.confirm_timeout.as_deref().unwrap_or("30s"))?;
        if confirm_timeout.is_zero() {
            return Err(invalid("broker.confirm_timeout", "must be greater than zero"));
        }
        let exchange = raw.broker.exchange.unwrap_or_else(|| "commerce.events".into());
        if exchange.is_empty() || exchange.len() > 255 {
            return Err(invalid("broker.exchange", "must be 1 to 255 characters"));
        }
        let name = |key: &str, value: Option<String>, default: &str| -> Result<String, ConfigError> {
            let value = value.unwrap_or_else(|| default.to_owned());
            if value.is_empty() || value.len() > 255 {
                return Err(invalid(key, "must be 1 to 255 characters"));
            }
            Ok(value)
        };
        let meeting_exchange =
            name("broker.meeting_exchange", raw.broker.meeting_exchange, "meeting.events")?;
        let dead_letter_exchange =
            name("broker.dead_letter_exchange", raw.broker.dead_letter_exchange, "payment.dlx")?;
        let register_queue =
            name("broker.register_queue", raw.broker.register_queue, "payment.participant-register")?;
        let cancel_queue =
            name("broker.cancel_queue", raw.broker.cancel_queue, "payment.participant-cancel")?;
        let meeting_deleted_queue = name(
            "broker.meeting_deleted_queue",
            raw.broker.meeting_deleted_queue,
            "payment.meeting-deleted",
        )?;
        let prefetch = raw.broker.prefetch.unwrap_or(32);
        if prefetch == 0 {
            return Err(invalid("broker.prefetch", "must be at least 1"));
        }
        let consumer_retry_backoff = dur(
            "broker.consumer_retry_backoff",
            raw.broker.consumer_retry_backoff.as_deref().unwrap_or("1s"),
        )?;
        Ok(Settings {
            http: HttpSettings { bind },
            database,
            broker: BrokerSettings {
                kind: broker_kind,
                explicit: raw.broker.kind.is_some() || raw.broker.url.is_some(),
                url: raw.broker.url,
                queue_type,
                exchange,
                confirm_timeout,
                meeting_exchange,
                dead_letter_exchange,
                register_queue,
                cancel_queue,
                meeting_deleted_queue,
                prefetch,
                consumer_retries: raw.broker.consumer_retries.unwrap_or(3),
                consumer_retry_backoff,
                delivery_limit: raw.broker.delivery_limit.unwrap_or(5),
            },
            outbox,
            notification,
            payment,
            worker: WorkerSettings {
                http_bind: raw
                    .worker
                    .http
                    .and_then(|h| h.bind)
                    .unwrap_or_else(|| "127.0.0.1:8081".into())
                    .parse()
                    .map_err(|_| invalid("worker.http.bind", "expected HOST:PORT, e.g. 127.0.0.1:8081"))?,
                embedded: raw.worker.embedded.unwrap_or(sqlite),
                saga_lease,
                saga_recovery_max_attempts,
            },
            auth,
            log,
            audit: AuditSettings {
                retention: dur("audit.retention", raw.audit.retention.as_deref().unwrap_or("365d"))?,
            },
        })
    }
}

/// Error messages from the config crate may quote values; never let one carry a secret.
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
    fn invalid_values_name_their_key() {
        for (key, value, named) in [
            ("APP__OUTBOX__POLL_INTERVAL", "soon", "outbox.poll_interval"),
            ("APP__OUTBOX__BATCH_SIZE", "0", "outbox.batch_size"),
            ("APP__HTTP__BIND", "nowhere", "http.bind"),
            ("APP__BROKER__KIND", "kafka", "broker.kind"),
            ("APP__PAYMENT__PROVIDER", "external", "payment.external.base_url"),
            ("APP__LOG__FORMAT", "xml", "log.format"),
            ("APP__OUTBOX__CLEANUP_AT", "3am", "outbox.cleanup_at"),
        ] {
            let err = load(&[(key, value)]).unwrap_err().to_string();
            assert!(err.contains(named), "{key}={value}: {err}");
        }
        let err = load(&[("APP__OUTBOX__BATCH_SIZE", "many")]).unwrap_err().to_string();
        assert!(err.contains("batch_size"), "{err}");
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
}
