//! The fee of a meeting whose registrations carry none (docs/spec.md §12, `momo`): the
//! platform's payment module read it from the meeting's record, and so do we.

use async_trait::async_trait;

use super::RepoError;

/// A meeting's participation fee, as its platform keeps it.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MeetingFees: Send + Sync {
    /// The fee of meeting `meeting_id` in minor units of `meetings.currency`; `Ok(None)`
    /// when there is no such meeting (a business failure, `MEETING_NOT_FOUND`). MUST read
    /// only, and MUST return `Unavailable` when the source cannot be reached or fails (the
    /// message is retried, then dead-lettered), `Corrupt` when the fee is not a whole number.
    async fn fee(&self, meeting_id: &str) -> Result<Option<i64>, RepoError>;
}
