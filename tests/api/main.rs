//! Integration tests: one binary (link time), modules by area. Every test gets a fresh
//! database; most run once on SQLite and once on PostgreSQL.
//!
//! Every file here is test code, so an `unwrap()` is a test failing loudly, not a panic in
//! the service: the workspace denies `clippy::unwrap_used` everywhere else.
#![allow(clippy::unwrap_used)]

mod helpers;

mod admin;
mod api_orders;
mod api_validation;
mod authz;
mod broker;
mod browser;
mod cards;
mod channels;
mod checkout;
mod cli;
mod cluster;
mod commerce_dialect;
mod console;
mod contracts;
mod edges;
mod external;
mod failover;
mod faults;
mod hostile;
mod identity;
mod kafka;
mod kafka_broker;
mod ledger;
mod meeting;
mod merchants;
mod momo;
mod momo_dialect;
mod money;
mod notifications;
mod numbers;
mod observability;
mod outbox_contract;
mod payouts;
mod properties;
mod refunds;
mod relay;
mod repository_contract;
mod schemathesis;
mod subscriptions;
mod toss;
mod toss_edges;
mod traces;
mod webhook_delivery;
mod webhooks;
