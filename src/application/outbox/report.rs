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
        self.next_retry_at = match (self.next_retry_at, r.next_retry_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
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
