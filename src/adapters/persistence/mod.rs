//! SeaORM persistence on PostgreSQL and SQLite: connection, migrations, and the
//! repositories that implement the application's storage ports.
//!
//! Entities live only here. Each repository maps rows to domain types in one place and
//! turns database errors into [`RepoError`]: a unique-key hit is `Conflict`, anything else
//! `Unavailable` (the caller may retry), an unmappable value `Corrupt`.

mod audit;
pub mod entities;
mod idempotency;
mod ledger;
mod listener;
mod mapping;
mod meeting_fees;
mod merchant_channels;
mod merchants;
mod notifications;
mod orders;
mod outbox;
mod payment_methods;
mod payments;
mod settlements;
mod store;
mod unit_of_work;
mod webhook_endpoints;
mod webhook_fanout;
mod webhook_messages;
mod webhook_records;

use std::path::Path;
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseBackend, DatabaseConnection, DbErr, SqlErr};
use sea_orm_migration::MigratorTrait;

pub use idempotency::SeaOrmIdempotencyStore;
pub use listener::{OUTBOX_CHANNEL, notified_lanes, wake_on_notify};
pub use meeting_fees::SqlMeetingFees;
pub use outbox::SeaOrmOutboxStore;
pub use store::SeaOrmStore;

use crate::application::health::HealthProbe;
use crate::application::ports::{Cause, RepoError};

/// Opens a pool. A SQLite file and its directory are created if missing, in WAL mode with
/// a busy timeout so that concurrent writers wait for each other instead of failing.
///
/// A pool of the outbox's own ([`connect_outbox`]) differs in one setting only.
///
/// # Errors
/// The database cannot be reached or the URL is invalid.
pub async fn connect(url: &str, max_connections: u32) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, Plans::Default, SessionLimits::default()).await
}

/// Bounds on every PostgreSQL session of a pool (none on SQLite, whose writers wait on its
/// busy timeout): how long a statement may wait for a lock, and run. Zero: no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionLimits {
    pub lock_timeout: Duration,
    pub statement_timeout: Duration,
}

/// [`connect`] with `limits` on every session: the service's own pools (migrations have
/// none, and may run long).
///
/// # Errors
/// As [`connect`].
pub async fn connect_limited(
    url: &str,
    max_connections: u32,
    limits: SessionLimits,
) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, Plans::Default, limits).await
}

/// Opens the outbox's pool: on PostgreSQL every session runs with [`PLAN_CACHE_MODE`].
/// sqlx prepares and caches every statement, and after the fifth execution of a prepared
/// statement PostgreSQL may switch to a generic plan that cannot see the bound `LIMIT` or
/// timestamps; for the claim that plan anti-joins over every published row, and it stalled
/// the relay for seconds per batch (docs/decisions.md, "Custom plans for the outbox").
/// The saga's statements (key look-ups and conditional updates) plan the same either way
/// and keep the default: custom planning of every statement cost 9 % of `bench orders`.
/// On SQLite this is the same as [`connect`].
///
/// # Errors
/// As [`connect`].
pub async fn connect_outbox(
    url: &str,
    max_connections: u32,
    limits: SessionLimits,
) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, Plans::Custom, limits).await
}

/// The relay's fast-path pool on PostgreSQL: its three statements (the fill, the read by
/// id, the record) are planned once per session and the plan kept (`plan_cache_mode =
/// force_generic_plan`). Planned anew on every run they cost the database three times
/// their execution at a trickle, where a relay runs them for a handful of events each; their
/// plan does not depend on the values bound (arrays of lanes and snapshots, ids by primary
/// key), unlike the slow path's claim (docs/decisions.md, "The fast path's statements keep
/// their plan").
///
/// # Errors
/// When the database cannot be reached.
pub async fn connect_fast_path(
    url: &str,
    max_connections: u32,
    limits: SessionLimits,
) -> Result<DatabaseConnection, DbErr> {
    open(url, max_connections, Plans::Generic, limits).await
}

/// How a pool's PostgreSQL sessions plan prepared statements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plans {
    /// PostgreSQL's own choice (`auto`).
    Default,
    /// Planned with the bound values on every run ([`PLAN_CACHE_MODE`]).
    Custom,
    /// Planned once per session.
    Generic,
}

async fn open(
    url: &str,
    max_connections: u32,
    plans: Plans,
    limits: SessionLimits,
) -> Result<DatabaseConnection, DbErr> {
    let dir = sqlite_path(url).and_then(|path| {
        Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()).map(Path::to_path_buf)
    });
    if let Some(dir) = dir {
        std::fs::create_dir_all(&dir)
            .map_err(|e| DbErr::Custom(format!("cannot create {}: {e}", dir.display())))?;
    }
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections.max(1))
        .test_before_acquire_if_idle_for(PING_AFTER_IDLE)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(5))
        .acquire_timeout(Duration::from_secs(10))
        .sqlx_logging(false)
        .map_sqlx_sqlite_opts(|o| {
            o.journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
        })
        .map_sqlx_postgres_opts(move |o| {
            // Which pool a session belongs to, in `pg_stat_activity` (unless the URL names it).
            let o = match (o.get_application_name(), plans) {
                (Some(_), _) => o,
                (None, Plans::Default) => o.application_name(APPLICATION_NAME),
                (None, Plans::Custom | Plans::Generic) => o.application_name(OUTBOX_APPLICATION_NAME),
            };
            let o = match plans {
                Plans::Default => o,
                Plans::Custom => o.options([("plan_cache_mode", PLAN_CACHE_MODE)]),
                Plans::Generic => o.options([("plan_cache_mode", "force_generic_plan")]),
            };
            let ms = |d: Duration| d.as_millis().to_string();
            let o = if limits.lock_timeout.is_zero() {
                o
            } else {
                o.options([("lock_timeout", ms(limits.lock_timeout))])
            };
            if limits.statement_timeout.is_zero() {
                o
            } else {
                o.options([("statement_timeout", ms(limits.statement_timeout))])
            }
        });
    Database::connect(options).await
}

/// How long a pooled connection may sit idle and still be handed out without a ping
/// (HikariCP's rule and window). sqlx pings by default on every acquire: a round trip before
/// each statement, which cost about a tenth of `bench orders` (docs/decisions.md, "A pooled
/// connection is pinged after it sat idle"). A connection idle longer is pinged first and
/// replaced if the server cut it (a restart, `pg_terminate_backend`, a proxy's idle timeout);
/// one cut within the window fails its next statement as one cut mid-statement does (503,
/// the saga resumed by the worker), and sqlx's ping on release then discards it.
pub const PING_AFTER_IDLE: Duration = Duration::from_millis(500);

/// `application_name` of the service's PostgreSQL sessions, and of its outbox relay's pool
/// (`pg_stat_activity.application_name`: which sessions are the relay's).
pub const APPLICATION_NAME: &str = "orchestrator";
pub const OUTBOX_APPLICATION_NAME: &str = "orchestrator-outbox";

/// The `plan_cache_mode` every PostgreSQL session of the outbox's pool runs with.
pub const PLAN_CACHE_MODE: &str = "force_custom_plan";

/// Checks that the database server of a `postgres://` URL accepts connections within
/// `timeout`, so a start fails in seconds with host and cause ("connection refused")
/// instead of a pool's bare "timed out". Other URLs pass.
///
/// # Errors
/// One line naming `host:port` and the cause; never the credentials.
pub async fn probe(url: &str, timeout: Duration) -> Result<(), crate::adapters::SetupError> {
    let Some(rest) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) else {
        return Ok(());
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host_port = if host_port.is_empty() { "localhost:5432".to_owned() } else { host_port.to_owned() };
    let address = if host_port.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        host_port
    } else {
        format!("{host_port}:5432")
    };
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&address)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot reach the database at {address}: {e}").into()),
        Err(_) => Err(format!("cannot reach the database at {address}: no answer within {timeout:?}").into()),
    }
}

/// A database error as one line for a person: PostgreSQL's source position (`at line
/// 948`) is dropped.
pub fn describe(err: &DbErr) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(i) if text[i + 9..].chars().all(|c| c.is_ascii_digit()) => text[..i].to_owned(),
        _ => text,
    }
}

/// The file path of a `sqlite:` URL (`sqlite://data/app.db?mode=rwc` -> `data/app.db`).
pub fn sqlite_path(url: &str) -> Option<String> {
    let rest = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| path.to_owned())
}

/// Applies every pending migration.
///
/// # Errors
/// A migration failed; the database is left at the last successful one.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    migrations::Migrator::up(db, None).await
}

pub fn is_postgres(db: &DatabaseConnection) -> bool {
    db.get_database_backend() == DatabaseBackend::Postgres
}

/// A raw statement written with `$n` placeholders, as SQLite's `?n` there.
pub(super) fn statement(
    backend: DatabaseBackend,
    sql: &str,
    values: Vec<sea_orm::Value>,
) -> sea_orm::Statement {
    let sql = if backend == DatabaseBackend::Sqlite { sql.replace('$', "?") } else { sql.to_owned() };
    sea_orm::Statement::from_sql_and_values(backend, sql, values)
}

pub(crate) fn repo_err(err: DbErr) -> RepoError {
    match err.sql_err() {
        Some(SqlErr::UniqueConstraintViolation(_)) => RepoError::Conflict,
        _ => RepoError::Unavailable(Cause::new(err)),
    }
}

/// The database as a readiness probe.
pub struct DatabaseProbe(pub DatabaseConnection);

#[async_trait::async_trait]
impl HealthProbe for DatabaseProbe {
    fn name(&self) -> &'static str {
        "database"
    }

    async fn is_healthy(&self) -> bool {
        self.0.ping().await.is_ok()
    }
}
