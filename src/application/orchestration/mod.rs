//! The order saga (docs/spec.md §4): a pure step table ([`steps`]) and the service that drives it
//! ([`Orchestrator`]), calling providers between commits and recording every outcome.

mod checkout;
mod compensation;
mod confirmation;
pub mod lease;
pub mod notify;
mod orchestrator;
mod outcome;
pub mod payment;
mod placement;
mod run;
mod service;
mod settlement;
mod settlement_repair;
pub mod steps;
#[cfg(test)]
mod testing;

pub use checkout::{Checkout, PayOrder};
pub use confirmation::{Confirmation, Reconciled};
pub use orchestrator::{CheckoutSettings, Orchestrator, SagaSettings};
pub use placement::{InboxKey, KeyedIn, MAX_DESCRIPTION, PlaceOrder};
pub use run::KEY_IN_NOT_ALLOWED;
pub use service::{ALREADY_REGISTERED, NO_PAYMENT_METHOD};
pub use settlement_repair::SettlementRetryBy;
