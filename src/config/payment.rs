//! `payment.*`: the payment provider (Toss, an external HTTP provider, or the simulated one),
//! its reconciliation and Toss's keys, windows and ledger.

use std::time::Duration;

use chrono::NaiveTime;
use serde::Deserialize;

use super::resolve::{duration, positive};
use super::{ConfigError, invalid};
use crate::adapters::Secret;

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
    pub(super) ledger_max_findings: usize,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Mock,
    External,
    /// Toss Payments' v1 API (docs/spec.md §10).
    Toss,
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
    /// The most findings one ledger run keeps; the rest are counted in one `TRUNCATED`.
    pub ledger_max_findings: usize,
}

pub(super) fn resolve_payment(p: RawPayment) -> Result<PaymentSettings, ConfigError> {
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
            settlement_grace: positive("payment.toss.settlement_grace", &p.toss.settlement_grace)?,
            ledger_max_findings: match p.toss.ledger_max_findings {
                0 => return Err(invalid("payment.toss.ledger_max_findings", "must be at least 1")),
                n => n,
            },
        },
    })
}

/// Whether `payment.provider` is (or defaults to) `mock`, for the checks of other sections.
pub(super) fn payment_is_mock(p: &RawPayment) -> bool {
    matches!(p.provider.as_deref(), None | Some("mock"))
}
