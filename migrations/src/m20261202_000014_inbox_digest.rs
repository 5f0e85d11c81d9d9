//! Each inbox entry keeps a digest of the message it recorded (SHA-256 of its JSON with keys
//! sorted), so a redelivery that reuses the `eventId` with another body is told apart from a
//! plain duplicate: still acknowledged (the first wins), but audited as a conflict.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared("ALTER TABLE inbox ADD COLUMN digest VARCHAR(64) NULL").await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared("ALTER TABLE inbox DROP COLUMN digest").await?;
        Ok(())
    }
}
