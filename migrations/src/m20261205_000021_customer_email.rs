//! The address an order's customer is told at (docs/spec.md §13, `notification.channel =
//! email`): `customerEmail` of `POST /api/orders`, optional.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("orders"))
                .add_column(string_len_null(Alias::new("customer_email"), 254))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter().table(Alias::new("orders")).drop_column(Alias::new("customer_email")).to_owned(),
        )
        .await
    }
}
