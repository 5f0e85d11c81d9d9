//! The messages' log and replays (docs/spec.md §16) under a merchant's path: a `VIEWER`
//! reads an endpoint's messages and their attempts, an `OPERATOR` resends one (one more
//! attempt, same `webhook-id`) or recovers every failed one since a time. And their upkeep:
//! the age of the oldest undelivered message (the alert's) and the retention.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::application::AppError;
use crate::application::audit::{self, entity};
use crate::application::jobs::PeriodicJob;
use crate::application::merchants::Authorized;
use crate::application::meter::Meter;
use crate::application::ports::{
    AttemptRecord, Clock, MessageQuery, MessageView, WebhookEndpointStore, WebhookMessageStore,
};
use crate::domain::audit::AuditAction;
use crate::domain::ids::{EventId, WebhookEndpointId};
use crate::domain::merchant::Need;
use crate::domain::webhook::MessageStatus;
use crate::domain::webhook_message::Message;

/// The most messages one page lists.
pub const MAX_PAGE: u32 = 200;
/// The most messages one recover resends (a larger backlog: recover again, or later since).
pub const MAX_RECOVER: usize = 10_000;

/// A page of messages and the cursor past it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessagePage {
    pub messages: Vec<MessageView>,
    pub next: Option<(DateTime<Utc>, EventId)>,
}

pub struct WebhookMessages {
    endpoints: Arc<dyn WebhookEndpointStore>,
    store: Arc<dyn WebhookMessageStore>,
    clock: Arc<dyn Clock>,
    /// The delivery workers of this process, woken by a resend.
    wake: Arc<tokio::sync::Notify>,
}

impl WebhookMessages {
    pub fn new(
        endpoints: Arc<dyn WebhookEndpointStore>,
        store: Arc<dyn WebhookMessageStore>,
        clock: Arc<dyn Clock>,
        wake: Arc<tokio::sync::Notify>,
    ) -> Self {
        WebhookMessages { endpoints, store, clock, wake }
    }

    /// `NotFound` unless the endpoint is the merchant's.
    async fn own(&self, auth: &Authorized, id: WebhookEndpointId) -> Result<(), AppError> {
        match self.endpoints.endpoint(auth.merchant.id, id).await? {
            Some(_) => Ok(()),
            None => Err(AppError::NotFound("webhook endpoint")),
        }
    }

    /// An endpoint's messages, newest first, `limit` (1–200) a page.
    ///
    /// # Errors
    /// `Forbidden`, `NotFound` (another merchant's endpoint too), `Validation` of `limit`.
    pub async fn list(
        &self,
        auth: &Authorized,
        endpoint: WebhookEndpointId,
        status: Option<MessageStatus>,
        limit: u32,
        after: Option<(DateTime<Utc>, EventId)>,
    ) -> Result<MessagePage, AppError> {
        auth.require(Need::Read)?;
        if !(1..=MAX_PAGE).contains(&limit) {
            return Err(AppError::Validation {
                field: "limit".into(),
                message: format!("between 1 and {MAX_PAGE}"),
            });
        }
        self.own(auth, endpoint).await?;
        let query = MessageQuery { endpoint, status, since: None, after, limit: limit + 1 };
        let mut messages = self.store.messages(&query).await?;
        let next = if messages.len() > limit as usize {
            messages.truncate(limit as usize);
            messages.last().map(|m| (m.message.created_at, m.message.event_id))
        } else {
            None
        };
        Ok(MessagePage { messages, next })
    }

    /// A message's attempts, in order.
    ///
    /// # Errors
    /// As [`Self::list`]; `NotFound` for a message the endpoint never had.
    pub async fn attempts(
        &self,
        auth: &Authorized,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<(Message, Vec<AttemptRecord>), AppError> {
        auth.require(Need::Read)?;
        self.own(auth, endpoint).await?;
        let message =
            self.store.message(endpoint, event).await?.ok_or(AppError::NotFound("webhook message"))?;
        Ok((message, self.store.attempts(endpoint, event).await?))
    }

    /// One more attempt of a message, at once, under the same `webhook-id` (an `OPERATOR`).
    ///
    /// # Errors
    /// As [`Self::attempts`]; `Conflict` when an attempt of it is in flight or it changed
    /// meanwhile.
    pub async fn resend(
        &self,
        auth: &Authorized,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<Message, AppError> {
        auth.require(Need::Write)?;
        self.own(auth, endpoint).await?;
        let mut message =
            self.store.message(endpoint, event).await?.ok_or(AppError::NotFound("webhook message"))?;
        let was = message.status;
        let now = self.clock.now();
        message.resend(now);
        let audit = audit::record(
            AuditAction::WebhookMessageResent,
            entity::WEBHOOK_ENDPOINT,
            endpoint,
            &auth.actor,
            Some(format!("event {event}, was {was}")),
            now,
        );
        if !self.store.resend(&message, was, Some(audit)).await? {
            return Err(AppError::Conflict {
                code: "WEBHOOK_MESSAGE_BUSY",
                message: "an attempt of this message is in flight or it just changed; try again".into(),
            });
        }
        self.wake.notify_one();
        Ok(message)
    }

    /// Every `FAILED` message of the endpoint made since `since` gets one more attempt (an
    /// `OPERATOR`): how many.
    ///
    /// # Errors
    /// As [`Self::resend`], but a message that changed meanwhile is passed over.
    pub async fn recover(
        &self,
        auth: &Authorized,
        endpoint: WebhookEndpointId,
        since: DateTime<Utc>,
    ) -> Result<usize, AppError> {
        auth.require(Need::Write)?;
        self.own(auth, endpoint).await?;
        let now = self.clock.now();
        let mut recovered = 0;
        let mut after = None;
        while recovered < MAX_RECOVER {
            let query = MessageQuery {
                endpoint,
                status: Some(MessageStatus::Failed),
                since: Some(since),
                after,
                limit: 500,
            };
            let page = self.store.messages(&query).await?;
            let Some(last) = page.last() else { break };
            after = Some((last.message.created_at, last.message.event_id));
            for view in page {
                let mut message = view.message;
                message.resend(now);
                if self.store.resend(&message, MessageStatus::Failed, None).await? {
                    recovered += 1;
                }
            }
        }
        let audit = audit::record(
            AuditAction::WebhookMessagesRecovered,
            entity::WEBHOOK_ENDPOINT,
            endpoint,
            &auth.actor,
            Some(format!("{recovered} failed messages since {since} resent")),
            now,
        );
        self.store.note(&audit).await?;
        self.wake.notify_one();
        Ok(recovered)
    }
}

/// The messages' upkeep: the oldest undelivered message's age for the alert, and the
/// attempts, finished messages and bodies past `webhooks.retention` removed.
pub struct WebhookUpkeep {
    store: Arc<dyn WebhookMessageStore>,
    clock: Arc<dyn Clock>,
    meter: Meter,
    retention: Duration,
}

impl WebhookUpkeep {
    pub fn new(
        store: Arc<dyn WebhookMessageStore>,
        clock: Arc<dyn Clock>,
        meter: Meter,
        retention: Duration,
    ) -> Self {
        WebhookUpkeep { store, clock, meter, retention }
    }

    /// One round: the gauge set, at most 10 000 old rows removed; how many were.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn run_once(&self) -> Result<u64, AppError> {
        let now = self.clock.now();
        let oldest = self.store.oldest_undelivered().await?;
        let age = oldest.map_or(0.0, |at| (now - at).to_std().unwrap_or_default().as_secs_f64());
        self.meter.record(|| metrics::gauge!("webhook_oldest_undelivered_seconds").set(age));
        let keep = chrono::Duration::from_std(self.retention).unwrap_or(chrono::Duration::MAX);
        let before = now.checked_sub_signed(keep).unwrap_or(DateTime::<Utc>::MIN_UTC);
        Ok(self.store.purge(before, 10_000).await?)
    }
}

#[async_trait]
impl PeriodicJob for WebhookUpkeep {
    fn name(&self) -> &'static str {
        "webhook upkeep"
    }

    fn interval(&self) -> Duration {
        Duration::from_secs(15)
    }

    async fn round(&self) -> Result<Option<String>, AppError> {
        let purged = self.run_once().await?;
        Ok((purged > 0).then(|| format!("{purged} webhook rows past their retention removed")))
    }
}
