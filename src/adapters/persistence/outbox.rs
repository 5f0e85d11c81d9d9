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
use sea_orm::ActiveValue::Set;
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DatabaseConnection, EntityTrait, FromQueryResult,
    QueryFilter, QueryOrder, QuerySelect, Statement, TransactionTrait, Value,
};

use tokio::sync::Notify;

use super::entities::outbox_events::{self, Column};
use super::mapping::{outbox_from_row, status_strings};
use super::orders::insert_audit;
use super::repo_err;
use crate::application::ports::{
    AuditRecord, DeliveryFailure, LaneFilter, NewOutboxEvent, OutboxFilter, OutboxRecord, OutboxStats,
    OutboxStore, RepoError,
};
use crate::domain::outbox::lanes::{self as lane_rules, lane_of};
use crate::domain::outbox::{FailureCode, FailureOutcome, OutboxAction, OutboxStatus};

/// The PostgreSQL `NOTIFY` channel a commit with outbox events signals.
pub const OUTBOX_CHANNEL: &str = "outbox_events";

pub(super) fn outbox_row(e: &NewOutboxEvent, lanes: u16) -> outbox_events::ActiveModel {
    outbox_events::ActiveModel {
        lane: Set(lane_of(&e.aggregate_type, &e.aggregate_id, lanes)),
        event_id: Set(e.event_id.as_uuid()),
        aggregate_type: Set(e.aggregate_type.clone()),
        aggregate_id: Set(e.aggregate_id.clone()),
        event_type: Set(e.event_type.clone()),
        routing_key: Set(e.routing_key.clone()),
        payload: Set(e.payload.clone()),
        correlation_id: Set(e.correlation_id.clone()),
        status: Set(OutboxStatus::Ready.as_str().to_owned()),
        retry_count: Set(0),
        failure_code: Set(None),
        failure_reason: Set(None),
        next_attempt_at: Set(None),
        last_attempt_at: Set(None),
        claimed_by: Set(None),
        claimed_until: Set(None),
        created_at: Set(e.created_at),
        published_at: Set(None),
        dead_lettered_at: Set(None),
        version: Set(1),
        ..Default::default()
    }
}

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
}

#[derive(Debug, FromQueryResult)]
struct Oldest {
    at: Option<DateTime<Utc>>,
}

#[async_trait]
impl OutboxStore for SeaOrmOutboxStore {
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
               WHERE o.status IN ({claimable}) \
                 AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $4) {in_lanes}\
                 AND NOT EXISTS (SELECT 1 FROM outbox_events p \
                   WHERE p.aggregate_type = o.aggregate_type AND p.aggregate_id = o.aggregate_id \
                     AND p.id < o.id AND p.status IN ({blocking})) \
               ORDER BY o.id LIMIT $5 {lock}) \
             AND status IN ({claimable}) \
             RETURNING *"
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
    ) -> Result<Vec<i16>, RepoError> {
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
        let mut held: Vec<i16> = lane_list(
            "UPDATE outbox_lanes SET lease_until = $1 WHERE owner = $2 RETURNING lane",
            vec![lease_until.into(), worker.into()],
        )
        .await
        .map_err(repo_err)?
        .into_iter()
        .map(|r| r.lane)
        .collect();
        let plan =
            lane_rules::plan(&held, usize::try_from(total).unwrap_or(0), usize::try_from(live).unwrap_or(1));
        if !plan.release.is_empty() {
            let list = plan.release.iter().map(i16::to_string).collect::<Vec<_>>().join(", ");
            exec(
                &format!("UPDATE outbox_lanes SET owner = NULL, lease_until = NULL WHERE owner = $1 AND lane IN ({list})"),
                vec![worker.into()],
            )
            .await
            .map_err(repo_err)?;
            held.retain(|l| !plan.release.contains(l));
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
                     AND (owner IS NULL OR lease_until <= $3) RETURNING lane"
                ),
                vec![worker.into(), lease_until.into(), now.into(), (plan.acquire as i64).into()],
            )
            .await
            .map_err(repo_err)?;
            held.extend(taken.into_iter().map(|r| r.lane));
        }
        txn.commit().await.map_err(repo_err)?;
        held.sort_unstable();
        Ok(held)
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
            // SPEC §6: the failure of an earlier attempt is cleared once published.
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

    async fn purge(
        &self,
        published_before: DateTime<Utc>,
        dead_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<u64, RepoError> {
        // One bounded statement per kind, each on its partial index.
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
                break;
            }
            let values: Vec<Value> = vec![before.into(), (budget as i64).into()];
            deleted +=
                self.db.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?.rows_affected();
        }
        Ok(deleted)
    }

    async fn stats(&self) -> Result<OutboxStats, RepoError> {
        let backend = self.db.get_database_backend();
        let counts = StatusCount::find_by_statement(Statement::from_string(
            backend,
            "SELECT status, COUNT(*) AS n FROM outbox_events GROUP BY status",
        ))
        .all(&self.db)
        .await
        .map_err(repo_err)?;
        let counts: HashMap<String, i64> = counts.into_iter().map(|c| (c.status, c.n)).collect();
        let by_status =
            OutboxStatus::ALL.iter().map(|s| (*s, counts.get(s.as_str()).copied().unwrap_or(0))).collect();
        let oldest = |sql: &str, status: OutboxStatus| {
            Oldest::find_by_statement(self.statement(sql, vec![status.as_str().into()])).one(&self.db)
        };
        let oldest_ready =
            oldest("SELECT MIN(created_at) AS at FROM outbox_events WHERE status = $1", OutboxStatus::Ready)
                .await
                .map_err(repo_err)?
                .and_then(|o| o.at);
        let oldest_claim = oldest(
            "SELECT MIN(last_attempt_at) AS at FROM outbox_events WHERE status = $1",
            OutboxStatus::Processing,
        )
        .await
        .map_err(repo_err)?
        .and_then(|o| o.at);
        let dead = TypeCount::find_by_statement(self.statement(
            "SELECT event_type, COUNT(*) AS n FROM outbox_events WHERE status = $1 \
             GROUP BY event_type ORDER BY event_type",
            vec![OutboxStatus::DeadLetter.as_str().into()],
        ))
        .all(&self.db)
        .await
        .map_err(repo_err)?;
        let blocked = Count::find_by_statement(self.statement(
            "SELECT COUNT(*) AS n FROM (SELECT DISTINCT d.aggregate_type, d.aggregate_id \
               FROM outbox_events d WHERE d.status = $1 AND EXISTS (\
                 SELECT 1 FROM outbox_events r WHERE r.aggregate_type = d.aggregate_type \
                   AND r.aggregate_id = d.aggregate_id AND r.id > d.id AND r.status = $2)) blocked",
            vec![OutboxStatus::DeadLetter.as_str().into(), OutboxStatus::Ready.as_str().into()],
        ))
        .one(&self.db)
        .await
        .map_err(repo_err)?
        .map_or(0, |c| c.n);
        Ok(OutboxStats {
            by_status,
            oldest_ready_created_at: oldest_ready,
            oldest_claim_at: oldest_claim,
            dead_letters_by_type: dead.into_iter().map(|t| (t.event_type, t.n)).collect(),
            blocked_aggregates: blocked,
        })
    }

    async fn get(&self, id: i64) -> Result<Option<OutboxRecord>, RepoError> {
        outbox_events::Entity::find_by_id(id)
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .map(outbox_from_row)
            .transpose()
    }

    async fn list(&self, filter: &OutboxFilter) -> Result<Vec<OutboxRecord>, RepoError> {
        let mut query = outbox_events::Entity::find();
        if let Some(status) = filter.status {
            query = query.filter(Column::Status.eq(status.as_str()));
        }
        if let Some(event_type) = &filter.event_type {
            query = query.filter(Column::EventType.eq(event_type.as_str()));
        }
        if let Some(code) = filter.failure_code {
            query = query.filter(Column::FailureCode.eq(code.as_str()));
        }
        if let Some(before) = filter.dead_lettered_before {
            query = query.filter(Column::DeadLetteredAt.lt(before));
        }
        if let Some(before) = filter.before_id {
            query = query.filter(Column::Id.lt(before));
        }
        query
            .order_by_desc(Column::Id)
            .limit(u64::from(filter.limit))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(outbox_from_row)
            .collect()
    }

    async fn for_aggregate(
        &self,
        aggregate_type: &str,
        aggregate_id: &str,
    ) -> Result<Vec<OutboxRecord>, RepoError> {
        outbox_events::Entity::find()
            .filter(Column::AggregateType.eq(aggregate_type))
            .filter(Column::AggregateId.eq(aggregate_id))
            .order_by_asc(Column::Id)
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(outbox_from_row)
            .collect()
    }

    async fn settle_dead_letters(
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
        let mut update = outbox_events::Entity::update_many()
            .col_expr(Column::Status, Expr::value(action.target().as_str()))
            .col_expr(Column::Version, Expr::col(Column::Version).add(1));
        if !discard {
            // A fresh start: the retry budget is reset and the row is due at once.
            update = update
                .col_expr(Column::RetryCount, Expr::value(0))
                .col_expr(Column::NextAttemptAt, Expr::value(Option::<DateTime<Utc>>::None))
                .col_expr(Column::DeadLetteredAt, Expr::value(Option::<DateTime<Utc>>::None));
        } else {
            // Keep the discard's own clock for retention.
            update = update.col_expr(Column::DeadLetteredAt, Expr::value(now));
        }
        let moved = update
            .filter(Column::Id.is_in(ids.iter().copied()))
            .filter(Column::Status.is_in(status_strings(action.from_statuses())))
            .exec_with_returning(&txn)
            .await
            .map_err(repo_err)?;
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

/// Failure reasons come from brokers and networks: keep them readable and bounded.
fn truncate(reason: &str) -> String {
    reason.chars().take(1000).collect()
}
