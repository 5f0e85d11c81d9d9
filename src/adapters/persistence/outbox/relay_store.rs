//! The relay's port: the fast path's batches and the lanes (`fast`, `lanes`), and the slow
//! path's per-row claims and marks.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, DatabaseBackend, EntityTrait, FromQueryResult, QueryFilter, TransactionTrait, Value,
};

use super::{OUTBOX_COLUMNS, Oldest, literals, smallints, truncate};
use crate::adapters::persistence::entities::outbox_events;
use crate::adapters::persistence::entities::outbox_events::Column;
use crate::adapters::persistence::mapping::status_strings;
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{
    BatchToken, DeliveryFailure, FastBatch, FastRecord, HeldLane, OutboxRecord, RelayStore, RepoError,
};
use crate::domain::outbox::{FailureOutcome, OutboxAction, OutboxStatus};

#[async_trait]
impl RelayStore for SeaOrmOutboxStore {
    async fn claim(
        &self,
        worker: &str,
        lanes: &[i16],
        limit: u32,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<OutboxRecord>, RepoError> {
        // The lanes as literals (integers) so the planner can use `idx_outbox_claimable_lane`;
        // the sub-select is the fence: only lanes whose lease this worker holds right now.
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let in_lanes = format!(
            "AND o.lane IN ({}) AND o.lane IN (SELECT l.lane FROM outbox_lanes l \
               WHERE l.owner = $2 AND l.lease_until > $4) ",
            lanes.iter().map(i16::to_string).collect::<Vec<_>>().join(", ")
        );
        // The status lists are constants of the domain, written into the SQL as literals
        // (not bound): only then can PostgreSQL match the partial index
        // `idx_outbox_claimable` under a generic prepared-statement plan.
        let claimable = literals(OutboxAction::Claim.from_statuses());
        if self.is_postgres() && !self.slow_rows_due(lanes, &claimable, now).await? {
            return Ok(Vec::new());
        }
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
        self.lease(worker, lanes, now, lease_until).await
    }

    async fn next_batch(
        &self,
        worker: &str,
        held: &[HeldLane],
        unrecorded: &[BatchToken],
        limit: u32,
    ) -> Result<Option<FastBatch>, RepoError> {
        SeaOrmOutboxStore::next_batch(self, worker, held, unrecorded, limit).await
    }

    async fn record_batches(
        &self,
        worker: &str,
        record: &FastRecord,
        now: DateTime<Utc>,
    ) -> Result<Vec<i16>, RepoError> {
        SeaOrmOutboxStore::record_batches(self, worker, record, now).await
    }

    async fn release_lanes(&self, worker: &str) -> Result<(), RepoError> {
        self.release(worker).await
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

impl SeaOrmOutboxStore {
    /// PostgreSQL: whether any slow-path row of `lanes` is due, on the fast path's pool (one
    /// plan per session, on `idx_outbox_claimable_lane`). A relay looks at the slow path on
    /// every drain, and at a trickle nearly every look finds nothing: the claim itself must
    /// be planned with its bound values (docs/decisions.md, "Custom plans for the outbox"),
    /// which costs more than this whole look.
    async fn slow_rows_due(
        &self,
        lanes: &[i16],
        claimable: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, RepoError> {
        #[derive(Debug, FromQueryResult)]
        struct Due {
            due: bool,
        }
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM outbox_events o WHERE o.slow AND o.status IN ({claimable}) \
               AND o.lane = ANY($1::smallint[]) AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= $2)) AS due"
        );
        let values: Vec<Value> = vec![smallints(lanes.iter().copied()), now.into()];
        let due = Due::find_by_statement(self.statement(&sql, values))
            .one(&self.fast)
            .await
            .map_err(repo_err)?
            .is_some_and(|d| d.due);
        Ok(due)
    }
}
