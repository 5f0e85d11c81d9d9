//! Entity of table `payments`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payments")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub order_id: Uuid,
    pub attempt: i32,
    pub payment_request_id: String,
    pub provider_transaction_id: Option<String>,
    /// Charged to a card keyed in with the order (`Payment::keyed_in`).
    pub keyed_in: bool,
    pub amount: i64,
    pub currency: String,
    pub status: String,
    pub decline_code: Option<String>,
    pub refund_failure_reason: Option<String>,
    pub refunded_amount: i64,
    pub approved_at: Option<DateTimeUtc>,
    pub reconcile_attempts: i32,
    pub next_reconcile_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub version: i64,
    /// The positive, unique, increasing number beside the uuid (docs/spec.md §3).
    pub number: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
