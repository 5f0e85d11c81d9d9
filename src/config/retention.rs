//! `audit.*` and `idempotency.*`: how long audit rows and `Idempotency-Key` answers are kept.

use std::time::Duration;

use serde::Deserialize;

use super::resolve::duration;
use super::{ConfigError, invalid};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) retention: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawIdempotency {
    pub(super) retention: String,
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

pub(super) fn resolve_idempotency(raw: RawIdempotency) -> Result<IdempotencySettings, ConfigError> {
    let retention = duration("idempotency.retention", &raw.retention)?;
    if retention < Duration::from_secs(24 * 3600) {
        return Err(invalid("idempotency.retention", "must be at least 24h (docs/spec.md §5)"));
    }
    Ok(IdempotencySettings { retention })
}
