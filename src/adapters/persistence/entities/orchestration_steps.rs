//! Entity of table `orchestration_steps`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "orchestration_steps")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub order_id: Uuid,
    pub step: String,
    pub status: String,
    pub detail: Option<String>,
    /// `StepFact::as_text`: what the row records as a fact, where a reader needs one.
    pub fact: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
