//! Webhook subscriptions (docs/spec.md §16): a merchant's endpoints (their secrets sealed as
//! §15's, the previous one kept beside the new during a rotation's overlap), one message
//! row per (endpoint, event) with its delivery state, every attempt with the answer's first
//! 4 KiB, and the fan-out's cursor over the outbox.

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
                .table(a("webhook_endpoints"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("merchant_id")))
                .col(text(a("url")))
                .col(string_len(a("description"), 500))
                // `*`, or the event types, comma-separated.
                .col(text(a("event_types")))
                .col(string_len_null(a("disabled_reason"), 16))
                .col(string_len(a("secret_key_id"), 32))
                .col(text(a("secret")))
                .col(string_len_null(a("previous_secret_key_id"), 32))
                .col(text_null(a("previous_secret")))
                .col(timestamp_with_time_zone_null(a("previous_secret_until")))
                .col(timestamp_with_time_zone(a("created_at")))
                .col(timestamp_with_time_zone(a("updated_at")))
                .col(timestamp_with_time_zone_null(a("last_success_at")))
                .col(timestamp_with_time_zone_null(a("failing_since")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_endpoints_merchant")
                .table(a("webhook_endpoints"))
                .col(a("merchant_id"))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("webhook_messages"))
                .col(uuid(a("endpoint_id")))
                .col(uuid(a("event_id")))
                .col(string_len(a("event_type"), 120))
                .col(string_len(a("status"), 16))
                .col(integer(a("attempts")))
                .col(timestamp_with_time_zone_null(a("next_attempt_at")))
                // A worker's claim: until then no other takes it.
                .col(timestamp_with_time_zone_null(a("claimed_until")))
                .col(timestamp_with_time_zone(a("created_at")))
                .col(timestamp_with_time_zone(a("updated_at")))
                .primary_key(Index::create().col(a("endpoint_id")).col(a("event_id")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_messages_due")
                .table(a("webhook_messages"))
                .col(a("status"))
                .col(a("next_attempt_at"))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("webhook_attempts"))
                .col(big_integer(a("id")).primary_key().auto_increment())
                .col(uuid(a("endpoint_id")))
                .col(uuid(a("event_id")))
                .col(integer(a("attempt")))
                .col(timestamp_with_time_zone(a("at")))
                // The HTTP status, or an error class (`TIMEOUT`, `CONNECT`, `REFUSED_ADDRESS`).
                .col(string_len(a("status"), 32))
                .col(big_integer(a("duration_ms")))
                .col(text(a("response")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_attempts_message")
                .table(a("webhook_attempts"))
                .col(a("endpoint_id"))
                .col(a("event_id"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_attempts_at")
                .table(a("webhook_attempts"))
                .col(a("at"))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(a("webhook_cursor"))
                .col(string_len(a("name"), 32).primary_key())
                // The last outbox row the fan-out has read.
                .col(big_integer(a("outbox_id")))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in ["webhook_cursor", "webhook_attempts", "webhook_messages", "webhook_endpoints"] {
            m.drop_table(Table::drop().table(a(table)).to_owned()).await?;
        }
        Ok(())
    }
}
