//! The settlement aggregate: moving an approved payment's money to the merchant.
//!
//! `REQUESTED -> SUCCEEDED | FAILED`. A failed settlement triggers compensation in the saga.

mod error;
mod event;
#[allow(clippy::module_inception)]
mod settlement;
mod status;

pub use error::SettlementError;
pub use event::SettlementEvent;
pub use settlement::Settlement;
pub use status::{SettlementAction, SettlementStatus};
