//! The provider's ledger reconciled (docs/spec.md §10): one run per day (in the provider's
//! zone) and the findings of that day's latest run; running a day again replaces both.

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
                .table(a("ledger_runs"))
                .col(string_len(a("day"), 10).primary_key())
                .col(timestamp_with_time_zone(a("started_at")))
                .col(timestamp_with_time_zone(a("finished_at")))
                .col(big_integer(a("transactions")))
                .col(big_integer(a("findings")))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("ledger_findings"))
                .col(big_integer(a("id")).auto_increment().primary_key())
                .col(string_len(a("day"), 10))
                .col(string_len(a("kind"), 32))
                .col(string_len_null(a("payment_key"), 200))
                .col(string_len_null(a("order_id"), 64))
                .col(string_len_null(a("transaction_key"), 200))
                .col(text_null(a("ours")))
                .col(text_null(a("theirs")))
                .col(text(a("detail")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_ledger_findings_day")
                .table(a("ledger_findings"))
                .col(a("day"))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(a("ledger_findings")).to_owned()).await?;
        m.drop_table(Table::drop().table(a("ledger_runs")).to_owned()).await
    }
}
