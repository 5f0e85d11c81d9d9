//! Errors of the notification aggregate.

use super::status::{NotificationAction, NotificationStatus};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotificationError {
    #[error("notification cannot {action} from {from}")]
    InvalidTransition { from: NotificationStatus, action: NotificationAction },
}
