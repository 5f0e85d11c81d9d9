//! The fee of a meeting whose registrations carry none (docs/spec.md §12, `momo`): the
//! platform's payment module read it from the meeting's record, and so do we.

use async_trait::async_trait;

use super::RepoError;

/// A meeting its platform still sells, as the platform keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeetingFee {
    /// The participation fee in minor units of `meetings.currency`.
    pub fee: i64,
    /// Its title, where the source has one (the provider shows the charge as
    /// `<title> 참가비`, as the platform did).
    pub title: Option<String>,
}

/// Why a meeting's fee is not charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unchargeable {
    /// It costs nothing: free meetings never reach payment (`FREE_MEETING`).
    Free,
    /// A negative fee: the platform's record is wrong.
    Negative(i64),
}

impl MeetingFee {
    /// The fee to charge, the one rule for a registration and a key-in alike.
    ///
    /// # Errors
    /// [`Unchargeable`]: free, or a negative fee.
    pub fn chargeable(&self) -> Result<i64, Unchargeable> {
        match self.fee {
            0 => Err(Unchargeable::Free),
            fee if fee < 0 => Err(Unchargeable::Negative(fee)),
            fee => Ok(fee),
        }
    }
}

/// A meeting's participation fee, as its platform keeps it.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MeetingFees: Send + Sync {
    /// Meeting `meeting_id`, if its platform still sells it; `Ok(None)` when there is no
    /// such meeting or it is no longer sold (deleted, finished, over capacity: a business
    /// failure, `MEETING_NOT_FOUND`). MUST read only, and MUST return `Unavailable` when the
    /// source cannot be reached or fails (the message is retried, then dead-lettered),
    /// `Corrupt` when the fee is not a whole number.
    async fn meeting(&self, meeting_id: &str) -> Result<Option<MeetingFee>, RepoError>;
}
