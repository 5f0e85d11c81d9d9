//! The application layer: use cases and the ports they need.
//!
//! Services here load state through ports, call the domain's transition functions, and
//! hand the resulting changes — aggregates, outbox events, saga steps, audit rows — to the
//! [`ports::UnitOfWork`] to commit atomically. Nothing here names a database, broker or
//! HTTP crate; the adapters implement the ports and `startup.rs` wires them in.

pub mod actor;
pub mod audit;
mod commit;
pub mod envelopes;
pub mod error;
pub mod health;
pub mod idempotency;
pub mod inbound;
pub mod input;
pub mod jobs;
pub mod merchants;
pub mod meter;
pub mod money;
pub mod notification_retry;
pub mod orchestration;
pub mod outbox;
pub mod ports;
pub mod queries;
pub mod recovery;
pub mod settlement_retry;
pub mod webhooks;

pub use actor::{Access, Actor};
pub use error::{AppError, ORDER_BUSY};
