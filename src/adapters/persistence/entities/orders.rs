//! Entity of table `orders`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orders")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub customer_id: String,
    pub source: String,
    /// How it started: `NOW`, `HELD` or `AWAIT_CHECKOUT` (`OrderStart`).
    pub start: String,
    pub meeting_id: Option<String>,
    pub currency: String,
    pub total_amount: i64,
    pub status: String,
    pub failure_stage: Option<String>,
    pub failure_reason: Option<String>,
    pub mock_scenario: Option<String>,
    pub correlation_id: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub version: i64,
    /// The positive, unique, increasing number beside the uuid (docs/spec.md §3).
    pub number: i64,
    pub saga_locked_by: Option<String>,
    pub saga_locked_until: Option<DateTimeUtc>,
    /// `Order::registration_key`, under a unique index (docs/spec.md §7).
    pub registration_key: Option<String>,
    /// Times the worker's stalled-saga recovery resumed this order.
    pub saga_resumes: i32,
    /// When stalled-saga recovery may resume it next.
    pub saga_resume_at: Option<DateTimeUtc>,
    /// The id of the inbound message that placed the order (docs/spec.md §12).
    pub causation_id: Option<String>,
    /// Where the customer is told by e-mail (docs/spec.md §13).
    pub customer_email: Option<String>,
    /// A commerce-dialect order's `description` (docs/dialects.md).
    pub description: Option<String>,
    /// The merchant whose order it is (docs/spec.md §15).
    pub merchant_id: Uuid,
    /// One of its stores, when the order names one.
    pub store_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
