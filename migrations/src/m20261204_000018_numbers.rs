//! Order and payment numbers (docs/spec.md §3): a positive 64-bit number beside each uuid,
//! unique, increasing, never reused — what wire contracts that need numeric ids send
//! (§12). The service takes the next one before it inserts the row: on PostgreSQL from a
//! sequence per kind (`order_numbers`, `payment_numbers`), on SQLite from a counter row per
//! kind in `number_sequences`, bumped in its own statement; a number taken by an insert that
//! then failed is a gap, never handed out again.
//!
//! Rows written before this migration are numbered in the order they were created, and the
//! sequences start after them.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The numbered tables and their sequences.
const NUMBERED: [(&str, &str); 2] = [("orders", "order_numbers"), ("payments", "payment_numbers")];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        let postgres = m.get_database_backend() == DatabaseBackend::Postgres;
        if !postgres {
            db.execute_unprepared(
                "CREATE TABLE number_sequences (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)",
            )
            .await?;
        }
        for (table, sequence) in NUMBERED {
            let mut statements = Vec::new();
            if postgres {
                statements.push(format!("CREATE SEQUENCE {sequence} AS BIGINT MINVALUE 1"));
                statements.push(format!("ALTER TABLE {table} ADD COLUMN number BIGINT"));
            } else {
                statements.push(format!("ALTER TABLE {table} ADD COLUMN number INTEGER"));
            }
            // The rows there are, numbered in the order they were made.
            statements.push(format!(
                "UPDATE {table} SET number = (SELECT n FROM (SELECT id, ROW_NUMBER() OVER \
                 (ORDER BY created_at, id) AS n FROM {table}) numbered WHERE numbered.id = {table}.id)"
            ));
            if postgres {
                statements.push(format!(
                    "SELECT setval('{sequence}', COALESCE((SELECT MAX(number) FROM {table}), 1), \
                     EXISTS (SELECT 1 FROM {table}))"
                ));
                statements.push(format!("ALTER TABLE {table} ALTER COLUMN number SET NOT NULL"));
                statements.push(format!(
                    "ALTER TABLE {table} ADD CONSTRAINT ck_{table}_number_positive CHECK (number > 0)"
                ));
            } else {
                statements.push(format!(
                    "INSERT INTO number_sequences (name, value) \
                     VALUES ('{sequence}', COALESCE((SELECT MAX(number) FROM {table}), 0))"
                ));
            }
            statements.push(format!("CREATE UNIQUE INDEX uq_{table}_number ON {table} (number)"));
            for sql in statements {
                db.execute_unprepared(&sql).await?;
            }
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        let postgres = m.get_database_backend() == DatabaseBackend::Postgres;
        for (table, sequence) in NUMBERED {
            db.execute_unprepared(&format!("DROP INDEX uq_{table}_number")).await?;
            if postgres {
                db.execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN number")).await?;
                db.execute_unprepared(&format!("DROP SEQUENCE {sequence}")).await?;
            } else {
                db.execute_unprepared(&format!("ALTER TABLE {table} DROP COLUMN number")).await?;
            }
        }
        if !postgres {
            db.execute_unprepared("DROP TABLE number_sequences").await?;
        }
        Ok(())
    }
}
