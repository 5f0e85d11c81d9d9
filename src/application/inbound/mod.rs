//! Inbound events from other services (docs/spec.md §7). The messaging adapter decodes and
//! validates the wire format; these use cases decide what each message means, with the
//! inbox making each `(consumer, eventId)` count once however often it is delivered.

mod meeting;

pub use meeting::{
    FREE_MEETING, Handled, MEETING_NOT_FOUND, MeetingDeleted, MeetingEvents, ParticipantCancelled,
    ParticipantRegistered, RegistrationAtFee, consumers,
};
