//! The inbox remembers which order an inbound event created, so a redelivery resumes that
//! order instead of creating another.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("inbox"))
                .add_column(uuid_null(Alias::new("order_id")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter().table(Alias::new("inbox")).drop_column(Alias::new("order_id")).to_owned(),
        )
        .await
    }
}
