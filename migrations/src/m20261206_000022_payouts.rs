//! What the provider pays out (docs/spec.md §13): one row per transaction of ours a
//! settlement of the provider's settles (its fee, VAT, payout and dates), replaced with the
//! ledger run of its sold day.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &'static str) -> Alias {
    Alias::new(name)
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(a("payouts"))
                // `{payment}:approval`, `{payment}:refund:{refund}`, `{payment}:cancel`.
                .col(string_len(a("source"), 120).primary_key())
                .col(uuid(a("payment_id")))
                .col(string_len_null(a("transaction_key"), 200))
                .col(big_integer(a("amount")))
                .col(big_integer(a("fee")))
                .col(big_integer_null(a("supply_amount")))
                .col(big_integer_null(a("vat")))
                .col(big_integer(a("pay_out_amount")))
                // `YYYY-MM-DD`, as the provider dates them.
                .col(string_len(a("sold_date"), 10))
                .col(string_len(a("paid_out_date"), 10))
                .to_owned(),
        )
        .await?;
        for (name, column) in [
            ("idx_payouts_payment", "payment_id"),
            ("idx_payouts_sold", "sold_date"),
            ("idx_payouts_paid_out", "paid_out_date"),
        ] {
            m.create_index(Index::create().name(name).table(a("payouts")).col(a(column)).to_owned()).await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(a("payouts")).to_owned()).await
    }
}
