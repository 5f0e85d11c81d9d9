//! Lanes: leases held in fair shares as workers come and go (each take-over bumps the
//! lane's epoch, which fences the previous owner's records).

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseBackend, FromQueryResult, TransactionTrait, Value};

use super::{Count, LaneRow};
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{HeldLane, RepoError};
use crate::domain::outbox::lanes as lane_rules;

impl SeaOrmOutboxStore {
    pub(super) async fn lease(
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
            let mut values = vec![worker.into()];
            let released = self.in_lanes("lane", &plan.release, &mut values);
            exec(
                &format!(
                    "UPDATE outbox_lanes SET owner = NULL, lease_until = NULL WHERE owner = $1 AND {released}"
                ),
                values,
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

    pub(super) async fn release(&self, worker: &str) -> Result<(), RepoError> {
        let txn = self.db.begin().await.map_err(repo_err)?;
        for sql in [
            "UPDATE outbox_lanes SET owner = NULL, lease_until = NULL WHERE owner = $1",
            "DELETE FROM outbox_relays WHERE worker = $1",
        ] {
            txn.execute_raw(self.statement(sql, vec![worker.into()])).await.map_err(repo_err)?;
        }
        txn.commit().await.map_err(repo_err)?;
        self.cursors.forget(worker);
        Ok(())
    }
}
