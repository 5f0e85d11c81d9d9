//! Entity of table `ledger_findings`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "ledger_findings")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub day: String,
    pub kind: String,
    pub payment_key: Option<String>,
    pub order_id: Option<String>,
    pub transaction_key: Option<String>,
    pub ours: Option<String>,
    pub theirs: Option<String>,
    pub detail: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
