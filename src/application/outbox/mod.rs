//! The outbox's moving parts: the relay (claim -> publish -> mark), its housekeeping
//! (expired-lease recovery, clean-up by retention) and the operator's repairs.

mod admin;
mod housekeeping;
mod pipeline;
mod relay;

pub use admin::{OutboxAdmin, OutboxPage, Redrive, RedriveReport};
pub use housekeeping::{Housekeeping, HousekeepingSettings};
pub use pipeline::UNRECORDED_BATCHES;
pub use relay::{LaneInterest, OutboxRelay, RelayError, RelayReport, RelaySettings};
