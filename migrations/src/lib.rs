//! The orchestrator's schema, one migration per file (`mYYYYMMDD_HHMMSS_name.rs`).
//!
//! Every table works on PostgreSQL and SQLite alike; the binary runs these through
//! `app migrate` (and automatically on the embedded SQLite default).

pub use sea_orm_migration::prelude::*;

mod m20261129_000001_create_tables;
mod m20261129_000002_outbox_claim_index;
mod m20261129_000003_inbox_order;
mod m20261129_000004_order_saga_lease;
mod m20261129_000005_payment_reconciliation;
mod m20261129_000006_outbox_partial_indexes;
mod m20261201_000007_registrations_and_saga_recovery;
mod m20261201_000008_outbox_lanes;
mod m20261201_000009_outbox_fast_path;
mod m20261201_000010_outbox_trace_context;
mod m20261201_000011_outbox_fast_index_covering;
mod m20261202_000012_provider_transaction_id_200;
mod m20261202_000013_payment_methods;
mod m20261202_000014_inbox_digest;
mod m20261202_000015_refunds;
mod m20261202_000016_ledger;
mod m20261203_000017_outbox_incarnation;
mod m20261204_000018_numbers;
mod m20261205_000019_causation;
mod m20261205_000020_settlement_retries;
mod m20261205_000021_customer_email;
mod m20261206_000022_payouts;
mod m20261207_000023_order_description;
mod m20261208_000024_order_start;
mod m20261208_000025_step_facts;
mod m20261209_000026_merchants;
mod m20261209_000027_merchant_channels;
mod m20261210_000028_webhook_subscriptions;
pub mod m20261211_000029_webhook_delivery;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261129_000001_create_tables::Migration),
            Box::new(m20261129_000002_outbox_claim_index::Migration),
            Box::new(m20261129_000003_inbox_order::Migration),
            Box::new(m20261129_000004_order_saga_lease::Migration),
            Box::new(m20261129_000005_payment_reconciliation::Migration),
            Box::new(m20261129_000006_outbox_partial_indexes::Migration),
            Box::new(m20261201_000007_registrations_and_saga_recovery::Migration),
            Box::new(m20261201_000008_outbox_lanes::Migration),
            Box::new(m20261201_000009_outbox_fast_path::Migration),
            Box::new(m20261201_000010_outbox_trace_context::Migration),
            Box::new(m20261201_000011_outbox_fast_index_covering::Migration),
            Box::new(m20261202_000012_provider_transaction_id_200::Migration),
            Box::new(m20261202_000013_payment_methods::Migration),
            Box::new(m20261202_000014_inbox_digest::Migration),
            Box::new(m20261202_000015_refunds::Migration),
            Box::new(m20261202_000016_ledger::Migration),
            Box::new(m20261203_000017_outbox_incarnation::Migration),
            Box::new(m20261204_000018_numbers::Migration),
            Box::new(m20261205_000019_causation::Migration),
            Box::new(m20261205_000020_settlement_retries::Migration),
            Box::new(m20261205_000021_customer_email::Migration),
            Box::new(m20261206_000022_payouts::Migration),
            Box::new(m20261207_000023_order_description::Migration),
            Box::new(m20261208_000024_order_start::Migration),
            Box::new(m20261208_000025_step_facts::Migration),
            Box::new(m20261209_000026_merchants::Migration),
            Box::new(m20261209_000027_merchant_channels::Migration),
            Box::new(m20261210_000028_webhook_subscriptions::Migration),
            Box::new(m20261211_000029_webhook_delivery::Migration),
        ]
    }
}
