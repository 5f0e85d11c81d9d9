//! Inbound events from other services (docs/spec.md §7). The messaging adapter decodes and
//! validates the wire format; these use cases decide what each message means, with the
//! inbox making each `(consumer, eventId)` count once however often it is delivered.

mod meeting;
mod messages;

pub use meeting::MeetingEvents;
pub use messages::{
    FREE_MEETING, Handled, MEETING_NOT_FOUND, MeetingDeleted, ParticipantCancelled, ParticipantRegistered,
    RegistrationAtFee, consumers,
};
