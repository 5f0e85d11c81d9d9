//! The fast path's index carries each event's `id` (PostgreSQL): a lane's snapshot
//! difference is then read from the index alone wherever the visibility map allows — as it
//! does for a backlog that autovacuum has been over — instead of fetching every event's row
//! for its `id`, once per slice of the difference (docs/benchmarks.md, "Backlog"). SQLite's
//! `(lane, id)` index already covers its query.

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
                "DROP INDEX idx_outbox_fast",
                "CREATE INDEX idx_outbox_fast ON outbox_events (lane, txid) INCLUDE (id) WHERE NOT slow",
            ],
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        run(
            m,
            &[
                "DROP INDEX idx_outbox_fast",
                "CREATE INDEX idx_outbox_fast ON outbox_events (lane, txid) WHERE NOT slow",
            ],
        )
        .await
    }
}
