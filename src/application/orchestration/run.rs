//! One run of an order's saga: the steps between two commits — the lease the run holds,
//! each step's provider call, and the one way its outcome is committed ([`Orchestrator`]'s
//! `commit_step`); the use cases that start a run are in `service`.

use crate::application::commit;
use crate::application::error::{Chain, broken_invariant};
use tracing::Instrument;

use crate::application::orchestration::notify::{apply_send_result, request_of};
use crate::application::orchestration::outcome::{Moved, Progress, StepOutcome, with_next_intent};
use crate::application::orchestration::payment::{self, decide_approval};
use crate::application::orchestration::placement::KeyedIn;
use crate::application::orchestration::steps::{NextAction, next_action, next_action_of};
use crate::application::orchestration::{compensation, settlement};
use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, CancelPayment, Changes, GatewayError, KeyInCharge, Numbered,
    OrderRecord, PaymentAuthorization, SettlementRequest,
};
use crate::application::{Actor, AppError};
use crate::domain::notification::Notification;
use crate::domain::order::Order;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::settlement::Settlement;

use super::orchestrator::{MAX_STEPS_PER_RUN, Orchestrator};

/// A keyed-in card's charge where the provider has no key-in (a live key): declined before
/// any call.
pub const KEY_IN_NOT_ALLOWED: &str = "KEY_IN_NOT_ALLOWED";

/// One run of an order's saga: the lease it holds (if any), and whether a commit of this
/// run already gave the lease back.
pub(super) struct Run<'a> {
    owner: Option<&'a str>,
    released: std::sync::atomic::AtomicBool,
    /// The first payment attempt's number, taken with the order's (0: none).
    pub(super) payment_number: std::sync::atomic::AtomicI64,
    /// The card keyed in with the order (the momo dialect's key-in), for its first charge
    /// only: held in memory by this run, never stored.
    keyed_in: std::sync::Mutex<Option<KeyedIn>>,
}

impl<'a> Run<'a> {
    pub(super) fn new(owner: Option<&'a str>) -> Self {
        Run {
            owner,
            released: std::sync::atomic::AtomicBool::new(false),
            payment_number: std::sync::atomic::AtomicI64::new(0),
            keyed_in: std::sync::Mutex::new(None),
        }
    }

    /// This run charges `keyed` (once).
    pub(super) fn with_keyed_in(self, keyed: Option<KeyedIn>) -> Self {
        *self.keyed_in.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = keyed;
        self
    }

    /// The keyed-in card, once: a retry of the step after a lost race has none, and asks
    /// the provider instead.
    fn take_keyed_in(&self) -> Option<KeyedIn> {
        self.keyed_in.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// The payment number reserved for this run, once.
    pub(super) fn take_payment_number(&self) -> Option<i64> {
        Some(self.payment_number.swap(0, std::sync::atomic::Ordering::SeqCst)).filter(|n| *n > 0)
    }

    pub(super) fn released(&self) -> bool {
        self.released.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// When the state a step commits leaves nothing more for this run to do, the same
    /// commit gives the lease back — one write fewer per order.
    pub(super) fn release_if_final(
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

/// The order's payment, which the step being run requires to be `APPROVED`.
pub(super) fn approved_payment(record: &OrderRecord, step: &str) -> Result<Payment, AppError> {
    record
        .payment
        .clone()
        .filter(|p| p.status == PaymentStatus::Approved)
        .ok_or_else(|| broken_invariant(step))
}

impl Orchestrator {
    /// The one way a step's outcome is committed: gives the lease back in the same commit
    /// when nothing is left for this run, commits conditionally, and on success moves
    /// `record` to the committed state. `Ok(None)`: a conditional write lost (nothing was
    /// written; the caller reloads or decides what the refusal means).
    pub(super) async fn commit_step(
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
    pub(super) async fn drive_run(
        &self,
        mut record: OrderRecord,
        actor: &Actor,
        run: &Run<'_>,
        moved: Moved,
    ) -> Result<OrderRecord, AppError> {
        let mut moved = moved == Moved::Already;
        for _ in 0..MAX_STEPS_PER_RUN {
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
            let result = self.step(&mut record, action, (step, name), actor, run).await;
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

    /// Runs one step in its span (a child of the request's or message's trace), timed and
    /// counted by what became of it: the saga moved on, stopped there (a final or waiting
    /// state), lost a race (re-decided), or failed (a dependency down).
    async fn step(
        &self,
        record: &mut OrderRecord,
        action: NextAction,
        (step, name): (&'static str, &'static str),
        actor: &Actor,
        run: &Run<'_>,
    ) -> Result<Progress, AppError> {
        let started = std::time::Instant::now();
        let span = tracing::info_span!("saga.step", otel.name = name, step, order = %record.order.id);
        let result = async {
            match action {
                NextAction::ApprovePayment { attempt } => {
                    self.approve_payment(record, attempt, actor, run).await
                }
                NextAction::RequestSettlement => self.request_settlement(record, actor, run).await,
                NextAction::SendNotification => self.send_notification(record, actor, run).await,
                _ => self.compensate(record, actor, run).await,
            }
        }
        .instrument(span)
        .await;
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
        result
    }

    pub(super) async fn approve_payment(
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
        let mut request = ApprovePayment {
            order_id: record.order.id,
            customer_id: record.order.customer_id.clone(),
            payment_request_id: payment.payment_request_id.clone(),
            amount: payment.amount,
            order_name: record.order.name(),
            authorization: self.authorization(record, &payment).await?,
            scenario: record.context.scenario,
        };
        if let (Some(PaymentAuthorization::KeyIn { card }), Some(keyed)) =
            (&mut request.authorization, run.take_keyed_in())
        {
            *card = Some(keyed.card);
            request.order_name = keyed.order_name;
        }
        let decision = decide_approval(self.charge(&request).await);
        let (outcome, detail) = payment::decide(record, payment, stored, decision, actor, self.clock.now())?;
        match self.commit_step(run, record, outcome).await? {
            Some(progress) => Ok(progress),
            None => self.approval_not_stored(record, attempt, detail, actor, run).await,
        }
    }

    /// Asks the provider to take the money: a card keyed in with this run through the
    /// provider's key-in (declined, nothing sent, where the provider does not allow it),
    /// anything else through the gateway (which never charges a key-in without its card).
    pub(super) async fn charge(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        let Some(PaymentAuthorization::KeyIn { card: Some(card) }) = &request.authorization else {
            return self.payments.approve(request).await;
        };
        let Some(key_in) = &self.key_in else {
            return Ok(ApprovalOutcome::Declined {
                code: KEY_IN_NOT_ALLOWED.into(),
                provider_transaction_id: None,
            });
        };
        let charge = KeyInCharge {
            payment_request_id: request.payment_request_id.clone(),
            amount: request.amount,
            order_name: request.order_name.clone(),
            card: card.clone(),
        };
        key_in.key_in(&charge).await
    }

    /// The approval's outcome commit was refused. Either another runner moved the order on
    /// (a lost race: reload and re-decide) or the answer itself cannot be stored — a
    /// `providerTransactionId` another payment already has. The provider has acted, so the
    /// order must not stay `CREATED` to be approved again and again: the payment becomes
    /// `CONFIRMATION_REQUIRED`, audited, and reconciliation (bounded) or an operator settles it.
    pub(super) async fn approval_not_stored(
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

    pub(super) async fn request_settlement(
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
            merchant_id: record.order.merchant_id,
            payment_id: payment.id,
            amount: payment.amount,
            payment_key: payment.provider_transaction_id.clone(),
            approved_at: payment.approved_at,
            scenario: record.context.scenario,
        };
        let result = self.settlements.settle(&request).await;
        let retry = &self.settings.settlement_retry;
        let outcome = settlement::decide(record, settlement, result, retry, actor, self.clock.now())?;
        let progress = self.commit_step(run, record, outcome).await?;
        if progress.is_some() {
            settlement::warn_if_awaiting_operator(record);
        }
        Ok(progress.unwrap_or(Progress::Reload))
    }

    pub(super) async fn send_notification(
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
        let request = request_of(record, &notification);
        let result = self.notifier.send(&request).await;
        let retry = &self.settings.notification_retry;
        let now = self.clock.now();
        let sent = apply_send_result(record, notification, true, result, retry, actor, now)?;
        let progress = if sent.completed { Progress::Continue } else { Progress::Stop };
        let mut outcome = StepOutcome::new(sent.changes, sent.order, progress);
        outcome.notification = Some(sent.notification);
        Ok(self.commit_step(run, record, outcome).await?.unwrap_or(Progress::Reload))
    }

    pub(super) async fn compensate(
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
