//! Configuration (docs/spec.md §2): built-in defaults < optional file (`--config PATH` or
//! `APP_CONFIG`) < environment `APP__SECTION__KEY`.
//!
//! Every fixed default lives in one place, `DEFAULTS` (checked against docs/configuration.md by
//! a test). Values are read loosely (strings for durations, options only where unset means
//! something) and then resolved section by section (`resolve_*`) into [`Settings`], where every
//! invalid value is reported with the key that holds it. Each section is one module: its raw
//! shape, its settings and its resolver (`broker`, `payment`, `channels`, …); `raw` holds the
//! root and `DEFAULTS`, `resolve` the value readers they share. Where an adapter has settings
//! of its own it defines their type (`AuthSettings`, `QueueType`, `LogFormat`, `Secret`) and
//! this module builds it.

mod auth;
mod broker;
mod channels;
mod database;
mod http;
mod meetings;
mod outbox;
mod payment;
mod raw;
mod resolve;
mod retention;
mod secrets;
mod telemetry;
mod webhooks;
mod worker;

use std::fmt;
use std::path::Path;

use auth::resolve_auth;
use broker::resolve_broker;
use channels::{resolve_notification, resolve_settlement};
use database::resolve_database;
use http::{resolve_commerce_dialect, resolve_momo_dialect};
use meetings::resolve_meetings;
use outbox::resolve_outbox;
use payment::resolve_payment;
use raw::{DEFAULTS, Raw};
use resolve::{address, duration, positive, redact};
use retention::resolve_idempotency;
use secrets::resolve_secrets;
use telemetry::{resolve_log, resolve_telemetry};
use webhooks::resolve_webhooks;
use worker::resolve_worker;

use crate::adapters::http::auth::AuthSettings;
use crate::telemetry::TelemetrySettings;

pub use broker::{BrokerKind, BrokerSettings, KafkaSettings};
pub use channels::{NotificationChannel, NotificationSettings, SettlementChannel, SettlementSettings};
pub use database::DatabaseSettings;
pub use http::HttpSettings;
pub use meetings::{FeeSource, MeetingsSettings};
pub use outbox::OutboxSettings;
pub use payment::{PaymentSettings, ProviderKind, TossConfig};
pub use retention::{AuditSettings, IdempotencySettings};
pub use secrets::SecretsSettings;
pub use telemetry::LogSettings;
pub use webhooks::WebhooksSettings;
pub use worker::WorkerSettings;

/// A configuration problem, naming the key.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

fn invalid(key: &str, why: impl fmt::Display) -> ConfigError {
    ConfigError(format!("`{key}`: {why}"))
}

/// A merchant's code as the domain normalises it (the merchant itself is found when the
/// service starts: the configuration cannot see the database).
fn merchant_code(key: &str, raw: &str) -> Result<String, ConfigError> {
    crate::domain::merchant::Code::parse(key, raw).map(|c| c.to_string()).map_err(|e| invalid(key, e))
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
    pub secrets: SecretsSettings,
    pub webhooks: WebhooksSettings,
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
        let hold = raw.http.dialects.commerce.hold_expiry.as_deref().unwrap_or("24h");
        let hold_expiry = p.take(positive("http.dialects.commerce.hold_expiry", hold));
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
        let secrets = p.take(resolve_secrets(raw.secrets));
        let webhooks = p.take(resolve_webhooks(raw.webhooks));
        p.finish()?;
        Ok(Settings {
            meetings: resolved(meetings)?,
            secrets: resolved(secrets)?,
            webhooks: resolved(webhooks)?,
            http: HttpSettings {
                bind: resolved(http)?,
                commerce: resolved(commerce)?,
                momo: resolved(momo)?,
                hold_expiry: resolved(hold_expiry)?,
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
