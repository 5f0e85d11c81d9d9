//! `webhooks.*`: the rules of merchants' webhook endpoints and their delivery (docs/spec.md
//! §16).

use std::time::Duration;

use serde::Deserialize;

use super::resolve::{RawList, positive};
use super::{ConfigError, invalid};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhooks {
    pub(super) allow_http: bool,
    pub(super) allow_private_networks: bool,
    pub(super) rotation_overlap: String,
    pub(super) schedule: RawList<String>,
    pub(super) timeout: String,
    pub(super) max_in_flight: u32,
    pub(super) workers: u32,
    pub(super) max_rate: u32,
    pub(super) disable_after: String,
    pub(super) retention: String,
}

/// `webhooks.*` (docs/configuration.md).
#[derive(Debug, Clone)]
pub struct WebhooksSettings {
    /// `http://` endpoints allowed (development only).
    pub allow_http: bool,
    /// Loopback, private and link-local addresses reachable (development only).
    pub allow_private_networks: bool,
    /// How long a rotated secret keeps signing beside the new one.
    pub rotation_overlap: Duration,
    /// The delay before each retry.
    pub schedule: Vec<Duration>,
    /// How long an attempt waits for its answer.
    pub timeout: Duration,
    /// Attempts in flight to one endpoint at once, per worker process.
    pub max_in_flight: u32,
    /// Messages claimed at once, per worker process (in flight: 16 times that at most).
    pub workers: u32,
    /// Messages a second a worker process makes and attempts at most (0: no bound).
    pub max_rate: u32,
    /// An endpoint failing this long with no success is disabled.
    pub disable_after: Duration,
    /// How long attempts and finished messages are kept.
    pub retention: Duration,
}

fn at_least_one(key: &str, n: u32) -> Result<u32, ConfigError> {
    if n == 0 {
        return Err(invalid(key, "must be at least 1"));
    }
    Ok(n)
}

pub(super) fn resolve_webhooks(raw: RawWebhooks) -> Result<WebhooksSettings, ConfigError> {
    let schedule = raw
        .schedule
        .into_list()
        .iter()
        .map(|step| positive("webhooks.schedule", step))
        .collect::<Result<Vec<_>, _>>()?;
    if schedule.is_empty() || schedule.len() > 20 {
        return Err(invalid("webhooks.schedule", "needs 1 to 20 delays"));
    }
    let timeout = positive("webhooks.timeout", &raw.timeout)?;
    if timeout > Duration::from_secs(60) {
        return Err(invalid("webhooks.timeout", "is at most 60s"));
    }
    Ok(WebhooksSettings {
        allow_http: raw.allow_http,
        allow_private_networks: raw.allow_private_networks,
        rotation_overlap: positive("webhooks.rotation_overlap", &raw.rotation_overlap)?,
        schedule,
        timeout,
        max_in_flight: at_least_one("webhooks.max_in_flight", raw.max_in_flight)?,
        workers: at_least_one("webhooks.workers", raw.workers)?,
        max_rate: raw.max_rate,
        disable_after: positive("webhooks.disable_after", &raw.disable_after)?,
        retention: positive("webhooks.retention", &raw.retention)?,
    })
}
