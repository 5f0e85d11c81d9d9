//! The notification aggregate: telling the customer their order went through.
//!
//! `PENDING -> SENT | RETRY_SCHEDULED | MANUAL_INTERVENTION_REQUIRED | IGNORED`;
//! `RETRY_SCHEDULED -> PROCESSING -> SENT | RETRY_SCHEDULED | FAILED`; an operator may
//! reprocess from `RETRY_SCHEDULED | MANUAL_INTERVENTION_REQUIRED | FAILED` or ignore.
//! A failure carries a policy that decides which of these it becomes.

mod error;
mod event;
#[allow(clippy::module_inception)]
mod notification;
mod status;

pub use error::NotificationError;
pub use event::NotificationEvent;
pub use notification::Notification;
pub use status::{FailurePolicy, NO_POLICY, NotificationAction, NotificationStatus};
