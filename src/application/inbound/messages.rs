//! The meeting service's messages as the use cases take them (decoded and validated by the
//! messaging adapter), the inbox's consumer names, and what handling one amounted to.

/// Inbox consumer names: stable identities, independent of queue names.
pub mod consumers {
    pub const PARTICIPANT_REGISTER: &str = "participant-register";
    pub const PARTICIPANT_CANCEL: &str = "participant-cancel";
    pub const MEETING_DELETED: &str = "meeting-deleted";
}

/// `meeting.participant.registered`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantRegistered {
    pub event_id: String,
    pub meeting_id: String,
    pub user_id: String,
    /// Minor units.
    pub amount: i64,
    pub currency: String,
    /// SHA-256 (hex) of the message's JSON, keys sorted (the inbox keeps it).
    pub digest: String,
}

/// A registration refused because its meeting is not in the platform's records.
pub const MEETING_NOT_FOUND: &str = "MEETING_NOT_FOUND";
/// A registration refused because its meeting costs nothing (free meetings never reach
/// payment).
pub const FREE_MEETING: &str = "FREE_MEETING";

/// A registration that carries no amount (the `momo` contract's, docs/spec.md §12): the
/// fee is the meeting's, read from where the platform keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationAtFee {
    pub event_id: String,
    pub meeting_id: String,
    pub user_id: String,
    /// The currency of the platform's fees (`meetings.currency`).
    pub currency: String,
    /// SHA-256 (hex) of the message's JSON, keys sorted (the inbox keeps it).
    pub digest: String,
}

/// `meeting.participant.cancelled`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantCancelled {
    pub event_id: String,
    pub meeting_id: String,
    pub user_id: String,
    pub refund_required: bool,
    /// The refund's reason as the sending platform words it (`momo`'s own text); `None`:
    /// ours, naming the event.
    pub reason: Option<String>,
    /// SHA-256 (hex) of the message's JSON, keys sorted (the inbox keeps it).
    pub digest: String,
}

/// `meeting.deleted`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeetingDeleted {
    pub event_id: String,
    pub meeting_id: String,
    /// The refunds' reason as the sending platform words it (`momo`'s own text); `None`:
    /// ours, naming the event.
    pub reason: Option<String>,
    /// SHA-256 (hex) of the message's JSON, keys sorted (the inbox keeps it).
    pub digest: String,
}

/// What a message amounted to; every variant is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    Processed,
    /// Seen before (inbox): nothing done again.
    Duplicate,
    /// Seen before with another body under the same event id: nothing done again, audited.
    ConflictingDuplicate,
    /// A business outcome that is not a success (declined, nothing to refund, a refund
    /// refused): recorded and announced by event, not retried.
    BusinessFailure(String),
}
