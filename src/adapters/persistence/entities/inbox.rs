//! Entity of table `inbox`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "inbox")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub consumer: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub event_id: String,
    pub processed_at: DateTimeUtc,
    pub order_id: Option<Uuid>,
    /// SHA-256 (hex) of the message recorded, keys sorted.
    pub digest: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
