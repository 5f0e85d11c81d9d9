//! Upkeep: slow-path claims whose lease ran out returned, and the daily clean-up by
//! retention.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, FromQueryResult, TransactionTrait, Value};

use super::{IdRow, LaneOnly, literals};
use crate::adapters::persistence::audit::insert_audit;
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{AuditRecord, OutboxUpkeep, RepoError, RestoredRebase};
use crate::domain::outbox::lanes as lane_rules;
use crate::domain::outbox::{FailureCode, OutboxAction, OutboxStatus};

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

    async fn restored_history(&self) -> Result<bool, RepoError> {
        if !self.is_postgres() {
            return Ok(false);
        }
        restored_on(self, &self.db).await
    }

    async fn rebase_restored(&self, audit: AuditRecord) -> Result<RestoredRebase, RepoError> {
        let now = audit.created_at;
        if !self.is_postgres() {
            return Ok(RestoredRebase::default());
        }
        let txn = self.db.begin().await.map_err(repo_err)?;
        // Every lane held: no relay records (its record joins its lane row FOR SHARE) or
        // takes a lane until this commits.
        txn.execute_unprepared("SELECT lane FROM outbox_lanes ORDER BY lane FOR UPDATE")
            .await
            .map_err(repo_err)?;
        if !restored_on(self, &txn).await? {
            txn.rollback().await.map_err(repo_err)?;
            return Ok(RestoredRebase::default());
        }
        // Covered by its lane's newest restored progress row: the old server sent it. Both
        // the row's transaction id and the progress row's snapshots are the old server's,
        // so the coverage is read as that server would have read it.
        let keep = OutboxAction::KeepRestoredProgress;
        let kept_sent = txn
            .execute_raw(self.statement(
                &format!(
                    "UPDATE outbox_events o SET slow = TRUE, status = $1, published_at = lp.published_at, \
                       failure_code = NULL, failure_reason = NULL, version = o.version + 1 \
                     FROM (SELECT DISTINCT ON (p.lane) p.lane, p.done, p.cur, p.upto_id, p.published_at \
                       FROM outbox_progress p ORDER BY p.lane, p.id DESC) lp \
                     WHERE o.lane = lp.lane AND NOT o.slow AND o.status IN ({}) AND {}",
                    literals(keep.from_statuses()),
                    self.covered("o", "lp")
                ),
                vec![keep.target().as_str().into()],
            ))
            .await
            .map_err(repo_err)?
            .rows_affected();
        // The rest go out: stamped with this transaction's id, which every snapshot taken
        // after it counts as committed, and no progress row says done.
        let to_send = txn
            .execute_unprepared("UPDATE outbox_events SET txid = pg_current_xact_id() WHERE NOT slow")
            .await
            .map_err(repo_err)?
            .rows_affected();
        txn.execute_unprepared("DELETE FROM outbox_progress").await.map_err(repo_err)?;
        let detail = format!("{kept_sent} event(s) kept as sent, {to_send} to send");
        insert_audit(&txn, &[AuditRecord { detail: Some(detail), ..audit }]).await?;
        // A new incarnation: a relay that read the old history forgets its cursors.
        txn.execute_unprepared("DELETE FROM outbox_incarnation").await.map_err(repo_err)?;
        self.wake(&txn).await?;
        txn.commit().await.map_err(repo_err)?;
        tracing::warn!(kept_sent, to_send, at = %now, "outbox history restored from another server made this server's own");
        self.relay_wake.notify_one();
        Ok(RestoredRebase { restored: true, kept_sent, to_send })
    }
}

/// PostgreSQL: whether a lane's newest progress row or a fast-path event carries a
/// transaction id at or past this server's next one (one index probe per lane each).
async fn restored_on<C: ConnectionTrait>(store: &SeaOrmOutboxStore, conn: &C) -> Result<bool, RepoError> {
    #[derive(Debug, FromQueryResult)]
    struct Restored {
        restored: bool,
    }
    let sql = format!(
        "SELECT EXISTS (SELECT 1 FROM generate_series(0, {max}) g(lane) \
           CROSS JOIN LATERAL (SELECT p.done, p.cur FROM outbox_progress p WHERE p.lane = g.lane \
             ORDER BY p.id DESC LIMIT 1) lp \
           WHERE GREATEST(pg_snapshot_xmax(lp.done::pg_snapshot), pg_snapshot_xmax(lp.cur::pg_snapshot)) \
             > pg_snapshot_xmax(pg_current_snapshot())) \
         OR EXISTS (SELECT 1 FROM generate_series(0, {max}) g(lane) \
           CROSS JOIN LATERAL (SELECT o.txid FROM outbox_events o WHERE o.lane = g.lane AND NOT o.slow \
             ORDER BY o.txid DESC LIMIT 1) lt \
           WHERE lt.txid >= pg_snapshot_xmax(pg_current_snapshot())) AS restored",
        max = lane_rules::MAX_LANES - 1
    );
    let row = Restored::find_by_statement(store.statement(&sql, vec![]))
        .one(conn)
        .await
        .map_err(repo_err)?
        .ok_or_else(|| RepoError::unavailable("no answer to the restored-history check"))?;
    Ok(row.restored)
}
