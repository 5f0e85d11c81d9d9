//! The outbox's status indexes become partial: each covers only the rows its query looks
//! at (docs/spec.md §6: the due scan, the pending pick-up, the clean-up), plus the lease recovery
//! scan. A row moving between statuses then only enters the indexes of its new status,
//! instead of every index on every update — about half the index writes per event, which
//! is most of the relay's database cost.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: &[&str] = &[
    "DROP INDEX idx_outbox_due",
    "DROP INDEX idx_outbox_pending",
    "DROP INDEX idx_outbox_cleanup",
    "CREATE INDEX idx_outbox_due ON outbox_events (status, next_attempt_at) WHERE status = 'RETRY_WAIT'",
    "CREATE INDEX idx_outbox_pending ON outbox_events (status, created_at) WHERE status = 'READY'",
    "CREATE INDEX idx_outbox_cleanup ON outbox_events (status, published_at) WHERE status = 'PUBLISHED'",
    "CREATE INDEX idx_outbox_cleanup_dead ON outbox_events (dead_lettered_at) \
     WHERE status IN ('DEAD_LETTER', 'DISCARDED')",
    "CREATE INDEX idx_outbox_leases ON outbox_events (claimed_until) WHERE status = 'PROCESSING'",
];

const DOWN: &[&str] = &[
    "DROP INDEX idx_outbox_leases",
    "DROP INDEX idx_outbox_cleanup_dead",
    "DROP INDEX idx_outbox_cleanup",
    "DROP INDEX idx_outbox_pending",
    "DROP INDEX idx_outbox_due",
    "CREATE INDEX idx_outbox_due ON outbox_events (status, next_attempt_at)",
    "CREATE INDEX idx_outbox_pending ON outbox_events (status, created_at)",
    "CREATE INDEX idx_outbox_cleanup ON outbox_events (status, published_at)",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // One call, so every statement runs on the same pooled connection: on SQLite a
        // second connection may not yet see the first one's DROP INDEX.
        m.get_connection().execute_unprepared(&UP.join(";\n")).await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection().execute_unprepared(&DOWN.join(";\n")).await?;
        Ok(())
    }
}
