//! Entity of table `ledger_runs`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_runs")]
pub struct Model {
    /// `YYYY-MM-DD`, in the provider's zone.
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: String,
    pub started_at: DateTimeUtc,
    pub finished_at: DateTimeUtc,
    pub transactions: i64,
    pub findings: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
