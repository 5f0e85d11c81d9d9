//! Reconciliation bookkeeping of payments whose outcome is unknown.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("payments"))
                .add_column(integer(Alias::new("reconcile_attempts")).default(0))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Alias::new("payments"))
                .add_column(timestamp_with_time_zone_null(Alias::new("next_reconcile_at")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in ["next_reconcile_at", "reconcile_attempts"] {
            m.alter_table(
                Table::alter().table(Alias::new("payments")).drop_column(Alias::new(column)).to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}
