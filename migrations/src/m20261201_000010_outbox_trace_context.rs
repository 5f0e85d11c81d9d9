//! Each outbox event keeps the W3C trace context (`traceparent`) of the transaction that
//! wrote it, so that its publish — and, through the AMQP `traceparent` header, its
//! consumers — continue the trace of the request that caused it. Empty when traces are off.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared("ALTER TABLE outbox_events ADD COLUMN traceparent VARCHAR(55) NULL")
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared("ALTER TABLE outbox_events DROP COLUMN traceparent").await?;
        Ok(())
    }
}
