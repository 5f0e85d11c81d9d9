//! Reads of notification events: the retry processor and operators.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::error::RepoError;
use crate::domain::ids::{MerchantId, NotificationId};
use crate::domain::notification::{Notification, NotificationStatus};

/// Reads of notification events for the retry processor and operators.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait NotificationRepository: Send + Sync {
    /// `RETRY_SCHEDULED` notifications whose `next_attempt_at` has passed, earliest due
    /// first, at most `limit`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn due(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError>;

    /// `PROCESSING` notifications whose claim ended before `now`.
    ///
    /// # Errors
    /// MUST return what [`NotificationRepository::due`] returns, in the same cases.
    async fn stuck(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError>;

    /// Notifications, optionally of one status and of one merchant's orders, most recently
    /// updated first.
    ///
    /// # Errors
    /// MUST return what [`NotificationRepository::due`] returns, in the same cases.
    async fn list(
        &self,
        status: Option<NotificationStatus>,
        merchant: Option<MerchantId>,
        limit: u32,
    ) -> Result<Vec<Notification>, RepoError>;

    /// One notification.
    ///
    /// # Errors
    /// MUST return what [`NotificationRepository::due`] returns, in the same cases.
    async fn find(&self, id: NotificationId) -> Result<Option<Notification>, RepoError>;
}
