//! What a relay round did, and why it could not: shared by the relay and its pipeline.

use chrono::{DateTime, Utc};

use crate::application::ports::{BrokerUnavailable, RepoError};

/// What one round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RelayReport {
    pub claimed: usize,
    pub published: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    /// Rows whose claim (or lane) was lost before marking (taken over elsewhere).
    pub lost_claims: u64,
    /// Fast-path events held back behind an earlier event of their aggregate.
    pub held_back: u64,
    /// Events that reached the broker (or may have) and will be sent again: each one may
    /// reach consumers twice, under the same `message_id` (`outbox_resent_total{cause}`).
    pub resent: u64,
    /// The earliest retry this round scheduled.
    pub next_retry_at: Option<DateTime<Utc>>,
}

impl RelayReport {
    pub(super) fn add(&mut self, r: RelayReport) {
        self.claimed += r.claimed;
        self.published += r.published;
        self.retried += r.retried;
        self.dead_lettered += r.dead_lettered;
        self.lost_claims += r.lost_claims;
        self.held_back += r.held_back;
        self.resent += r.resent;
        self.next_retry_at = match (self.next_retry_at, r.next_retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// Why events that reached the broker, or may have, are sent again (docs/reliability.md,
/// "When a message is delivered twice"): the label of `outbox_resent_total{cause}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// The lanes' lease ran short mid-drain (a paused or starved worker): what it sent and
    /// did not record is sent again from the lanes' last record.
    LeaseLapsed,
    /// Another worker took a lane before its batches were recorded (fenced off).
    LaneLost,
    /// The database refused a batch's record on every attempt (or a slow-path mark).
    RecordFailed,
    /// The broker's verdict never came (a confirm timeout, a connection lost with the
    /// message in flight): retried, though the broker may have it.
    ConfirmUnknown,
    /// A slow-path row's claim was recovered elsewhere before it was marked published.
    ClaimLost,
}

impl Resend {
    pub fn as_str(self) -> &'static str {
        match self {
            Resend::LeaseLapsed => "lease_lapsed",
            Resend::LaneLost => "lane_lost",
            Resend::RecordFailed => "record_failed",
            Resend::ConfirmUnknown => "confirm_unknown",
            Resend::ClaimLost => "claim_lost",
        }
    }
}

/// Why a round did nothing useful.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error(transparent)]
    Store(#[from] RepoError),
    #[error(transparent)]
    Broker(#[from] BrokerUnavailable),
}
