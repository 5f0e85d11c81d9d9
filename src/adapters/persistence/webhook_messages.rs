//! Webhook messages and their attempts (docs/spec.md §16): the workers' claims (one
//! statement for a batch, at most `per_endpoint` of each endpoint), each attempt recorded
//! with the message's new state and its endpoint's in one transaction conditional on the
//! claim, the log's reads, replays and retention.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, EntityTrait, FromQueryResult, QueryFilter,
    TransactionTrait, Value,
};

use super::audit::insert_audit;
use super::entities::webhook_endpoints;
use super::mapping::corrupt;
use super::store::SeaOrmStore;
use super::webhook_endpoints::{endpoint_from_row, secrets_from_row};
use super::{repo_err, statement};
use crate::application::ports::{
    AttemptRecord, AuditRecord, DeliveryRecord, DueMessage, MessageQuery, MessageView, Recorded, RepoError,
    WebhookDeliveryStore, WebhookMessageStore,
};
use crate::domain::ids::{EventId, WebhookEndpointId};
use crate::domain::webhook::MessageStatus;
use crate::domain::webhook_message::Message;

const MESSAGE_COLUMNS: &str = "m.endpoint_id, m.event_id, m.event_type, m.status, m.attempts, m.manual, \
     m.next_attempt_at, m.created_at, m.last_status, m.last_attempt_at";

#[derive(FromQueryResult)]
struct MessageRow {
    endpoint_id: uuid::Uuid,
    event_id: uuid::Uuid,
    event_type: String,
    status: String,
    attempts: i32,
    manual: bool,
    next_attempt_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    last_status: Option<String>,
    last_attempt_at: Option<DateTime<Utc>>,
}

impl MessageRow {
    fn into_view(self) -> Result<MessageView, RepoError> {
        let status = MessageStatus::parse(&self.status)
            .ok_or_else(|| corrupt("webhook_messages.status", &self.status))?;
        Ok(MessageView {
            message: Message {
                endpoint_id: WebhookEndpointId::from_uuid(self.endpoint_id),
                event_id: EventId::from_uuid(self.event_id),
                event_type: self.event_type,
                status,
                attempts: u32::try_from(self.attempts).unwrap_or(0),
                manual: self.manual,
                next_attempt_at: self.next_attempt_at,
                created_at: self.created_at,
            },
            last_status: self.last_status,
            last_attempt_at: self.last_attempt_at,
        })
    }
}

#[derive(FromQueryResult)]
struct Candidate {
    endpoint_id: uuid::Uuid,
    event_id: uuid::Uuid,
    claimed_until: Option<DateTime<Utc>>,
}

#[derive(FromQueryResult)]
struct Body {
    event_id: uuid::Uuid,
    body: String,
}

#[derive(FromQueryResult)]
struct AttemptRow {
    endpoint_id: uuid::Uuid,
    event_id: uuid::Uuid,
    attempt: i32,
    at: DateTime<Utc>,
    status: String,
    duration_ms: i64,
    response: String,
}

#[derive(FromQueryResult)]
struct Oldest {
    value: Option<DateTime<Utc>>,
}

/// `(VALUES ($n, $n+1), …) AS k`, the keys appended to `values`: joined on the primary key
/// (`k.column1`, `k.column2`), which PostgreSQL plans as index probes where a row-value
/// `IN` list of many pairs can be a scan of the table.
fn keys_table(keys: &[(uuid::Uuid, uuid::Uuid)], values: &mut Vec<Value>) -> String {
    let cells: Vec<String> = keys
        .iter()
        .map(|(endpoint, event)| {
            values.push((*endpoint).into());
            values.push((*event).into());
            format!("(${}, ${})", values.len() - 1, values.len())
        })
        .collect();
    format!("(VALUES {}) AS k", cells.join(", "))
}

/// The join of `table` to [`keys_table`]'s `k`.
fn on_keys(table: &str) -> String {
    format!("{table}.endpoint_id = k.column1 AND {table}.event_id = k.column2")
}

fn pending() -> &'static str {
    MessageStatus::Pending.as_str()
}

impl SeaOrmStore {
    /// The due messages a claim may take, at most `per_endpoint` of each endpoint.
    async fn due_candidates(
        &self,
        now: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
        busy: &[WebhookEndpointId],
    ) -> Result<Vec<Candidate>, RepoError> {
        let mut values: Vec<Value> =
            vec![now.into(), i64::from(per_endpoint).into(), i64::from(limit).into()];
        let skip = if busy.is_empty() {
            String::new()
        } else {
            let marks: Vec<String> = busy
                .iter()
                .map(|b| {
                    values.push(b.as_uuid().into());
                    format!("${}", values.len())
                })
                .collect();
            format!("AND m.endpoint_id NOT IN ({})", marks.join(", "))
        };
        let due = format!(
            "m.status = '{}' AND m.next_attempt_at <= $1 AND (m.claimed_until IS NULL OR m.claimed_until < $1)",
            pending()
        );
        let sql = if self.db.get_database_backend() == DatabaseBackend::Postgres {
            // Each enabled endpoint's oldest due messages, by index: a flood at one endpoint
            // costs a claim `per_endpoint` rows of it, whatever its backlog.
            format!(
                "SELECT m.endpoint_id, m.event_id, m.claimed_until FROM webhook_endpoints e \
                 CROSS JOIN LATERAL (SELECT m.endpoint_id, m.event_id, m.claimed_until, m.next_attempt_at \
                   FROM webhook_messages m WHERE m.endpoint_id = e.id AND {due} \
                   ORDER BY m.next_attempt_at LIMIT $2) m \
                 WHERE e.disabled_reason IS NULL {} ORDER BY m.next_attempt_at LIMIT $3",
                skip.replace("m.endpoint_id", "e.id")
            )
        } else {
            format!(
                "SELECT endpoint_id, event_id, claimed_until FROM (\
                   SELECT m.endpoint_id, m.event_id, m.claimed_until, m.next_attempt_at, \
                     ROW_NUMBER() OVER (PARTITION BY m.endpoint_id ORDER BY m.next_attempt_at) AS rn \
                   FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_id \
                   WHERE {due} AND e.disabled_reason IS NULL {skip}\
                 ) x WHERE rn <= $2 ORDER BY next_attempt_at LIMIT $3"
            )
        };
        Candidate::find_by_statement(statement(self.db.get_database_backend(), &sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)
    }

    /// The claimed messages with their endpoints, secrets and bodies.
    async fn due_details(
        &self,
        claimed: &[(uuid::Uuid, uuid::Uuid)],
        reclaimed: &HashMap<(uuid::Uuid, uuid::Uuid), bool>,
        until: DateTime<Utc>,
    ) -> Result<Vec<DueMessage>, RepoError> {
        let backend = self.db.get_database_backend();
        let mut values = Vec::new();
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM webhook_messages m JOIN {} ON {}",
            keys_table(claimed, &mut values),
            on_keys("m")
        );
        let rows = MessageRow::find_by_statement(statement(backend, &sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        let endpoint_ids: Vec<uuid::Uuid> = claimed.iter().map(|(e, _)| *e).collect();
        let endpoints: HashMap<uuid::Uuid, webhook_endpoints::Model> = webhook_endpoints::Entity::find()
            .filter(webhook_endpoints::Column::Id.is_in(endpoint_ids))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|r| (r.id, r))
            .collect();
        let events: Vec<Value> = claimed.iter().map(|(_, e)| Value::from(*e)).collect();
        let marks: Vec<String> = (1..=events.len()).map(|i| format!("${i}")).collect();
        let sql =
            format!("SELECT event_id, body FROM webhook_events WHERE event_id IN ({})", marks.join(", "));
        let bodies: HashMap<uuid::Uuid, String> = Body::find_by_statement(statement(backend, &sql, events))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|b| (b.event_id, b.body))
            .collect();
        let mut due = Vec::with_capacity(rows.len());
        for row in rows {
            let key = (row.endpoint_id, row.event_id);
            let (Some(endpoint), Some(body)) = (endpoints.get(&row.endpoint_id), bodies.get(&row.event_id))
            else {
                continue;
            };
            due.push(DueMessage {
                message: row.into_view()?.message,
                endpoint: endpoint_from_row(endpoint)?,
                secrets: secrets_from_row(endpoint),
                body: body.clone(),
                claimed_until: until,
                reclaimed: reclaimed.get(&key).copied().unwrap_or(false),
            });
        }
        Ok(due)
    }
}

#[async_trait]
impl WebhookDeliveryStore for SeaOrmStore {
    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
        busy: &[WebhookEndpointId],
    ) -> Result<Vec<DueMessage>, RepoError> {
        let backend = self.db.get_database_backend();
        // Stored to the microsecond: the record's condition compares it as stored.
        let until = until.trunc_subsecs(6);
        let candidates = self.due_candidates(now, limit, per_endpoint, busy).await?;
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<(uuid::Uuid, uuid::Uuid)> =
            candidates.iter().map(|c| (c.endpoint_id, c.event_id)).collect();
        let reclaimed: HashMap<_, _> =
            candidates.iter().map(|c| ((c.endpoint_id, c.event_id), c.claimed_until.is_some())).collect();
        let mut values: Vec<Value> = vec![until.into(), now.into()];
        let sql = format!(
            "UPDATE webhook_messages SET claimed_until = $1 FROM {} WHERE {} AND status = '{}' \
               AND (claimed_until IS NULL OR claimed_until < $2) RETURNING endpoint_id, event_id",
            keys_table(&keys, &mut values),
            on_keys("webhook_messages"),
            pending()
        );
        #[derive(FromQueryResult)]
        struct Key {
            endpoint_id: uuid::Uuid,
            event_id: uuid::Uuid,
        }
        let claimed: Vec<(uuid::Uuid, uuid::Uuid)> = Key::find_by_statement(statement(backend, &sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?
            .into_iter()
            .map(|k| (k.endpoint_id, k.event_id))
            .collect();
        if claimed.is_empty() {
            return Ok(Vec::new());
        }
        self.due_details(&claimed, &reclaimed, until).await
    }

    async fn release(
        &self,
        claims: &[(WebhookEndpointId, EventId)],
        claimed_until: DateTime<Utc>,
    ) -> Result<(), RepoError> {
        let keys: Vec<_> = claims.iter().map(|(e, v)| (e.as_uuid(), v.as_uuid())).collect();
        let mut values: Vec<Value> = vec![claimed_until.trunc_subsecs(6).into()];
        let sql = format!(
            "UPDATE webhook_messages SET claimed_until = NULL FROM {} WHERE {} AND claimed_until = $1",
            keys_table(&keys, &mut values),
            on_keys("webhook_messages")
        );
        self.db
            .execute_raw(statement(self.db.get_database_backend(), &sql, values))
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn record(&self, records: &[DeliveryRecord]) -> Result<Vec<Recorded>, RepoError> {
        self.record_batch(records).await
    }
}

#[async_trait]
impl WebhookMessageStore for SeaOrmStore {
    async fn messages(&self, query: &MessageQuery) -> Result<Vec<MessageView>, RepoError> {
        let mut values: Vec<Value> = vec![query.endpoint.as_uuid().into()];
        let mut sql = format!("SELECT {MESSAGE_COLUMNS} FROM webhook_messages m WHERE m.endpoint_id = $1");
        if let Some(status) = query.status {
            values.push(status.as_str().into());
            sql.push_str(&format!(" AND m.status = ${}", values.len()));
        }
        if let Some(since) = query.since {
            values.push(since.into());
            sql.push_str(&format!(" AND m.created_at >= ${}", values.len()));
        }
        if let Some((created, event)) = query.after {
            values.push(created.into());
            values.push(event.as_uuid().into());
            let (c, e) = (values.len() - 1, values.len());
            sql.push_str(&format!(
                " AND (m.created_at < ${c} OR (m.created_at = ${c} AND m.event_id < ${e}))"
            ));
        }
        values.push(i64::from(query.limit).into());
        sql.push_str(&format!(" ORDER BY m.created_at DESC, m.event_id DESC LIMIT ${}", values.len()));
        let rows = MessageRow::find_by_statement(statement(self.db.get_database_backend(), &sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        rows.into_iter().map(MessageRow::into_view).collect()
    }

    async fn message(
        &self,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<Option<Message>, RepoError> {
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM webhook_messages m WHERE m.endpoint_id = $1 AND m.event_id = $2"
        );
        let values: Vec<Value> = vec![endpoint.as_uuid().into(), event.as_uuid().into()];
        let row = MessageRow::find_by_statement(statement(self.db.get_database_backend(), &sql, values))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        row.map(|r| r.into_view().map(|v| v.message)).transpose()
    }

    async fn attempts(
        &self,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<Vec<AttemptRecord>, RepoError> {
        let sql = "SELECT endpoint_id, event_id, attempt, at, status, duration_ms, response FROM webhook_attempts \
                   WHERE endpoint_id = $1 AND event_id = $2 ORDER BY id";
        let values: Vec<Value> = vec![endpoint.as_uuid().into(), event.as_uuid().into()];
        let rows = AttemptRow::find_by_statement(statement(self.db.get_database_backend(), sql, values))
            .all(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(rows
            .into_iter()
            .map(|r| AttemptRecord {
                endpoint_id: WebhookEndpointId::from_uuid(r.endpoint_id),
                event_id: EventId::from_uuid(r.event_id),
                attempt: u32::try_from(r.attempt).unwrap_or(0),
                at: r.at,
                status: r.status,
                duration_ms: u64::try_from(r.duration_ms).unwrap_or(0),
                response: r.response,
            })
            .collect())
    }

    async fn resend(
        &self,
        message: &Message,
        was: MessageStatus,
        audit: Option<AuditRecord>,
    ) -> Result<bool, RepoError> {
        let now = message.next_attempt_at.unwrap_or_else(Utc::now);
        let sql = "UPDATE webhook_messages SET status = $1, manual = $2, next_attempt_at = $3, updated_at = $3 \
                   WHERE endpoint_id = $4 AND event_id = $5 AND status = $6 \
                     AND (claimed_until IS NULL OR claimed_until < $3)";
        let values: Vec<Value> = vec![
            message.status.as_str().into(),
            message.manual.into(),
            now.into(),
            message.endpoint_id.as_uuid().into(),
            message.event_id.as_uuid().into(),
            was.as_str().into(),
        ];
        let txn = self.db.begin().await.map_err(repo_err)?;
        let changed = txn
            .execute_raw(statement(self.db.get_database_backend(), sql, values))
            .await
            .map_err(repo_err)?
            .rows_affected()
            == 1;
        if changed {
            insert_audit(&txn, audit.as_slice()).await?;
        }
        txn.commit().await.map_err(repo_err)?;
        Ok(changed)
    }

    async fn note(&self, audit: &AuditRecord) -> Result<(), RepoError> {
        insert_audit(&self.db, std::slice::from_ref(audit)).await
    }

    async fn oldest_undelivered(&self) -> Result<Option<DateTime<Utc>>, RepoError> {
        let sql = format!(
            "SELECT MIN(m.created_at) AS value FROM webhook_messages m \
             JOIN webhook_endpoints e ON e.id = m.endpoint_id \
             WHERE m.status = '{}' AND e.disabled_reason IS NULL",
            pending()
        );
        let row = Oldest::find_by_statement(statement(self.db.get_database_backend(), &sql, vec![]))
            .one(&self.db)
            .await
            .map_err(repo_err)?;
        Ok(row.and_then(|r| r.value))
    }

    async fn purge(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError> {
        let backend = self.db.get_database_backend();
        let finished =
            format!("'{}', '{}'", MessageStatus::Delivered.as_str(), MessageStatus::Failed.as_str());
        let statements = [
            "DELETE FROM webhook_attempts WHERE id IN (SELECT id FROM webhook_attempts WHERE at < $1 LIMIT $2)".to_owned(),
            format!(
                "DELETE FROM webhook_messages WHERE (endpoint_id, event_id) IN (SELECT endpoint_id, event_id \
                   FROM webhook_messages WHERE status IN ({finished}) AND created_at < $1 LIMIT $2)"
            ),
            "DELETE FROM webhook_events WHERE event_id IN (SELECT w.event_id FROM webhook_events w \
               WHERE w.created_at < $1 AND NOT EXISTS \
                 (SELECT 1 FROM webhook_messages m WHERE m.event_id = w.event_id) LIMIT $2)"
                .to_owned(),
        ];
        let mut removed = 0;
        for sql in statements {
            let values: Vec<Value> = vec![before.into(), i64::from(limit).into()];
            removed += self
                .db
                .execute_raw(statement(backend, &sql, values))
                .await
                .map_err(repo_err)?
                .rows_affected();
        }
        Ok(removed)
    }
}
