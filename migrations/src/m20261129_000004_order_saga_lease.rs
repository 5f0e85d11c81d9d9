//! A lease on an order's saga: one runner at a time calls its providers.

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
                .add_column(string_len_null(Alias::new("saga_locked_by"), 64))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Alias::new("orders"))
                .add_column(timestamp_with_time_zone_null(Alias::new("saga_locked_until")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in ["saga_locked_until", "saga_locked_by"] {
            m.alter_table(
                Table::alter().table(Alias::new("orders")).drop_column(Alias::new(column)).to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}
