//! `database.*`: the URL (SQLite, the embedded default, or PostgreSQL) and the pool.

use std::time::Duration;

use serde::Deserialize;

use super::resolve::{duration, positive};
use super::{ConfigError, invalid};
use crate::adapters::Secret;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDatabase {
    pub(super) url: Secret,
    pub(super) max_connections: u32,
    pub(super) connect_timeout: String,
    pub(super) lock_timeout: String,
    pub(super) statement_timeout: String,
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

pub(super) fn resolve_database(raw: RawDatabase) -> Result<DatabaseSettings, ConfigError> {
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
