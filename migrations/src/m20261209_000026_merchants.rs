//! Merchants (docs/spec.md §15): the merchants, their stores, their people (memberships) and
//! their servers' API keys (only the secret's SHA-256 is kept), and the owner of every order
//! (`orders.merchant_id`, and optionally `orders.store_id`). The merchant `DEFAULT` is made
//! here and owns every order made before — and every order an older release still writes,
//! through the column's default — so a deployment that never creates a merchant sees no
//! change.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn a(name: &'static str) -> Alias {
    Alias::new(name)
}

/// The `DEFAULT` merchant's id (`domain::merchant::default_merchant_id`; this crate does not
/// see the domain), as each database writes a uuid literal.
const DEFAULT_ID: &str = "00000000-0000-0000-0000-000000000001";

fn default_id(postgres: bool) -> String {
    if postgres { format!("'{DEFAULT_ID}'") } else { format!("x'{}'", DEFAULT_ID.replace('-', "")) }
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(a("merchants"))
                .col(uuid(a("id")).primary_key())
                .col(string_len(a("code"), 50).unique_key())
                .col(string_len(a("name"), 120))
                .col(string_len(a("status"), 16))
                .col(string_len(a("timezone"), 64))
                .col(timestamp_with_time_zone(a("created_at")))
                .col(timestamp_with_time_zone(a("updated_at")))
                .col(big_integer(a("version")))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("stores"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("merchant_id")))
                .col(string_len(a("code"), 50))
                .col(string_len(a("name"), 120))
                .col(string_len(a("status"), 16))
                .col(string_len(a("timezone"), 64))
                .col(timestamp_with_time_zone(a("created_at")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("uq_stores_merchant_code")
                .table(a("stores"))
                .col(a("merchant_id"))
                .col(a("code"))
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("merchant_members"))
                .col(uuid(a("merchant_id")))
                .col(string_len(a("subject"), 200))
                .col(string_len(a("role"), 16))
                .col(timestamp_with_time_zone(a("created_at")))
                .primary_key(Index::create().col(a("merchant_id")).col(a("subject")))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("merchant_api_keys"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("merchant_id")))
                .col(string_len(a("name"), 120))
                .col(string_len(a("role"), 16))
                // The 12 hex digits after `mk_`: how a presented key finds its row.
                .col(string_len(a("prefix"), 32).unique_key())
                // The SHA-256 of the secret, hex; the key itself is never stored.
                .col(string_len(a("secret_hash"), 64))
                .col(timestamp_with_time_zone(a("created_at")))
                .col(timestamp_with_time_zone_null(a("expires_at")))
                .col(timestamp_with_time_zone_null(a("last_used_at")))
                .col(timestamp_with_time_zone_null(a("revoked_at")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_merchant_api_keys_merchant")
                .table(a("merchant_api_keys"))
                .col(a("merchant_id"))
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        let postgres = m.get_database_backend() == DatabaseBackend::Postgres;
        let (id, now) = if postgres {
            (default_id(true), "CURRENT_TIMESTAMP".to_owned())
        } else {
            (default_id(false), "strftime('%Y-%m-%d %H:%M:%f+00:00', 'now')".to_owned())
        };
        db.execute_unprepared(&format!(
            "INSERT INTO merchants (id, code, name, status, timezone, created_at, updated_at, version) \
             VALUES ({id}, 'DEFAULT', 'Default merchant', 'ACTIVE', 'UTC', {now}, {now}, 0)"
        ))
        .await?;
        // NOT NULL with the default's id: every existing row is the default's at once, and a
        // row an older release inserts (it names no merchant) is too.
        let column_type = if postgres { "uuid" } else { "uuid_text" };
        db.execute_unprepared(&format!(
            "ALTER TABLE orders ADD COLUMN merchant_id {column_type} NOT NULL DEFAULT {id}"
        ))
        .await?;
        m.alter_table(Table::alter().table(a("orders")).add_column(uuid_null(a("store_id"))).to_owned())
            .await?;
        m.create_index(
            Index::create()
                .name("idx_orders_merchant")
                .table(a("orders"))
                .col(a("merchant_id"))
                .col(a("id"))
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(Index::drop().name("idx_orders_merchant").table(a("orders")).to_owned()).await?;
        for column in ["store_id", "merchant_id"] {
            m.alter_table(Table::alter().table(a("orders")).drop_column(a(column)).to_owned()).await?;
        }
        for table in ["merchant_api_keys", "merchant_members", "stores", "merchants"] {
            m.drop_table(Table::drop().table(a(table)).to_owned()).await?;
        }
        Ok(())
    }
}
