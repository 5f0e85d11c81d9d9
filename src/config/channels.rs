//! `settlement.*` and `notification.*`: the channels a paid order is settled and announced
//! through (simulated, webhooks, e-mail) and how an undelivered message is tried again.

use std::time::Duration;

use serde::Deserialize;

use super::resolve::RawList;
use super::resolve::{duration, positive};
use super::{ConfigError, invalid};
use crate::adapters::Secret;
use crate::adapters::providers::{EmailSettings, Locale, WebhookSecret, WebhookSettings};

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

/// `<step>.webhook.*`, required when the step's channel is `webhook`.
pub(super) fn resolve_webhook(step: &str, raw: RawWebhook) -> Result<WebhookSettings, ConfigError> {
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

pub(super) fn resolve_email(raw: RawEmail) -> Result<EmailSettings, ConfigError> {
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

pub(super) fn resolve_settlement(raw: RawSettlement) -> Result<SettlementSettings, ConfigError> {
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

pub(super) fn resolve_notification(
    raw: RawNotification,
    sqlite: bool,
) -> Result<NotificationSettings, ConfigError> {
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
