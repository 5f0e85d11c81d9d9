//! Webhook messages and their attempts (docs/spec.md §16): the workers' claims (one
//! statement for a batch, at most `per_endpoint` of each endpoint), each attempt recorded
//! with the message's new state and its endpoint's in one transaction conditional on the
//! claim, the log's reads, replays and retention.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, EntityTrait, FromQueryResult, QueryFilter, QueryTrait,
    TransactionTrait, Value,
};

use super::audit::insert_audit;
use super::entities::{outbox_events, webhook_endpoints};
use super::listener::OUTBOX_CHANNEL;
use super::mapping::{corrupt, outbox_row};
use super::repo_err;
use super::store::SeaOrmStore;
use super::webhook_endpoints::{endpoint_from_row, secrets_from_row};
use super::webhook_fanout::statement;
use crate::application::ports::{
    AttemptRecord, AuditRecord, DeliveryRecord, DueMessage, EndpointChange, MessageQuery, MessageView,
    NewOutboxEvent, RepoError, WebhookDeliveryStore, WebhookMessageStore,
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

/// `({table}endpoint_id, {table}event_id) IN (($n, $n+1), …)`, the keys appended to `values`.
fn keys_in(table: &str, keys: &[(uuid::Uuid, uuid::Uuid)], values: &mut Vec<Value>) -> String {
    let cells: Vec<String> = keys
        .iter()
        .map(|(endpoint, event)| {
            values.push((*endpoint).into());
            values.push((*event).into());
            format!("(${}, ${})", values.len() - 1, values.len())
        })
        .collect();
    format!("({table}endpoint_id, {table}event_id) IN ({})", cells.join(", "))
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
        let sql = format!(
            "SELECT endpoint_id, event_id, claimed_until FROM (\
               SELECT m.endpoint_id, m.event_id, m.claimed_until, m.next_attempt_at, \
                 ROW_NUMBER() OVER (PARTITION BY m.endpoint_id ORDER BY m.next_attempt_at) AS rn \
               FROM webhook_messages m JOIN webhook_endpoints e ON e.id = m.endpoint_id \
               WHERE m.status = '{}' AND m.next_attempt_at <= $1 \
                 AND (m.claimed_until IS NULL OR m.claimed_until < $1) AND e.disabled_reason IS NULL {skip}\
             ) x WHERE rn <= $2 ORDER BY next_attempt_at LIMIT $3",
            pending()
        );
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
            "SELECT {MESSAGE_COLUMNS} FROM webhook_messages m WHERE {}",
            keys_in("m.", claimed, &mut values)
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

    /// Our delivery events into the outbox, within `conn`'s transaction.
    async fn append_events<C: ConnectionTrait>(
        &self,
        conn: &C,
        events: &[&NewOutboxEvent],
    ) -> Result<(), RepoError> {
        if events.is_empty() {
            return Ok(());
        }
        let backend = conn.get_database_backend();
        let insert = outbox_events::Entity::insert_many(events.iter().map(|e| outbox_row(e, self.lanes)));
        conn.execute_raw(insert.build(backend)).await.map_err(repo_err)?;
        if backend == DatabaseBackend::Postgres {
            conn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}")).await.map_err(repo_err)?;
        }
        Ok(())
    }

    /// The endpoint's change; whether it turned it off.
    async fn change_endpoint<C: ConnectionTrait>(
        &self,
        conn: &C,
        id: WebhookEndpointId,
        change: &EndpointChange,
        at: DateTime<Utc>,
    ) -> Result<bool, RepoError> {
        let backend = conn.get_database_backend();
        let (sql, values): (&str, Vec<Value>) = match change {
            EndpointChange::Succeeded => (
                "UPDATE webhook_endpoints SET last_success_at = $1, failing_since = NULL WHERE id = $2",
                vec![at.into(), id.as_uuid().into()],
            ),
            EndpointChange::Failed => (
                "UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, $1) WHERE id = $2",
                vec![at.into(), id.as_uuid().into()],
            ),
            EndpointChange::Disabled { reason, .. } => (
                "UPDATE webhook_endpoints SET disabled_reason = $1, failing_since = COALESCE(failing_since, $2), \
                   updated_at = $2 WHERE id = $3 AND disabled_reason IS NULL",
                vec![reason.as_str().into(), at.into(), id.as_uuid().into()],
            ),
        };
        let changed =
            conn.execute_raw(statement(backend, sql, values)).await.map_err(repo_err)?.rows_affected() == 1;
        let EndpointChange::Disabled { event, audit, .. } = change else { return Ok(false) };
        if !changed {
            return Ok(false);
        }
        self.append_events(conn, &[event.as_ref()]).await?;
        insert_audit(conn, std::slice::from_ref(audit.as_ref())).await?;
        Ok(true)
    }
}

async fn insert_attempt<C: ConnectionTrait>(conn: &C, a: &AttemptRecord) -> Result<(), RepoError> {
    let sql = "INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, at, status, duration_ms, response) \
               VALUES ($1, $2, $3, $4, $5, $6, $7)";
    let values: Vec<Value> = vec![
        a.endpoint_id.as_uuid().into(),
        a.event_id.as_uuid().into(),
        i32::try_from(a.attempt).unwrap_or(i32::MAX).into(),
        a.at.into(),
        a.status.clone().into(),
        i64::try_from(a.duration_ms).unwrap_or(i64::MAX).into(),
        a.response.clone().into(),
    ];
    conn.execute_raw(statement(conn.get_database_backend(), sql, values)).await.map_err(repo_err)?;
    Ok(())
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
            "UPDATE webhook_messages SET claimed_until = $1 WHERE {} AND status = '{}' \
               AND (claimed_until IS NULL OR claimed_until < $2) RETURNING endpoint_id, event_id",
            keys_in("", &keys, &mut values),
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
            "UPDATE webhook_messages SET claimed_until = NULL WHERE {} AND claimed_until = $1",
            keys_in("", &keys, &mut values)
        );
        self.db
            .execute_raw(statement(self.db.get_database_backend(), &sql, values))
            .await
            .map_err(repo_err)?;
        Ok(())
    }

    async fn record(&self, record: &DeliveryRecord) -> Result<bool, RepoError> {
        let backend = self.db.get_database_backend();
        let m = &record.message;
        let at = record.attempt.at;
        let sql = format!(
            "UPDATE webhook_messages SET status = $1, attempts = $2, manual = $3, next_attempt_at = $4, \
               claimed_until = NULL, last_status = $5, last_attempt_at = $6, updated_at = $6 \
             WHERE endpoint_id = $7 AND event_id = $8 AND status = '{}' AND claimed_until = $9",
            pending()
        );
        let values: Vec<Value> = vec![
            m.status.as_str().into(),
            i32::try_from(m.attempts).unwrap_or(i32::MAX).into(),
            m.manual.into(),
            m.next_attempt_at.into(),
            record.attempt.status.clone().into(),
            at.into(),
            m.endpoint_id.as_uuid().into(),
            m.event_id.as_uuid().into(),
            record.claimed_until.trunc_subsecs(6).into(),
        ];
        let txn = self.db.begin().await.map_err(repo_err)?;
        let updated = txn.execute_raw(statement(backend, &sql, values)).await.map_err(repo_err)?;
        if updated.rows_affected() != 1 {
            let _ = txn.rollback().await;
            return Err(RepoError::Conflict);
        }
        insert_attempt(&txn, &record.attempt).await?;
        let disabled = self.change_endpoint(&txn, m.endpoint_id, &record.endpoint, at).await?;
        let exhausted: Vec<&NewOutboxEvent> = record.exhausted.iter().collect();
        self.append_events(&txn, &exhausted).await?;
        txn.commit().await.map_err(repo_err)?;
        if disabled || !exhausted.is_empty() {
            self.relay_wake.notify_one();
        }
        Ok(disabled)
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
