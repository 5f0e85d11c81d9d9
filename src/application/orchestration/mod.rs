//! The order saga (SPEC §4): a pure step table ([`steps`]) and the service that drives it
//! ([`Orchestrator`]), calling providers between commits and recording every outcome.

mod confirmation;
pub mod events;
pub mod lease;
pub mod notify;
pub mod payment;
mod service;
pub mod steps;

pub use confirmation::{Confirmation, Reconciled};
pub use service::{ALREADY_REGISTERED, InboxKey, Orchestrator, PlaceOrder, SagaSettings};
