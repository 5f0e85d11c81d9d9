//! The facts of an order's door the core reads, stored with the order and its payment
//! (docs/architecture.md, "Where an order's source is read"): how it started
//! (`orders.start`: `NOW`, `HELD`, `AWAIT_CHECKOUT`) and whether its payment attempt was
//! charged to a keyed-in card (`payments.keyed_in`). Rows made before are given what their
//! source meant then: every `COMMERCE` order was held, an `API` order waiting for its
//! payment waited for checkout, and every `MOMO` attempt was keyed in.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Alias::new("orders"))
                .add_column(string_len(Alias::new("start"), 16).default("NOW"))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Alias::new("payments"))
                .add_column(boolean(Alias::new("keyed_in")).default(false))
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        db.execute_unprepared("UPDATE orders SET start = 'HELD' WHERE source = 'COMMERCE'").await?;
        db.execute_unprepared(
            "UPDATE orders SET start = 'AWAIT_CHECKOUT' WHERE source = 'API' AND status = 'AWAITING_PAYMENT'",
        )
        .await?;
        db.execute_unprepared(
            "UPDATE payments SET keyed_in = TRUE WHERE order_id IN (SELECT id FROM orders WHERE source = 'MOMO')",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter().table(Alias::new("payments")).drop_column(Alias::new("keyed_in")).to_owned(),
        )
        .await?;
        m.alter_table(Table::alter().table(Alias::new("orders")).drop_column(Alias::new("start")).to_owned())
            .await
    }
}
