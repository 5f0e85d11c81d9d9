//! A batch's record: one progress row per lane, fenced by the lane's epoch, and — when the
//! broker refused some of its events — their move to the slow path, in one transaction.

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, FromQueryResult, TransactionTrait, Value};

use super::Page;
use crate::adapters::persistence::outbox::{LaneOnly, bigints, smallints, texts, truncate};
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{FastRecord, RepoError};
use crate::domain::outbox::{FailureOutcome, OutboxStatus};

impl SeaOrmOutboxStore {
    /// The record's transaction: returns the lanes recorded (those still held under the
    /// page's epoch, and on PostgreSQL read in the server's present incarnation).
    pub(super) async fn write_progress(
        &self,
        worker: &str,
        progress: &[&Page],
        batch: &FastRecord,
        now: DateTime<Utc>,
    ) -> Result<Vec<i16>, RepoError> {
        // First, and fenced: a progress row for each lane this worker still holds under the
        // epoch it read it with (the lane row held against a take-over until commit on
        // PostgreSQL). Writing first also takes SQLite's write lock before anything is read,
        // so a concurrent writer makes this wait, not fail.
        let all_sent = batch.failures.is_empty() && batch.held_back.is_empty();
        let (sql, values) = if self.is_postgres() {
            let values: Vec<Value> = vec![
                smallints(progress.iter().map(|c| c.lane)),
                bigints(progress.iter().map(|c| c.epoch)),
                texts(progress.iter().map(|c| c.next.done.clone())),
                texts(progress.iter().map(|c| c.next.current.clone())),
                bigints(progress.iter().map(|c| c.next.upto_id)),
                now.into(),
                worker.into(),
                texts(progress.iter().map(|c| c.incarnation.clone())),
            ];
            // A record whose events all went out commits without waiting for the WAL flush
            // (`synchronous_commit` off for its own transaction; `set_config(..., true)` is
            // joined in, as a subquery nothing refers to is not evaluated, and is one row, so
            // it changes none): a crash that loses it only sends its events again, and one
            // that survives it has the WAL before it, so every transaction id its snapshot
            // counts as done, on disk. A page read before a crash is not recorded after it
            // (no incarnation matches), so no snapshot taken before a crash is recorded after
            // it (docs/decisions.md, "The fast path's records commit asynchronously, again").
            let commit_mode = if all_sent {
                "CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode "
            } else {
                ""
            };
            let sql = format!(
                "INSERT INTO outbox_progress (lane, done, cur, upto_id, published_at, worker) \
                 SELECT v.lane, NULLIF(v.done, ''), NULLIF(v.cur, ''), v.upto, $6, $7 \
                 FROM unnest($1::smallint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $8::text[]) \
                   AS v(lane, epoch, done, cur, upto, incarnation) {commit_mode}\
                 JOIN outbox_incarnation i ON i.token = v.incarnation \
                 JOIN outbox_lanes l ON l.lane = v.lane AND l.epoch = v.epoch AND l.owner = $7 \
                 FOR SHARE OF l RETURNING lane"
            );
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
                        c.next.done.clone().into(),
                        c.next.current.clone().into(),
                        c.next.upto_id.into(),
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
        if all_sent {
            // Every event went out: the insert alone, one statement and its own transaction
            // (one round trip instead of three on the path every batch takes).
            let recorded = insert.all(&self.fast).await.map_err(repo_err)?;
            return Ok(recorded.into_iter().map(|l| l.lane).collect());
        }
        let txn = self.fast.begin().await.map_err(repo_err)?;
        let recorded: Vec<i16> =
            insert.all(&txn).await.map_err(repo_err)?.into_iter().map(|l| l.lane).collect();
        if recorded.is_empty() {
            txn.rollback().await.map_err(repo_err)?;
            return Ok(recorded);
        }
        for f in &batch.failures {
            let (status, retry_count, next_attempt_at, dead_lettered_at) = match f.outcome {
                FailureOutcome::Retry { retry_count, next_attempt_at } => {
                    (OutboxStatus::RetryWait, retry_count, Some(next_attempt_at), None)
                }
                FailureOutcome::DeadLetter { retry_count } => {
                    (OutboxStatus::DeadLetter, retry_count, None, Some(now))
                }
            };
            let mut values: Vec<Value> = vec![
                status.as_str().into(),
                retry_count.into(),
                next_attempt_at.into(),
                dead_lettered_at.into(),
                f.code.as_str().into(),
                truncate(&f.reason).into(),
                batch.attempted_at.into(),
                f.id.into(),
            ];
            let in_lanes = self.in_lanes("lane", &recorded, &mut values);
            let sql = format!(
                "UPDATE outbox_events SET slow = TRUE, status = $1, retry_count = $2, next_attempt_at = $3, \
                   dead_lettered_at = $4, failure_code = $5, failure_reason = $6, last_attempt_at = $7, \
                   version = version + 1 \
                 WHERE id = $8 AND NOT slow AND {in_lanes}"
            );
            txn.execute_raw(self.statement(&sql, values)).await.map_err(repo_err)?;
        }
        if !batch.held_back.is_empty() {
            let mut values = Vec::new();
            let ids = self.in_ids("id", &batch.held_back, &mut values);
            let in_lanes = self.in_lanes("lane", &recorded, &mut values);
            txn.execute_raw(self.statement(
                &format!(
                    "UPDATE outbox_events SET slow = TRUE, version = version + 1 \
                     WHERE {ids} AND NOT slow AND {in_lanes}"
                ),
                values,
            ))
            .await
            .map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        Ok(recorded)
    }
}
