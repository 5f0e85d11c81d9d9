//! Events a notification emits.

use super::status::FailurePolicy;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotificationEvent {
    Failed { policy: FailurePolicy, reason: String, attempts: i32 },
}

impl NotificationEvent {
    /// The event type, which is also its routing key (docs/spec.md §6).
    pub fn event_type(&self) -> &'static str {
        match self {
            NotificationEvent::Failed { .. } => "notification.failed",
        }
    }
}
