//! The outbox's rows as its statements return them: the named result rows, the columns
//! the fast path reads (an event row and whether its aggregate is held), their decoding by
//! position, and PostgreSQL arrays as parameters.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::ArrayType;
use sea_orm::{FromQueryResult, QueryResult, Value};

use super::literals;
use crate::adapters::persistence::entities::outbox_events;
use crate::adapters::persistence::mapping::outbox_from_row;
use crate::adapters::persistence::repo_err;
use crate::application::ports::{OutboxRecord, RepoError};
use crate::domain::outbox::OutboxStatus;

#[derive(Debug, FromQueryResult)]
pub(super) struct StatusCount {
    pub(super) status: String,
    pub(super) n: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct TypeCount {
    pub(super) event_type: String,
    pub(super) n: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct Count {
    pub(super) n: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct LaneRow {
    pub(super) lane: i16,
    pub(super) epoch: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct ProgressRow {
    pub(super) lane: i16,
    pub(super) done: Option<String>,
    pub(super) cur: Option<String>,
    pub(super) upto_id: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct LaneOnly {
    pub(super) lane: i16,
}

/// Every column of an outbox row, named: a statement returning them keeps its shape
/// whatever columns are added later (`*` is expanded when a statement is prepared, and a
/// cached SQLite statement whose table changed under it returns rows of another width).
pub(super) const OUTBOX_COLUMNS: &str = "id, event_id, aggregate_type, aggregate_id, event_type, routing_key, payload, \
    correlation_id, status, retry_count, failure_code, failure_reason, next_attempt_at, last_attempt_at, \
    claimed_by, claimed_until, created_at, published_at, dead_lettered_at, version, lane, slow, traceparent";

/// The columns of outbox row `o` as the fast path reads them, then [`held_column`].
pub(super) fn fast_columns() -> String {
    OUTBOX_COLUMNS.split(", ").map(|c| format!("o.{c}")).collect::<Vec<_>>().join(", ")
}

/// Column `held`: whether row `o`'s aggregate waits on the slow path (an earlier event not
/// yet delivered or discarded), read with the row rather than in a second round trip. Not
/// narrowed to `h.lane = o.lane` (an index-only probe of `idx_outbox_held`, a quarter
/// cheaper): a dead letter written before `outbox.lanes` changed sits in its old lane and
/// must still hold its aggregate's later events back.
pub(super) fn held_column() -> String {
    format!(
        "EXISTS (SELECT 1 FROM outbox_events h WHERE h.slow AND h.status IN ({}) \
           AND h.aggregate_type = o.aggregate_type AND h.aggregate_id = o.aggregate_id) AS held",
        literals(OutboxStatus::BLOCKING)
    )
}

/// A row read with [`fast_columns`] and [`held_column`] from column `at` on, with whether it
/// is held; `None` if it moved to the slow path since its lane was filled. Decoded by
/// position: a batch is hundreds of rows, and by name each column costs a lookup of its
/// name, twice (the order is the entity's, `outbox_columns_are_the_entity_fields_in_order`).
pub(super) fn fast_row(result: &QueryResult, at: usize) -> Result<Option<(OutboxRecord, bool)>, RepoError> {
    let mut next = at;
    let mut get = || {
        next += 1;
        next - 1
    };
    let model = outbox_events::Model {
        id: result.try_get_by_index(get()).map_err(repo_err)?,
        event_id: result.try_get_by_index(get()).map_err(repo_err)?,
        aggregate_type: result.try_get_by_index(get()).map_err(repo_err)?,
        aggregate_id: result.try_get_by_index(get()).map_err(repo_err)?,
        event_type: result.try_get_by_index(get()).map_err(repo_err)?,
        routing_key: result.try_get_by_index(get()).map_err(repo_err)?,
        payload: result.try_get_by_index(get()).map_err(repo_err)?,
        correlation_id: result.try_get_by_index(get()).map_err(repo_err)?,
        status: result.try_get_by_index(get()).map_err(repo_err)?,
        retry_count: result.try_get_by_index(get()).map_err(repo_err)?,
        failure_code: result.try_get_by_index(get()).map_err(repo_err)?,
        failure_reason: result.try_get_by_index(get()).map_err(repo_err)?,
        next_attempt_at: result.try_get_by_index(get()).map_err(repo_err)?,
        last_attempt_at: result.try_get_by_index(get()).map_err(repo_err)?,
        claimed_by: result.try_get_by_index(get()).map_err(repo_err)?,
        claimed_until: result.try_get_by_index(get()).map_err(repo_err)?,
        created_at: result.try_get_by_index(get()).map_err(repo_err)?,
        published_at: result.try_get_by_index(get()).map_err(repo_err)?,
        dead_lettered_at: result.try_get_by_index(get()).map_err(repo_err)?,
        version: result.try_get_by_index(get()).map_err(repo_err)?,
        lane: result.try_get_by_index(get()).map_err(repo_err)?,
        slow: result.try_get_by_index(get()).map_err(repo_err)?,
        traceparent: result.try_get_by_index(get()).map_err(repo_err)?,
    };
    if model.slow {
        return Ok(None);
    }
    let held = result.try_get_by_index::<bool>(get()).map_err(repo_err)?;
    Ok(Some((outbox_from_row(model)?, held)))
}

/// A row id, as `SELECT id` or `RETURNING id` gives it.
#[derive(Debug, FromQueryResult)]
pub(super) struct IdRow {
    pub(super) id: i64,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct LaneOldest {
    pub(super) lane: i16,
    pub(super) n: i64,
    pub(super) at: Option<DateTime<Utc>>,
}

#[derive(Debug, FromQueryResult)]
pub(super) struct Oldest {
    pub(super) at: Option<DateTime<Utc>>,
}

/// PostgreSQL arrays as statement parameters (`unnest($1::smallint[], ...)`, `= ANY($1)`):
/// one statement text whatever the number of lanes or ids, so it is parsed and planned once.
pub(super) fn smallints(items: impl Iterator<Item = i16>) -> Value {
    Value::Array(ArrayType::SmallInt, Some(Box::new(items.map(|v| Value::SmallInt(Some(v))).collect())))
}

pub(super) fn bigints(items: impl Iterator<Item = i64>) -> Value {
    Value::Array(ArrayType::BigInt, Some(Box::new(items.map(|v| Value::BigInt(Some(v))).collect())))
}

/// Text items with `None` as the empty text, which the statement reads back as NULL
/// (`NULLIF(x, '')`): the driver binds no NULL inside a text array (it would panic), and no
/// item here is ever empty (snapshots).
pub(super) fn texts(items: impl Iterator<Item = Option<String>>) -> Value {
    let items = items.map(|v| Value::String(Some(v.unwrap_or_default()))).collect();
    Value::Array(ArrayType::String, Some(Box::new(items)))
}

/// Failure reasons come from brokers and networks: keep them readable and bounded.
pub(super) fn truncate(reason: &str) -> String {
    reason.chars().take(1000).collect()
}

#[cfg(test)]
mod tests {
    use sea_orm::{IdenStatic, Iterable};

    use super::OUTBOX_COLUMNS;
    use crate::adapters::persistence::entities::outbox_events;

    #[test]
    fn outbox_columns_are_the_entity_fields_in_order() {
        // `fast_row` decodes by position, in the entity's field order.
        let entity: Vec<&str> = outbox_events::Column::iter().map(|c| c.as_str()).collect();
        assert_eq!(OUTBOX_COLUMNS.split(", ").collect::<Vec<_>>(), entity);
    }
}
