//! Unknown payment outcomes and failed compensations, resolved in the background (docs/spec.md §4,
//! §9): reconciliation asks the provider about payments left `CONFIRMATION_REQUIRED` by a
//! timeout; provider callbacks deliver the same answer pushed; compensations whose cancel
//! failed are retried with backoff until their attempts run out and an operator takes over;
//! sagas a dead run left half-way are resumed once their lease has run out (a bounded
//! number of times); refunds whose outcome was never recorded are finished.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;
use tokio_util::sync::CancellationToken;

use crate::application::audit::{self, entity};
use crate::application::error::Chain;
use crate::application::health::LoopProgress;
use crate::application::meter::Meter;
use crate::application::orchestration::{Confirmation, Orchestrator, Reconciled};
use crate::application::ports::{
    Changes, Clock, OrderRecord, OrderRepository, PaymentRepository, UnitOfWork,
};
use crate::application::refunds::{PendingRefundReport, ProviderRefunds, Refunds};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::backoff::doubled;
use crate::domain::ids::OrderId;
use crate::domain::order::{Order, OrderStatus, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};

#[derive(Debug, Clone)]
pub struct ReconciliationSettings {
    /// How often the worker looks (`payment.reconciliation.interval`).
    pub interval: StdDuration,
    /// Look-ups of one payment before an operator must decide
    /// (`payment.reconciliation.max_attempts`).
    pub max_attempts: i32,
    /// Delay before the second look-up; doubled after each.
    pub retry_after: Duration,
    /// Cancel attempts of a failed compensation before an operator must decide.
    pub compensation_max_attempts: usize,
    /// Delay after the first failed cancel; doubled after each.
    pub compensation_backoff: Duration,
    /// A saga unchanged this long without a live lease was abandoned by a dead run.
    pub stall_after: Duration,
    /// Resumes of one stalled saga (backoff doubling from `stall_after`) before an
    /// operator must look.
    pub stall_max_resumes: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    pub resolved: usize,
    pub still_unknown: usize,
    pub exhausted: usize,
    pub busy: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompensationReport {
    pub retried: usize,
    pub compensated: usize,
    pub exhausted: usize,
}

/// A provider callback's claim about a payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCallback {
    pub provider_transaction_id: String,
    pub payment_request_id: String,
    pub approved: bool,
    pub decline_code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallbackResult {
    /// Applied; the saga went on.
    Applied(Box<OrderRecord>),
    /// Already known (a replayed callback, or reconciliation was first): nothing changed.
    Duplicate,
    /// Another runner holds the order right now: the provider should retry.
    Busy,
}

/// A provider's notice that one of its payments changed: a hint that names it, no more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentNotice {
    /// Toss's `paymentKey`.
    pub payment_key: String,
    /// Toss's `orderId` (our `paymentRequestId`), when the notice has one.
    pub order_id: Option<String>,
}

/// What a notice led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeOutcome {
    /// What the provider said was applied (an outcome resolved, a dashboard cancel recorded).
    Applied,
    /// Nothing to change (a duplicate, an unknown payment, nothing new at the provider).
    Unchanged,
    /// The caller's budget for notices of this kind is spent: nothing was asked or changed
    /// (the provider retries).
    Throttled,
}

/// What a notice names, as far as this service knows, before anything is asked or audited:
/// the caller's budget for each is its own (docs/operations.md, "Toss's webhooks").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeSubject<'a> {
    /// A payment we have: asking the provider about it costs a provider call.
    Known(&'a str),
    /// A payment we do not have: answered from our database alone.
    Unknown,
}

/// At most one `CALLBACK_REJECTED` audit row per this long (per process).
pub const CALLBACK_AUDIT_WINDOW: Duration = Duration::seconds(10);

pub struct Recovery {
    /// When the last rejected callback was audited, and how many were refused since.
    callback_audit: std::sync::Mutex<(Option<chrono::DateTime<chrono::Utc>>, u64)>,
    /// The same for ignored payment webhooks.
    webhook_audit: std::sync::Mutex<(Option<chrono::DateTime<chrono::Utc>>, u64)>,
    orchestrator: Arc<Orchestrator>,
    refunds: Arc<Refunds>,
    payments: Arc<dyn PaymentRepository>,
    orders: Arc<dyn OrderRepository>,
    uow: Arc<dyn UnitOfWork>,
    clock: Arc<dyn Clock>,
    settings: ReconciliationSettings,
    meter: Meter,
    /// Where each round's success or failure is reported (the worker's readiness).
    progress: Option<Arc<LoopProgress>>,
}

/// The recovery loop's name in the worker's readiness.
const RECOVERY_LOOP: &str = "payment recovery";

impl Recovery {
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        refunds: Arc<Refunds>,
        payments: Arc<dyn PaymentRepository>,
        orders: Arc<dyn OrderRepository>,
        uow: Arc<dyn UnitOfWork>,
        clock: Arc<dyn Clock>,
        settings: ReconciliationSettings,
    ) -> Self {
        Recovery {
            callback_audit: std::sync::Mutex::default(),
            webhook_audit: std::sync::Mutex::default(),
            orchestrator,
            refunds,
            payments,
            orders,
            uow,
            clock,
            settings,
            meter: Meter::default(),
            progress: None,
        }
    }

    /// Records this service's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.meter = meter;
        self
    }

    /// Reports each round to `progress`: a round any of whose parts failed is a failure.
    pub fn with_progress(mut self, progress: Arc<LoopProgress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// One look-up for every unknown payment that is due.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn reconcile_due(&self) -> Result<ReconcileReport, AppError> {
        let actor = Actor::system("reconciliation");
        let due = self
            .payments
            .awaiting_confirmation(
                PaymentStatus::ConfirmationRequired,
                self.clock.now(),
                self.settings.max_attempts,
                100,
            )
            .await?;
        let mut report = ReconcileReport::default();
        for payment in due {
            match self.reconcile(&actor, payment.order_id).await? {
                Reconciled::Resolved(_) => report.resolved += 1,
                Reconciled::StillUnknown => report.still_unknown += 1,
                Reconciled::Exhausted => report.exhausted += 1,
                Reconciled::Busy | Reconciled::NotPending => report.busy += 1,
            }
        }
        Ok(report)
    }

    /// Asks the provider about one unknown outcome and applies its answer (bounded attempts).
    async fn reconcile(&self, actor: &Actor, order_id: OrderId) -> Result<Reconciled, AppError> {
        self.orchestrator
            .reconcile_payment(actor, order_id, self.settings.max_attempts, self.settings.retry_after)
            .await
    }

    /// Retries the compensations whose cancel failed, with backoff; past the attempts,
    /// leaves them (once audited) to an operator.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn retry_compensations(&self) -> Result<CompensationReport, AppError> {
        let actor = Actor::system("compensation-retry");
        let mut report = CompensationReport::default();
        for order_id in self.payments.awaiting_compensation(100).await? {
            let Some(record) = self.orders.get(order_id).await? else {
                continue;
            };
            if !record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::Approved) {
                continue;
            }
            let failures = compensation_failures(&record);
            let Some(last) = failures.last() else {
                // Never attempted (a crash between the settlement failure and compensation).
                report.retried += 1;
                if self.orchestrator.orchestrate(&actor, order_id).await?.order.status
                    == OrderStatus::Cancelled
                {
                    report.compensated += 1;
                }
                continue;
            };
            let now = self.clock.now();
            if failures.len() >= self.settings.compensation_max_attempts {
                let audited = self.orders.audit_for(entity::ORDER, &order_id.to_string()).await?;
                if !audited.iter().any(|a| a.action == AuditAction::CompensationExhausted) {
                    let mut changes = Changes::default();
                    let detail = format!(
                        "payment cancel failed {} times; the order stays FAILED with its payment APPROVED until an operator acts",
                        failures.len()
                    );
                    changes.audit.push(audit::record(
                        AuditAction::CompensationExhausted,
                        entity::ORDER,
                        order_id,
                        &actor,
                        Some(detail),
                        now,
                    ));
                    self.uow.commit(changes).await?;
                    report.exhausted += 1;
                    self.meter.record(|| metrics::counter!("compensations_exhausted_total").increment(1));
                }
                continue;
            }
            let n = u32::try_from(failures.len()).unwrap_or(u32::MAX).saturating_sub(1);
            let due = last.created_at + doubled(self.settings.compensation_backoff, n, Duration::days(1));
            if due > now {
                continue;
            }
            report.retried += 1;
            let after = self.orchestrator.orchestrate(&actor, order_id).await?;
            if after.order.status == OrderStatus::Cancelled {
                report.compensated += 1;
            }
        }
        Ok(report)
    }

    /// Resumes sagas a dead run left half-way (crash between steps, or a killed consumer
    /// whose redelivery found the lease still held). Returns how many were resumed.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    ///
    /// Each resume is counted and audited (`SAGA_RESUMED`); the next one waits twice as
    /// long. A saga still half-way after `stall_max_resumes` resumes (a provider that keeps
    /// answering what cannot be stored, a bug) is left alone, audited
    /// `SAGA_RECOVERY_EXHAUSTED` and listed by [`Self::stalled_for_operator`].
    pub async fn resume_stalled(&self) -> Result<usize, AppError> {
        let actor = Actor::system("saga-recovery");
        let now = self.clock.now();
        let max = self.settings.stall_max_resumes;
        let stalled = self.orders.stalled(now - self.settings.stall_after, now, max, 100).await?;
        for (order_id, resumes) in &stalled {
            let resumes = *resumes + 1;
            let backoff =
                doubled(self.settings.stall_after, resumes.max(0).unsigned_abs(), Duration::days(1));
            self.orders.note_resume(*order_id, now + backoff).await?;
            let before = self.orders.get(*order_id).await?.map(|r| r.order.status);
            // One order that fails again must not hold up the others.
            let (after, why) = match self.orchestrator.orchestrate(&actor, *order_id).await {
                Ok(record) => (Some(record.order.status), String::new()),
                Err(err) => {
                    tracing::warn!(order = %order_id, error = %Chain(&err), "resuming a stalled saga failed");
                    (before, format!(" ({})", Chain(&err)))
                }
            };
            let after = after.map_or("-", |s| s.as_str());
            let still_stalled = before.map(|s| s.as_str()) == Some(after);
            let (action, detail) = if still_stalled && resumes >= max {
                (
                    AuditAction::SagaRecoveryExhausted,
                    format!(
                        "still {after} after {resumes} resumes{why}; left for an operator (GET /api/admin/orders/stalled)"
                    ),
                )
            } else {
                (
                    AuditAction::SagaResumed,
                    format!(
                        "resume {resumes} of {max}: {} -> {after}{why}",
                        before.map_or("-", |s| s.as_str())
                    ),
                )
            };
            let mut changes = Changes::default();
            changes.audit.push(audit::record(action, entity::ORDER, order_id, &actor, Some(detail), now));
            self.uow.commit(changes).await?;
        }
        if !stalled.is_empty() {
            tracing::warn!(resumed = stalled.len(), "resumed sagas a dead run had left half-way");
        }
        Ok(stalled.len())
    }

    /// Orders whose compensation failed on every retry: the payment is still `APPROVED` for
    /// a `FAILED` order (money taken for nothing) and only an operator can settle it.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn compensations_exhausted(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        actor.require_admin()?;
        let mut exhausted = Vec::new();
        for order_id in self.payments.awaiting_compensation(1000).await? {
            let Some(record) = self.orders.get(order_id).await? else {
                continue;
            };
            let approved = record.payment.as_ref().is_some_and(|p| p.status == PaymentStatus::Approved);
            if approved && compensation_failures(&record).len() >= self.settings.compensation_max_attempts {
                exhausted.push(record.order);
            }
        }
        Ok(exhausted)
    }

    /// Orders whose stalled-saga recovery ran out of resumes, for operators.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin; `Unavailable` when the database fails.
    pub async fn stalled_for_operator(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        actor.require_admin()?;
        Ok(self.orders.stalled_for_operator(self.settings.stall_max_resumes, 100).await?)
    }

    /// A provider callback: the final outcome of a payment, pushed.
    ///
    /// # Errors
    /// `NotFound` for an unknown `paymentRequestId`; `Unavailable` when the database fails.
    pub async fn handle_callback(&self, callback: ProviderCallback) -> Result<CallbackResult, AppError> {
        let actor = Actor::system("payment-callback");
        let known = self.payments.by_provider_transaction(&callback.provider_transaction_id).await?;
        if known.is_some_and(|p| p.status != PaymentStatus::ConfirmationRequired) {
            return Ok(CallbackResult::Duplicate);
        }
        let payment = self
            .payments
            .by_request_id(&callback.payment_request_id)
            .await?
            .ok_or(AppError::NotFound("payment"))?;
        if payment.status != PaymentStatus::ConfirmationRequired {
            let mut changes = Changes::default();
            let detail = format!(
                "callback for {} ({}) after the payment was already {}",
                callback.payment_request_id, callback.provider_transaction_id, payment.status
            );
            changes.audit.push(audit::record(
                AuditAction::CallbackDuplicate,
                entity::ORDER,
                payment.order_id,
                &actor,
                Some(detail),
                self.clock.now(),
            ));
            self.uow.commit(changes).await?;
            return Ok(CallbackResult::Duplicate);
        }
        let confirmation = if callback.approved {
            Confirmation::Approved { provider_transaction_id: callback.provider_transaction_id }
        } else {
            Confirmation::Declined {
                code: callback.decline_code.unwrap_or_else(|| "DECLINED".into()),
                provider_transaction_id: Some(callback.provider_transaction_id),
            }
        };
        Ok(
            match self
                .orchestrator
                .confirm_payment(&actor, payment.order_id, confirmation, "callback")
                .await?
            {
                Some(record) => CallbackResult::Applied(Box::new(record)),
                None => CallbackResult::Busy,
            },
        )
    }

    /// Records a callback refused before reading it (bad or stale signature).
    ///
    /// Every rejection is counted (`payment_callbacks_rejected_total`), but an
    /// unauthenticated caller must not be able to grow the audit log at will: at most one
    /// `CALLBACK_REJECTED` row per [`CALLBACK_AUDIT_WINDOW`] per process, saying how many
    /// were refused since the last one.
    pub async fn reject_callback(&self, reason: &str) {
        self.meter.record(|| metrics::counter!("payment_callbacks_rejected_total").increment(1));
        self.bounded_audit(&self.callback_audit, AuditAction::CallbackRejected, "payment-callback", reason)
            .await;
    }

    /// At most one audit row of `action` per [`CALLBACK_AUDIT_WINDOW`] per process (anyone can
    /// call the endpoints that write them), saying how many were left out since the last.
    async fn bounded_audit(
        &self,
        window: &std::sync::Mutex<(Option<chrono::DateTime<chrono::Utc>>, u64)>,
        action: AuditAction,
        component: &str,
        reason: &str,
    ) {
        let now = self.clock.now();
        let suppressed = {
            let mut window = window.lock().unwrap_or_else(|e| e.into_inner());
            match window.0 {
                Some(last) if now - last < CALLBACK_AUDIT_WINDOW => {
                    window.1 += 1;
                    return;
                }
                _ => {
                    window.0 = Some(now);
                    std::mem::take(&mut window.1)
                }
            }
        };
        let actor = Actor::system(component);
        let mut changes = Changes::default();
        let mut detail: String = reason.chars().take(200).collect();
        if suppressed > 0 {
            detail.push_str(&format!(" (and {suppressed} more since the last audit row)"));
        }
        changes.audit.push(audit::record(action, entity::PAYMENT_CALLBACK, "-", &actor, Some(detail), now));
        if let Err(err) = self.uow.commit(changes).await {
            tracing::warn!(error = %Chain(&err), "could not write a bounded audit row");
        }
    }

    /// A provider's notice that a payment changed (Toss's `PAYMENT_STATUS_CHANGED` webhook,
    /// docs/spec.md §10). Never trusted: it only names the payment; what the provider says
    /// when asked is what applies — an unknown outcome is reconciled now, a payment cancelled
    /// in the provider's dashboard is recorded as a refund by `provider`. A notice for a
    /// payment we do not have, or that changes nothing, changes nothing (its audit bounded).
    /// `admit` is asked once the payment is looked up, with what the notice names: `false`
    /// ends it `Throttled`, before the provider is asked or anything audited — so a flood
    /// of made-up keys and the notices of real payments can be given budgets of their own.
    ///
    /// # Errors
    /// `Conflict` `ORDER_BUSY` while another runner holds the order; `Unavailable` when the
    /// provider or the database fails (the provider retries its webhook).
    pub async fn payment_notice(
        &self,
        notice: PaymentNotice,
        admit: impl FnOnce(NoticeSubject<'_>) -> bool,
    ) -> Result<NoticeOutcome, AppError> {
        let mut payment = self.payments.by_provider_transaction(&notice.payment_key).await?;
        if payment.is_none()
            && let Some(order_id) = &notice.order_id
        {
            payment = self.payments.by_request_id(order_id).await?;
        }
        let subject = match &payment {
            Some(payment) => NoticeSubject::Known(payment.payment_request_id.as_str()),
            None => NoticeSubject::Unknown,
        };
        if !admit(subject) {
            return Ok(NoticeOutcome::Throttled);
        }
        let Some(payment) = payment else {
            self.bounded_audit(
                &self.webhook_audit,
                AuditAction::WebhookIgnored,
                "payment-webhook",
                "a notice of a payment we do not have",
            )
            .await;
            return Ok(NoticeOutcome::Unchanged);
        };
        let actor = Actor::system("payment-webhook");
        match payment.status {
            PaymentStatus::ConfirmationRequired => {
                Ok(match self.reconcile(&actor, payment.order_id).await? {
                    Reconciled::Resolved(_) => NoticeOutcome::Applied,
                    Reconciled::Busy => {
                        return Err(AppError::order_busy());
                    }
                    _ => NoticeOutcome::Unchanged,
                })
            }
            PaymentStatus::Approved | PaymentStatus::PartiallyRefunded => {
                Ok(match self.refunds.record_provider_refunds(payment.order_id).await? {
                    ProviderRefunds::Recorded(_) => NoticeOutcome::Applied,
                    ProviderRefunds::Nothing => NoticeOutcome::Unchanged,
                })
            }
            _ => Ok(NoticeOutcome::Unchanged),
        }
    }

    /// Payments whose outcome is still unknown (attempts left or not), for operators: an
    /// approval (`CONFIRMATION_REQUIRED`) or a refund (`REFUND_PENDING`) the provider has
    /// not told us the end of.
    ///
    /// # Errors
    /// `Forbidden` for a non-admin.
    pub async fn unconfirmed(&self, actor: &Actor) -> Result<Vec<Payment>, AppError> {
        actor.require_admin()?;
        let mut payments = self.payments.with_status(PaymentStatus::ConfirmationRequired, 100).await?;
        payments.extend(self.payments.with_status(PaymentStatus::RefundPending, 100).await?);
        Ok(payments)
    }

    /// What waits for an operator, by kind, for `/metrics` (`operator_attention{kind}`):
    /// approvals and refunds whose outcome stayed unknown after every attempt, and sagas
    /// stalled-saga recovery gave up on. Counted up to 1 000 of each.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn needs_operator(&self) -> Result<Vec<(&'static str, usize)>, AppError> {
        let max = self.settings.max_attempts;
        let exhausted =
            |payments: Vec<Payment>| payments.iter().filter(|p| p.reconcile_attempts >= max).count();
        let confirmations =
            exhausted(self.payments.with_status(PaymentStatus::ConfirmationRequired, 1000).await?);
        let refunds = exhausted(self.payments.with_status(PaymentStatus::RefundPending, 1000).await?);
        let stalled = self.orders.stalled_for_operator(self.settings.stall_max_resumes, 1000).await?.len();
        Ok(vec![
            ("payment_unconfirmed", confirmations),
            ("refund_unresolved", refunds),
            ("saga_stalled", stalled),
        ])
    }

    /// Every interval: reconcile due payments, resume stalled sagas, fail orders unpaid past
    /// their payment window, finish pending refunds, retry due compensations.
    pub async fn run_until_stopped(&self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tick.tick() => {
                    // The first failure of the round, for readiness.
                    let mut failed: Option<String> = None;
                    let mut note = |what: &str, err: &AppError| {
                        tracing::error!(error = %Chain(err), "{what} failed");
                        failed.get_or_insert_with(|| format!("{what}: {}", Chain(err)));
                    };
                    match self.reconcile_due().await {
                        Ok(r) if r != ReconcileReport::default() => tracing::info!(?r, "payment reconciliation"),
                        Ok(_) => {}
                        Err(err) => note("payment reconciliation", &err),
                    }
                    if let Err(err) = self.resume_stalled().await {
                        note("saga recovery", &err);
                    }
                    match self.orchestrator.expire_unpaid().await {
                        Ok(0) => {}
                        Ok(expired) => tracing::info!(expired, "orders unpaid past the payment window failed"),
                        Err(err) => note("expiring unpaid orders", &err),
                    }
                    match self.refunds.resolve_pending().await {
                        Ok(r) if r != PendingRefundReport::default() => tracing::info!(?r, "pending refunds"),
                        Ok(_) => {}
                        Err(err) => note("pending refunds", &err),
                    }
                    match self.retry_compensations().await {
                        Ok(r) if r != CompensationReport::default() => tracing::info!(?r, "compensation retries"),
                        Ok(_) => {}
                        Err(err) => note("compensation retries", &err),
                    }
                    if let Some(progress) = &self.progress {
                        match failed {
                            None => progress.ok(RECOVERY_LOOP),
                            Some(why) => progress.failed(RECOVERY_LOOP, why),
                        }
                    }
                }
            }
        }
    }
}

/// The failed cancel attempts of an order's compensation, oldest first.
fn compensation_failures(record: &OrderRecord) -> Vec<&crate::application::ports::StepRecord> {
    record
        .steps
        .iter()
        .filter(|s| s.step == SagaStep::Compensation && s.status == StepStatus::Failed)
        .collect()
}
