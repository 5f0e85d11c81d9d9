//! SeaORM entities: the tables of `migrations/`, seen from Rust. Only the persistence
//! adapter sees these; everything else speaks domain types.

pub mod audit_log;
pub mod idempotency_keys;
pub mod inbox;
pub mod ledger_findings;
pub mod ledger_runs;
pub mod merchant_api_keys;
pub mod merchant_channels;
pub mod merchant_members;
pub mod merchants;
pub mod notification_events;
pub mod orchestration_steps;
pub mod order_items;
pub mod orders;
pub mod outbox_events;
pub mod payment_methods;
pub mod payments;
pub mod payouts;
pub mod refunds;
pub mod settlements;
pub mod stores;
pub mod webhook_endpoints;
