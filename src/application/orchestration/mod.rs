//! The order saga (SPEC §4): a pure step table ([`steps`]) and the service that drives it
//! ([`Orchestrator`]), calling providers between commits and recording every outcome.

pub mod events;
pub mod notify;
mod service;
pub mod steps;

pub use service::{
    ALREADY_REGISTERED, Confirmation, InboxKey, Orchestrator, PlaceOrder, Reconciled, SagaSettings,
};
