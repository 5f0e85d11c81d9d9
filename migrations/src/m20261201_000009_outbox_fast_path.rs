//! The relay's success path writes no row version per event (docs/spec.md §6). An event is inserted
//! once and never updated while all goes well: each lane's progress is an insert-only log,
//! `outbox_progress`, one row per published batch. Only the rare path writes per event: a
//! failed or held-back event moves to the *slow path* (`slow = true`), where its stored
//! status, retries and dead letter are kept per row, as before.
//!
//! - `outbox_events.slow`: existing rows become slow, so they keep their stored state
//!   (nothing published is sent again, nothing pending is lost).
//! - `outbox_events.txid` (PostgreSQL): the inserting transaction, `pg_current_xact_id()`.
//!   A batch is the difference of two snapshots, so an event whose transaction commits
//!   late is never skipped (docs/relay-design.md).
//! - The claim, pending and lane indexes cover slow rows only: fast rows enter one index,
//!   `(lane, txid)` on PostgreSQL, `(lane, id)` on SQLite.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

const COMMON: &[&str] = &[
    "ALTER TABLE outbox_events ADD COLUMN slow BOOLEAN NOT NULL DEFAULT FALSE",
    "UPDATE outbox_events SET slow = TRUE",
    "DROP INDEX idx_outbox_claimable",
    "DROP INDEX idx_outbox_claimable_lane",
    "DROP INDEX idx_outbox_pending",
    "CREATE INDEX idx_outbox_claimable_lane ON outbox_events (lane, id) \
     WHERE slow AND status IN ('READY', 'RETRY_WAIT')",
    "CREATE INDEX idx_outbox_pending ON outbox_events (created_at) WHERE slow AND status = 'READY'",
    "CREATE INDEX idx_outbox_held ON outbox_events (lane, aggregate_type, aggregate_id) \
     WHERE slow AND status IN ('READY', 'PROCESSING', 'RETRY_WAIT', 'DEAD_LETTER')",
];

const POSTGRES: &[&str] = &[
    "ALTER TABLE outbox_events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id()",
    "CREATE INDEX idx_outbox_fast ON outbox_events (lane, txid) WHERE NOT slow",
    "CREATE TABLE outbox_progress (id BIGSERIAL PRIMARY KEY, lane SMALLINT NOT NULL, \
       done TEXT NULL, cur TEXT NULL, upto_id BIGINT NOT NULL, \
       published_at TIMESTAMPTZ NOT NULL, worker VARCHAR(200) NOT NULL)",
];

const SQLITE: &[&str] = &[
    "CREATE INDEX idx_outbox_fast ON outbox_events (lane, id) WHERE NOT slow",
    "CREATE TABLE outbox_progress (id INTEGER PRIMARY KEY AUTOINCREMENT, lane SMALLINT NOT NULL, \
       done TEXT NULL, cur TEXT NULL, upto_id BIGINT NOT NULL, \
       published_at timestamp_with_timezone_text NOT NULL, worker VARCHAR(200) NOT NULL)",
    // When a row was published: the first progress row whose mark reaches it.
    "CREATE INDEX idx_outbox_progress_upto ON outbox_progress (lane, upto_id)",
];

const PROGRESS_INDEXES: &[&str] = &[
    "CREATE INDEX idx_outbox_progress_lane ON outbox_progress (lane, id)",
    "CREATE INDEX idx_outbox_progress_time ON outbox_progress (lane, published_at)",
];

const DOWN: &[&str] = &[
    "DROP TABLE outbox_progress",
    "DROP INDEX idx_outbox_fast",
    "DROP INDEX idx_outbox_held",
    "DROP INDEX idx_outbox_pending",
    "DROP INDEX idx_outbox_claimable_lane",
    "CREATE INDEX idx_outbox_claimable ON outbox_events (id) WHERE status IN ('READY', 'RETRY_WAIT')",
    "CREATE INDEX idx_outbox_claimable_lane ON outbox_events (lane, id) WHERE status IN ('READY', 'RETRY_WAIT')",
    "CREATE INDEX idx_outbox_pending ON outbox_events (status, created_at) WHERE status = 'READY'",
    "ALTER TABLE outbox_events DROP COLUMN slow",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let conn = m.get_connection();
        let specific = match conn.get_database_backend() {
            DatabaseBackend::Postgres => POSTGRES,
            _ => SQLITE,
        };
        let all: Vec<&str> = COMMON.iter().chain(specific).chain(PROGRESS_INDEXES).copied().collect();
        // One call, so every statement runs on the same pooled connection (SQLite).
        conn.execute_unprepared(&all.join(";\n")).await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let conn = m.get_connection();
        let mut all: Vec<&str> = DOWN.to_vec();
        if conn.get_database_backend() == DatabaseBackend::Postgres {
            all.push("ALTER TABLE outbox_events DROP COLUMN txid");
        }
        conn.execute_unprepared(&all.join(";\n")).await?;
        Ok(())
    }
}
