//! A partial index over exactly the claimable outbox rows, so that claiming stays on an
//! index however many published rows accumulate before clean-up (PostgreSQL and SQLite
//! both support partial indexes).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(
                "CREATE INDEX idx_outbox_claimable ON outbox_events (id) \
                 WHERE status IN ('READY', 'RETRY_WAIT')",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared("DROP INDEX idx_outbox_claimable").await?;
        Ok(())
    }
}
