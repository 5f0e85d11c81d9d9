//! What caused an order and a refund (docs/spec.md §12): the id of the inbound message that
//! placed the order (a meeting service's registration) or asked for the refund (a
//! cancellation, a meeting's deletion). Their events carry it as `causationId`, and a
//! contract that answers the other side's message by its id (`momo`'s `uuId`) takes it from
//! there. Null for what the HTTP API, an operator or the provider caused, and for rows
//! written before this migration.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const TABLES: [&str; 2] = ["orders", "refunds"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        for table in TABLES {
            // An inbound event id is at most 128 characters (`text::limits::EVENT_ID`).
            db.execute_unprepared(&format!("ALTER TABLE {table} ADD COLUMN causation_id VARCHAR(200)"))
                .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        for table in TABLES {
            db.execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN causation_id")).await?;
        }
        Ok(())
    }
}
