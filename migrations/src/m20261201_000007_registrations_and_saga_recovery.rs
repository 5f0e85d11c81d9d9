//! docs/spec.md §7's registration rule enforced by the database, and bounded stalled-saga recovery.
//!
//! - `orders.registration_key`: the (meeting, user) key a live meeting order holds
//!   (`Order::registration_key`), `NULL` otherwise, under a unique index — so two
//!   registrations of one pair can never both create an order, however they race. Existing
//!   rows: the newest live order of each pair takes the key (older duplicates, from before
//!   the rule, keep `NULL`).
//! - `orders.saga_resumes` / `saga_resume_at`: how often the worker's stalled-saga recovery
//!   has resumed the order and when it may next; past the bound an operator takes over.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// A live meeting order of alias `o`, as `Order::registration_key` decides it.
const LIVE: &str = "o.source = 'MEETING' AND o.meeting_id IS NOT NULL AND (o.status IN \
    ('CREATED', 'PAYMENT_APPROVED', 'SETTLEMENT_REQUESTED', 'COMPLETED', 'PENDING_CONFIRMATION') \
    OR (o.status = 'FAILED' AND o.failure_stage <> 'PAYMENT'))";

fn orders() -> Alias {
    Alias::new("orders")
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            string_len_null(Alias::new("registration_key"), 160),
            integer(Alias::new("saga_resumes")).default(0).to_owned(),
            timestamp_with_time_zone_null(Alias::new("saga_resume_at")),
        ] {
            let mut column = column;
            m.alter_table(Table::alter().table(orders()).add_column(&mut column).to_owned()).await?;
        }
        let backfill = format!(
            "UPDATE orders SET registration_key = \
               length(meeting_id) || ':' || meeting_id || '/' || customer_id \
             WHERE id IN (SELECT o.id FROM orders o WHERE {LIVE} AND o.id = (\
               SELECT o2.id FROM orders o2 WHERE o2.meeting_id = o.meeting_id \
                 AND o2.customer_id = o.customer_id AND {live2} \
               ORDER BY o2.created_at DESC, o2.id DESC LIMIT 1))",
            live2 = LIVE.replace("o.", "o2.")
        );
        m.get_connection().execute_unprepared(&backfill).await?;
        // Partial: orders without a registration (every API order) never enter the index.
        m.get_connection()
            .execute_unprepared(
                "CREATE UNIQUE INDEX idx_orders_registration ON orders (registration_key) \
                 WHERE registration_key IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(Index::drop().name("idx_orders_registration").table(orders()).to_owned()).await?;
        for column in ["saga_resume_at", "saga_resumes", "registration_key"] {
            m.alter_table(Table::alter().table(orders()).drop_column(Alias::new(column)).to_owned()).await?;
        }
        Ok(())
    }
}
