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
use crate::application::orchestration::placement::{self, InboxKey, PlaceOrder};
use crate::application::orchestration::run::Run;
use crate::application::orchestration::steps::next_action_of;
use crate::application::ports::{
    CardKeyIn, Changes, Clock, Notifier, Numbered, OrderRecord, OrderRepository, PaymentAuthorization,
    PaymentGateway, PaymentMethodRepository, ProviderCustomers, SagaLease, SagaRuns, SettlementGateway,
    UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::order::{OrderSource, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus};

/// docs/spec.md §7: a (meeting, user) pair with a live order cannot register again.
pub const ALREADY_REGISTERED: &str = "ALREADY_REGISTERED";
/// A registration refused before any charge: the member has no saved card (docs/spec.md §10).
pub const NO_PAYMENT_METHOD: &str = "NO_PAYMENT_METHOD";

/// What the customer authorized a payment attempt with, where it was committed with it:
/// Toss's checkout (the widget's `paymentKey`, before the charge is approved), or a key-in
/// (`MOMO`: the card is never stored, so a run after the first asks the provider what it
/// holds under the request id and never charges).
pub(super) fn authorization_of(payment: &Payment) -> Option<PaymentAuthorization> {
    let undecided = matches!(payment.status, PaymentStatus::Requested | PaymentStatus::ConfirmationRequired);
    if !undecided {
        return None;
    }
    if payment.keyed_in {
        return Some(PaymentAuthorization::KeyIn { card: None });
    }
    payment.provider_transaction_id.clone().map(|key| PaymentAuthorization::Checkout { payment_key: key })
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
            key_in: None,
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
        if let Some(given) = authorization_of(payment) {
            return Ok(Some(given));
        }
        let Some(cards) = self.cards.as_ref().filter(|_| record.order.source.pays_with_saved_card()) else {
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

    /// Charges keyed-in cards (the momo dialect's key-in), where the provider allows it.
    pub fn with_card_key_in(mut self, key_in: Option<Arc<dyn CardKeyIn>>) -> Self {
        self.key_in = key_in;
        self
    }

    /// Whether a keyed-in card can be charged here (the provider allows key-in).
    pub fn charges_keyed_cards(&self) -> bool {
        self.key_in.is_some()
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
        let now = self.clock.now();
        let customer_id = match placement::admit(actor, &cmd, now) {
            Ok(customer_id) => customer_id,
            Err(refusal) => {
                if let Some(audit) = refusal.audit {
                    self.uow.commit(Changes { audit: vec![*audit], ..Changes::default() }).await?;
                }
                return Err(refusal.error);
            }
        };
        let asked = cmd.inbox.as_ref().filter(|key| !key.unseen);
        if let Some(existing) = self.created_by_inbox(asked).await? {
            return self.resume(existing, actor).await;
        }
        let keyed_number = match cmd.keyed_in {
            Some(_) => Some(self.number(Numbered::Payment).await?),
            None => None,
        };
        let (order_id, inbox) = (cmd.order_id, cmd.inbox.clone());
        let lease = self.leases.fresh();
        let checkout = self.settings.checkout.is_some();
        let placement = placement::place(cmd, customer_id, actor, checkout, &lease, keyed_number, now)?;
        let placed = match self.uow.commit_placing(placement.changes, placement.reserve_payment).await {
            Ok(placed) => placed,
            Err(crate::application::ports::RepoError::Conflict) => {
                return self.placed_before(actor, order_id, inbox.as_ref(), placement.order.source).await;
            }
            Err(err) => return Err(err.into()),
        };
        let mut order = placement.order;
        order.number = placed.order_number;
        let record = OrderRecord {
            refunds: Vec::new(),
            order,
            payment: placement.payment,
            settlement: None,
            notification: None,
            steps: Vec::new(),
            context: placement.context,
        };
        if placement.held {
            return Ok(record);
        }
        // The order is committed: whatever the saga meets now, the answer is the order.
        let run = Run::new(Some(&lease.owner)).with_keyed_in(placement.keyed_in);
        if let Some(number) = placed.payment_number {
            run.payment_number.store(number, std::sync::atomic::Ordering::SeqCst);
        }
        self.run_with(record, actor, &lease, &run, Moved::Already).await
    }

    /// A placement refused as a duplicate: the id exists already (a retried request whose
    /// idempotency key reserved it) or the same message was processed concurrently — that
    /// order, resumed. Neither, for a meeting order: its (meeting, user) pair holds a live
    /// order already.
    async fn placed_before(
        &self,
        actor: &Actor,
        order_id: OrderId,
        inbox: Option<&InboxKey>,
        source: OrderSource,
    ) -> Result<OrderRecord, AppError> {
        let existing = match self.created_by_inbox(inbox).await? {
            Some(existing) => existing,
            None => match self.orders.get(order_id).await? {
                Some(existing) => existing,
                None if source.is_meeting() => {
                    return Err(AppError::Conflict {
                        code: ALREADY_REGISTERED,
                        message: "this participant already has a live order for this meeting".into(),
                    });
                }
                None => return Err(AppError::NotFound("order")),
            },
        };
        self.resume(existing, actor).await
    }

    /// Resumes the saga of an existing order: steps already done are skipped, and on a
    /// finished order nothing changes.
    ///
    /// # Errors
    /// `NotFound` when the order does not exist or the caller may not see it.
    pub async fn orchestrate(&self, actor: &Actor, order_id: OrderId) -> Result<OrderRecord, AppError> {
        let record = self.load(order_id).await?;
        if !actor.may_access(&record.order) {
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
        if !actor.may_access(&record.order) {
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
        let order_id = record.order.id;
        let resumed = self
            .holding_run(order_id, async move |run| {
                // The state may have moved on before the lease was ours.
                let fresh = self.load(order_id).await?;
                self.drive_run(fresh, actor, run, Moved::NotYet).await
            })
            .await?;
        resumed.unwrap_or(Ok(record))
    }

    /// The saga's lease scope: runs `body` holding the order's lease, with a [`Run`] of its
    /// owner, then gives the lease back — unless the run's last commit gave it back with its
    /// writes (one write fewer per order). `None`, and `body` not run, while another runner
    /// holds the order. Every use case that calls an order's providers outside a placement
    /// runs in this scope (or, for the money's, [`SagaLeases::holding`]): no lease is
    /// given back by hand.
    ///
    /// # Errors
    /// `Unavailable` when the lease cannot be taken (the database).
    pub(super) async fn holding_run<T>(
        &self,
        order_id: OrderId,
        body: impl AsyncFnOnce(&Run<'_>) -> T,
    ) -> Result<Option<T>, AppError> {
        let Some(lease) = self.leases.take(order_id).await? else { return Ok(None) };
        let run = Run::new(Some(&lease.owner));
        let out = body(&run).await;
        if !run.released() {
            self.leases.release(order_id, &lease.owner).await;
        }
        Ok(Some(out))
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
