//! Entity of table `payouts`.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payouts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub source: String,
    pub payment_id: Uuid,
    pub transaction_key: Option<String>,
    pub amount: i64,
    pub fee: i64,
    pub supply_amount: Option<i64>,
    pub vat: Option<i64>,
    pub pay_out_amount: i64,
    /// `YYYY-MM-DD`.
    pub sold_date: String,
    /// `YYYY-MM-DD`.
    pub paid_out_date: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
