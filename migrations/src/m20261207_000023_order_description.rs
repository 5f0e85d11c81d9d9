//! What a commerce-dialect order says about itself (`description` of the commerce
//! backend's `POST /api/orders`, docs/dialects.md): its fault words drive the mock
//! providers, and its clients read it back.

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
                .add_column(string_len_null(Alias::new("description"), 255))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter().table(Alias::new("orders")).drop_column(Alias::new("description")).to_owned(),
        )
        .await
    }
}
