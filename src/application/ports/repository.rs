//! Persistence of orders and everything recorded about them.
//!
//! Reads go through [`OrderRepository`]; every write goes through [`UnitOfWork::commit`],
//! which applies a whole [`Changes`] set — aggregates, saga steps, audit rows and outbox
//! events — in one transaction, with every update conditional on the version loaded.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::audit::AuditRecord;
use super::error::RepoError;
use super::outbox::NewOutboxEvent;
use super::providers::Scenario;
use crate::domain::ids::{NotificationId, OrderId};
use crate::domain::notification::{Notification, NotificationStatus};
use crate::domain::order::{Order, OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};
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
}

/// One saga step outcome as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub step: SagaStep,
    pub status: StepStatus,
    pub detail: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A saga step outcome to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewStep {
    pub order_id: OrderId,
    pub record: StepRecord,
}

/// An order with everything the saga and the API need about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderRecord {
    pub order: Order,
    /// The latest payment attempt.
    pub payment: Option<Payment>,
    pub settlement: Option<Settlement>,
    pub notification: Option<Notification>,
    /// Oldest first.
    pub steps: Vec<StepRecord>,
    pub context: OrderContext,
}

/// Order listing filter: newest first, keyset-paged on the (time-ordered) id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderFilter {
    pub status: Option<OrderStatus>,
    pub customer_id: Option<String>,
    /// Only orders with an id smaller than this (the previous page's last id).
    pub before: Option<OrderId>,
    pub limit: u32,
}

/// Insert a new row, or update an existing one conditional on `version` (the version the
/// aggregate was loaded with). Either way the stored version becomes `version + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write<T> {
    Insert(T),
    Update(T),
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
}

/// Everything one transaction writes. Build it with the `insert_*`/`update_*` helpers,
/// which also advance the in-memory aggregate's version to what the store will hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// New orders, each with its context and the lease of the run creating it.
    pub new_orders: Vec<(Order, OrderContext, Option<SagaLease>)>,
    pub orders: Vec<Order>,
    pub payments: Vec<Write<Payment>>,
    pub settlements: Vec<Write<Settlement>>,
    pub notifications: Vec<Write<Notification>>,
    pub steps: Vec<NewStep>,
    pub audit: Vec<AuditRecord>,
    pub outbox: Vec<NewOutboxEvent>,
    /// Inserted; an existing `(consumer, event_id)` makes the whole commit a `Conflict`.
    pub inbox: Vec<InboxEntry>,
    /// Give the saga lease of the updated order back, if this owner still holds it — in
    /// the same commit as the run's last step.
    pub release_saga: Option<String>,
}

impl Changes {
    pub fn insert_order(&mut self, order: &mut Order, context: OrderContext) {
        self.new_orders.push((order.clone(), context, None));
        order.version += 1;
    }

    /// Inserts an order whose saga the caller drives, holding `lease` from the start.
    pub fn insert_leased_order(&mut self, order: &mut Order, context: OrderContext, lease: SagaLease) {
        self.new_orders.push((order.clone(), context, Some(lease)));
        order.version += 1;
    }

    pub fn update_order(&mut self, order: &mut Order) {
        self.orders.push(order.clone());
        order.version += 1;
    }

    pub fn insert_payment(&mut self, payment: &mut Payment) {
        self.payments.push(Write::Insert(payment.clone()));
        payment.version += 1;
    }

    pub fn update_payment(&mut self, payment: &mut Payment) {
        self.payments.push(Write::Update(payment.clone()));
        payment.version += 1;
    }

    pub fn insert_settlement(&mut self, settlement: &mut Settlement) {
        self.settlements.push(Write::Insert(settlement.clone()));
        settlement.version += 1;
    }

    pub fn update_settlement(&mut self, settlement: &mut Settlement) {
        self.settlements.push(Write::Update(settlement.clone()));
        settlement.version += 1;
    }

    pub fn insert_notification(&mut self, notification: &mut Notification) {
        self.notifications.push(Write::Insert(notification.clone()));
        notification.version += 1;
    }

    pub fn update_notification(&mut self, notification: &mut Notification) {
        self.notifications.push(Write::Update(notification.clone()));
        notification.version += 1;
    }

    pub fn step(
        &mut self,
        order_id: OrderId,
        step: SagaStep,
        status: StepStatus,
        detail: Option<String>,
        now: DateTime<Utc>,
    ) {
        self.steps.push(NewStep { order_id, record: StepRecord { step, status, detail, created_at: now } });
    }

    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

/// Reads of orders and their saga state.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait OrderRepository: Send + Sync {
    /// The order with its latest payment, settlement, notification, steps and context.
    ///
    /// # Errors
    /// `Ok(None)` when no such order exists; `Unavailable` when the database fails;
    /// `Corrupt` when a stored value does not map to the domain.
    async fn get(&self, id: OrderId) -> Result<Option<OrderRecord>, RepoError>;

    /// Orders matching the filter, newest first, at most `filter.limit`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn list(&self, filter: &OrderFilter) -> Result<Vec<Order>, RepoError>;

    /// Takes the saga lease of an order for `owner` until `until`: succeeds when the order
    /// has no lease, an expired one, or one already held by `owner`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn lease_saga(&self, id: OrderId, lease: &SagaLease, now: DateTime<Utc>)
    -> Result<bool, RepoError>;

    /// Gives the lease up (only if `owner` holds it).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn release_saga(&self, id: OrderId, owner: &str) -> Result<(), RepoError>;

    /// Orders whose saga stopped half-way — `CREATED`, `PAYMENT_APPROVED` or
    /// `SETTLEMENT_REQUESTED`, unchanged since `before`, with no live saga lease, resumed
    /// fewer than `max_resumes` times and due for the next resume — so a run that died can
    /// be resumed. At most `limit`, oldest first, each with its resumes so far.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
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
    /// `Unavailable` when the database fails.
    async fn note_resume(&self, id: OrderId, next_at: DateTime<Utc>) -> Result<(), RepoError>;

    /// Orders still half-way after `max_resumes` resumes: an operator must look. Newest
    /// first, at most `limit`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn stalled_for_operator(&self, max_resumes: i32, limit: u32) -> Result<Vec<Order>, RepoError>;

    /// How many orders are in each status (every status listed, zero included).
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn count_by_status(&self) -> Result<Vec<(OrderStatus, i64)>, RepoError>;

    /// The inbox entry of an inbound message, if it was processed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn inbox_entry(&self, consumer: &str, event_id: &str) -> Result<Option<InboxEntry>, RepoError>;

    /// `COMPLETED` orders of a meeting (of one customer, if given), oldest first.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn completed_meeting_orders(
        &self,
        meeting_id: &str,
        customer_id: Option<String>,
    ) -> Result<Vec<OrderId>, RepoError>;

    /// Audit rows about one entity, oldest first.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    async fn audit_for(&self, entity_type: &str, entity_id: &str) -> Result<Vec<AuditRecord>, RepoError>;
}

/// Reads of payments for reconciliation, provider callbacks and operators.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentRepository: Send + Sync {
    /// Payments in `status` — an outcome the provider has not told us yet:
    /// `CONFIRMATION_REQUIRED` (an approval) or `REFUND_PENDING` (a refund) — with fewer
    /// than `max_attempts` look-ups whose next look-up is due, oldest first.
    ///
    /// # Errors
    /// `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn awaiting_confirmation(
        &self,
        status: PaymentStatus,
        now: DateTime<Utc>,
        max_attempts: i32,
        limit: u32,
    ) -> Result<Vec<Payment>, RepoError>;

    /// Payments of one status, most recently changed first.
    ///
    /// # Errors
    /// As [`PaymentRepository::awaiting_confirmation`].
    async fn with_status(&self, status: PaymentStatus, limit: u32) -> Result<Vec<Payment>, RepoError>;

    /// The payment of a request id.
    ///
    /// # Errors
    /// As [`PaymentRepository::awaiting_confirmation`].
    async fn by_request_id(&self, payment_request_id: &str) -> Result<Option<Payment>, RepoError>;

    /// The payment of a provider transaction id.
    ///
    /// # Errors
    /// As [`PaymentRepository::awaiting_confirmation`].
    async fn by_provider_transaction(
        &self,
        provider_transaction_id: &str,
    ) -> Result<Option<Payment>, RepoError>;

    /// Orders whose settlement failed and whose payment still waits to be compensated.
    ///
    /// # Errors
    /// As [`PaymentRepository::awaiting_confirmation`].
    async fn awaiting_compensation(&self, limit: u32) -> Result<Vec<OrderId>, RepoError>;
}

/// Reads of notification events for the retry processor and operators.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait NotificationRepository: Send + Sync {
    /// `RETRY_SCHEDULED` notifications whose `next_attempt_at` has passed, earliest due
    /// first, at most `limit`.
    ///
    /// # Errors
    /// `Unavailable` when the database fails; `Corrupt` for unmappable rows.
    async fn due(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError>;

    /// `PROCESSING` notifications whose claim ended before `now`.
    ///
    /// # Errors
    /// As [`NotificationRepository::due`].
    async fn stuck(&self, now: DateTime<Utc>, limit: u32) -> Result<Vec<Notification>, RepoError>;

    /// Notifications, optionally of one status, most recently updated first.
    ///
    /// # Errors
    /// As [`NotificationRepository::due`].
    async fn list(
        &self,
        status: Option<NotificationStatus>,
        limit: u32,
    ) -> Result<Vec<Notification>, RepoError>;

    /// One notification.
    ///
    /// # Errors
    /// As [`NotificationRepository::due`].
    async fn find(&self, id: NotificationId) -> Result<Option<Notification>, RepoError>;
}

/// The audit trail's retention (SPEC §4 rows are written through [`UnitOfWork`]).
#[async_trait]
pub trait AuditLog: Send + Sync {
    /// Deletes at most `limit` audit rows created before `before`; returns how many.
    ///
    /// # Errors
    /// `Unavailable` when the database fails (what was deleted stays deleted).
    async fn purge_audit(&self, before: DateTime<Utc>, limit: u32) -> Result<u64, RepoError>;
}

/// The one way to write: apply a change set atomically.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait UnitOfWork: Send + Sync {
    /// Applies every write in `changes` in one transaction, or none of them.
    ///
    /// After a successful commit that appended outbox events, the relay is woken (in
    /// process at once; across processes where the database can signal).
    ///
    /// # Errors
    /// `Conflict` when an update's version no longer matches or an insert hits a unique
    /// key — nothing is written and the caller should reload; `Unavailable` when the
    /// database fails (nothing is written).
    async fn commit(&self, changes: Changes) -> Result<(), RepoError>;
}
