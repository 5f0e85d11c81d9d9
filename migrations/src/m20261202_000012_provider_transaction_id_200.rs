//! A payment's provider transaction id holds Toss's `paymentKey`, which Toss documents as up
//! to 200 characters (reference: the Payment object); the column was 128. SQLite does not
//! enforce a `varchar` length, so only PostgreSQL changes.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

async fn run(m: &SchemaManager<'_>, sql: &str) -> Result<(), DbErr> {
    if m.get_database_backend() != DatabaseBackend::Postgres {
        return Ok(());
    }
    m.get_connection().execute_unprepared(sql).await.map(|_| ())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        run(m, "ALTER TABLE payments ALTER COLUMN provider_transaction_id TYPE varchar(200)").await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        run(m, "ALTER TABLE payments ALTER COLUMN provider_transaction_id TYPE varchar(128)").await
    }
}
