//! The outbox's moving parts: the relay (claim -> publish -> mark) and its housekeeping
//! (expired-lease recovery, clean-up by retention).

mod housekeeping;
mod relay;

pub use housekeeping::{Housekeeping, HousekeepingSettings};
pub use relay::{OutboxRelay, RelayReport, RelaySettings};
