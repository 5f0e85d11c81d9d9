//! Settlements that could not be delivered (docs/spec.md §13): retried with backoff under
//! the same id, then waiting for an operator, never compensated for an outage. Each keeps
//! its attempts, when it is tried next, and its last transient error; the retry processor
//! finds the due ones through a partial index.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            integer(Alias::new("attempts")).default(0).to_owned(),
            timestamp_with_time_zone_null(Alias::new("next_attempt_at")),
            text_null(Alias::new("last_error")),
        ] {
            let mut column = column;
            m.alter_table(Table::alter().table(Alias::new("settlements")).add_column(&mut column).to_owned())
                .await?;
        }
        m.get_connection()
            .execute_unprepared(
                "CREATE INDEX ix_settlements_due ON settlements (next_attempt_at) WHERE status = 'RETRY_SCHEDULED'",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        db.execute_unprepared("DROP INDEX ix_settlements_due").await?;
        for column in ["attempts", "next_attempt_at", "last_error"] {
            m.alter_table(
                Table::alter().table(Alias::new("settlements")).drop_column(Alias::new(column)).to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}
