//! The settlement aggregate: moving an approved payment's money to the merchant.
//!
//! `REQUESTED -> SUCCEEDED | FAILED | RETRY_SCHEDULED | AWAITING_OPERATOR`; a retry or an
//! operator's retry goes back to `REQUESTED` (the same settlement, the same id), an operator
//! may mark a waiting one settled. Only a refusal (`FAILED`) triggers compensation in the
//! saga; an outage never does (docs/spec.md §13).

mod error;
mod event;
#[allow(clippy::module_inception)]
mod settlement;
mod status;

pub use error::SettlementError;
pub use event::SettlementEvent;
pub use settlement::Settlement;
pub use status::{SettlementAction, SettlementStatus};
