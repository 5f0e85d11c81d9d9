//! Webhook delivery (docs/spec.md §16): each fanned-out event's body kept once
//! (`webhook_events`, so a message outlives the outbox row it came from), a message's manual
//! flag (a resend or recover: one attempt, no schedule) and its last answer, and the
//! fan-out's position as snapshots (PostgreSQL: an event is read once its transaction is
//! visible, whatever id it took) with an index on the outbox's `txid` (of those events only) for that read.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The events the fan-out reads: `orchestrator::domain::webhook::EVENT_TYPES` as of this
/// migration (a test there checks they are the same).
pub const WEBHOOK_EVENT_TYPES: &[&str] = &[
    "order.completed",
    "order.failed",
    "order.cancelled",
    "payment.approved",
    "payment.declined",
    "payment.cancelled",
    "payment.failed",
    "payment.refunded",
    "payment.refund_failed",
    "settlement.failed",
    "notification.failed",
    "webhook.message.exhausted",
    "webhook.endpoint.disabled",
];

fn a(name: &'static str) -> Alias {
    Alias::new(name)
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(a("webhook_events"))
                .col(uuid(a("event_id")).primary_key())
                .col(uuid(a("merchant_id")))
                .col(string_len(a("event_type"), 120))
                // `{type, timestamp, data}` as sent.
                .col(text(a("body")))
                .col(timestamp_with_time_zone(a("created_at")))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_events_created")
                .table(a("webhook_events"))
                .col(a("created_at"))
                .to_owned(),
        )
        .await?;
        // One column per statement: SQLite alters one at a time.
        let columns = [
            ("webhook_messages", boolean(a("manual")).default(false).to_owned()),
            ("webhook_messages", string_len_null(a("last_status"), 32)),
            ("webhook_messages", timestamp_with_time_zone_null(a("last_attempt_at"))),
            ("webhook_cursor", text_null(a("done_snapshot"))),
            ("webhook_cursor", text_null(a("current_snapshot"))),
        ];
        for (table, mut column) in columns {
            m.alter_table(Table::alter().table(a(table)).add_column(&mut column).to_owned()).await?;
        }
        // A claim's read of each endpoint's oldest due messages.
        m.create_index(
            Index::create()
                .name("idx_webhook_messages_endpoint_due")
                .table(a("webhook_messages"))
                .col(a("endpoint_id"))
                .col(a("status"))
                .col(a("next_attempt_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_messages_endpoint_created")
                .table(a("webhook_messages"))
                .col(a("endpoint_id"))
                .col(a("created_at"))
                .to_owned(),
        )
        .await?;
        // The fan-out starts here: no endpoint had a message before it existed, and every event
        // committed from now on is read (the cursor is a snapshot on PostgreSQL, an id on SQLite).
        if m.get_database_backend() == DatabaseBackend::Postgres {
            // Partial on the events the fan-out reads (the domain's `webhook::EVENT_TYPES`, the
            // same list in its query): the relay's statements name no event type, so they can
            // never prefer this index to `idx_outbox_fast` (lane, txid).
            m.get_connection()
                .execute_unprepared(&format!(
                    "CREATE INDEX idx_outbox_webhook_txid ON outbox_events (txid) WHERE event_type IN ({})",
                    WEBHOOK_EVENT_TYPES.iter().map(|t| format!("'{t}'")).collect::<Vec<_>>().join(", ")
                ))
                .await?;
            m.get_connection()
                .execute_unprepared(
                    "INSERT INTO webhook_cursor (name, outbox_id, done_snapshot) \
                     VALUES ('fanout', 0, pg_current_snapshot()::text)",
                )
                .await?;
        } else {
            m.get_connection()
                .execute_unprepared(
                    "INSERT INTO webhook_cursor (name, outbox_id) \
                     VALUES ('fanout', (SELECT COALESCE(MAX(id), 0) FROM outbox_events))",
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        if m.get_database_backend() == DatabaseBackend::Postgres {
            m.get_connection().execute_unprepared("DROP INDEX IF EXISTS idx_outbox_webhook_txid").await?;
        }
        m.get_connection().execute_unprepared("DELETE FROM webhook_cursor WHERE name = 'fanout'").await?;
        m.drop_index(
            Index::drop().name("idx_webhook_messages_endpoint_due").table(a("webhook_messages")).to_owned(),
        )
        .await?;
        m.drop_index(
            Index::drop()
                .name("idx_webhook_messages_endpoint_created")
                .table(a("webhook_messages"))
                .to_owned(),
        )
        .await?;
        for (table, column) in [
            ("webhook_cursor", "current_snapshot"),
            ("webhook_cursor", "done_snapshot"),
            ("webhook_messages", "last_attempt_at"),
            ("webhook_messages", "last_status"),
            ("webhook_messages", "manual"),
        ] {
            m.alter_table(Table::alter().table(a(table)).drop_column(a(column)).to_owned()).await?;
        }
        m.drop_table(Table::drop().table(a("webhook_events")).to_owned()).await
    }
}
