//! The outbox table: claiming (with `FOR UPDATE SKIP LOCKED` on PostgreSQL, a single
//! conditional `UPDATE ... RETURNING` on SQLite), marking, recovery, clean-up and the
//! operator's views and repairs.
//!
//! Every `WHERE status IN (...)` is built from the domain's
//! [`OutboxAction::from_statuses`], so the SQL cannot drift from the state machine.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DatabaseConnection, EntityTrait, FromQueryResult,
    QueryFilter, Statement, TransactionTrait, Value,
};

use tokio::sync::Notify;

use super::audit::insert_audit;
use super::entities::outbox_events::{self, Column};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::{outbox_from_row, status_strings};
use super::repo_err;
use crate::application::ports::{
    AuditRecord, DeliveryFailure, FastBatch, FastProgress, HeldLane, LaneCursor, LaneFilter, OutboxFilter,
    OutboxOperations, OutboxRecord, OutboxStats, OutboxUpkeep, RelayStore, RepoError,
};
use crate::domain::outbox::lanes as lane_rules;
use crate::domain::outbox::{FailureCode, FailureOutcome, OutboxAction, OutboxStatus};

/// The most ids of one lane held at once: its snapshot difference's (PostgreSQL), the ids
/// past its mark (SQLite). Batches read ahead take their pages from them, so a fill must hold
/// more than one batch's share, or the read-ahead finds nothing and a drain ends after one
/// batch.
const FILL: usize = 16_384;

#[derive(Clone)]
pub struct SeaOrmOutboxStore {
    db: DatabaseConnection,
    /// The in-process relay's wake-up (PostgreSQL `NOTIFY` wakes relays elsewhere).
    relay_wake: Arc<Notify>,
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

impl SeaOrmOutboxStore {
    pub fn new(db: DatabaseConnection, relay_wake: Arc<Notify>) -> Self {
        SeaOrmOutboxStore { db, relay_wake }
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

    /// Fills the `pending` ids of `cursors[which]` from snapshot differences: a cursor in the
    /// middle of one resumes it past `upto_id`; the others start one from a new snapshot. A
    /// lane whose difference is empty moves `done` on to it (in the cursor only).
    async fn fill_from_snapshots(
        &self,
        cursors: &mut [LaneCursor],
        which: &[usize],
    ) -> Result<(), RepoError> {
        for &i in which {
            if cursors[i].current.is_none() {
                cursors[i].upto_id = 0;
            }
        }
        // One statement text whatever the lanes (parsed once, cached): the lanes' positions
        // go in as delimited lists, unnested in SQL.
        let chosen: Vec<&LaneCursor> = which.iter().map(|&i| &cursors[i]).collect();
        let values: Vec<Value> = vec![
            joined(chosen.iter().map(|c| Some(c.lane.to_string()))).into(),
            joined(chosen.iter().map(|c| c.done.clone())).into(),
            joined(chosen.iter().map(|c| c.current.clone())).into(),
            joined(chosen.iter().map(|c| Some(c.upto_id.to_string()))).into(),
            (FILL as i64).into(),
        ];
        // The lower bound `xmin(done)` keeps the scan on `idx_outbox_fast` to the events
        // not yet surely done; visibility decides each one.
        // At most FILL ids per lane: a difference of a million events is read in slices, so
        // that memory stays bounded; the next slice starts past `upto`.
        // A lane starting a difference takes this statement's own snapshot as its `cur`
        // (one snapshot for the whole statement, the one its reads see); the last row,
        // lane -1, reports it.
        let sql = "SELECT l.lane, x.id, NULL AS snap FROM unnest(\
               string_to_array($1, chr(31))::smallint[], string_to_array($2, chr(31), chr(30)), \
               string_to_array($3, chr(31), chr(30)), string_to_array($4, chr(31))::bigint[]) \
               AS l(lane, done, cur, upto) \
             CROSS JOIN LATERAL (SELECT o.id FROM outbox_events o WHERE o.lane = l.lane AND NOT o.slow \
               AND o.txid >= COALESCE(pg_snapshot_xmin(l.done::pg_snapshot), '0'::xid8) \
               AND o.txid < pg_snapshot_xmax(COALESCE(l.cur::pg_snapshot, pg_current_snapshot())) \
               AND pg_visible_in_snapshot(o.txid, COALESCE(l.cur::pg_snapshot, pg_current_snapshot())) \
               AND (l.done IS NULL OR NOT pg_visible_in_snapshot(o.txid, l.done::pg_snapshot)) \
               AND o.id > l.upto \
             ORDER BY o.id LIMIT $5) x \
             UNION ALL SELECT -1::smallint, -1::bigint, pg_current_snapshot()::text \
             ORDER BY 1, 2";
        let rows =
            FillRow::find_by_statement(self.statement(sql, values)).all(&self.db).await.map_err(repo_err)?;
        let mut snapshot = None;
        let mut by_lane: HashMap<i16, std::collections::VecDeque<i64>> = HashMap::new();
        for r in rows {
            if r.lane < 0 {
                snapshot = r.snap;
            } else {
                by_lane.entry(r.lane).or_default().push_back(r.id);
            }
        }
        let snapshot = snapshot.ok_or_else(|| RepoError::unavailable("no snapshot reported"))?;
        for &i in which {
            let c = &mut cursors[i];
            if c.current.is_none() {
                c.current = Some(snapshot.clone());
            }
            match by_lane.remove(&c.lane) {
                Some(pending) => {
                    c.complete = pending.len() < FILL;
                    c.pending = pending;
                }
                None => {
                    // Nothing between the two snapshots: the newer one is done.
                    c.done = c.current.take();
                    c.upto_id = 0;
                }
            }
        }
        Ok(())
    }

    fn is_postgres(&self) -> bool {
        self.db.get_database_backend() == DatabaseBackend::Postgres
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

#[derive(Debug, FromQueryResult)]
struct StatusCount {
    status: String,
    n: i64,
}

#[derive(Debug, FromQueryResult)]
struct TypeCount {
    event_type: String,
    n: i64,
}

#[derive(Debug, FromQueryResult)]
struct Count {
    n: i64,
}

#[derive(Debug, FromQueryResult)]
struct LaneRow {
    lane: i16,
    epoch: i64,
}

#[derive(Debug, FromQueryResult)]
struct ProgressRow {
    lane: i16,
    done: Option<String>,
    cur: Option<String>,
    upto_id: i64,
}

#[derive(Debug, FromQueryResult)]
struct LaneOnly {
    lane: i16,
}

/// Every column of an outbox row, named: a statement returning them keeps its shape
/// whatever columns are added later (`*` is expanded when a statement is prepared, and a
/// cached SQLite statement whose table changed under it returns rows of another width).
const OUTBOX_COLUMNS: &str = "id, event_id, aggregate_type, aggregate_id, event_type, routing_key, payload, \
    correlation_id, status, retry_count, failure_code, failure_reason, next_attempt_at, last_attempt_at, \
    claimed_by, claimed_until, created_at, published_at, dead_lettered_at, version, lane, slow, traceparent";

/// A row id, as `SELECT id` or `RETURNING id` gives it.
#[derive(Debug, FromQueryResult)]
struct IdRow {
    id: i64,
}

#[derive(Debug, FromQueryResult)]
struct FillRow {
    lane: i16,
    id: i64,
    snap: Option<String>,
}

#[derive(Debug, FromQueryResult)]
struct LaneOldest {
    lane: i16,
    n: i64,
    at: Option<DateTime<Utc>>,
}

#[derive(Debug, FromQueryResult)]
struct Oldest {
    at: Option<DateTime<Utc>>,
}

#[async_trait]
impl RelayStore for SeaOrmOutboxStore {
    async fn claim(
        &self,
        worker: &str,
        lanes: &LaneFilter,
        limit: u32,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<OutboxRecord>, RepoError> {
        // The lanes as literals (integers) so the planner can use `idx_outbox_claimable_lane`;
        // the sub-select is the fence: only lanes whose lease this worker holds right now.
        let in_lanes = match lanes {
            LaneFilter::Any => String::new(),
            LaneFilter::Held(held) if held.is_empty() => return Ok(Vec::new()),
            LaneFilter::Held(held) => format!(
                "AND o.lane IN ({}) AND o.lane IN (SELECT l.lane FROM outbox_lanes l \
                   WHERE l.owner = $2 AND l.lease_until > $4) ",
                held.iter().map(i16::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
        // The status lists are constants of the domain, written into the SQL as literals
        // (not bound): only then can PostgreSQL match the partial index
        // `idx_outbox_claimable` under a generic prepared-statement plan.
        let claimable = literals(OutboxAction::Claim.from_statuses());
        let blocking = literals(OutboxStatus::BLOCKING);
        let lock = match self.db.get_database_backend() {
            DatabaseBackend::Postgres => "FOR UPDATE SKIP LOCKED",
            _ => "",
        };
        let sql = format!(
            "UPDATE outbox_events SET status = $1, claimed_by = $2, claimed_until = $3, \
             last_attempt_at = $4, version = version + 1 \
             WHERE id IN (\
               SELECT o.id FROM outbox_events o \
               WHERE o.slow AND o.status IN ({claimable}) \
                 AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $4) {in_lanes}\
                 AND NOT EXISTS (SELECT 1 FROM outbox_events p \
                   WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id \
                     AND p.id < o.id AND p.slow AND p.status IN ({blocking})) \
               ORDER BY o.id LIMIT $5 {lock}) \
             AND status IN ({claimable}) \
             RETURNING {OUTBOX_COLUMNS}"
        );
        let values: Vec<Value> = vec![
            OutboxAction::Claim.target().as_str().into(),
            worker.into(),
            lease_until.into(),
            now.into(),
            i64::from(limit).into(),
        ];
        self.rows(&sql, values).await
    }

    async fn lease_lanes(
        &self,
        worker: &str,
        lanes: u16,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<HeldLane>, RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        let exec = |sql: &str, values: Vec<Value>| txn.execute_raw(self.statement(sql, values));
        let every_lane = (0..lanes).map(|l| format!("({l}, 0)")).collect::<Vec<_>>().join(", ");
        exec(
            &format!(
                "INSERT INTO outbox_lanes (lane, epoch) VALUES {every_lane} ON CONFLICT (lane) DO NOTHING"
            ),
            vec![],
        )
        .await
        .map_err(repo_err)?;
        exec(
            "DELETE FROM outbox_relays WHERE alive_until < $1 AND worker <> $2",
            vec![now.into(), worker.into()],
        )
        .await
        .map_err(repo_err)?;
        exec(
            "INSERT INTO outbox_relays (worker, alive_until) VALUES ($1, $2) \
             ON CONFLICT (worker) DO UPDATE SET alive_until = excluded.alive_until",
            vec![worker.into(), lease_until.into()],
        )
        .await
        .map_err(repo_err)?;
        let count =
            |sql: &str, values: Vec<Value>| Count::find_by_statement(self.statement(sql, values)).one(&txn);
        let live = count("SELECT COUNT(*) AS n FROM outbox_relays WHERE alive_until >= $1", vec![now.into()])
            .await
            .map_err(repo_err)?
            .map_or(1, |c| c.n);
        let total = count("SELECT COUNT(*) AS n FROM outbox_lanes", vec![])
            .await
            .map_err(repo_err)?
            .map_or(0, |c| c.n);
        let lane_list =
            |sql: &str, values: Vec<Value>| LaneRow::find_by_statement(self.statement(sql, values)).all(&txn);
        // Renew what is still ours (a lane another worker took has another owner now).
        let mut held: Vec<HeldLane> = lane_list(
            "UPDATE outbox_lanes SET lease_until = $1 WHERE owner = $2 RETURNING lane, epoch",
            vec![lease_until.into(), worker.into()],
        )
        .await
        .map_err(repo_err)?
        .into_iter()
        .map(|r| HeldLane { lane: r.lane, epoch: r.epoch })
        .collect();
        let held_ids: Vec<i16> = held.iter().map(|h| h.lane).collect();
        let plan = lane_rules::plan(
            &held_ids,
            usize::try_from(total).unwrap_or(0),
            usize::try_from(live).unwrap_or(1),
        );
        if !plan.release.is_empty() {
            let list = plan.release.iter().map(i16::to_string).collect::<Vec<_>>().join(", ");
            exec(
                &format!("UPDATE outbox_lanes SET owner = NULL, lease_until = NULL WHERE owner = $1 AND lane IN ({list})"),
                vec![worker.into()],
            )
            .await
            .map_err(repo_err)?;
            held.retain(|h| !plan.release.contains(&h.lane));
        }
        if plan.acquire > 0 {
            let skip_locked = match self.db.get_database_backend() {
                DatabaseBackend::Postgres => "FOR UPDATE SKIP LOCKED",
                _ => "",
            };
            let taken = lane_list(
                &format!(
                    "UPDATE outbox_lanes SET owner = $1, lease_until = $2, epoch = epoch + 1 \
                     WHERE lane IN (SELECT lane FROM outbox_lanes \
                       WHERE owner IS NULL OR lease_until <= $3 ORDER BY lane LIMIT $4 {skip_locked}) \
                     AND (owner IS NULL OR lease_until <= $3) RETURNING lane, epoch"
                ),
                vec![worker.into(), lease_until.into(), now.into(), (plan.acquire as i64).into()],
            )
            .await
            .map_err(repo_err)?;
            held.extend(taken.into_iter().map(|r| HeldLane { lane: r.lane, epoch: r.epoch }));
        }
        txn.commit().await.map_err(repo_err)?;
        held.sort_unstable_by_key(|h| h.lane);
        Ok(held)
    }

    async fn lane_cursors(&self, held: &[HeldLane]) -> Result<Vec<LaneCursor>, RepoError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        // One index probe per lane (`(lane, id)`), however long the progress log is.
        let newest = held
            .iter()
            .map(|h| format!("(SELECT MAX(q.id) FROM outbox_progress q WHERE q.lane = {})", h.lane))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = ProgressRow::find_by_statement(self.statement(
            &format!(
                "SELECT p.lane, p.done, p.cur, p.upto_id FROM outbox_progress p WHERE p.id IN ({newest})"
            ),
            vec![],
        ))
        .all(&self.db)
        .await
        .map_err(repo_err)?;
        let latest: HashMap<i16, ProgressRow> = rows.into_iter().map(|r| (r.lane, r)).collect();
        Ok(held
            .iter()
            .map(|h| match latest.get(&h.lane) {
                Some(p) => LaneCursor {
                    lane: h.lane,
                    epoch: h.epoch,
                    done: p.done.clone(),
                    current: p.cur.clone(),
                    upto_id: p.upto_id,
                    pending: Default::default(),
                    complete: false,
                },
                None => LaneCursor { lane: h.lane, epoch: h.epoch, ..Default::default() },
            })
            .collect())
    }

    async fn fast_batch(
        &self,
        cursors: &mut [LaneCursor],
        skip: &[usize],
        per_lane: u32,
    ) -> Result<FastBatch, RepoError> {
        // A lane with a batch in flight is not refilled: its next difference starts once
        // that batch is recorded.
        let empty: Vec<usize> = (0..cursors.len())
            .filter(|&i| cursors[i].pending.is_empty() && skip.get(i).copied().unwrap_or(0) == 0)
            .collect();
        if !empty.is_empty() {
            if self.is_postgres() {
                self.fill_from_snapshots(cursors, &empty).await?;
            } else {
                for &i in &empty {
                    let c = &mut cursors[i];
                    let ids = IdRow::find_by_statement(self.statement(
                        "SELECT id FROM outbox_events WHERE NOT slow AND lane = $1 AND id > $2 \
                         ORDER BY id LIMIT $3",
                        vec![c.lane.into(), c.upto_id.into(), (FILL as i64).into()],
                    ))
                    .all(&self.db)
                    .await
                    .map_err(repo_err)?;
                    c.pending = ids.into_iter().map(|r| r.id).collect();
                    // One writer: there is no difference to finish, only ids past the mark.
                    c.complete = false;
                }
            }
        }
        let ids: Vec<String> = cursors
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.pending.iter().skip(skip.get(i).copied().unwrap_or(0)).take(per_lane as usize)
            })
            .map(i64::to_string)
            .collect();
        if ids.is_empty() {
            return Ok(FastBatch::default());
        }
        // Each row with whether its aggregate waits on the slow path (an earlier event not yet
        // delivered or discarded): one statement, not a second round trip.
        let held = format!(
            "EXISTS (SELECT 1 FROM outbox_events h WHERE h.slow AND h.status IN ({}) \
               AND h.aggregate_type = o.aggregate_type AND h.aggregate_id = o.aggregate_id) AS held",
            literals(OutboxStatus::BLOCKING)
        );
        let columns = OUTBOX_COLUMNS.split(", ").map(|c| format!("o.{c}")).collect::<Vec<_>>().join(", ");
        // By id alone, the primary key's plan whatever the statistics: a `NOT o.slow` here
        // let a table without statistics (truncated, restored, not analyzed yet) be read
        // through the whole of `idx_outbox_fast` for every batch (docs/decisions.md). A row
        // moved to the slow path since its lane was filled is dropped below instead.
        let statement = if self.is_postgres() {
            self.statement(
                &format!(
                    "SELECT {columns}, {held} FROM outbox_events o \
                     WHERE o.id = ANY(string_to_array($1, ',')::bigint[])"
                ),
                vec![ids.join(",").into()],
            )
        } else {
            self.statement(
                &format!("SELECT {columns}, {held} FROM outbox_events o WHERE o.id IN ({})", ids.join(", ")),
                vec![],
            )
        };
        let results = self.db.query_all_raw(statement).await.map_err(repo_err)?;
        let mut rows = Vec::with_capacity(results.len());
        let mut waiting = Vec::new();
        for result in results {
            let model = outbox_events::Model::from_query_result(&result, "").map_err(repo_err)?;
            if model.slow {
                continue;
            }
            if result.try_get::<bool>("", "held").map_err(repo_err)? {
                waiting.push((model.aggregate_type.clone(), model.aggregate_id.clone()));
            }
            rows.push(outbox_from_row(model)?);
        }
        rows.sort_by_key(|r| (r.lane, r.id));
        waiting.sort_unstable();
        waiting.dedup();
        Ok(FastBatch { rows, waiting })
    }

    async fn record_fast(
        &self,
        worker: &str,
        batch: &FastProgress,
        now: DateTime<Utc>,
    ) -> Result<Vec<i16>, RepoError> {
        if batch.progress.is_empty() {
            return Ok(Vec::new());
        }
        // First, and fenced: a progress row for each lane this worker still holds under the
        // epoch it read it with (the lane row held against a take-over until commit on
        // PostgreSQL). Writing first also takes SQLite's write lock before anything is read,
        // so a concurrent writer makes this wait, not fail.
        let progress = &batch.progress;
        let (sql, values) = if self.is_postgres() {
            let values: Vec<Value> = vec![
                joined(progress.iter().map(|c| Some(c.lane.to_string()))).into(),
                joined(progress.iter().map(|c| Some(c.epoch.to_string()))).into(),
                joined(progress.iter().map(|c| c.done.clone())).into(),
                joined(progress.iter().map(|c| c.current.clone())).into(),
                joined(progress.iter().map(|c| Some(c.upto_id.to_string()))).into(),
                now.into(),
                worker.into(),
            ];
            let sql = "INSERT INTO outbox_progress (lane, done, cur, upto_id, published_at, worker) \
                 SELECT v.lane, v.done, v.cur, v.upto, $6, $7 FROM unnest(\
                   string_to_array($1, chr(31))::smallint[], string_to_array($2, chr(31))::bigint[], \
                   string_to_array($3, chr(31), chr(30)), string_to_array($4, chr(31), chr(30)), \
                   string_to_array($5, chr(31))::bigint[]) AS v(lane, epoch, done, cur, upto) \
                 JOIN outbox_lanes l ON l.lane = v.lane AND l.epoch = v.epoch AND l.owner = $7 \
                 FOR SHARE OF l RETURNING lane"
                .to_owned();
            (sql, values)
        } else {
            let mut values: Vec<Value> = Vec::new();
            let rows = progress
                .iter()
                .map(|c| {
                    let b = values.len();
                    values.extend([
                        c.lane.into(),
                        c.epoch.into(),
                        c.done.clone().into(),
                        c.current.clone().into(),
                        c.upto_id.into(),
                    ]);
                    format!("(${}, ${}, ${}, ${}, ${})", b + 1, b + 2, b + 3, b + 4, b + 5)
                })
                .collect::<Vec<_>>()
                .join(", ");
            let (now_at, worker_at) = (values.len() + 1, values.len() + 2);
            values.push(now.into());
            values.push(worker.into());
            let sql = format!(
                "INSERT INTO outbox_progress (lane, done, cur, upto_id, published_at, worker) \
                 SELECT v.column1, v.column3, v.column4, v.column5, ${now_at}, ${worker_at} \
                 FROM (VALUES {rows}) AS v \
                 JOIN outbox_lanes l ON l.lane = v.column1 AND l.epoch = v.column2 AND l.owner = ${worker_at} \
                 RETURNING lane"
            );
            (sql, values)
        };
        let insert = LaneOnly::find_by_statement(self.statement(&sql, values));
        if batch.failures.is_empty() && batch.held_back.is_empty() {
            // Every event went out: the insert alone, one statement and its own transaction
            // (one round trip instead of three on the path every batch takes).
            let fenced = insert.all(&self.db).await.map_err(repo_err)?;
            return Ok(fenced.into_iter().map(|l| l.lane).collect());
        }
        let txn = self.db.begin().await.map_err(repo_err)?;
        let fenced: Vec<i16> =
            insert.all(&txn).await.map_err(repo_err)?.into_iter().map(|l| l.lane).collect();
        if fenced.is_empty() {
            txn.rollback().await.map_err(repo_err)?;
            return Ok(fenced);
        }
        let in_lanes = fenced.iter().map(i16::to_string).collect::<Vec<_>>().join(", ");
        for f in &batch.failures {
            let (status, retry_count, next_attempt_at, dead_lettered_at) = match f.outcome {
                FailureOutcome::Retry { retry_count, next_attempt_at } => {
                    (OutboxStatus::RetryWait, retry_count, Some(next_attempt_at), None)
                }
                FailureOutcome::DeadLetter { retry_count } => {
                    (OutboxStatus::DeadLetter, retry_count, None, Some(now))
                }
            };
            let sql = format!(
                "UPDATE outbox_events SET slow = TRUE, status = $1, retry_count = $2, next_attempt_at = $3, \
                   dead_lettered_at = $4, failure_code = $5, failure_reason = $6, last_attempt_at = $7, \
                   version = version + 1 \
                 WHERE id = $8 AND NOT slow AND lane IN ({in_lanes})"
            );
            let values: Vec<Value> = vec![
                status.as_str().into(),
                retry_count.into(),
                next_attempt_at.into(),
                dead_lettered_at.into(),
                f.code.as_str().into(),
                truncate(&f.reason).into(),
                batch.attempted_at.into(),
                f.id.into(),
            ];
            txn.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?;
        }
        if !batch.held_back.is_empty() {
            let ids = batch.held_back.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            txn.execute_raw(self.statement(
                &format!(
                    "UPDATE outbox_events SET slow = TRUE, version = version + 1 \
                     WHERE id IN ({ids}) AND NOT slow AND lane IN ({in_lanes})"
                ),
                vec![],
            ))
            .await
            .map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        Ok(fenced)
    }

    async fn release_lanes(&self, worker: &str) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        for sql in [
            "UPDATE outbox_lanes SET owner = NULL, lease_until = NULL WHERE owner = $1",
            "DELETE FROM outbox_relays WHERE worker = $1",
        ] {
            txn.execute_raw(self.statement(sql, vec![worker.into()])).await.map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)
    }

    async fn mark_published(&self, ids: &[i64], worker: &str, now: DateTime<Utc>) -> Result<u64, RepoError> {
        let action = OutboxAction::MarkPublished;
        let result = outbox_events::Entity::update_many()
            .col_expr(Column::Status, Expr::value(action.target().as_str()))
            .col_expr(Column::PublishedAt, Expr::value(now))
            // docs/spec.md §6: the failure of an earlier attempt is cleared once published.
            .col_expr(Column::FailureCode, Expr::value(Option::<String>::None))
            .col_expr(Column::FailureReason, Expr::value(Option::<String>::None))
            .col_expr(Column::ClaimedUntil, Expr::value(Option::<DateTime<Utc>>::None))
            .col_expr(Column::Version, Expr::col(Column::Version).add(1))
            .filter(Column::Id.is_in(ids.iter().copied()))
            .filter(Column::Status.is_in(status_strings(action.from_statuses())))
            .filter(Column::ClaimedBy.eq(worker))
            .exec(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(result.rows_affected)
    }

    async fn next_retry_at(&self) -> Result<Option<DateTime<Utc>>, RepoError> {
        // On the partial index `idx_outbox_due`.
        let sql = format!(
            "SELECT MIN(next_attempt_at) AS at FROM outbox_events WHERE status = {}",
            literals(&[OutboxStatus::RetryWait])
        );
        Ok(Oldest::find_by_statement(self.statement(&sql, vec![]))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .and_then(|o| o.at))
    }

    async fn mark_failed(
        &self,
        failures: &[DeliveryFailure],
        worker: &str,
        now: DateTime<Utc>,
    ) -> Result<u64, RepoError> {
        let action = OutboxAction::MarkFailed;
        let txn = self.db.begin().await.map_err(repo_err)?;
        let mut marked = 0;
        for f in failures {
            let mut update = outbox_events::Entity::update_many()
                .col_expr(Column::FailureCode, Expr::value(f.code.as_str()))
                .col_expr(Column::FailureReason, Expr::value(truncate(&f.reason)))
                .col_expr(Column::ClaimedUntil, Expr::value(Option::<DateTime<Utc>>::None))
                .col_expr(Column::Version, Expr::col(Column::Version).add(1));
            update = match f.outcome {
                FailureOutcome::Retry { retry_count, next_attempt_at } => update
                    .col_expr(Column::Status, Expr::value(OutboxStatus::RetryWait.as_str()))
                    .col_expr(Column::RetryCount, Expr::value(retry_count))
                    .col_expr(Column::NextAttemptAt, Expr::value(next_attempt_at)),
                FailureOutcome::DeadLetter { retry_count } => update
                    .col_expr(Column::Status, Expr::value(OutboxStatus::DeadLetter.as_str()))
                    .col_expr(Column::RetryCount, Expr::value(retry_count))
                    .col_expr(Column::DeadLetteredAt, Expr::value(now))
                    .col_expr(Column::NextAttemptAt, Expr::value(Option::<DateTime<Utc>>::None)),
            };
            let result = update
                .filter(Column::Id.eq(f.id))
                .filter(Column::Status.is_in(status_strings(action.from_statuses())))
                .filter(Column::ClaimedBy.eq(worker))
                .exec(&txn)
                .await
                .map_err(repo_err)?;
            marked += result.rows_affected;
        }
        txn.commit().await.map_err(repo_err)?;
        Ok(marked)
    }
}

#[async_trait]
impl OutboxUpkeep for SeaOrmOutboxStore {
    async fn recover_expired(&self, now: DateTime<Utc>) -> Result<u64, RepoError> {
        // Literal statuses: the scan runs on the partial index `idx_outbox_leases`.
        let action = OutboxAction::RecoverLease;
        let sql = format!(
            "UPDATE outbox_events SET status = $1, next_attempt_at = $2, claimed_until = NULL, \
               failure_code = $3, failure_reason = $4, retry_count = retry_count + 1, \
               version = version + 1 \
             WHERE status IN ({}) AND claimed_until < $2",
            literals(action.from_statuses())
        );
        let values: Vec<Value> = vec![
            action.target().as_str().into(),
            now.into(),
            FailureCode::LeaseExpired.as_str().into(),
            "claim lease expired before the outcome was recorded".into(),
        ];
        let result = self.db.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?;
        if result.rows_affected() > 0 {
            self.wake(&self.db).await?;
            self.relay_wake.notify_one();
        }
        Ok(result.rows_affected())
    }

    async fn purge(
        &self,
        published_before: DateTime<Utc>,
        dead_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, RepoError> {
        // Slow rows: one bounded statement per kind, each on its partial index.
        let published = format!(
            "DELETE FROM outbox_events WHERE id IN (SELECT id FROM outbox_events \
               WHERE status = {} AND published_at < $1 LIMIT $2)",
            literals(&[OutboxStatus::Published])
        );
        let dead = format!(
            "DELETE FROM outbox_events WHERE id IN (SELECT id FROM outbox_events \
               WHERE status IN ({}) AND dead_lettered_at < $1 LIMIT $2)",
            literals(&[OutboxStatus::DeadLetter, OutboxStatus::Discarded])
        );
        let mut deleted = 0;
        for (sql, before) in [(published, published_before), (dead, dead_before)] {
            let budget = u64::from(limit).saturating_sub(deleted);
            if budget == 0 {
                return Ok(deleted);
            }
            let values: Vec<Value> = vec![before.into(), (budget as i64).into()];
            deleted +=
                self.db.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?.rows_affected();
        }
        // Fast rows, in bulk per lane: those the newest progress row older than the
        // retention covers; then the progress rows before it, once its rows are gone.
        let lanes =
            LaneOnly::find_by_statement(self.statement("SELECT DISTINCT lane FROM outbox_progress", vec![]))
                .all(&self.db)
                .await
                .map_err(repo_err)?;
        for LaneOnly { lane } in lanes {
            let budget = u64::from(limit).saturating_sub(deleted);
            if budget == 0 {
                break;
            }
            let Some(mark) = IdRow::find_by_statement(self.statement(
                "SELECT p.id FROM outbox_progress p \
                 WHERE p.lane = $1 AND p.published_at < $2 ORDER BY p.id DESC LIMIT 1",
                vec![lane.into(), published_before.into()],
            ))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            else {
                continue;
            };
            let range = if self.is_postgres() {
                "AND o.txid < pg_snapshot_xmax(COALESCE(p.cur, p.done)::pg_snapshot)"
            } else {
                ""
            };
            let sql = format!(
                "DELETE FROM outbox_events WHERE id IN (SELECT o.id FROM outbox_events o \
                   JOIN outbox_progress p ON p.id = $1 \
                 WHERE o.lane = $2 AND NOT o.slow {range} AND {} LIMIT $3)",
                self.covered("o", "p")
            );
            let values: Vec<Value> = vec![mark.id.into(), lane.into(), (budget as i64).into()];
            let gone =
                self.db.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?.rows_affected();
            deleted += gone;
            if gone < budget {
                self.db
                    .execute_raw(self.statement(
                        "DELETE FROM outbox_progress WHERE lane = $1 AND id < $2",
                        vec![lane.into(), mark.id.into()],
                    ))
                    .await
                    .map_err(repo_err)?;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl OutboxOperations for SeaOrmOutboxStore {
    async fn stats(&self) -> Result<OutboxStats, RepoError> {
        // Every count from one snapshot: read in separate statements, `PUBLISHED` (the fast
        // path's total less its waiting events) went backwards while the relay worked.
        let txn = if self.is_postgres() {
            self.db
                .begin_with_config(
                    Some(sea_orm::IsolationLevel::RepeatableRead),
                    Some(sea_orm::AccessMode::ReadOnly),
                )
                .await
        } else {
            // SQLite: a read transaction sees one snapshot of the database.
            self.db.begin().await
        }
        .map_err(repo_err)?;
        let counts =
            StatusCount::find_by_statement(self.statement(
                "SELECT status, COUNT(*) AS n FROM outbox_events WHERE slow GROUP BY status",
                vec![],
            ))
            .all(&txn)
            .await
            .map_err(repo_err)?;
        let mut counts: HashMap<String, i64> = counts.into_iter().map(|c| (c.status, c.n)).collect();
        let fast_total = Count::find_by_statement(
            self.statement("SELECT COUNT(*) AS n FROM outbox_events WHERE NOT slow", vec![]),
        )
        .one(&txn)
        .await
        .map_err(repo_err)?
        .map_or(0, |c| c.n);
        let fast_by_lane = LaneOldest::find_by_statement(self.statement(&self.fast_ready_sql(), vec![]))
            .all(&txn)
            .await
            .map_err(repo_err)?;
        let slow_by_lane = LaneOldest::find_by_statement(self.statement(
            &format!(
                "SELECT lane, COUNT(*) AS n, MIN(created_at) AS at FROM outbox_events \
                 WHERE slow AND status = {} GROUP BY lane",
                literals(&[OutboxStatus::Ready])
            ),
            vec![],
        ))
        .all(&txn)
        .await
        .map_err(repo_err)?;
        let fast_ready: i64 = fast_by_lane.iter().map(|l| l.n).sum();
        // Every lane that exists, waiting or not (a lane that caught up reads 0).
        let lanes = LaneOnly::find_by_statement(
            self.statement("SELECT lane FROM outbox_lanes ORDER BY lane", vec![]),
        )
        .all(&txn)
        .await
        .map_err(repo_err)?;
        let mut by_lane: std::collections::BTreeMap<i16, Option<DateTime<Utc>>> =
            lanes.into_iter().map(|l| (l.lane, None)).collect();
        for l in fast_by_lane.iter().chain(&slow_by_lane) {
            let entry = by_lane.entry(l.lane).or_default();
            *entry = match (*entry, l.at) {
                (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                (a, b) => a.or(b),
            };
        }
        *counts.entry(OutboxStatus::Ready.as_str().to_owned()).or_default() += fast_ready;
        *counts.entry(OutboxStatus::Published.as_str().to_owned()).or_default() += fast_total - fast_ready;
        let by_status =
            OutboxStatus::ALL.iter().map(|s| (*s, counts.get(s.as_str()).copied().unwrap_or(0))).collect();
        let oldest = |sql: String| Oldest::find_by_statement(self.statement(&sql, vec![])).one(&txn);
        // The lanes' oldest waiting events, fast and slow path, already read above.
        let oldest_ready = by_lane.values().flatten().min().copied();
        let oldest_claim = oldest(format!(
            "SELECT MIN(last_attempt_at) AS at FROM outbox_events WHERE status = {}",
            literals(&[OutboxStatus::Processing])
        ))
        .await
        .map_err(repo_err)?
        .and_then(|o| o.at);
        let dead = TypeCount::find_by_statement(self.statement(
            "SELECT event_type, COUNT(*) AS n FROM outbox_events WHERE status = $1 \
             GROUP BY event_type ORDER BY event_type",
            vec![OutboxStatus::DeadLetter.as_str().into()],
        ))
        .all(&txn)
        .await
        .map_err(repo_err)?;
        let blocked = Count::find_by_statement(self.statement(
            "SELECT COUNT(*) AS n FROM (SELECT DISTINCT d.aggregate_type, d.aggregate_id \
               FROM outbox_events d WHERE d.status = $1 AND EXISTS (\
                 SELECT 1 FROM outbox_events r WHERE r.aggregate_type = d.aggregate_type \
                   AND r.aggregate_id = d.aggregate_id AND r.id > d.id AND r.slow AND r.status = $2)) blocked",
            vec![OutboxStatus::DeadLetter.as_str().into(), OutboxStatus::Ready.as_str().into()],
        ))
        .one(&txn)
        .await
        .map_err(repo_err)?
        .map_or(0, |c| c.n);
        txn.commit().await.map_err(repo_err)?;
        Ok(OutboxStats {
            by_status,
            oldest_ready_created_at: oldest_ready,
            oldest_claim_at: oldest_claim,
            dead_letters_by_type: dead.into_iter().map(|t| (t.event_type, t.n)).collect(),
            blocked_aggregates: blocked,
            oldest_ready_by_lane: by_lane.into_iter().collect(),
        })
    }

    async fn get(&self, id: i64) -> Result<Option<OutboxRecord>, RepoError> {
        let sql = format!("{} WHERE o.id = $1", self.derived_select());
        Ok(self.rows(&sql, vec![id.into()]).await?.pop())
    }

    async fn list(&self, filter: &OutboxFilter) -> Result<Vec<OutboxRecord>, RepoError> {
        let mut conditions = vec!["1 = 1".to_owned()];
        let mut values: Vec<Value> = Vec::new();
        let mut bind = |condition: &str, value: Value, conditions: &mut Vec<String>| {
            values.push(value);
            conditions.push(condition.replace('?', &format!("${}", values.len())));
        };
        if let Some(event_type) = &filter.event_type {
            bind("o.event_type = ?", event_type.as_str().into(), &mut conditions);
        }
        if let Some(code) = filter.failure_code {
            bind("o.failure_code = ?", code.as_str().into(), &mut conditions);
        }
        if let Some(before) = filter.dead_lettered_before {
            bind("o.dead_lettered_at < ?", before.into(), &mut conditions);
        }
        if let Some(before) = filter.before_id {
            bind("o.id < ?", before.into(), &mut conditions);
        }
        let limit = u64::from(filter.limit);
        let sql = match filter.status {
            // Derived for fast rows: filter on what the operator sees.
            Some(status @ (OutboxStatus::Ready | OutboxStatus::Published)) => format!(
                "SELECT * FROM ({} WHERE {}) d WHERE d.status = {} ORDER BY d.id DESC LIMIT {limit}",
                self.derived_select(),
                conditions.join(" AND "),
                literals(&[status])
            ),
            // Only slow rows are ever in these.
            Some(status) => format!(
                "{} WHERE {} AND o.slow AND o.status = {} ORDER BY o.id DESC LIMIT {limit}",
                self.derived_select(),
                conditions.join(" AND "),
                literals(&[status])
            ),
            None => format!(
                "{} WHERE {} ORDER BY o.id DESC LIMIT {limit}",
                self.derived_select(),
                conditions.join(" AND ")
            ),
        };
        let mut rows = self.rows(&sql, values).await?;
        rows.reverse();
        Ok(rows)
    }

    async fn for_aggregate(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Vec<OutboxRecord>, RepoError> {
        let sql = format!("{} WHERE o.aggregate_type = $1 AND o.aggregate_id = $2", self.derived_select());
        self.rows(&sql, vec![aggregate_type.into(), aggregate_id.into()]).await
    }

    async fn resolve_dead_letters(
        &self,
        ids: &[i64],
        discard: bool,
        now: DateTime<Utc>,
        audit: AuditRecord,
    ) -> Result<Vec<i64>, RepoError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let action = if discard { OutboxAction::Discard } else { OutboxAction::Republish };
        let txn = self.db.begin().await.map_err(repo_err)?;
        // Raw `RETURNING id`: only the ids are needed (and a whole-row RETURNING would tie
        // this statement to the table's column list).
        let (set, values): (&str, Vec<Value>) = if discard {
            // Keep the discard's own clock for retention.
            ("dead_lettered_at = $2", vec![action.target().as_str().into(), now.into()])
        } else {
            // A fresh start: the retry budget is reset and the row is due at once.
            (
                "retry_count = 0, next_attempt_at = NULL, dead_lettered_at = NULL",
                vec![action.target().as_str().into()],
            )
        };
        let sql = format!(
            "UPDATE outbox_events SET status = $1, version = version + 1, {set} \
             WHERE id IN ({}) AND status IN ({}) RETURNING id",
            ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", "),
            literals(action.from_statuses())
        );
        let moved =
            IdRow::find_by_statement(self.statement(&sql, values)).all(&txn).await.map_err(repo_err)?;
        let mut moved: Vec<i64> = moved.into_iter().map(|m| m.id).collect();
        moved.sort_unstable();
        if !moved.is_empty() {
            let rows: Vec<AuditRecord> =
                moved.iter().map(|id| AuditRecord { entity_id: id.to_string(), ..audit.clone() }).collect();
            insert_audit(&txn, &rows).await?;
            self.wake(&txn).await?;
        }
        txn.commit().await.map_err(repo_err)?;
        if !moved.is_empty() {
            self.relay_wake.notify_one();
        }
        Ok(moved)
    }
}

/// A list as one text parameter for `string_to_array($n, chr(31), chr(30))`: items joined
/// by the unit separator, `None` as the record separator (read back as NULL). Neither can
/// occur in what is joined: numbers, snapshots, and aggregate types and ids (docs/spec.md §5 refuses
/// control characters in input).
fn joined(items: impl Iterator<Item = Option<String>>) -> String {
    items.map(|i| i.unwrap_or_else(|| "\u{1e}".to_owned())).collect::<Vec<_>>().join("\u{1f}")
}

/// Failure reasons come from brokers and networks: keep them readable and bounded.
fn truncate(reason: &str) -> String {
    reason.chars().take(1000).collect()
}
