//! The fast path's batches: a lane's ids filled from its snapshot difference (PostgreSQL)
//! or past its mark (SQLite), a batch's rows read by id, and a batch recorded as one
//! progress row per lane, fenced by the lane's epoch.

use super::*;

impl SeaOrmOutboxStore {
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
        // go in as arrays, unnested in SQL.
        let chosen: Vec<&LaneCursor> = which.iter().map(|&i| &cursors[i]).collect();
        let values: Vec<Value> = vec![
            smallints(chosen.iter().map(|c| c.lane)),
            texts(chosen.iter().map(|c| c.done.clone())),
            texts(chosen.iter().map(|c| c.current.clone())),
            bigints(chosen.iter().map(|c| c.upto_id)),
            (FILL as i64).into(),
        ];
        // The lower bound `xmin(done)` keeps the scan on `idx_outbox_fast` to the events
        // not yet surely done; visibility decides each one.
        // At most FILL ids per lane: a difference of a million events is read in slices, so
        // that memory stays bounded; the next slice starts past `upto`.
        // A lane starting a difference takes this statement's own snapshot as its `cur`
        // (one snapshot for the whole statement, the one its reads see); the last row,
        // lane -1, reports it.
        let sql = "SELECT l.lane, x.id, NULL AS snap FROM (SELECT u.lane, NULLIF(u.done, '') AS done, \
               NULLIF(u.cur, '') AS cur, u.upto \
               FROM unnest($1::smallint[], $2::text[], $3::text[], $4::bigint[]) AS u(lane, done, cur, upto)) l \
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

    pub(super) async fn read_batch(
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
        let ids: Vec<i64> = cursors
            .iter()
            .enumerate()
            .flat_map(|(i, c)| {
                c.pending.iter().skip(skip.get(i).copied().unwrap_or(0)).take(per_lane as usize)
            })
            .copied()
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
                &format!("SELECT {columns}, {held} FROM outbox_events o WHERE o.id = ANY($1::bigint[])"),
                vec![bigints(ids.iter().copied())],
            )
        } else {
            let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            self.statement(
                &format!("SELECT {columns}, {held} FROM outbox_events o WHERE o.id IN ({list})"),
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

    pub(super) async fn record_batch(
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
                smallints(progress.iter().map(|c| c.lane)),
                bigints(progress.iter().map(|c| c.epoch)),
                texts(progress.iter().map(|c| c.done.clone())),
                texts(progress.iter().map(|c| c.current.clone())),
                bigints(progress.iter().map(|c| c.upto_id)),
                now.into(),
                worker.into(),
            ];
            let sql = "INSERT INTO outbox_progress (lane, done, cur, upto_id, published_at, worker) \
                 SELECT v.lane, NULLIF(v.done, ''), NULLIF(v.cur, ''), v.upto, $6, $7 \
                 FROM unnest($1::smallint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[]) \
                   AS v(lane, epoch, done, cur, upto) \
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
}
