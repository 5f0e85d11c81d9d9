//! A customer's saved card (docs/spec.md §10): the billing key Toss issued for it, bound to the
//! customer's key at Toss, and what may be shown of the card. One per customer; the billing
//! key is a secret that never leaves this table except in a charge to Toss.

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
                .table(a("payment_methods"))
                .col(string_len(a("customer_id"), 64).primary_key())
                .col(string_len(a("customer_key"), 50))
                .col(string_len(a("billing_key"), 200))
                .col(string_len_null(a("card_company"), 64))
                .col(string_len_null(a("card_number"), 64))
                .col(timestamp_with_time_zone(a("created_at")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(a("payment_methods")).to_owned()).await
    }
}
