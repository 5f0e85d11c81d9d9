//! The orchestration service: the imperative shell around the saga's step table.
//!
//! Each step calls one provider, then commits the step's whole outcome in one
//! transaction — aggregates (conditional on the versions loaded), outbox events, the
//! `orchestration_steps` row and any audit row. A lost race (`Conflict`) reloads and
//! re-decides, so two runs of the same order never both apply a step.

use std::sync::Arc;

use crate::application::audit::{self, entity};
use crate::application::commit;
use crate::application::error::{Chain, broken_invariant};
use tracing::Instrument;

use crate::application::meter::Meter;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::orchestration::notify::apply_send_result;
use crate::application::orchestration::outcome::{Moved, Progress, StepOutcome, with_next_intent};
use crate::application::orchestration::payment::{self, decide_approval};
use crate::application::orchestration::steps::{NextAction, next_action, next_action_of};
use crate::application::orchestration::{compensation, settlement};
use crate::application::ports::{
    ApprovePayment, CancelPayment, Changes, Clock, InboxEntry, NotificationRequest, Notifier, Numbered,
    OrderContext, OrderRecord, OrderRepository, PaymentAuthorization, PaymentGateway,
    PaymentMethodRepository, ProviderCustomers, SagaLease, SagaRuns, Scenario, SettlementGateway,
    SettlementRequest, UnitOfWork,
};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::OrderId;
use crate::domain::notification::{Notification, RetryPolicy};
use crate::domain::order::{NewOrder, NewOrderItem, Order, OrderEvent, OrderSource, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::settlement::Settlement;

/// A run never takes more steps than the saga has; the bound only guards against a bug
/// turning into a loop.
const MAX_STEPS_PER_RUN: usize = 8;

/// docs/spec.md §7: a (meeting, user) pair with a live order cannot register again.
pub const ALREADY_REGISTERED: &str = "ALREADY_REGISTERED";
/// A registration refused before any charge: the member has no saved card (docs/spec.md §10).
pub const NO_PAYMENT_METHOD: &str = "NO_PAYMENT_METHOD";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SagaSettings {
    pub notification_retry: RetryPolicy,
    /// How an undelivered settlement is tried again before it waits for an operator.
    pub settlement_retry: RetryPolicy,
    /// How long one run holds an order's saga lease: only the holder calls providers for
    /// the order; a crashed holder's lease simply runs out.
    pub saga_lease: chrono::Duration,
    /// Set when the payment provider needs the customer's authorization before a charge
    /// (Toss): API orders then wait `AWAITING_PAYMENT` (docs/spec.md §10).
    pub checkout: Option<CheckoutSettings>,
}

/// How the checkout waits for the customer (docs/spec.md §10; `checkout.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckoutSettings {
    /// `payment.toss.confirm_window`: how long an order may wait for its payment.
    pub window: chrono::Duration,
}

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

/// One run of an order's saga: the lease it holds (if any), and whether a commit of this
/// run already gave the lease back.
struct Run<'a> {
    owner: Option<&'a str>,
    released: std::sync::atomic::AtomicBool,
    /// The first payment attempt's number, taken with the order's (0: none).
    payment_number: std::sync::atomic::AtomicI64,
}

impl<'a> Run<'a> {
    fn new(owner: Option<&'a str>) -> Self {
        Run {
            owner,
            released: std::sync::atomic::AtomicBool::new(false),
            payment_number: std::sync::atomic::AtomicI64::new(0),
        }
    }

    /// The payment number reserved for this run, once.
    fn take_payment_number(&self) -> Option<i64> {
        Some(self.payment_number.swap(0, std::sync::atomic::Ordering::SeqCst)).filter(|n| *n > 0)
    }

    fn released(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When the state a step commits leaves nothing more for this run to do, the same
    /// commit gives the lease back — one write fewer per order.
    fn release_if_final(
        &self,
        changes: &mut Changes,
        order: &Order,
        payment: Option<&Payment>,
        settlement: Option<&Settlement>,
        notification: Option<&Notification>,
    ) {
        let finished = next_action(order, payment, settlement, notification).runs_nothing();
        if let (true, Some(owner)) = (finished, self.owner) {
            changes.release_saga = Some(owner.to_owned());
        }
    }
}

pub struct Orchestrator {
    pub(super) orders: Arc<dyn OrderRepository>,
    pub(super) uow: Arc<dyn UnitOfWork>,
    pub(super) payments: Arc<dyn PaymentGateway>,
    settlements: Arc<dyn SettlementGateway>,
    notifier: Arc<dyn Notifier>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: SagaSettings,
    pub(super) leases: SagaLeases,
    meter: Meter,
    /// Saved cards, for a provider that charges registrations with one (Toss's billing).
    cards: Option<Arc<dyn PaymentMethodRepository>>,
    /// The provider's customer keys, for its checkout widget (Toss).
    pub(super) customers: Option<Arc<dyn ProviderCustomers>>,
}

/// The order's payment, which the step being run requires to be `APPROVED`.
fn approved_payment(record: &OrderRecord, step: &str) -> Result<Payment, AppError> {
    record
        .payment
        .clone()
        .filter(|p| p.status == PaymentStatus::Approved)
        .ok_or_else(|| broken_invariant(step))
}

/// What the customer authorized a payment attempt with, where it was committed with it
/// (Toss's checkout: the widget's `paymentKey`, before the charge is approved).
pub(super) fn authorization_of(payment: &Payment) -> Option<PaymentAuthorization> {
    let undecided = matches!(payment.status, PaymentStatus::Requested | PaymentStatus::ConfirmationRequired);
    match (&payment.provider_transaction_id, undecided) {
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
        if let Some(given) = authorization_of(payment) {
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
        };
        let mut changes = Changes::default();
        let lease = self.leases.fresh();
        changes.insert_leased_order(&mut order, context.clone(), lease.clone());
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
        let placed = match self.uow.commit_placing(changes, !awaits_payment).await {
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
                    None if order.source == OrderSource::Meeting => {
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
            payment: None,
            settlement: None,
            notification: None,
            steps: Vec::new(),
            context,
        };
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
            // docs/spec.md §4: a replay that changes nothing is audited too.
            let mut changes = Changes::default();
            changes.audit.push(audit::record(
                AuditAction::OrchestrateNoop,
                entity::ORDER,
                order_id,
                actor,
                Some(format!("order is {}; nothing left to run ({action:?})", record.order.status)),
                self.clock.now(),
            ));
            self.uow.commit(changes).await?;
            return Ok(record);
        }
        self.resume(record, actor).await
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

    /// The one way a step's outcome is committed: gives the lease back in the same commit
    /// when nothing is left for this run, commits conditionally, and on success moves
    /// `record` to the committed state. `Ok(None)`: a conditional write lost (nothing was
    /// written; the caller reloads or decides what the refusal means).
    async fn commit_step(
        &self,
        run: &Run<'_>,
        record: &mut OrderRecord,
        mut outcome: StepOutcome,
    ) -> Result<Option<Progress>, AppError> {
        with_next_intent(record, &mut outcome, self.clock.now());
        if outcome.changes.release_saga.is_none() {
            run.release_if_final(
                &mut outcome.changes,
                &outcome.order,
                outcome.payment.as_ref().or(record.payment.as_ref()),
                outcome.settlement.as_ref().or(record.settlement.as_ref()),
                outcome.notification.as_ref().or(record.notification.as_ref()),
            );
        }
        let releasing = outcome.changes.release_saga.is_some();
        let steps = outcome.changes.steps.clone();
        if !self.commit(outcome.changes).await? {
            return Ok(None);
        }
        if releasing {
            run.released.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        record.order = outcome.order;
        if let Some(payment) = outcome.payment {
            record.payment = Some(payment);
        }
        if let Some(settlement) = outcome.settlement {
            record.settlement = Some(settlement);
        }
        if let Some(notification) = outcome.notification {
            record.notification = Some(notification);
        }
        record.steps.extend(steps.into_iter().map(|s| s.record));
        Ok(Some(outcome.progress))
    }

    /// Commits; `Ok(false)` when a conditional write lost a race (nothing was written).
    pub(super) async fn commit(&self, changes: Changes) -> Result<bool, AppError> {
        commit::commit(self.uow.as_ref(), changes).await
    }

    pub(super) async fn drive(&self, record: OrderRecord, actor: &Actor) -> Result<OrderRecord, AppError> {
        self.drive_run(record, actor, &Run::new(None), Moved::NotYet).await
    }

    /// Runs the saga's steps while there is one to run now. `record` is always the state as
    /// committed, so once something was committed for this call (`moved`, or a step of this
    /// run), a dependency failing later ends the run with that state rather than an error:
    /// an error answer means nothing happened (issue 43 item 8: a 503 to an order that was
    /// in fact placed, and later charged, invites a second order). The saga goes on where
    /// it stopped (stalled-saga recovery, docs/spec.md §4).
    async fn drive_run(
        &self,
        mut record: OrderRecord,
        actor: &Actor,
        run: &Run<'_>,
        moved: Moved,
    ) -> Result<OrderRecord, AppError> {
        let mut moved = moved == Moved::Already;
        for _ in 0..MAX_STEPS_PER_RUN {
            let started = std::time::Instant::now();
            let action = next_action_of(&record);
            // The step's label (metrics) and its span's name.
            let (step, name) = match action {
                NextAction::Done
                | NextAction::AwaitConfirmation
                | NextAction::AwaitPayment
                | NextAction::AwaitRetryOrOperator => {
                    return Ok(record);
                }
                NextAction::ApprovePayment { .. } => ("payment", "saga payment"),
                NextAction::RequestSettlement => ("settlement", "saga settlement"),
                NextAction::SendNotification => ("notification", "saga notification"),
                NextAction::Compensate => ("compensation", "saga compensation"),
            };
            // One span per step (a child of the request's or message's trace).
            let span = tracing::info_span!("saga.step", otel.name = name, step, order = %record.order.id);
            let result = async {
                match action {
                    NextAction::ApprovePayment { attempt } => {
                        self.approve_payment(&mut record, attempt, actor, run).await
                    }
                    NextAction::RequestSettlement => self.request_settlement(&mut record, actor, run).await,
                    NextAction::SendNotification => self.send_notification(&mut record, actor, run).await,
                    _ => self.compensate(&mut record, actor, run).await,
                }
            }
            .instrument(span)
            .await;
            // What became of the step: the saga moved on, stopped there (a final or waiting
            // state), lost a race (re-decided), or failed (a dependency down).
            let outcome = match &result {
                Ok(Progress::Continue) => "continued",
                Ok(Progress::Stop) => "stopped",
                Ok(Progress::Reload) => "raced",
                Err(_) => "error",
            };
            let elapsed = started.elapsed().as_secs_f64();
            self.meter.record(|| {
                metrics::counter!("saga_steps_total", "step" => step, "outcome" => outcome).increment(1);
                metrics::histogram!("saga_step_duration_seconds", "step" => step).record(elapsed);
            });
            let progress = match result {
                Ok(progress) => progress,
                Err(err) if moved && err.is_transient() => {
                    tracing::warn!(
                        order = %record.order.id, step, error = %Chain(&err),
                        "a saga step could not run now; the order is answered as committed and resumed later"
                    );
                    return Ok(record);
                }
                Err(err) => return Err(err),
            };
            match progress {
                Progress::Continue => moved = true,
                Progress::Stop => return Ok(record),
                Progress::Reload => record = self.load(record.order.id).await?,
            }
        }
        Ok(record)
    }

    async fn approve_payment(
        &self,
        record: &mut OrderRecord,
        attempt: i32,
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        let payment = match &record.payment {
            Some(p) if p.status == PaymentStatus::Requested && p.attempt == attempt => p.clone(),
            _ => {
                let mut payment =
                    Payment::request(record.order.id, attempt, record.order.total, self.clock.now());
                payment.number = match run.take_payment_number() {
                    Some(reserved) => reserved,
                    None => self.number(Numbered::Payment).await?,
                };
                payment
            }
        };
        let stored = record.payment.as_ref().is_some_and(|p| p.id == payment.id);
        let request = ApprovePayment {
            order_id: record.order.id,
            customer_id: record.order.customer_id.clone(),
            payment_request_id: payment.payment_request_id.clone(),
            amount: payment.amount,
            order_name: record.order.name(),
            authorization: self.authorization(record, &payment).await?,
            scenario: record.context.scenario,
        };
        let decision = decide_approval(self.payments.approve(&request).await);
        let (outcome, detail) = payment::decide(record, payment, stored, decision, actor, self.clock.now())?;
        match self.commit_step(run, record, outcome).await? {
            Some(progress) => Ok(progress),
            None => self.approval_not_stored(record, attempt, detail, actor, run).await,
        }
    }

    /// The approval's outcome commit was refused. Either another runner moved the order on
    /// (a lost race: reload and re-decide) or the answer itself cannot be stored — a
    /// `providerTransactionId` another payment already has. The provider has acted, so the
    /// order must not stay `CREATED` to be approved again and again: the payment becomes
    /// `CONFIRMATION_REQUIRED`, audited, and reconciliation (bounded) or an operator settles it.
    async fn approval_not_stored(
        &self,
        record: &mut OrderRecord,
        attempt: i32,
        answer: String,
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        let current = self.load(record.order.id).await?;
        let unchanged = current.order.version == record.order.version
            && current.payment.as_ref().map(|p| (p.id, p.version))
                == record.payment.as_ref().map(|p| (p.id, p.version));
        if !unchanged {
            // Re-decide from the state that won (already loaded: no second read).
            *record = current;
            return Ok(Progress::Continue);
        }
        tracing::error!(order = %current.order.id, %answer, "a payment provider answer could not be stored");
        let stored = current
            .payment
            .as_ref()
            .is_some_and(|p| p.status == PaymentStatus::Requested && p.attempt == attempt);
        let number = if stored { 0 } else { self.number(Numbered::Payment).await? };
        let outcome = payment::unstorable(&current, attempt, number, &answer, actor, self.clock.now())?;
        *record = current;
        Ok(self.commit_step(run, record, outcome).await?.unwrap_or(Progress::Reload))
    }

    async fn request_settlement(
        &self,
        record: &mut OrderRecord,
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        let payment = approved_payment(record, "settlement without an approved payment")?.clone();
        // docs/spec.md §13: the intent is committed before the first attempt, so a crash
        // between the call and its outcome is resumed under the same settlement (a webhook's
        // `webhook-id`), never a second one.
        let settlement = match record.settlement.clone() {
            Some(requested) => requested,
            None => {
                let mut settlement =
                    Settlement::request(record.order.id, payment.id, payment.amount, self.clock.now());
                let mut changes = Changes::default();
                changes.insert_settlement(&mut settlement);
                let mut intent = StepOutcome::new(changes, record.order.clone(), Progress::Continue);
                intent.settlement = Some(settlement.clone());
                if self.commit_step(run, record, intent).await?.is_none() {
                    return Ok(Progress::Reload);
                }
                settlement
            }
        };
        let request = SettlementRequest {
            settlement_id: settlement.id,
            order_id: record.order.id,
            order_number: record.order.number,
            payment_id: payment.id,
            amount: payment.amount,
            payment_key: payment.provider_transaction_id.clone(),
            approved_at: payment.approved_at,
            scenario: record.context.scenario,
        };
        let result = self.settlements.settle(&request).await;
        let retry = &self.settings.settlement_retry;
        let outcome = settlement::decide(record, settlement, result, retry, actor, self.clock.now())?;
        Ok(self.commit_step(run, record, outcome).await?.unwrap_or(Progress::Reload))
    }

    async fn send_notification(
        &self,
        record: &mut OrderRecord,
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        // docs/spec.md §13: the intent is committed before the first attempt, so a crash
        // between the call and its outcome is resumed under the same notification (a
        // webhook's `webhook-id`), never a second one.
        let notification = match record.notification.clone() {
            Some(pending) => pending,
            None => {
                let mut notification = Notification::new(record.order.id, self.clock.now());
                let mut changes = Changes::default();
                changes.insert_notification(&mut notification);
                let mut intent = StepOutcome::new(changes, record.order.clone(), Progress::Continue);
                intent.notification = Some(notification.clone());
                if self.commit_step(run, record, intent).await?.is_none() {
                    return Ok(Progress::Reload);
                }
                notification
            }
        };
        let request = NotificationRequest {
            notification_id: notification.id,
            order_id: record.order.id,
            order_number: record.order.number,
            event_type: OrderEvent::Completed.event_type(),
            order_status: OrderStatus::Completed.as_str(),
            amount: record.order.total,
            customer_id: record.order.customer_id.clone(),
            recipient: record.context.customer_email.clone(),
            attempt: 1,
            scenario: record.context.scenario,
        };
        let result = self.notifier.send(&request).await;
        let retry = &self.settings.notification_retry;
        let now = self.clock.now();
        let sent = apply_send_result(record, notification, true, result, retry, actor, now)?;
        let progress = if sent.completed { Progress::Continue } else { Progress::Stop };
        let mut outcome = StepOutcome::new(sent.changes, sent.order, progress);
        outcome.notification = Some(sent.notification);
        Ok(self.commit_step(run, record, outcome).await?.unwrap_or(Progress::Reload))
    }

    async fn compensate(
        &self,
        record: &mut OrderRecord,
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        let payment = approved_payment(record, "compensation without an approved payment")?;
        let provider_transaction_id = payment
            .provider_transaction_id
            .clone()
            .ok_or_else(|| broken_invariant("approved payment without a provider transaction"))?;
        let request = CancelPayment {
            payment_id: payment.id,
            payment_request_id: payment.payment_request_id.clone(),
            provider_transaction_id,
            // The whole payment: compensation is a full cancel, keyed like every cancel of
            // this payment's approval.
            idempotency_key: format!("cancel-{}", payment.payment_request_id),
            amount: payment.amount,
            balance: payment.amount,
            reason: "settlement failed".into(),
            scenario: record.context.scenario,
        };
        let result = self.payments.cancel(&request).await;
        let mut outcome = compensation::decide(record, payment, result.map(|_| ()), actor, self.clock.now())?;
        if let (Progress::Stop, Some(owner)) = (&outcome.progress, run.owner) {
            // A failed cancel ends this run (the worker retries later).
            outcome.changes.release_saga = Some(owner.to_owned());
        }
        Ok(self.commit_step(run, record, outcome).await?.unwrap_or(Progress::Reload))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use chrono::{DateTime, Duration, Utc};

    use super::*;
    use crate::application::ports::{
        ApprovalOutcome, GatewayError, MockClock, MockNotifier, MockOrderRepository, MockPaymentGateway,
        MockSagaRuns, MockSettlementGateway, MockUnitOfWork, NotifyFailure, Placed, RepoError,
        SettlementOutcome,
    };
    use crate::domain::notification::FailurePolicy;
    use crate::domain::order::OrderStatus;
    use crate::domain::order::{FailureStage, SagaStep, StepStatus};

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    struct Mocks {
        orders: MockOrderRepository,
        runs: MockSagaRuns,
        uow: MockUnitOfWork,
        payments: MockPaymentGateway,
        settlements: MockSettlementGateway,
        notifier: MockNotifier,
        committed: Arc<Mutex<Vec<Changes>>>,
    }

    /// Numbers handed out as a sequence would: 1, 2, 3 …
    fn numbered(orders: &mut MockOrderRepository) {
        let next = Arc::new(std::sync::atomic::AtomicI64::new(0));
        orders.expect_next_numbers().returning(move |kinds| {
            Ok(kinds.iter().map(|_| next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1).collect())
        });
    }

    /// Placements that succeed, numbered 100, 101 … (and recorded in `sink`).
    fn placing(uow: &mut MockUnitOfWork, sink: Option<Arc<Mutex<Vec<Changes>>>>) {
        let next = Arc::new(std::sync::atomic::AtomicI64::new(100));
        uow.expect_commit_placing().returning(move |c, payment| {
            if let Some(sink) = &sink {
                sink.lock().unwrap().push(c);
            }
            let take = || next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Placed { order_number: take(), payment_number: payment.then(take) })
        });
    }

    /// Leases always granted.
    fn leasing() -> MockSagaRuns {
        let mut runs = MockSagaRuns::new();
        runs.expect_lease_saga().returning(|_, _, _| Ok(true));
        runs.expect_release_saga().returning(|_, _| Ok(()));
        runs
    }

    impl Mocks {
        /// Mocks where every commit succeeds and is recorded.
        fn new() -> Mocks {
            let committed = Arc::new(Mutex::new(Vec::new()));
            let mut uow = MockUnitOfWork::new();
            let sink = committed.clone();
            uow.expect_commit().returning(move |c| {
                sink.lock().unwrap().push(c);
                Ok(())
            });
            placing(&mut uow, Some(committed.clone()));
            let mut orders = MockOrderRepository::new();
            orders.expect_get().returning(|_| Ok(None));
            numbered(&mut orders);
            Mocks {
                orders,
                runs: leasing(),
                uow,
                payments: MockPaymentGateway::new(),
                settlements: MockSettlementGateway::new(),
                notifier: MockNotifier::new(),
                committed,
            }
        }

        fn build(self) -> (Orchestrator, Arc<Mutex<Vec<Changes>>>) {
            let mut clock = MockClock::new();
            clock.expect_now().returning(now);
            let orchestrator = Orchestrator::new(
                Arc::new(self.orders),
                Arc::new(self.runs),
                Arc::new(self.uow),
                Arc::new(self.payments),
                Arc::new(self.settlements),
                Arc::new(self.notifier),
                Arc::new(clock),
                SagaSettings {
                    notification_retry: RetryPolicy { max_attempts: 5, backoff_base: Duration::seconds(60) },
                    settlement_retry: RetryPolicy { max_attempts: 5, backoff_base: Duration::seconds(60) },
                    saga_lease: Duration::seconds(60),
                    checkout: None,
                },
            );
            (orchestrator, self.committed)
        }
    }

    fn command() -> PlaceOrder {
        PlaceOrder {
            order_id: OrderId::new(),
            customer_id: None,
            source: OrderSource::Api,
            meeting_id: None,
            currency: "KRW".into(),
            items: vec![NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 500 }],
            scenario: Scenario::default(),
            correlation_id: Some("corr-1".into()),
            inbox: None,
            customer_email: None,
        }
    }

    fn event_types(committed: &Mutex<Vec<Changes>>) -> Vec<String> {
        committed.lock().unwrap().iter().flat_map(|c| c.outbox.iter().map(|e| e.event_type.clone())).collect()
    }

    fn approved() -> Result<ApprovalOutcome, GatewayError> {
        Ok(ApprovalOutcome::Approved { provider_transaction_id: "tx-1".into() })
    }

    #[tokio::test]
    async fn settlement_failure_compensates_exactly_once() {
        let mut m = Mocks::new();
        m.payments.expect_approve().times(1).returning(|_| approved());
        m.settlements
            .expect_settle()
            .times(1)
            .returning(|_| Ok(SettlementOutcome::Failed { reason: "bank closed".into() }));
        m.payments
            .expect_cancel()
            .times(1)
            .withf(|c| c.provider_transaction_id == "tx-1")
            .returning(|_| Ok(crate::application::ports::CancelReceipt::default()));
        m.notifier.expect_send().never();
        let (saga, committed) = m.build();

        let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

        assert_eq!(record.order.status, OrderStatus::Cancelled);
        assert_eq!(record.payment.unwrap().status, PaymentStatus::Cancelled);
        assert_eq!(
            event_types(&committed),
            vec![
                "payment.approved",
                "settlement.failed",
                "order.failed",
                "payment.cancelled",
                "order.cancelled"
            ]
        );
        let steps: Vec<_> = record.steps.iter().map(|s| (s.step, s.status)).collect();
        assert_eq!(
            steps,
            vec![
                (SagaStep::Payment, StepStatus::Success),
                (SagaStep::Settlement, StepStatus::Failed),
                (SagaStep::Compensation, StepStatus::Success),
            ]
        );
        let commits = committed.lock().unwrap();
        assert!(
            commits.iter().flat_map(|c| &c.outbox).all(|e| e.correlation_id.as_deref() == Some("corr-1"))
        );
        assert!(commits.iter().flat_map(|c| &c.audit).any(|a| a.action == AuditAction::Compensated));
    }

    #[tokio::test]
    async fn an_unknown_payment_outcome_is_neither_settled_nor_compensated() {
        let mut m = Mocks::new();
        m.payments
            .expect_approve()
            .times(1)
            .returning(|_| Ok(ApprovalOutcome::Unknown { reason: "timeout".into() }));
        m.settlements.expect_settle().never();
        m.payments.expect_cancel().never();
        m.notifier.expect_send().never();
        let (saga, committed) = m.build();

        let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

        assert_eq!(record.order.status, OrderStatus::PendingConfirmation);
        assert_eq!(record.payment.unwrap().status, PaymentStatus::ConfirmationRequired);
        assert!(event_types(&committed).is_empty(), "nothing is announced before the outcome is known");
    }

    #[tokio::test]
    async fn a_notification_failure_undoes_nothing() {
        let mut m = Mocks::new();
        m.payments.expect_approve().times(1).returning(|_| approved());
        m.settlements.expect_settle().times(1).returning(|_| Ok(SettlementOutcome::Succeeded));
        m.notifier.expect_send().times(1).returning(|_| {
            Err(NotifyFailure {
                policy: FailurePolicy::ManualIntervention,
                reason: "smtp down".into(),
                retry_after: None,
            })
        });
        m.payments.expect_cancel().never();
        let (saga, committed) = m.build();

        let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

        assert_eq!(record.order.status, OrderStatus::Failed);
        assert_eq!(record.order.failure_stage, Some(FailureStage::Notification));
        assert_eq!(record.payment.unwrap().status, PaymentStatus::Approved);
        assert_eq!(event_types(&committed), vec!["payment.approved", "notification.failed", "order.failed"]);
        assert_eq!(
            record.steps.last().map(|s| (s.step, s.status)),
            Some((SagaStep::Compensation, StepStatus::Ready))
        );
    }

    #[tokio::test]
    async fn a_lost_race_reloads_and_never_repeats_a_step() {
        let mut m = Mocks::new();
        // The payment commit loses to a concurrent run that approved and settled already.
        let mut uow = MockUnitOfWork::new();
        let calls = Arc::new(Mutex::new(0));
        let counter = calls.clone();
        uow.expect_commit().returning(move |c| {
            let mut n = counter.lock().unwrap();
            *n += 1;
            if c.payments.is_empty() { Ok(()) } else { Err(RepoError::Conflict) }
        });
        let placements = calls.clone();
        uow.expect_commit_placing().times(1).returning(move |_, _| {
            *placements.lock().unwrap() += 1;
            Ok(Placed { order_number: 1, payment_number: Some(1) })
        });
        m.uow = uow;
        let cmd = command();
        let order_id = cmd.order_id;
        let mut orders = MockOrderRepository::new();
        numbered(&mut orders);
        let mut seq = mockall::Sequence::new();
        orders.expect_get().times(1).in_sequence(&mut seq).returning(move |_| {
            let mut order = Order::place(
                order_id,
                NewOrder {
                    customer_id: "alice".into(),
                    source: OrderSource::Api,
                    meeting_id: None,
                    currency: "KRW".into(),
                    items: vec![NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 500 }],
                },
                now(),
            )
            .unwrap();
            order.status = OrderStatus::Completed;
            let mut payment = Payment::request(order_id, 1, order.total, now());
            payment.approve("tx-other", now()).unwrap();
            Ok(Some(OrderRecord {
                refunds: Vec::new(),
                order,
                payment: Some(payment),
                settlement: None,
                notification: None,
                steps: vec![],
                context: OrderContext::default(),
            }))
        });
        m.orders = orders;
        m.payments.expect_approve().times(1).returning(|_| approved());
        m.settlements.expect_settle().never();
        m.notifier.expect_send().never();
        let (saga, _) = m.build();

        let record = saga.place_order(&Actor::customer("alice"), cmd).await.unwrap();

        assert_eq!(record.order.status, OrderStatus::Completed, "the winner's state is returned");
        assert_eq!(record.payment.unwrap().provider_transaction_id.as_deref(), Some("tx-other"));
        assert_eq!(*calls.lock().unwrap(), 2, "order insert, then the lost payment commit");
    }

    #[tokio::test]
    async fn a_customer_cannot_order_for_someone_else() {
        let mut m = Mocks::new();
        m.payments.expect_approve().never();
        let mut uow = MockUnitOfWork::new();
        uow.expect_commit()
            .times(1)
            .withf(|c| {
                c.new_orders.is_empty()
                    && c.audit.len() == 1
                    && c.audit[0].action == AuditAction::OrderRejected
            })
            .returning(|_| Ok(()));
        m.uow = uow;
        let (saga, _) = m.build();
        let cmd = PlaceOrder { customer_id: Some("bob".into()), ..command() };
        let err = saga.place_order(&Actor::customer("alice"), cmd).await.unwrap_err();
        assert!(matches!(err, AppError::Forbidden { .. }));
    }
}
