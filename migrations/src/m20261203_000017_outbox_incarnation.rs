//! The server's incarnation (PostgreSQL): one random token in an **unlogged** table, which
//! PostgreSQL empties whenever it recovers from a crash (of the server, or of any of its
//! processes) or a standby is promoted, and keeps across a clean restart. A relay reads it
//! with each fill and carries it in the batches it hands out: a token changed or gone means
//! the server lost WAL that was never flushed, and with it possibly transaction ids that a
//! snapshot taken before counts as done, so the relay forgets its cursors and a batch read
//! before is never recorded (docs/decisions.md, "A database crash resets the relay's
//! cursors"). SQLite has no snapshots of transaction ids: nothing to do there.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

async fn run(m: &SchemaManager<'_>, statements: &[&str]) -> Result<(), DbErr> {
    if m.get_database_backend() != DatabaseBackend::Postgres {
        return Ok(());
    }
    for sql in statements {
        m.get_connection().execute_unprepared(sql).await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        run(
            m,
            &[
                "CREATE UNLOGGED TABLE outbox_incarnation (\
                   single BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (single), \
                   token TEXT NOT NULL)",
                "INSERT INTO outbox_incarnation (token) VALUES (gen_random_uuid()::text)",
            ],
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        run(m, &["DROP TABLE outbox_incarnation"]).await
    }
}
