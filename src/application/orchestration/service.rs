//! The orchestration service: the imperative shell around the saga's step table.
//!
//! Each step calls one provider, then commits the step's whole outcome in one
//! transaction — aggregates (conditional on the versions loaded), outbox events, the
//! `orchestration_steps` row and any audit row. A lost race (`Conflict`) reloads and
//! re-decides, so two runs of the same order never both apply a step.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::error::broken_invariant;

use crate::application::meter::Meter;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::orchestration::orchestrator::{Orchestrator, SagaSettings};
use crate::application::orchestration::outcome::Moved;
use crate::application::orchestration::run::Run;
use crate::application::orchestration::steps::next_action_of;
use crate::application::ports::{
    Changes, Clock, InboxEntry, Notifier, Numbered, OrderContext, OrderRecord, OrderRepository,
    PaymentAuthorization, PaymentGateway, PaymentMethodRepository, ProviderCustomers, SagaLease, SagaRuns,
    Scenario, SettlementGateway, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{NewOrder, NewOrderItem, Order, OrderSource, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus};

/// docs/spec.md §7: a (meeting, user) pair with a live order cannot register again.
pub const ALREADY_REGISTERED: &str = "ALREADY_REGISTERED";
/// The longest `description` an order keeps (the commerce backend's column).
pub const MAX_DESCRIPTION: usize = 255;
/// A registration refused before any charge: the member has no saved card (docs/spec.md §10).
pub const NO_PAYMENT_METHOD: &str = "NO_PAYMENT_METHOD";

/// A checkout (HTTP) or a paid registration (AMQP), not yet validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlaceOrder {
    /// Chosen by the caller so that a retried request (same idempotency key, same
    /// inbound event) resumes the same order instead of creating another.
    pub order_id: OrderId,
    /// Defaults to the caller.
    pub customer_id: Option<String>,
    pub source: OrderSource,
    pub meeting_id: Option<String>,
    pub currency: String,
    pub items: Vec<NewOrderItem>,
    pub scenario: Scenario,
    pub correlation_id: Option<String>,
    /// The inbound message creating this order: recorded with the order, so that the
    /// same message delivered again (or twice at once) resumes this order.
    pub inbox: Option<InboxKey>,
    /// Where the customer is told by e-mail (`customerEmail`, docs/spec.md §13).
    pub customer_email: Option<String>,
    /// What the client said about the order (the commerce dialect's `description`).
    pub description: Option<String>,
    /// The provider's key of a charge already taken under the order's first payment request
    /// id (the momo dialect's key-in): the payment is committed with the order, and the
    /// saga's payment step asks the provider what it took instead of charging.
    pub charged: Option<String>,
}

/// Identifies an inbound message for the inbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxKey {
    pub consumer: String,
    pub event_id: String,
    /// A digest of the message, kept with its inbox entry.
    pub digest: Option<String>,
    /// The caller found no entry under this key just before: the order is inserted without
    /// asking the inbox again (a concurrent duplicate loses the insert on the inbox's key
    /// and resumes the winner's order).
    pub unseen: bool,
}

/// What the customer authorized a payment attempt with, where it was committed with it:
/// Toss's checkout (the widget's `paymentKey`, before the charge is approved), or a key-in
/// (`MOMO`: the charge taken before the order was placed).
pub(super) fn authorization_of(source: OrderSource, payment: &Payment) -> Option<PaymentAuthorization> {
    let undecided = matches!(payment.status, PaymentStatus::Requested | PaymentStatus::ConfirmationRequired);
    match (&payment.provider_transaction_id, undecided) {
        (Some(key), true) if source == OrderSource::Momo => {
            Some(PaymentAuthorization::Charged { payment_key: key.clone() })
        }
        (Some(key), true) => Some(PaymentAuthorization::Checkout { payment_key: key.clone() }),
        _ => None,
    }
}

impl Orchestrator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        orders: Arc<dyn OrderRepository>,
        runs: Arc<dyn SagaRuns>,
        uow: Arc<dyn UnitOfWork>,
        payments: Arc<dyn PaymentGateway>,
        settlements: Arc<dyn SettlementGateway>,
        notifier: Arc<dyn Notifier>,
        clock: Arc<dyn Clock>,
        settings: SagaSettings,
    ) -> Self {
        let leases = SagaLeases::new(runs, clock.clone(), settings.saga_lease);
        Orchestrator {
            orders,
            uow,
            payments,
            settlements,
            notifier,
            clock,
            settings,
            leases,
            meter: Meter::default(),
            cards: None,
            customers: None,
        }
    }

    /// Charges meeting registrations with the member's saved card (docs/spec.md §10).
    pub fn with_saved_cards(mut self, cards: Arc<dyn PaymentMethodRepository>) -> Self {
        self.cards = Some(cards);
        self
    }

    /// What the customer authorized the charge of `payment` with: the widget's key committed
    /// with an HTTP order's attempt, or, for a registration, the member's saved card (none
    /// saved: `None`, which the provider declines `NO_PAYMENT_METHOD` without a charge).
    pub(super) async fn authorization(
        &self,
        record: &OrderRecord,
        payment: &Payment,
    ) -> Result<Option<PaymentAuthorization>, AppError> {
        if let Some(given) = authorization_of(record.order.source, payment) {
            return Ok(Some(given));
        }
        let Some(cards) = self.cards.as_ref().filter(|_| record.order.source == OrderSource::Meeting) else {
            return Ok(None);
        };
        Ok(cards.saved_card(&record.order.customer_id).await?.map(|card| PaymentAuthorization::SavedCard {
            billing_key: card.billing_key,
            customer_key: card.customer_key,
        }))
    }

    /// Whether a member's registration can be charged: always, unless registrations are
    /// charged with saved cards (docs/spec.md §10) and the member has none.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn can_charge_registration(&self, customer_id: &str) -> Result<bool, AppError> {
        match &self.cards {
            None => Ok(true),
            Some(cards) => Ok(cards.saved_card(customer_id).await?.is_some()),
        }
    }

    /// The provider's customers (Toss: the checkout widget's `customerKey`).
    pub fn with_provider_customers(mut self, customers: Option<Arc<dyn ProviderCustomers>>) -> Self {
        self.customers = customers;
        self
    }

    /// Records the saga's step metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    /// Places an order and runs the saga as far as it goes now.
    ///
    /// # Errors
    /// `Forbidden` when a customer orders for someone else; `Validation` naming the field
    /// for bad input (nothing is written); `Unavailable` when the database fails.
    pub async fn place_order(&self, actor: &Actor, cmd: PlaceOrder) -> Result<OrderRecord, AppError> {
        let customer_id = cmd.customer_id.clone().unwrap_or_else(|| actor.subject.clone());
        if !actor.may_access(&customer_id) {
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::OrderRejected,
                entity::CUSTOMER,
                &customer_id,
                actor,
                Some("a customer may only place orders for themselves".into()),
                self.clock.now(),
            ));
            self.uow.commit(changes).await?;
            return Err(AppError::Forbidden {
                code: "FORBIDDEN",
                message: "a customer may only place orders for themselves".into(),
            });
        }
        if cmd.description.as_ref().is_some_and(|d| d.chars().count() > MAX_DESCRIPTION) {
            return Err(AppError::Validation {
                field: "description".into(),
                message: format!("must be at most {MAX_DESCRIPTION} characters"),
            });
        }
        if cmd.customer_email.as_deref().is_some_and(|e| !crate::domain::text::is_email(e)) {
            return Err(AppError::Validation {
                field: "customerEmail".into(),
                message: "must be an e-mail address (name@example.com)".into(),
            });
        }
        let asked = cmd.inbox.as_ref().filter(|key| !key.unseen);
        if let Some(existing) = self.created_by_inbox(asked).await? {
            return self.resume(existing, actor).await;
        }
        let now = self.clock.now();
        let input = NewOrder {
            customer_id,
            source: cmd.source,
            meeting_id: cmd.meeting_id,
            currency: cmd.currency,
            items: cmd.items,
        };
        let mut order = Order::place(cmd.order_id, input, now)?;
        // The provider charges only what the customer authorized in its widget: no payment
        // is asked for until then. Otherwise the first payment attempt's number is taken
        // with the order's, in the placement's own round trip, and kept for this run's
        // approval (a crash before it leaves a gap, as a failed insert does; docs/spec.md §3).
        let awaits_payment = self.settings.checkout.is_some() && order.source == OrderSource::Api;
        if awaits_payment {
            order.await_payment(now)?;
        }
        let context = OrderContext {
            scenario: cmd.scenario,
            correlation_id: cmd.correlation_id,
            // An inbound message's order is caused by it (docs/spec.md §12).
            causation_id: cmd.inbox.as_ref().map(|key| key.event_id.clone()),
            // The order's own address, else the caller's token's when the order is theirs.
            customer_email: cmd
                .customer_email
                .or_else(|| actor.email.clone().filter(|_| actor.subject == order.customer_id)),
            description: cmd.description,
        };
        // A commerce-dialect order waits in CREATED until its client asks for the saga
        // ([`Self::start_held`]); no one holds its lease meanwhile.
        let held = order.source == OrderSource::Commerce;
        let mut changes = Changes::default();
        let lease = self.leases.fresh();
        if held {
            changes.insert_order(&mut order, context.clone());
        } else {
            changes.insert_leased_order(&mut order, context.clone(), lease.clone());
        }
        // A charge taken already (the key-in): its payment is committed with the order.
        let charged = match cmd.charged {
            Some(key) => {
                let mut payment = Payment::request_authorized(order.id, 1, order.total, key, now);
                payment.number = self.number(Numbered::Payment).await?;
                changes.insert_payment(&mut payment);
                Some(payment)
            }
            None => None,
        };
        if let Some(key) = &cmd.inbox {
            changes.inbox.push(InboxEntry {
                consumer: key.consumer.clone(),
                event_id: key.event_id.clone(),
                order_id: Some(order.id),
                processed_at: now,
                digest: key.digest.clone(),
            });
        }
        changes.audit.push(audit::record(
            AuditAction::OrderPlaced,
            entity::ORDER,
            order.id,
            actor,
            Some(format!("source {} total {}", order.source, order.total)),
            now,
        ));
        let reserve_payment = !awaits_payment && !held && charged.is_none();
        let placed = match self.uow.commit_placing(changes, reserve_payment).await {
            Ok(placed) => Some(placed),
            Err(crate::application::ports::RepoError::Conflict) => None,
            Err(err) => return Err(err.into()),
        };
        let Some(placed) = placed else {
            // The id exists already (a retried request whose idempotency key reserved it)
            // or the same message was processed concurrently: resume that order. Neither,
            // for a meeting order: its (meeting, user) pair holds a live order already.
            let existing = match self.created_by_inbox(cmd.inbox.as_ref()).await? {
                Some(existing) => existing,
                None => match self.orders.get(cmd.order_id).await? {
                    Some(existing) => existing,
                    None if order.source.is_meeting() => {
                        return Err(AppError::Conflict {
                            code: ALREADY_REGISTERED,
                            message: "this participant already has a live order for this meeting".into(),
                        });
                    }
                    None => return Err(AppError::NotFound("order")),
                },
            };
            return self.resume(existing, actor).await;
        };
        order.number = placed.order_number;
        let record = OrderRecord {
            refunds: Vec::new(),
            order,
            payment: charged,
            settlement: None,
            notification: None,
            steps: Vec::new(),
            context,
        };
        if held {
            return Ok(record);
        }
        // The order is committed: whatever the saga meets now, the answer is the order.
        let run = Run::new(Some(&lease.owner));
        if let Some(number) = placed.payment_number {
            run.payment_number.store(number, std::sync::atomic::Ordering::SeqCst);
        }
        self.run_with(record, actor, &lease, &run, Moved::Already).await
    }

    /// Resumes the saga of an existing order: steps already done are skipped, and on a
    /// finished order nothing changes.
    ///
    /// # Errors
    /// `NotFound` when the order does not exist or the caller may not see it.
    pub async fn orchestrate(&self, actor: &Actor, order_id: OrderId) -> Result<OrderRecord, AppError> {
        let record = self.load(order_id).await?;
        if !actor.may_access(&record.order.customer_id) {
            return Err(AppError::NotFound("order"));
        }
        let action = next_action_of(&record);
        if action.runs_nothing() {
            let why = format!("order is {}; nothing left to run ({action:?})", record.order.status);
            return self.replayed(record, actor, why).await;
        }
        self.resume(record, actor).await
    }

    /// docs/spec.md §4: a replay that changes nothing is audited too.
    async fn replayed(
        &self,
        record: OrderRecord,
        actor: &Actor,
        why: String,
    ) -> Result<OrderRecord, AppError> {
        let mut changes = Changes::default();
        changes.audit.push(audit::record(
            AuditAction::OrchestrateNoop,
            entity::ORDER,
            record.order.id,
            actor,
            Some(why),
            self.clock.now(),
        ));
        self.uow.commit(changes).await?;
        Ok(record)
    }

    /// Starts the saga of an order held in `CREATED` (the commerce dialect's `orchestrate`):
    /// it runs as far as it goes now. An order that is not `CREATED` is left as it is (the
    /// platform's replay), audited as a no-op.
    ///
    /// # Errors
    /// `NotFound` when the order does not exist or the caller may not see it.
    pub async fn start_held(&self, actor: &Actor, order_id: OrderId) -> Result<OrderRecord, AppError> {
        let record = self.load(order_id).await?;
        if !actor.may_access(&record.order.customer_id) {
            return Err(AppError::NotFound("order"));
        }
        let untouched = record.order.status == OrderStatus::Created && record.payment.is_none();
        if untouched {
            return self.resume(record, actor).await;
        }
        let why = format!("order is {}; its saga has run already", record.order.status);
        self.replayed(record, actor, why).await
    }

    /// Runs the saga of an existing order if no one else is running it now; otherwise
    /// answers its current state and leaves it to the runner holding the lease.
    pub(super) async fn resume(&self, record: OrderRecord, actor: &Actor) -> Result<OrderRecord, AppError> {
        if next_action_of(&record).runs_nothing() {
            return Ok(record);
        }
        let Some(lease) = self.leases.take(record.order.id).await? else {
            return Ok(record);
        };
        // The state may have moved on before the lease was ours.
        let fresh = self.load(record.order.id).await?;
        self.run_leased(fresh, actor, lease, Moved::NotYet).await
    }

    pub(super) async fn run_leased(
        &self,
        record: OrderRecord,
        actor: &Actor,
        lease: SagaLease,
        moved: Moved,
    ) -> Result<OrderRecord, AppError> {
        self.run_with(record, actor, &lease, &Run::new(Some(&lease.owner)), moved).await
    }

    async fn run_with(
        &self,
        record: OrderRecord,
        actor: &Actor,
        lease: &SagaLease,
        run: &Run<'_>,
        moved: Moved,
    ) -> Result<OrderRecord, AppError> {
        let id = record.order.id;
        let result = self.drive_run(record, actor, run, moved).await;
        if !run.released() {
            self.leases.release(id, &lease.owner).await;
        }
        result
    }

    /// The order an inbound message already created, if it was processed before.
    async fn created_by_inbox(&self, key: Option<&InboxKey>) -> Result<Option<OrderRecord>, AppError> {
        let Some(key) = key else { return Ok(None) };
        let entry = self.orders.inbox_entry(&key.consumer, &key.event_id).await?;
        match entry.and_then(|e| e.order_id) {
            Some(order_id) => Ok(Some(self.load(order_id).await?)),
            None => Ok(None),
        }
    }

    /// The next number of `kind` (docs/spec.md §3).
    pub(super) async fn number(&self, kind: Numbered) -> Result<i64, AppError> {
        let numbers = self.orders.next_numbers(&[kind]).await?;
        numbers.first().copied().ok_or_else(|| broken_invariant("a number asked for, none handed out"))
    }

    pub(super) async fn load(&self, order_id: OrderId) -> Result<OrderRecord, AppError> {
        self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))
    }
}

#[cfg(test)]
mod tests;
