//! Upkeep: slow-path claims whose lease ran out returned, and the daily clean-up by
//! retention.

use super::*;

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
