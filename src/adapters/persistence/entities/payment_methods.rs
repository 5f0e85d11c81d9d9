//! Entity of table `payment_methods`.

use sea_orm::entity::prelude::*;

#[derive(Clone, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "payment_methods")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub customer_id: String,
    pub customer_key: String,
    /// A secret: `Debug` below never shows it.
    pub billing_key: String,
    pub card_company: Option<String>,
    pub card_number: Option<String>,
    pub created_at: DateTimeUtc,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("payment_methods::Model")
            .field("customer_id", &self.customer_id)
            .finish_non_exhaustive()
    }
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
