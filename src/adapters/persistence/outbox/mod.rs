//! The outbox's tables, as docs/relay-design.md describes them. An event row is written once
//! and, while all goes well, never again: a lane's events are read in **batches** — on
//! PostgreSQL the difference between the lane's last done snapshot and a newer one
//! (`pg_visible_in_snapshot`), on SQLite (one writer) the ids past the lane's mark — and a
//! batch sent is **recorded** as one `outbox_progress` row per lane, fenced by the lane's
//! epoch. A row the broker refused, or one behind an earlier event of its aggregate still
//! undelivered, moves to the **slow path**, where its state is kept per row (claimed with
//! `FOR UPDATE SKIP LOCKED` on PostgreSQL, a conditional `UPDATE ... RETURNING` on SQLite).
//!
//! By job: `lanes` (leases), `cursors` (where each lane stands for its relay), `fast`
//! (batches read; `fast::record`, their records), `rows` (the rows statements return, and
//! their decoding), `relay_store` (the relay's port, with the slow path's claims and
//! marks), `upkeep` (lease recovery, clean-up), `operations` (stats, listings, an
//! operator's repairs). Every
//! `WHERE status IN (...)` is built from the domain's [`OutboxAction::from_statuses`], so the
//! SQL cannot drift from the state machine.

use std::sync::Arc;

use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseConnection, EntityTrait, Statement, Value};

use tokio::sync::Notify;

use super::entities::outbox_events::{self};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::outbox_from_row;
use super::repo_err;
use crate::application::ports::{OutboxRecord, RepoError};
use crate::domain::outbox::OutboxStatus;
use crate::domain::outbox::lanes as lane_rules;

/// The most ids of one lane held at once: its snapshot difference's (PostgreSQL), the ids
/// past its mark (SQLite). Batches read ahead take their pages from them, so a fill must hold
/// more than one batch's share, or the read-ahead finds nothing and a drain ends after one
/// batch.
const FILL: usize = 16_384;

#[derive(Clone)]
pub struct SeaOrmOutboxStore {
    db: DatabaseConnection,
    /// The fast path's statements (fill, read by id, record): `db` unless
    /// [`SeaOrmOutboxStore::with_fast_path_pool`] gave it a pool of its own.
    fast: DatabaseConnection,
    /// The in-process relay's wake-up (PostgreSQL `NOTIFY` wakes relays elsewhere).
    relay_wake: Arc<Notify>,
    /// Where each relay of this process stands in the lanes it holds (`fast`).
    cursors: Arc<cursors::Cursors>,
}

/// Writes SQL with `$n` placeholders for PostgreSQL and `?n` for SQLite.
fn placeholders(backend: DatabaseBackend, sql: &str) -> String {
    match backend {
        DatabaseBackend::Sqlite => sql.replace('$', "?"),
        _ => sql.to_owned(),
    }
}

/// `'READY', 'RETRY_WAIT'`: domain spellings as SQL literals. They are compile-time
/// constants of [`OutboxStatus::as_str`], upper-case letters and `_` only.
fn literals(statuses: &[OutboxStatus]) -> String {
    statuses.iter().map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ")
}

mod cursors;
mod fast;
mod lanes;
mod operations;
mod relay_store;
mod rows;
mod upkeep;

use rows::*;

impl SeaOrmOutboxStore {
    pub fn new(db: DatabaseConnection, relay_wake: Arc<Notify>) -> Self {
        SeaOrmOutboxStore { fast: db.clone(), db, relay_wake, cursors: Arc::default() }
    }

    /// The same store, its fast path's statements on `fast` (PostgreSQL:
    /// `persistence::connect_fast_path`, whose sessions keep each statement's plan).
    pub fn with_fast_path_pool(self, fast: DatabaseConnection) -> Self {
        SeaOrmOutboxStore { fast, ..self }
    }

    /// Wakes relays: this process's at once, other processes' through `NOTIFY` on
    /// PostgreSQL (sent on `conn`, delivered when its transaction commits).
    async fn wake<C: ConnectionTrait>(&self, conn: &C) -> Result<(), RepoError> {
        if self.db.get_database_backend() == DatabaseBackend::Postgres {
            conn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}")).await.map_err(repo_err)?;
        }
        Ok(())
    }

    fn statement(&self, sql: &str, values: Vec<Value>) -> Statement {
        let backend = self.db.get_database_backend();
        Statement::from_sql_and_values(backend, placeholders(backend, sql), values)
    }

    fn is_postgres(&self) -> bool {
        self.db.get_database_backend() == DatabaseBackend::Postgres
    }

    /// `{column} IN (ids)`: on PostgreSQL `= ANY($n::bigint[])`, the list bound as one array
    /// appended to `values` (one statement text whatever the list); on SQLite, which has no
    /// arrays, the integers written in.
    fn in_ids(&self, column: &str, ids: &[i64], values: &mut Vec<Value>) -> String {
        self.in_list(column, ids, || bigints(ids.iter().copied()), "bigint", values)
    }

    /// `{column} IN (lanes)`, as [`Self::in_ids`].
    fn in_lanes(&self, column: &str, lanes: &[i16], values: &mut Vec<Value>) -> String {
        self.in_list(column, lanes, || smallints(lanes.iter().copied()), "smallint", values)
    }

    fn in_list<T: ToString>(
        &self,
        column: &str,
        items: &[T],
        array: impl FnOnce() -> Value,
        sql_type: &str,
        values: &mut Vec<Value>,
    ) -> String {
        if self.is_postgres() {
            values.push(array());
            format!("{column} = ANY(${}::{sql_type}[])", values.len())
        } else {
            format!("{column} IN ({})", items.iter().map(T::to_string).collect::<Vec<_>>().join(", "))
        }
    }

    /// SQL: whether outbox row `o` is done by progress row `p` (a fast-path row the lane's
    /// progress has passed). PostgreSQL: visible in `p.done`, or in `p.cur` up to
    /// `p.upto_id`; SQLite (ids in commit order): up to `p.upto_id`.
    fn covered(&self, o: &str, p: &str) -> String {
        if self.is_postgres() {
            format!(
                "(({p}.done IS NOT NULL AND pg_visible_in_snapshot({o}.txid, {p}.done::pg_snapshot)) \
                 OR ({p}.cur IS NOT NULL AND {o}.id <= {p}.upto_id \
                   AND pg_visible_in_snapshot({o}.txid, {p}.cur::pg_snapshot)))"
            )
        } else {
            format!("({o}.id <= {p}.upto_id)")
        }
    }

    /// `SELECT` of outbox rows (alias `o`) as operators see them: a fast-path row's status
    /// is `PUBLISHED` once its lane's newest progress row covers it (`READY` before), and
    /// its `published_at` is that of the first progress row that did.
    fn derived_select(&self) -> String {
        let (latest, first_published) = if self.is_postgres() {
            (
                "LEFT JOIN LATERAL (SELECT p.done, p.cur, p.upto_id FROM outbox_progress p \
                   WHERE p.lane = o.lane ORDER BY p.id DESC LIMIT 1) lp ON TRUE"
                    .to_owned(),
                // The first covering row: progress only grows, so the scan stops early.
                format!(
                    "(SELECT p.published_at FROM outbox_progress p WHERE p.lane = o.lane \
                       AND p.published_at >= o.created_at - INTERVAL '1 minute' AND {} \
                     ORDER BY p.published_at LIMIT 1)",
                    self.covered("o", "p")
                ),
            )
        } else {
            (
                "LEFT JOIN outbox_progress lp ON lp.id = \
                   (SELECT MAX(p.id) FROM outbox_progress p WHERE p.lane = o.lane)"
                    .to_owned(),
                "(SELECT p.published_at FROM outbox_progress p WHERE p.lane = o.lane AND p.upto_id >= o.id \
                   ORDER BY p.upto_id LIMIT 1)"
                    .to_owned(),
            )
        };
        let covered = format!("COALESCE({}, FALSE)", self.covered("o", "lp"));
        format!(
            "SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.routing_key, \
               o.payload, o.correlation_id, \
               CASE WHEN o.slow THEN o.status WHEN {covered} THEN {published} ELSE {ready} END AS status, \
               o.retry_count, o.failure_code, o.failure_reason, o.next_attempt_at, o.last_attempt_at, \
               o.claimed_by, o.claimed_until, o.created_at, \
               CASE WHEN o.slow THEN o.published_at WHEN {covered} THEN {first_published} END AS published_at, \
               o.dead_lettered_at, o.version, o.lane, o.slow, o.traceparent \
             FROM outbox_events o {latest}",
            published = literals(&[OutboxStatus::Published]),
            ready = literals(&[OutboxStatus::Ready]),
        )
    }

    /// SQL: per lane, how many fast-path rows no progress covers yet, and the oldest one's
    /// `created_at`.
    fn fast_ready_sql(&self) -> String {
        if self.is_postgres() {
            format!(
                "SELECT g.lane::smallint AS lane, COUNT(*) AS n, MIN(o.created_at) AS at FROM generate_series(0, {max}) g(lane) \
                 LEFT JOIN LATERAL (SELECT p.done, p.cur, p.upto_id FROM outbox_progress p \
                   WHERE p.lane = g.lane ORDER BY p.id DESC LIMIT 1) lp ON TRUE \
                 JOIN outbox_events o ON o.lane = g.lane AND NOT o.slow \
                   AND o.txid >= COALESCE(pg_snapshot_xmin(lp.done::pg_snapshot), '0'::xid8) \
                 WHERE NOT COALESCE({covered}, FALSE) GROUP BY g.lane",
                max = lane_rules::MAX_LANES - 1,
                covered = self.covered("o", "lp")
            )
        } else {
            "SELECT o.lane, COUNT(*) AS n, MIN(o.created_at) AS at FROM outbox_events o WHERE NOT o.slow \
               AND o.id > COALESCE((SELECT MAX(p.upto_id) FROM outbox_progress p WHERE p.lane = o.lane), 0) \
             GROUP BY o.lane"
                .to_owned()
        }
    }

    async fn rows(&self, sql: &str, values: Vec<Value>) -> Result<Vec<OutboxRecord>, RepoError> {
        let mut rows = outbox_events::Entity::find()
            .from_raw_sql(self.statement(sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.sort_by_key(|r| r.id);
        rows.into_iter().map(outbox_from_row).collect()
    }
}
