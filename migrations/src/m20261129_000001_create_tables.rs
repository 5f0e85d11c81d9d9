//! Orders and everything recorded about them, the outbox, the inbox and idempotency keys.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// A `created_at`/`updated_at`-style column: timestamp with time zone, not null.
fn ts(name: &'static str) -> ColumnDef {
    timestamp_with_time_zone(Alias::new(name))
}

fn ts_null(name: &'static str) -> ColumnDef {
    timestamp_with_time_zone_null(Alias::new(name))
}

fn s(name: &'static str, len: u32) -> ColumnDef {
    string_len(Alias::new(name), len)
}

fn s_null(name: &'static str, len: u32) -> ColumnDef {
    string_len_null(Alias::new(name), len)
}

fn a(name: &'static str) -> Alias {
    Alias::new(name)
}

fn index(table: &'static str, name: &'static str, cols: &[&'static str]) -> IndexCreateStatement {
    let mut idx = Index::create();
    idx.name(name).table(a(table));
    for c in cols {
        idx.col(a(c));
    }
    idx.to_owned()
}

const TABLES: &[&str] = &[
    "idempotency_keys",
    "inbox",
    "outbox_events",
    "audit_log",
    "orchestration_steps",
    "notification_events",
    "settlements",
    "payments",
    "order_items",
    "orders",
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(a("orders"))
                .col(uuid(a("id")).primary_key())
                .col(s("customer_id", 64))
                .col(s("source", 16))
                .col(s_null("meeting_id", 64))
                .col(s("currency", 3))
                .col(big_integer(a("total_amount")))
                .col(s("status", 32))
                .col(s_null("failure_stage", 16))
                .col(text_null(a("failure_reason")))
                .col(s_null("mock_scenario", 255))
                .col(s_null("correlation_id", 128))
                .col(ts("created_at"))
                .col(ts("updated_at"))
                .col(big_integer(a("version")))
                .to_owned(),
        )
        .await?;
        m.create_index(index("orders", "idx_orders_customer", &["customer_id", "id"])).await?;
        m.create_index(index("orders", "idx_orders_status", &["status", "id"])).await?;
        m.create_index(index("orders", "idx_orders_meeting", &["meeting_id", "customer_id"])).await?;

        m.create_table(
            Table::create()
                .table(a("order_items"))
                .col(big_integer(a("id")).auto_increment().primary_key())
                .col(uuid(a("order_id")))
                .col(integer(a("line_no")))
                .col(s("sku", 64))
                .col(big_integer(a("quantity")))
                .col(big_integer(a("unit_price")))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_order_items_order")
                        .from(a("order_items"), a("order_id"))
                        .to(a("orders"), a("id")),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(index("order_items", "idx_order_items_order", &["order_id", "line_no"])).await?;

        m.create_table(
            Table::create()
                .table(a("payments"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("order_id")))
                .col(integer(a("attempt")))
                .col(string_len_uniq(a("payment_request_id"), 128))
                .col(string_len_null(a("provider_transaction_id"), 128).unique_key())
                .col(big_integer(a("amount")))
                .col(s("currency", 3))
                .col(s("status", 32))
                .col(s_null("decline_code", 128))
                .col(text_null(a("refund_failure_reason")))
                .col(ts("created_at"))
                .col(ts("updated_at"))
                .col(big_integer(a("version")))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_payments_order")
                        .from(a("payments"), a("order_id"))
                        .to(a("orders"), a("id")),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(index("payments", "idx_payments_order", &["order_id", "attempt"])).await?;
        m.create_index(index("payments", "idx_payments_status", &["status", "updated_at"])).await?;

        m.create_table(
            Table::create()
                .table(a("settlements"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("order_id")))
                .col(uuid(a("payment_id")))
                .col(big_integer(a("amount")))
                .col(s("currency", 3))
                .col(s("status", 32))
                .col(text_null(a("failure_reason")))
                .col(ts("created_at"))
                .col(ts("updated_at"))
                .col(big_integer(a("version")))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_settlements_order")
                        .from(a("settlements"), a("order_id"))
                        .to(a("orders"), a("id")),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(index("settlements", "idx_settlements_order", &["order_id"]).unique().to_owned())
            .await?;

        m.create_table(
            Table::create()
                .table(a("notification_events"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("order_id")))
                .col(s("status", 40))
                .col(s_null("policy", 32))
                .col(integer(a("attempts")))
                .col(ts_null("next_attempt_at"))
                .col(text_null(a("last_error")))
                .col(ts_null("claimed_until"))
                .col(ts("created_at"))
                .col(ts("updated_at"))
                .col(big_integer(a("version")))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_notification_events_order")
                        .from(a("notification_events"), a("order_id"))
                        .to(a("orders"), a("id")),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            index("notification_events", "idx_notification_events_order", &["order_id"]).unique().to_owned(),
        )
        .await?;
        m.create_index(index(
            "notification_events",
            "idx_notification_events_due",
            &["status", "next_attempt_at"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table(a("orchestration_steps"))
                .col(big_integer(a("id")).auto_increment().primary_key())
                .col(uuid(a("order_id")))
                .col(s("step", 32))
                .col(s("status", 16))
                .col(text_null(a("detail")))
                .col(ts("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(index("orchestration_steps", "idx_orchestration_steps_order", &["order_id", "id"]))
            .await?;

        m.create_table(
            Table::create()
                .table(a("audit_log"))
                .col(big_integer(a("id")).auto_increment().primary_key())
                .col(s("action", 64))
                .col(s("entity_type", 64))
                .col(s("entity_id", 255))
                .col(s("actor", 255))
                .col(text_null(a("detail")))
                .col(ts("created_at"))
                .to_owned(),
        )
        .await?;
        m.create_index(index("audit_log", "idx_audit_log_entity", &["entity_type", "entity_id", "id"]))
            .await?;

        m.create_table(
            Table::create()
                .table(a("outbox_events"))
                .col(big_integer(a("id")).auto_increment().primary_key())
                .col(uuid_uniq(a("event_id")))
                .col(s("aggregate_type", 64))
                .col(s("aggregate_id", 128))
                .col(s("event_type", 128))
                .col(s("routing_key", 255))
                .col(text(a("payload")))
                .col(s_null("correlation_id", 128))
                .col(s("status", 16))
                .col(integer(a("retry_count")).default(0))
                .col(s_null("failure_code", 32))
                .col(text_null(a("failure_reason")))
                .col(ts_null("next_attempt_at"))
                .col(ts_null("last_attempt_at"))
                .col(s_null("claimed_by", 128))
                .col(ts_null("claimed_until"))
                .col(ts("created_at"))
                .col(ts_null("published_at"))
                .col(ts_null("dead_lettered_at"))
                .col(big_integer(a("version")).default(1))
                .to_owned(),
        )
        .await?;
        // docs/spec.md §6: the due scan, the pending pick-up, the clean-up; plus per-aggregate order.
        m.create_index(index("outbox_events", "idx_outbox_due", &["status", "next_attempt_at"])).await?;
        m.create_index(index("outbox_events", "idx_outbox_pending", &["status", "created_at"])).await?;
        m.create_index(index("outbox_events", "idx_outbox_cleanup", &["status", "published_at"])).await?;
        m.create_index(index(
            "outbox_events",
            "idx_outbox_aggregate",
            &["aggregate_type", "aggregate_id", "id"],
        ))
        .await?;

        m.create_table(
            Table::create()
                .table(a("inbox"))
                .col(s("consumer", 128))
                .col(s("event_id", 128))
                .col(ts("processed_at"))
                .primary_key(Index::create().col(a("consumer")).col(a("event_id")))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(a("idempotency_keys"))
                .col(s("scope", 255))
                .col(s("idempotency_key", 255))
                .col(s("fingerprint", 64))
                .col(uuid(a("order_id")))
                .col(integer_null(a("response_status")))
                .col(text_null(a("response_body")))
                .col(ts_null("locked_until"))
                .col(ts("created_at"))
                .primary_key(Index::create().col(a("scope")).col(a("idempotency_key")))
                .to_owned(),
        )
        .await?;
        m.create_index(index("idempotency_keys", "idx_idempotency_keys_created", &["created_at"])).await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in TABLES {
            m.drop_table(Table::drop().table(a(table)).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}
