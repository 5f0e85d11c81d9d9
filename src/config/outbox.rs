//! `outbox.*`: the relay (docs/spec.md §6) — its batches, window, retries and lanes — and the
//! retention of what it published.

use std::time::Duration;

use chrono::NaiveTime;
use serde::Deserialize;

use super::resolve::{duration, positive};
use super::{ConfigError, invalid};

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

pub(super) fn resolve_outbox(o: RawOutbox) -> Result<OutboxSettings, ConfigError> {
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
