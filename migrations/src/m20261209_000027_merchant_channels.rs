//! A merchant's own settlement and notification channels (docs/spec.md §15), sealed under
//! `secrets.key`: one opaque value per merchant and the id of the key that sealed it — the
//! URLs and secrets are never stored open.

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
                .table(a("merchant_channels"))
                .col(uuid(a("merchant_id")).primary_key())
                .col(string_len(a("key_id"), 32))
                .col(text(a("sealed")))
                .col(timestamp_with_time_zone(a("updated_at")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(a("merchant_channels")).to_owned()).await
    }
}
