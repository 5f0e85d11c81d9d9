//! Entity of table `outbox_events`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "outbox_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub event_id: Uuid,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub routing_key: String,
    pub payload: String,
    pub correlation_id: Option<String>,
    pub status: String,
    pub retry_count: i32,
    pub failure_code: Option<String>,
    pub failure_reason: Option<String>,
    pub next_attempt_at: Option<DateTimeUtc>,
    pub last_attempt_at: Option<DateTimeUtc>,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub published_at: Option<DateTimeUtc>,
    pub dead_lettered_at: Option<DateTimeUtc>,
    pub version: i64,
    pub lane: i16,
    /// On the per-event slow path (a failure, a held-back event, or a row from before it).
    pub slow: bool,
    /// The W3C trace context of the transaction that wrote it (traces on only).
    pub traceparent: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
