//! What operators read and repair: stats (one snapshot), listings, an aggregate's events,
//! dead letters republished or discarded (audited).

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{FromQueryResult, TransactionTrait, Value};

use super::{Count, IdRow, LaneOldest, LaneOnly, Oldest, StatusCount, TypeCount, literals};
use crate::adapters::persistence::audit::insert_audit;
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{
    AuditRecord, OutboxFilter, OutboxOperations, OutboxRecord, OutboxStats, RepoError,
};
use crate::domain::outbox::{OutboxAction, OutboxStatus};

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
        let (set, mut values): (&str, Vec<Value>) = if discard {
            // Keep the discard's own clock for retention.
            ("dead_lettered_at = $2", vec![action.target().as_str().into(), now.into()])
        } else {
            // A fresh start: the retry budget is reset and the row is due at once.
            (
                "retry_count = 0, next_attempt_at = NULL, dead_lettered_at = NULL",
                vec![action.target().as_str().into()],
            )
        };
        let by_id = self.in_ids("id", ids, &mut values);
        let sql = format!(
            "UPDATE outbox_events SET status = $1, version = version + 1, {set} \
             WHERE {by_id} AND status IN ({}) RETURNING id",
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
