//! Refunds, full or partial, each a record of its own (docs/spec.md §3): its amount, reason,
//! status, the idempotency key it is asked for with, the provider's key of the cancel and
//! who asked. The payment keeps the sum of its succeeded refunds (`refunded_amount`) and
//! when it was approved (`approved_at`, for the provider's ledger, §10).
//!
//! Payments refunded before this migration become one full refund each, whose id is the
//! payment's and whose key is the one the old refund path used (`cancel-{paymentRequestId}`):
//! a refund still pending is resumed with the key it was first asked with.

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
                .table(a("refunds"))
                .col(uuid(a("id")).primary_key())
                .col(uuid(a("payment_id")))
                .col(uuid(a("order_id")))
                .col(big_integer(a("amount")))
                .col(string_len(a("currency"), 3))
                .col(text(a("reason")))
                .col(string_len(a("status"), 16))
                .col(string_len(a("idempotency_key"), 300))
                .col(string_len_null(a("request_key"), 300))
                .col(string_len_null(a("provider_transaction_key"), 200))
                .col(text_null(a("failure_reason")))
                .col(string_len(a("actor"), 128))
                .col(timestamp_with_time_zone(a("created_at")))
                .col(timestamp_with_time_zone(a("updated_at")))
                .col(big_integer(a("version")))
                .foreign_key(
                    ForeignKey::create()
                        .name("fk_refunds_payment")
                        .from(a("refunds"), a("payment_id"))
                        .to(a("payments"), a("id")),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("idx_refunds_payment").table(a("refunds")).col(a("payment_id")).to_owned(),
        )
        .await?;
        // One refund per request: a request asked again is the same refund, never a second.
        m.create_index(
            Index::create()
                .name("uq_refunds_request")
                .table(a("refunds"))
                .col(a("payment_id"))
                .col(a("request_key"))
                .unique()
                .to_owned(),
        )
        .await?;
        // The provider's key of a cancel is recorded once (a webhook and the ledger may both
        // report a cancel made in its dashboard).
        m.create_index(
            Index::create()
                .name("uq_refunds_provider_key")
                .table(a("refunds"))
                .col(a("provider_transaction_key"))
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("idx_refunds_updated").table(a("refunds")).col(a("updated_at")).to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(a("payments"))
                .add_column(big_integer(a("refunded_amount")).default(0))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(a("payments"))
                .add_column(timestamp_with_time_zone_null(a("approved_at")))
                .to_owned(),
        )
        .await?;
        let db = m.get_connection();
        db.execute_unprepared(
            "INSERT INTO refunds (id, payment_id, order_id, amount, currency, reason, status, \
             idempotency_key, request_key, provider_transaction_key, failure_reason, actor, \
             created_at, updated_at, version) \
             SELECT id, id, order_id, amount, currency, 'refund (recorded before partial refunds)', \
             CASE status WHEN 'REFUNDED' THEN 'SUCCEEDED' ELSE 'PENDING' END, \
             'cancel-' || payment_request_id, NULL, NULL, NULL, 'system', updated_at, updated_at, 0 \
             FROM payments WHERE status IN ('REFUNDED', 'REFUND_PENDING')",
        )
        .await?;
        db.execute_unprepared("UPDATE payments SET refunded_amount = amount WHERE status = 'REFUNDED'")
            .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(Table::alter().table(a("payments")).drop_column(a("approved_at")).to_owned()).await?;
        m.alter_table(Table::alter().table(a("payments")).drop_column(a("refunded_amount")).to_owned())
            .await?;
        m.drop_table(Table::drop().table(a("refunds")).to_owned()).await
    }
}
