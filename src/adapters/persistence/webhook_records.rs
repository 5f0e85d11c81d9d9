//! Webhook attempts recorded in batches (docs/spec.md §16): every record of a batch in one
//! transaction — the messages updated in one statement, each conditional on its claim, the
//! attempts inserted in one, each endpoint's success or failure written once, our delivery
//! events appended — so that ten endpoints' deliveries cost the database a few statements
//! per batch, not a transaction per message.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, SubsecRound, Utc};
use sea_orm::{
    ConnectionTrait, DatabaseBackend, EntityTrait, FromQueryResult, QueryTrait, TransactionTrait, Value,
};

use super::audit::insert_audit;
use super::entities::outbox_events;
use super::listener::OUTBOX_CHANNEL;
use super::mapping::outbox_row;
use super::repo_err;
use super::statement;
use super::store::SeaOrmStore;
use super::webhook_fanout::commit_without_waiting;
use crate::application::ports::{
    AttemptRecord, DeliveryRecord, EndpointChange, NewOutboxEvent, Recorded, RepoError,
};
use crate::domain::ids::WebhookEndpointId;
use crate::domain::webhook::MessageStatus;

type Key = (uuid::Uuid, uuid::Uuid);

#[derive(FromQueryResult)]
struct Updated {
    endpoint_id: uuid::Uuid,
    event_id: uuid::Uuid,
}

/// One record's message as a `SELECT` of its new values (`v_…`), its values appended.
fn message_row(r: &DeliveryRecord, pg: bool, values: &mut Vec<Value>) -> String {
    let cast = |t: &str| if pg { format!("::{t}") } else { String::new() };
    let m = &r.message;
    let first = values.len() + 1;
    values.extend([
        m.endpoint_id.as_uuid().into(),
        m.event_id.as_uuid().into(),
        m.status.as_str().into(),
        i32::try_from(m.attempts).unwrap_or(i32::MAX).into(),
        m.manual.into(),
        m.next_attempt_at.into(),
        r.attempt.status.clone().into(),
        r.attempt.at.into(),
        r.claimed_until.trunc_subsecs(6).into(),
    ]);
    let names = [
        ("v_endpoint", "uuid"),
        ("v_event", "uuid"),
        ("v_status", "text"),
        ("v_attempts", "int"),
        ("v_manual", "bool"),
        ("v_next", "timestamptz"),
        ("v_last", "text"),
        ("v_at", "timestamptz"),
        ("v_claimed", "timestamptz"),
    ];
    let cells: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, (name, t))| format!("${}{} AS {name}", first + i, cast(t)))
        .collect();
    format!("SELECT {}", cells.join(", "))
}

/// Each record's message written as it now is, only where its claim still holds: the keys
/// written.
async fn update_messages<C: ConnectionTrait>(
    conn: &C,
    records: &[DeliveryRecord],
) -> Result<HashSet<Key>, RepoError> {
    let backend = conn.get_database_backend();
    let pg = backend == DatabaseBackend::Postgres;
    let mut values: Vec<Value> = Vec::with_capacity(records.len() * 9);
    let rows: Vec<String> = records.iter().map(|r| message_row(r, pg, &mut values)).collect();
    let sql = format!(
        "UPDATE webhook_messages SET status = v.v_status, attempts = v.v_attempts, manual = v.v_manual, \
           next_attempt_at = v.v_next, claimed_until = NULL, last_status = v.v_last, \
           last_attempt_at = v.v_at, updated_at = v.v_at \
         FROM ({}) AS v \
         WHERE webhook_messages.endpoint_id = v.v_endpoint AND webhook_messages.event_id = v.v_event \
           AND webhook_messages.status = '{}' AND webhook_messages.claimed_until = v.v_claimed \
         RETURNING endpoint_id, event_id",
        rows.join(" UNION ALL "),
        MessageStatus::Pending.as_str()
    );
    let updated =
        Updated::find_by_statement(statement(backend, &sql, values)).all(conn).await.map_err(repo_err)?;
    Ok(updated.into_iter().map(|u| (u.endpoint_id, u.event_id)).collect())
}

async fn insert_attempts<C: ConnectionTrait>(conn: &C, attempts: &[&AttemptRecord]) -> Result<(), RepoError> {
    if attempts.is_empty() {
        return Ok(());
    }
    let mut values: Vec<Value> = Vec::with_capacity(attempts.len() * 7);
    let rows: Vec<String> = attempts
        .iter()
        .map(|a| {
            let first = values.len() + 1;
            values.extend([
                a.endpoint_id.as_uuid().into(),
                a.event_id.as_uuid().into(),
                i32::try_from(a.attempt).unwrap_or(i32::MAX).into(),
                a.at.into(),
                a.status.clone().into(),
                i64::try_from(a.duration_ms).unwrap_or(i64::MAX).into(),
                a.response.clone().into(),
            ]);
            let cells: Vec<String> = (0..7).map(|i| format!("${}", first + i)).collect();
            format!("({})", cells.join(", "))
        })
        .collect();
    let sql = format!(
        "INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, at, status, duration_ms, response) VALUES {}",
        rows.join(", ")
    );
    conn.execute_raw(statement(conn.get_database_backend(), &sql, values)).await.map_err(repo_err)?;
    Ok(())
}

/// Our delivery events into the outbox, within `conn`'s transaction.
async fn append_events<C: ConnectionTrait>(
    conn: &C,
    lanes: u16,
    events: &[&NewOutboxEvent],
) -> Result<(), RepoError> {
    if events.is_empty() {
        return Ok(());
    }
    let backend = conn.get_database_backend();
    let insert = outbox_events::Entity::insert_many(events.iter().map(|e| outbox_row(e, lanes)));
    conn.execute_raw(insert.build(backend)).await.map_err(repo_err)?;
    if backend == DatabaseBackend::Postgres {
        conn.execute_unprepared(&format!("NOTIFY {OUTBOX_CHANNEL}")).await.map_err(repo_err)?;
    }
    Ok(())
}

/// What a batch does to each endpoint: its last success, and its first failure after it.
#[derive(Default)]
struct EndpointOutcome {
    success: Option<DateTime<Utc>>,
    failure: Option<DateTime<Utc>>,
}

/// Each endpoint's success or failure written once: a success when it changes something or
/// the last one is a minute old (the row is every attempt's, and would otherwise be hot), a
/// failure only as the start of a failing run.
async fn write_outcomes<C: ConnectionTrait>(
    conn: &C,
    outcomes: &HashMap<WebhookEndpointId, EndpointOutcome>,
) -> Result<(), RepoError> {
    let backend = conn.get_database_backend();
    for (id, outcome) in outcomes {
        if let Some(at) = outcome.success {
            let sql = "UPDATE webhook_endpoints SET last_success_at = $1, failing_since = NULL WHERE id = $2 \
                       AND (failing_since IS NOT NULL OR last_success_at IS NULL OR last_success_at < $3)";
            let values: Vec<Value> =
                vec![at.into(), id.as_uuid().into(), (at - chrono::TimeDelta::minutes(1)).into()];
            conn.execute_raw(statement(backend, sql, values)).await.map_err(repo_err)?;
        }
        if let Some(at) = outcome.failure.filter(|f| outcome.success.is_none_or(|s| *f > s)) {
            let sql =
                "UPDATE webhook_endpoints SET failing_since = $1 WHERE id = $2 AND failing_since IS NULL";
            conn.execute_raw(statement(backend, sql, vec![at.into(), id.as_uuid().into()]))
                .await
                .map_err(repo_err)?;
        }
    }
    Ok(())
}

impl SeaOrmStore {
    /// Turns the endpoint off (only if it is still on), with its event and audit row; whether
    /// it did.
    async fn disable<C: ConnectionTrait>(
        &self,
        conn: &C,
        id: WebhookEndpointId,
        change: &EndpointChange,
        at: DateTime<Utc>,
    ) -> Result<bool, RepoError> {
        let EndpointChange::Disabled { reason, event, audit } = change else { return Ok(false) };
        let sql = "UPDATE webhook_endpoints SET disabled_reason = $1, failing_since = COALESCE(failing_since, $2), \
                     updated_at = $2 WHERE id = $3 AND disabled_reason IS NULL";
        let values: Vec<Value> = vec![reason.as_str().into(), at.into(), id.as_uuid().into()];
        let changed = conn
            .execute_raw(statement(conn.get_database_backend(), sql, values))
            .await
            .map_err(repo_err)?
            .rows_affected()
            == 1;
        if changed {
            append_events(conn, self.lanes, &[event.as_ref()]).await?;
            insert_audit(conn, std::slice::from_ref(audit.as_ref())).await?;
        }
        Ok(changed)
    }

    /// [`WebhookDeliveryStore::record`](crate::application::ports::WebhookDeliveryStore::record).
    pub(super) async fn record_batch(&self, records: &[DeliveryRecord]) -> Result<Vec<Recorded>, RepoError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        let txn = self.db.begin().await.map_err(repo_err)?;
        commit_without_waiting(&txn).await?;
        let written = update_messages(&txn, records).await?;
        let held = |r: &DeliveryRecord| {
            written.contains(&(r.message.endpoint_id.as_uuid(), r.message.event_id.as_uuid()))
        };
        let attempts: Vec<&AttemptRecord> = records.iter().filter(|r| held(r)).map(|r| &r.attempt).collect();
        insert_attempts(&txn, &attempts).await?;
        let mut outcomes: HashMap<WebhookEndpointId, EndpointOutcome> = HashMap::new();
        let mut answers = Vec::with_capacity(records.len());
        let mut events: Vec<&NewOutboxEvent> = Vec::new();
        for r in records {
            if !held(r) {
                answers.push(Recorded::ClaimLost);
                continue;
            }
            let at = r.attempt.at;
            let outcome = outcomes.entry(r.message.endpoint_id).or_default();
            match &r.endpoint {
                EndpointChange::Succeeded => outcome.success = outcome.success.max(Some(at)),
                _ => outcome.failure = Some(outcome.failure.map_or(at, |f| f.min(at))),
            }
            let disabled = self.disable(&txn, r.message.endpoint_id, &r.endpoint, at).await?;
            events.extend(r.exhausted.iter());
            answers.push(Recorded::Done { disabled });
        }
        write_outcomes(&txn, &outcomes).await?;
        append_events(&txn, self.lanes, &events).await?;
        txn.commit().await.map_err(repo_err)?;
        if !events.is_empty() || answers.contains(&Recorded::Done { disabled: true }) {
            self.relay_wake.notify_one();
        }
        Ok(answers)
    }
}
