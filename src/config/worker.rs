//! `worker.*` and `saga.*`: the worker's ops listener, its saga lease and how often a stalled
//! saga is resumed.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::resolve::{address, duration, positive};
use super::{ConfigError, invalid};

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

pub(super) fn resolve_worker(
    raw: RawWorker,
    saga: RawSaga,
    sqlite: bool,
) -> Result<WorkerSettings, ConfigError> {
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
