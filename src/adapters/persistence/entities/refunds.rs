//! Entity of table `refunds`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "refunds")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub payment_id: Uuid,
    pub order_id: Uuid,
    pub amount: i64,
    pub currency: String,
    pub reason: String,
    pub status: String,
    pub idempotency_key: String,
    pub request_key: Option<String>,
    pub provider_transaction_key: Option<String>,
    pub failure_reason: Option<String>,
    pub actor: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    pub version: i64,
    /// The id of the inbound message that asked for the refund (docs/spec.md §12).
    pub causation_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
