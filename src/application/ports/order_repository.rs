//! Reads of orders and their saga state (every write goes through the unit of work).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::audit_log::AuditRecord;
use super::error::RepoError;
use super::scenario::Scenario;
use crate::domain::ids::{MerchantId, OrderId, StoreId};
use crate::domain::notification::Notification;
use crate::domain::order::{Order, OrderSource, OrderStart, OrderStatus, SagaStep, StepFact, StepStatus};
use crate::domain::payment::{Payment, Refund};
use crate::domain::settlement::Settlement;

/// Who drives an order's saga, until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SagaLease {
    pub owner: String,
    pub until: DateTime<Utc>,
}

/// Facts about an order that are not part of the domain but travel with it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderContext {
    /// Mock-provider behaviours requested at checkout (mock mode only).
    pub scenario: Scenario,
    /// The correlation id of the request that created the order.
    pub correlation_id: Option<String>,
    /// The id of the inbound message that placed the order (a meeting service's
    /// registration): its events carry it as `causationId` (docs/spec.md §12).
    pub causation_id: Option<String>,
    /// Where the customer is told by e-mail (`customerEmail`, docs/spec.md §13).
    pub customer_email: Option<String>,
    /// What the client said about the order (the commerce dialect's `description`, at most
    /// 255 characters; docs/dialects.md).
    pub description: Option<String>,
}

/// One saga step outcome as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub step: SagaStep,
    pub status: StepStatus,
    /// Ours to word: for people, never parsed (readers read `fact`).
    pub detail: Option<String>,
    /// What the row records as a fact, where a reader needs one.
    pub fact: Option<StepFact>,
    pub created_at: DateTime<Utc>,
}

/// An order with everything the saga and the API need about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRecord {
    pub order: Order,
    /// The latest payment attempt.
    pub payment: Option<Payment>,
    /// The latest payment's refunds, oldest first.
    pub refunds: Vec<Refund>,
    pub settlement: Option<Settlement>,
    pub notification: Option<Notification>,
    /// Oldest first.
    pub steps: Vec<StepRecord>,
    pub context: OrderContext,
}

/// Order listing filter: newest first, keyset-paged on the (time-ordered) id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OrderFilter {
    /// Only this merchant's orders (docs/spec.md §15).
    pub merchant_id: Option<MerchantId>,
    /// Only orders of this store.
    pub store_id: Option<StoreId>,
    /// Only orders created at or after this.
    pub from: Option<DateTime<Utc>>,
    /// Only orders created before this.
    pub to: Option<DateTime<Utc>>,
    pub status: Option<OrderStatus>,
    pub customer_id: Option<String>,
    /// Only the order numbered so.
    pub number: Option<i64>,
    /// Only orders that came through this API.
    pub source: Option<OrderSource>,
    /// Only orders with an id smaller than this (the previous page's last id).
    pub before: Option<OrderId>,
    pub limit: u32,
}

/// An inbound message processed: written in the same transaction as its effects, so a
/// message is processed at most once per `(consumer, event_id)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    pub consumer: String,
    pub event_id: String,
    /// The order the message created, if any (a redelivery resumes it).
    pub order_id: Option<OrderId>,
    pub processed_at: DateTime<Utc>,
    /// What the message said (a digest of its body), to tell a redelivery that reuses the
    /// event id with another body from a plain duplicate.
    pub digest: Option<String>,
}

/// What is numbered (docs/spec.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbered {
    Order,
    Payment,
}

/// Reads of orders and their saga state.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait OrderRepository: Send + Sync {
    /// The order with its latest payment, settlement, notification, steps and context.
    ///
    /// # Errors
    /// MUST return `Ok(None)` when no such order exists; `Unavailable` when the database fails;
    /// `Corrupt` when a stored value does not map to the domain.
    async fn get(&self, id: OrderId) -> Result<Option<OrderRecord>, RepoError>;

    /// The order numbered `number` (docs/spec.md §3), if there is one.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn find_by_number(&self, number: i64) -> Result<Option<OrderId>, RepoError>;

    /// The next number of each of `kinds`, in their order, taken in one statement (an order
    /// and its first payment in one round trip; docs/spec.md §3): each positive, larger than
    /// every number of its kind handed out before, never handed out again (one taken by an
    /// insert that failed is a gap).
    ///
    /// # Errors
    /// MUST return `Corrupt` when a kind appears twice in `kinds`; `Unavailable` when the
    /// database fails.
    async fn next_numbers(&self, kinds: &[Numbered]) -> Result<Vec<i64>, RepoError>;

    /// Orders matching the filter, newest first, at most `filter.limit`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn list(&self, filter: &OrderFilter) -> Result<Vec<Order>, RepoError>;

    /// Orders in `status` (that started as `start`, when given) created before
    /// `created_before`: those unpaid past their payment window (`AWAITING_PAYMENT`), or held
    /// past their hold (`CREATED`, `HELD`). At most `limit`, oldest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn waiting_since_before(
        &self,
        status: OrderStatus,
        start: Option<OrderStart>,
        created_before: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<OrderId>, RepoError>;

    /// How many orders are in each status (every status listed, zero included).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn count_by_status(&self) -> Result<Vec<(OrderStatus, i64)>, RepoError>;

    /// The inbox entry of an inbound message, if it was processed.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn inbox_entry(&self, consumer: &str, event_id: &str) -> Result<Option<InboxEntry>, RepoError>;

    /// Audit rows about one entity, oldest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn audit_for(&self, entity_type: &str, entity_id: &str) -> Result<Vec<AuditRecord>, RepoError>;
}

/// The meeting service's orders: a (meeting, member) pair's registration and a meeting's
/// completed orders, for its messages (`application::inbound`).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait MeetingOrders: Send + Sync {
    /// The live order holding the (meeting, user) registration (docs/spec.md §7), if any:
    /// the one whose `registration_key` is the pair's.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn live_registration(&self, meeting_id: &str, user_id: &str) -> Result<Option<OrderId>, RepoError>;

    /// `COMPLETED` orders of a meeting (of one customer, if given), oldest first.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn completed_meeting_orders(
        &self,
        meeting_id: &str,
        customer_id: Option<String>,
    ) -> Result<Vec<OrderId>, RepoError>;
}

/// Who runs an order's saga: its lease, and the runs that stopped half-way, which the worker
/// resumes (bounded) and then hands to an operator.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait SagaRuns: Send + Sync {
    /// Takes the saga lease of an order for `owner` until `until`: succeeds when the order
    /// has no lease, an expired one, or one already held by `owner`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn lease_saga(&self, id: OrderId, lease: &SagaLease, now: DateTime<Utc>)
    -> Result<bool, RepoError>;

    /// Gives the lease up (only if `owner` holds it).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn release_saga(&self, id: OrderId, owner: &str) -> Result<(), RepoError>;

    /// Orders whose saga stopped half-way — `CREATED`, `PAYMENT_APPROVED` or
    /// `SETTLEMENT_REQUESTED`, unchanged since `before`, with no live saga lease, resumed
    /// fewer than `max_resumes` times and due for the next resume — so a run that died can
    /// be resumed. At most `limit`, oldest first, each with its resumes so far.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn stalled(
        &self,
        before: DateTime<Utc>,
        now: DateTime<Utc>,
        max_resumes: i32,
        limit: u32,
    ) -> Result<Vec<(OrderId, i32)>, RepoError>;

    /// Counts a resume of a stalled saga and says when the next may happen (the backoff).
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn note_resume(&self, id: OrderId, next_at: DateTime<Utc>) -> Result<(), RepoError>;

    /// Orders still half-way after `max_resumes` resumes: an operator must look. Newest
    /// first, at most `limit`.
    ///
    /// # Errors
    /// MUST return `Unavailable` when the database fails.
    async fn stalled_for_operator(&self, max_resumes: i32, limit: u32) -> Result<Vec<Order>, RepoError>;
}
