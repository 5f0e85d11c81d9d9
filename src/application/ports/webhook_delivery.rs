//! Delivering merchants' webhooks (docs/spec.md §16): the fan-out's read of the outbox and
//! its writes of messages, the workers' claims and records of attempts, the messages' log and
//! replays, and the HTTP call itself.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{AuditRecord, EndpointSecrets, NewOutboxEvent, RepoError};
use crate::domain::ids::{EventId, MerchantId, WebhookEndpointId};
use crate::domain::webhook::{DisabledReason, Endpoint, MessageStatus};
use crate::domain::webhook_message::Message;

/// An outbox event as the fan-out reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEventView {
    pub event_id: EventId,
    pub event_type: String,
    /// The envelope (docs/spec.md §6).
    pub envelope: String,
    pub created_at: DateTime<Utc>,
}

/// Where the fan-out stands in the outbox: the store's to interpret, the fan-out's to hand
/// back with the messages it made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FanoutPosition {
    /// Every event visible in this snapshot is fanned out (PostgreSQL).
    pub done: Option<String>,
    /// The snapshot being worked through (PostgreSQL).
    pub current: Option<String>,
    /// Within `current` (SQLite: overall), every event up to this outbox id is fanned out.
    pub upto: i64,
}

/// The next events past the fan-out's position.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FanoutBatch {
    /// The position as read (the fan-out's write is conditional on it).
    pub read: FanoutPosition,
    /// The position once `events` are fanned out.
    pub next: FanoutPosition,
    pub events: Vec<OutboxEventView>,
}

/// An event as the endpoints get it, kept once however many take it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookEvent {
    pub event_id: EventId,
    pub merchant_id: MerchantId,
    pub event_type: String,
    /// `{type, timestamp, data}`.
    pub body: String,
    pub created_at: DateTime<Utc>,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait WebhookFanoutStore: Send + Sync {
    /// At most `limit` events of `types` past the fan-out's position, in the order they
    /// were written, each only once its transaction has committed (an event that took its
    /// id early and committed late is read all the same). The first read ever starts at the
    /// outbox's present.
    async fn next_events(&self, types: &[&'static str], limit: u32) -> Result<FanoutBatch, RepoError>;

    /// The enabled endpoints of `merchants`.
    async fn enabled_endpoints(&self, merchants: &[MerchantId]) -> Result<Vec<Endpoint>, RepoError>;

    /// Writes `events` and `messages` (a message already there stays as it is) and moves the
    /// position from `read` to `next`, in one transaction; `Ok(false)`, having written
    /// nothing, when the position is no longer `read` (another fan-out moved it).
    async fn fan_out(
        &self,
        read: &FanoutPosition,
        next: &FanoutPosition,
        events: &[WebhookEvent],
        messages: &[Message],
    ) -> Result<bool, RepoError>;
}

/// A message claimed for one attempt, with what the attempt needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueMessage {
    pub message: Message,
    pub endpoint: Endpoint,
    pub secrets: EndpointSecrets,
    pub body: String,
    /// The claim: until then no other worker takes the message; the record is conditional
    /// on it.
    pub claimed_until: DateTime<Utc>,
    /// An earlier claim of it ran out unrecorded (a worker died mid-attempt): this attempt
    /// may be the receiver's second of the same `webhook-id`.
    pub reclaimed: bool,
}

/// One attempt as the log keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub endpoint_id: WebhookEndpointId,
    pub event_id: EventId,
    pub attempt: u32,
    pub at: DateTime<Utc>,
    /// The HTTP status, or the error class (`TIMEOUT`, `CONNECT`, `REFUSED_ADDRESS`).
    pub status: String,
    pub duration_ms: u64,
    /// The answer's first 4 KiB.
    pub response: String,
}

/// What an attempt changes of its endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointChange {
    Succeeded,
    Failed,
    /// Turned off (only if it is still on), then `event` and `audit` are written with it.
    Disabled {
        reason: DisabledReason,
        event: Box<NewOutboxEvent>,
        audit: Box<AuditRecord>,
    },
}

/// One attempt's outcome, written in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryRecord {
    /// The message after the attempt.
    pub message: Message,
    pub claimed_until: DateTime<Utc>,
    pub attempt: AttemptRecord,
    pub endpoint: EndpointChange,
    /// `webhook.message.exhausted`, when the schedule is spent.
    pub exhausted: Option<NewOutboxEvent>,
}

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// Written; `disabled` when it turned its endpoint off.
    Done { disabled: bool },
    /// Its claim had run out: nothing of it written.
    ClaimLost,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait WebhookDeliveryStore: Send + Sync {
    /// Claims until `until` at most `limit` `PENDING` messages due at `now` of enabled
    /// endpoints not in `busy`, at most `per_endpoint` of each endpoint, oldest due first.
    async fn claim_due(
        &self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        limit: u32,
        per_endpoint: u32,
        busy: &[WebhookEndpointId],
    ) -> Result<Vec<DueMessage>, RepoError>;

    /// Gives claims back unattempted (each only if still held as `claimed_until`).
    async fn release(
        &self,
        claims: &[(WebhookEndpointId, EventId)],
        claimed_until: DateTime<Utc>,
    ) -> Result<(), RepoError>;

    /// Writes each record — the attempt, the message as it now is, its endpoint's change and
    /// its events — all in one transaction; a record whose claim is no longer held (it ran
    /// out and another worker took the message) writes nothing and is `ClaimLost`. One
    /// answer per record, in order.
    async fn record(&self, records: &[DeliveryRecord]) -> Result<Vec<Recorded>, RepoError>;
}

/// A message as the log lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    pub message: Message,
    pub last_status: Option<String>,
    pub last_attempt_at: Option<DateTime<Utc>>,
}

/// Which messages a list asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageQuery {
    pub endpoint: WebhookEndpointId,
    pub status: Option<MessageStatus>,
    /// Made at or after.
    pub since: Option<DateTime<Utc>>,
    /// Past this (created, event) in newest-first order.
    pub after: Option<(DateTime<Utc>, EventId)>,
    pub limit: u32,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait WebhookMessageStore: Send + Sync {
    /// An endpoint's messages, newest first.
    async fn messages(&self, query: &MessageQuery) -> Result<Vec<MessageView>, RepoError>;

    /// One message.
    async fn message(
        &self,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<Option<Message>, RepoError>;

    /// A message's attempts, in order.
    async fn attempts(
        &self,
        endpoint: WebhookEndpointId,
        event: EventId,
    ) -> Result<Vec<AttemptRecord>, RepoError>;

    /// Writes `message` as resent, only if it is still `was` and unclaimed, with `audit`;
    /// whether it was.
    async fn resend(
        &self,
        message: &Message,
        was: MessageStatus,
        audit: Option<AuditRecord>,
    ) -> Result<bool, RepoError>;

    /// Writes an audit row (a recover's, once its messages are resent).
    async fn note(&self, audit: &AuditRecord) -> Result<(), RepoError>;

    /// When the oldest message still to deliver to an enabled endpoint was made.
    async fn oldest_undelivered(&self) -> Result<Option<DateTime<Utc>>, RepoError>;

    /// Removes at most `limit` attempts, finished messages and their events older than
    /// `before`; how many rows went.
    async fn purge(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError>;
}

/// Why an attempt had no HTTP answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// No answer within `webhooks.timeout`.
    Timeout,
    /// No connection (refused, reset, TLS, DNS).
    Connect,
    /// The host resolved to an address deliveries may not reach.
    RefusedAddress,
}

impl PostError {
    pub fn as_str(self) -> &'static str {
        match self {
            PostError::Timeout => "TIMEOUT",
            PostError::Connect => "CONNECT",
            PostError::RefusedAddress => "REFUSED_ADDRESS",
        }
    }
}

/// One signed `POST`.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookPost {
    pub url: String,
    /// `webhook-id`: the event's id.
    pub id: String,
    /// `webhook-timestamp`, Unix seconds.
    pub timestamp: i64,
    pub body: String,
    /// The `whsec_` secrets it is signed with (two during a rotation's overlap).
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for WebhookPost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry a token, the secrets are secrets.
        f.debug_struct("WebhookPost").field("id", &self.id).field("timestamp", &self.timestamp).finish()
    }
}

/// What a `POST` got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostAnswer {
    pub status: Result<u16, PostError>,
    pub retry_after: Option<Duration>,
    /// The answer's first 4 KiB.
    pub body: String,
    pub duration: Duration,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait WebhookSender: Send + Sync {
    /// Sends `post`, signed, to an address its host resolves to now that deliveries may
    /// reach, following no redirect, within the timeout.
    async fn post(&self, post: &WebhookPost) -> PostAnswer;

    /// Whether `url`'s host may be delivered to as it resolves now: `Err` with why when it
    /// resolves to a loopback, private, link-local or metadata address (a host that does
    /// not resolve yet is let through: each delivery checks again).
    async fn check_host(&self, url: &str) -> Result<(), RefusedHost>;
}

/// Why a URL's host may not be delivered to, for the merchant who gave it (answered as the
/// `url` field's error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RefusedHost(pub String);
