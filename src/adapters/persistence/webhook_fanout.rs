//! The fan-out's read of the outbox and its writes (docs/spec.md §16), on its own cursor
//! (`webhook_cursor`, row `fanout`).
//!
//! On PostgreSQL an event's id is taken when it is inserted, not when its transaction
//! commits, so "past id n" could skip an event that took its id early and committed late.
//! The cursor is therefore a pair of snapshots, as the relay's lanes are (`outbox/cursors`):
//! `done` (every event visible in it is fanned out) and `current` (the one being worked
//! through, past `upto`); an event is read once its transaction is visible in `current` and
//! was not in `done`, found by the `txid` index. SQLite has one writer at a time, so its ids
//! commit in order and the cursor is the last id read.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseBackend, FromQueryResult, TransactionTrait, Value};

use super::entities::webhook_endpoints;
use super::store::SeaOrmStore;
use super::webhook_endpoints::endpoint_from_row;
use super::{repo_err, statement};
use crate::application::ports::{
    FanoutBatch, FanoutPosition, OutboxEventView, RepoError, WebhookEvent, WebhookFanoutStore,
};
use crate::domain::ids::{EventId, MerchantId};
use crate::domain::webhook::Endpoint;
use crate::domain::webhook_message::Message;

/// On PostgreSQL, lets `txn` commit without waiting for the WAL flush. The webhooks' own
/// transactions may: a crash that loses one only does its work again (the fan-out reads the
/// same events and makes the same messages; a lost record sends its attempt again under
/// the same `webhook-id`), and one that survives has all the WAL before it. The saga's
/// commits then never queue behind the webhooks' flushes.
pub(super) async fn commit_without_waiting<C: ConnectionTrait>(txn: &C) -> Result<(), RepoError> {
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        txn.execute_unprepared("SET LOCAL synchronous_commit = off").await.map_err(repo_err)?;
    }
    Ok(())
}

/// The cursor's row.
const NAME: &str = "fanout";
/// Rows per insert statement (within both databases' bounds on parameters).
const ROWS_PER_INSERT: usize = 500;

#[derive(FromQueryResult)]
struct CursorRow {
    outbox_id: i64,
    done_snapshot: Option<String>,
    current_snapshot: Option<String>,
}

#[derive(FromQueryResult)]
struct EventRow {
    id: i64,
    event_id: uuid::Uuid,
    event_type: String,
    payload: String,
    created_at: chrono::DateTime<chrono::Utc>,
}

#[derive(FromQueryResult)]
struct Text {
    value: Option<String>,
}

#[derive(FromQueryResult)]
struct Max {
    value: Option<i64>,
}

impl SeaOrmStore {
    fn backend(&self) -> DatabaseBackend {
        self.db.get_database_backend()
    }

    async fn cursor<C: ConnectionTrait>(&self, conn: &C) -> Result<Option<FanoutPosition>, RepoError> {
        let sql = "SELECT outbox_id, done_snapshot, current_snapshot FROM webhook_cursor WHERE name = $1";
        let row = CursorRow::find_by_statement(statement(self.backend(), sql, vec![NAME.into()]))
            .one(conn)
            .await
            .map_err(repo_err)?;
        Ok(row.map(|r| FanoutPosition {
            done: r.done_snapshot,
            current: r.current_snapshot,
            upto: r.outbox_id,
        }))
    }

    /// The first position ever: the outbox's present (what came before had no endpoint).
    async fn start_cursor(&self) -> Result<(), RepoError> {
        let sql = if self.backend() == DatabaseBackend::Postgres {
            "INSERT INTO webhook_cursor (name, outbox_id, done_snapshot) \
             VALUES ($1, 0, pg_current_snapshot()::text) ON CONFLICT (name) DO NOTHING"
        } else {
            "INSERT INTO webhook_cursor (name, outbox_id) \
             VALUES ($1, (SELECT COALESCE(MAX(id), 0) FROM outbox_events)) ON CONFLICT (name) DO NOTHING"
        };
        self.db.execute_raw(statement(self.backend(), sql, vec![NAME.into()])).await.map_err(repo_err)?;
        Ok(())
    }

    async fn next_on_postgres(
        &self,
        read: FanoutPosition,
        types: &[&'static str],
        limit: u32,
    ) -> Result<FanoutBatch, RepoError> {
        let backend = self.backend();
        let done =
            read.done.clone().ok_or_else(|| RepoError::corrupt("webhook_cursor.done_snapshot is empty"))?;
        let current = match &read.current {
            Some(c) => c.clone(),
            None => Text::find_by_statement(statement(
                backend,
                "SELECT pg_current_snapshot()::text AS value",
                vec![],
            ))
            .one(&self.db)
            .await
            .map_err(repo_err)?
            .and_then(|t| t.value)
            .ok_or_else(|| RepoError::corrupt("pg_current_snapshot() returned nothing"))?,
        };
        let sql = format!(
            "SELECT o.id, o.event_id, o.event_type, o.payload, o.created_at FROM outbox_events o \
             WHERE o.txid >= pg_snapshot_xmin($1::pg_snapshot) AND o.txid < pg_snapshot_xmax($2::pg_snapshot) \
               AND pg_visible_in_snapshot(o.txid, $2::pg_snapshot) \
               AND NOT pg_visible_in_snapshot(o.txid, $1::pg_snapshot) \
               AND o.id > $3 AND o.event_type IN ({}) ORDER BY o.id LIMIT $4",
            type_list(types)
        );
        let values: Vec<Value> =
            vec![done.clone().into(), current.clone().into(), read.upto.into(), i64::from(limit).into()];
        let rows = EventRow::find_by_statement(statement(backend, &sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        let next = match rows.last() {
            Some(last) if rows.len() >= limit as usize => {
                FanoutPosition { done: Some(done), current: Some(current), upto: last.id }
            }
            _ => FanoutPosition { done: Some(current), current: None, upto: 0 },
        };
        Ok(FanoutBatch { read, next, events: views(rows) })
    }

    async fn next_on_sqlite(
        &self,
        read: FanoutPosition,
        types: &[&'static str],
        limit: u32,
    ) -> Result<FanoutBatch, RepoError> {
        let backend = self.backend();
        // One read transaction: the rows and the last id are of one moment.
        let txn = self.db.begin().await.map_err(repo_err)?;
        let sql = format!(
            "SELECT id, event_id, event_type, payload, created_at FROM outbox_events \
             WHERE id > $1 AND event_type IN ({}) ORDER BY id LIMIT $2",
            type_list(types)
        );
        let rows = EventRow::find_by_statement(statement(
            backend,
            &sql,
            vec![read.upto.into(), i64::from(limit).into()],
        ))
        .all(&txn)
        .await
        .map_err(repo_err)?;
        let upto = match rows.last() {
            Some(last) if rows.len() >= limit as usize => last.id,
            _ => Max::find_by_statement(statement(
                backend,
                "SELECT MAX(id) AS value FROM outbox_events",
                vec![],
            ))
            .one(&txn)
            .await
            .map_err(repo_err)?
            .and_then(|m| m.value)
            .unwrap_or(read.upto)
            .max(read.upto),
        };
        txn.commit().await.map_err(repo_err)?;
        Ok(FanoutBatch {
            next: FanoutPosition { done: None, current: None, upto },
            read,
            events: views(rows),
        })
    }
}

/// `'order.completed', …`: the domain's event names (lower-case letters, `.` and `_`) as
/// SQL literals.
fn type_list(types: &[&'static str]) -> String {
    types
        .iter()
        .filter(|t| t.bytes().all(|b| b.is_ascii_lowercase() || b == b'.' || b == b'_'))
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn views(rows: Vec<EventRow>) -> Vec<OutboxEventView> {
    rows.into_iter()
        .map(|r| OutboxEventView {
            event_id: EventId::from_uuid(r.event_id),
            event_type: r.event_type,
            envelope: r.payload,
            created_at: r.created_at,
        })
        .collect()
}

/// `($1, $2, …), (…)`: `rows` rows of `width` placeholders, numbered from 1.
fn value_rows(rows: usize, width: usize) -> String {
    (0..rows)
        .map(|r| {
            let cells: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            format!("({})", cells.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

async fn insert_events<C: ConnectionTrait>(conn: &C, events: &[WebhookEvent]) -> Result<(), RepoError> {
    let backend = conn.get_database_backend();
    for chunk in events.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO webhook_events (event_id, merchant_id, event_type, body, created_at) VALUES {} \
             ON CONFLICT (event_id) DO NOTHING",
            value_rows(chunk.len(), 5)
        );
        let values: Vec<Value> = chunk
            .iter()
            .flat_map(|e| -> [Value; 5] {
                [
                    e.event_id.as_uuid().into(),
                    e.merchant_id.as_uuid().into(),
                    e.event_type.clone().into(),
                    e.body.clone().into(),
                    e.created_at.into(),
                ]
            })
            .collect();
        conn.execute_raw(statement(backend, &sql, values)).await.map_err(repo_err)?;
    }
    Ok(())
}

async fn insert_messages<C: ConnectionTrait>(conn: &C, messages: &[Message]) -> Result<(), RepoError> {
    let backend = conn.get_database_backend();
    for chunk in messages.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, status, attempts, \
               next_attempt_at, created_at, updated_at, manual) VALUES {} \
             ON CONFLICT (endpoint_id, event_id) DO NOTHING",
            value_rows(chunk.len(), 9)
        );
        let values: Vec<Value> = chunk
            .iter()
            .flat_map(|m| -> [Value; 9] {
                [
                    m.endpoint_id.as_uuid().into(),
                    m.event_id.as_uuid().into(),
                    m.event_type.clone().into(),
                    m.status.as_str().into(),
                    i32::try_from(m.attempts).unwrap_or(i32::MAX).into(),
                    m.next_attempt_at.into(),
                    m.created_at.into(),
                    m.created_at.into(),
                    m.manual.into(),
                ]
            })
            .collect();
        conn.execute_raw(statement(backend, &sql, values)).await.map_err(repo_err)?;
    }
    Ok(())
}

#[async_trait]
impl WebhookFanoutStore for SeaOrmStore {
    async fn next_events(&self, types: &[&'static str], limit: u32) -> Result<FanoutBatch, RepoError> {
        let read = match self.cursor(&self.db).await? {
            Some(read) => read,
            None => {
                self.start_cursor().await?;
                let read = self
                    .cursor(&self.db)
                    .await?
                    .ok_or_else(|| RepoError::corrupt("webhook_cursor: no row after its insert"))?;
                return Ok(FanoutBatch { next: read.clone(), read, events: Vec::new() });
            }
        };
        if self.backend() == DatabaseBackend::Postgres {
            self.next_on_postgres(read, types, limit).await
        } else {
            self.next_on_sqlite(read, types, limit).await
        }
    }

    async fn enabled_endpoints(&self, merchants: &[MerchantId]) -> Result<Vec<Endpoint>, RepoError> {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        let rows = webhook_endpoints::Entity::find()
            .filter(webhook_endpoints::Column::MerchantId.is_in(merchants.iter().map(MerchantId::as_uuid)))
            .filter(webhook_endpoints::Column::DisabledReason.is_null())
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.iter().map(endpoint_from_row).collect()
    }

    async fn fan_out(
        &self,
        read: &FanoutPosition,
        next: &FanoutPosition,
        events: &[WebhookEvent],
        messages: &[Message],
    ) -> Result<bool, RepoError> {
        let backend = self.backend();
        let same = if backend == DatabaseBackend::Postgres { "IS NOT DISTINCT FROM" } else { "IS" };
        let sql = format!(
            "UPDATE webhook_cursor SET outbox_id = $1, done_snapshot = $2, current_snapshot = $3 \
             WHERE name = $4 AND outbox_id = $5 AND done_snapshot {same} $6 AND current_snapshot {same} $7"
        );
        let values: Vec<Value> = vec![
            next.upto.into(),
            next.done.clone().into(),
            next.current.clone().into(),
            NAME.into(),
            read.upto.into(),
            read.done.clone().into(),
            read.current.clone().into(),
        ];
        let txn = self.db.begin().await.map_err(repo_err)?;
        commit_without_waiting(&txn).await?;
        let moved = txn.execute_raw(statement(backend, &sql, values)).await.map_err(repo_err)?;
        if moved.rows_affected() != 1 {
            let _ = txn.rollback().await;
            return Ok(false);
        }
        insert_events(&txn, events).await?;
        insert_messages(&txn, messages).await?;
        txn.commit().await.map_err(repo_err)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Migration 29's partial index on `txid` serves the fan-out's read only if it names the
    /// same events.
    #[test]
    fn the_fanouts_index_names_the_events_it_reads() {
        assert_eq!(
            migrations::m20261211_000029_webhook_delivery::WEBHOOK_EVENT_TYPES,
            crate::domain::webhook::EVENT_TYPES
        );
    }

    #[test]
    fn value_rows_number_every_cell() {
        assert_eq!(value_rows(2, 3), "($1, $2, $3), ($4, $5, $6)");
    }
}
