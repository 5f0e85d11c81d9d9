//! The customer notification service.

use async_trait::async_trait;

use super::scenario::Scenario;
use crate::domain::ids::{MerchantId, NotificationId, OrderId};
use crate::domain::money::Money;
use crate::domain::notification::FailurePolicy;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRequest {
    /// The notification's id: the same on every attempt (a webhook's `webhook-id`).
    pub notification_id: NotificationId,
    pub order_id: OrderId,
    pub order_number: i64,
    /// The order's merchant: its own channel, when it set one (docs/spec.md §15).
    pub merchant_id: MerchantId,
    /// What the customer is told of (`order.completed`).
    pub event_type: &'static str,
    /// The order's status once told (`COMPLETED`).
    pub order_status: &'static str,
    pub amount: Money,
    pub customer_id: String,
    /// The order's `customerEmail`, if it has one (the e-mail channel's recipient).
    pub recipient: Option<String>,
    /// 1 for the first send, 2 for the first retry, ...
    pub attempt: i32,
    pub scenario: Scenario,
}

impl NotificationRequest {
    /// The key a notifier deduplicates by: the notification's, the same on every attempt —
    /// an attempt resumed after a crash, or a retry of one whose answer was lost, is the
    /// same message to the customer, never a second (a webhook's `webhook-id`, an e-mail's
    /// `Message-ID` are made from it too).
    pub fn idempotency_key(&self) -> String {
        format!("notify-{}", self.notification_id)
    }
}

/// A send that did not go through, with what should happen next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("notification failed ({policy}): {reason}")]
pub struct NotifyFailure {
    pub policy: FailurePolicy,
    pub reason: String,
    /// How long the other side asked us to wait (a webhook receiver's `Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Tells the customer their order went through.
    ///
    /// # Errors
    /// MUST return [`NotifyFailure`] with the policy the failure calls for.
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure>;
}
