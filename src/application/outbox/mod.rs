//! The outbox's moving parts: the relay (lanes, the fast path's pipeline, the slow path),
//! its housekeeping (expired-lease recovery, clean-up by retention) and the operator's
//! repairs.

mod admin;
mod housekeeping;
mod lane_timing;
mod lanes;
mod pipeline;
mod relay;
mod report;
mod slow;
mod stages;

pub use admin::{OutboxAdmin, OutboxPage, Redrive, RedriveReport};
pub use housekeeping::{DailyCleanUp, Housekeeping, HousekeepingSettings, LeaseRecovery, housekeeping_jobs};
pub use pipeline::UNRECORDED_BATCHES;
pub use relay::{LaneInterest, OutboxRelay, RelaySettings};
pub use report::{RelayError, RelayReport};
