//! The one way to write: a whole [`Changes`] set — aggregates, saga steps, audit rows,
//! outbox events, inbox entries — applied in one transaction, every update conditional on
//! the version loaded.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::audit_log::AuditRecord;
use super::error::RepoError;
use super::order_repository::{InboxEntry, OrderContext, SagaLease, StepRecord};
use super::outbox_store::NewOutboxEvent;
use crate::domain::ids::OrderId;
use crate::domain::notification::Notification;
use crate::domain::order::{Order, SagaStep, StepFact, StepStatus};
use crate::domain::payment::{Payment, Refund};
use crate::domain::settlement::Settlement;

/// A saga step outcome to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewStep {
    pub order_id: OrderId,
    pub record: StepRecord,
}

/// Insert a new row, or update an existing one conditional on `version` (the version the
/// aggregate was loaded with). Either way the stored version becomes `version + 1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write<T> {
    Insert(T),
    Update(T),
}

/// Everything one transaction writes. Build it with the `insert_*`/`update_*` helpers,
/// which also advance the in-memory aggregate's version to what the store will hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// New orders, each with its context and the lease of the run creating it.
    pub new_orders: Vec<(Order, OrderContext, Option<SagaLease>)>,
    pub orders: Vec<Order>,
    pub payments: Vec<Write<Payment>>,
    /// Refunds of the payments (inserted after the payments, updated with them).
    pub refunds: Vec<Write<Refund>>,
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

    pub fn insert_refund(&mut self, refund: &mut Refund) {
        self.refunds.push(Write::Insert(refund.clone()));
        refund.version += 1;
    }

    pub fn update_refund(&mut self, refund: &mut Refund) {
        self.refunds.push(Write::Update(refund.clone()));
        refund.version += 1;
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
        self.steps.push(NewStep {
            order_id,
            record: StepRecord { step, status, detail, fact: None, created_at: now },
        });
    }

    /// [`Changes::step`], with the fact it records (`orchestration_steps.fact`).
    pub fn step_with_fact(
        &mut self,
        order_id: OrderId,
        (step, status): (SagaStep, StepStatus),
        detail: String,
        fact: StepFact,
        now: DateTime<Utc>,
    ) {
        let record = StepRecord { step, status, detail: Some(detail), fact: Some(fact), created_at: now };
        self.steps.push(NewStep { order_id, record });
    }

    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
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
    /// MUST return `Conflict` when an update's version no longer matches or an insert hits a unique
    /// key — nothing is written and the caller should reload; `Unavailable` when the
    /// database fails (nothing is written).
    async fn commit(&self, changes: Changes) -> Result<(), RepoError>;

    /// Commits `changes`, which place exactly one order whose `number` is not yet given, and
    /// numbers it in the same round trip where the database can (docs/spec.md §3); with
    /// `payment`, a number for the order's first payment attempt is taken too (a crash
    /// before that payment is written leaves a gap, as a failed insert does).
    ///
    /// # Errors
    /// As [`UnitOfWork::commit`]; `Corrupt` when `changes` do not place exactly one order.
    async fn commit_placing(&self, changes: Changes, payment: bool) -> Result<Placed, RepoError>;
}

/// The numbers [`UnitOfWork::commit_placing`] gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub order_number: i64,
    pub payment_number: Option<i64>,
}
