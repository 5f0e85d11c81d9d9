//! When a relay renews its lanes (docs/spec.md §6), and what it holds as of its last renewal:
//! shared by the relay's loop (`relay.rs`) and its lease (`lanes.rs`).

use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::application::ports::HeldLane;

/// The lanes this relay leases, as of its last renewal.
#[derive(Debug, Default)]
pub(super) struct HeldLanes {
    pub(super) lanes: Vec<HeldLane>,
    /// When the last renewal started (`None`: never renewed, or given back since).
    pub(super) renewed_at: Option<tokio::time::Instant>,
    /// Whether lanes are changing hands: the relay joined lately, or its last renewal took
    /// or gave back lanes.
    pub(super) settling: bool,
    /// When the relay first held a lease (`None`: not yet, or given back since).
    pub(super) joined: Option<tokio::time::Instant>,
}

/// How often a relay renews its lanes: often enough to rebalance within seconds as workers
/// come and go, and at least three times per lease.
pub(super) fn renew_every(lease: Duration) -> StdDuration {
    (lease.to_std().unwrap_or_default() / 3).min(StdDuration::from_secs(5))
}

/// How often a relay renews between drains while lanes change hands (it joined lately, or
/// its last renewal took or gave back lanes): workers started together, or one joining,
/// share the lanes within a fraction of a second of one giving lanes back, rather than a
/// renewal interval later. Only between drains, when nothing read is unrecorded: a lane
/// given back then has no batch its next owner would send again. Within a drain a relay
/// renews every renewal interval, as ever.
pub(super) const SETTLING_RENEW_EVERY: StdDuration = StdDuration::from_millis(100);

/// How long a relay counts as joining: a renewal interval of the workers already there
/// (they see it then, and give lanes back), and a second for their statements.
pub(super) fn joining(lease: Duration) -> StdDuration {
    renew_every(lease) + StdDuration::from_secs(1)
}

/// The time from one renewal to the next: [`SETTLING_RENEW_EVERY`] while `settling`.
pub(super) fn renew_interval(lease: Duration, settling: bool) -> StdDuration {
    let every = renew_every(lease);
    if settling { every.min(SETTLING_RENEW_EVERY) } else { every }
}
