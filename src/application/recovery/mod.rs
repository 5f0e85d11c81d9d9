//! Unknown payment outcomes and failed compensations, resolved in the background (docs/spec.md §4,
//! §9): reconciliation asks the provider about payments left `CONFIRMATION_REQUIRED` by a
//! timeout; provider callbacks deliver the same answer pushed; compensations whose cancel
//! failed are retried with backoff until their attempts run out and an operator takes over;
//! sagas a dead run left half-way are resumed once their lease has run out (a bounded
//! number of times); refunds whose outcome was never recorded are finished.

mod callbacks;
mod compensations;
pub mod jobs;
mod reconciliation;
mod stalled;

pub use compensations::CompensationRecovery;
pub use stalled::SagaRecovery;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::Duration;

use crate::application::Actor;
use crate::application::AppError;
use crate::application::meter::Meter;
use crate::application::money::refunds::Refunds;
use crate::application::orchestration::Orchestrator;
use crate::application::ports::{
    Clock, OrderRecord, OrderRepository, PaymentRepository, SagaRuns, UnitOfWork,
};
use crate::domain::order::Order;
use crate::domain::order::{SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::retry::RetryPolicy;

#[derive(Debug, Clone)]
pub struct ReconciliationSettings {
    /// How often the worker looks (`payment.reconciliation.interval`).
    pub interval: StdDuration,
    /// Look-ups of one payment whose outcome is unknown before an operator must decide
    /// (`payment.reconciliation.max_attempts`), and their spacing.
    pub lookups: RetryPolicy,
    /// Cancel attempts of a failed compensation before an operator must decide, and their
    /// spacing.
    pub compensations: RetryPolicy,
    /// Resumes of a stalled saga before an operator must look. A saga unchanged for
    /// `backoff_base` without a live lease was abandoned by a dead run; it is resumed, again
    /// after a doubling backoff.
    pub stalled: RetryPolicy,
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
    uow: Arc<dyn UnitOfWork>,
    clock: Arc<dyn Clock>,
    settings: ReconciliationSettings,
    meter: Meter,
    /// Stalled sagas, with only what they need (their own job's).
    sagas: Arc<SagaRecovery>,
    /// Failed compensations, with only what they need (their own job's).
    compensations: Arc<CompensationRecovery>,
}

impl Recovery {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        orchestrator: Arc<Orchestrator>,
        refunds: Arc<Refunds>,
        payments: Arc<dyn PaymentRepository>,
        orders: Arc<dyn OrderRepository>,
        runs: Arc<dyn SagaRuns>,
        uow: Arc<dyn UnitOfWork>,
        clock: Arc<dyn Clock>,
        settings: ReconciliationSettings,
    ) -> Self {
        let sagas = Arc::new(SagaRecovery {
            orchestrator: orchestrator.clone(),
            orders: orders.clone(),
            runs,
            uow: uow.clone(),
            clock: clock.clone(),
            policy: settings.stalled,
        });
        let compensations = Arc::new(CompensationRecovery {
            orchestrator: orchestrator.clone(),
            orders,
            payments: payments.clone(),
            uow: uow.clone(),
            clock: clock.clone(),
            policy: settings.compensations,
            meter: Meter::default(),
        });
        Recovery {
            callback_audit: std::sync::Mutex::default(),
            webhook_audit: std::sync::Mutex::default(),
            orchestrator,
            refunds,
            payments,
            uow,
            clock,
            settings,
            meter: Meter::default(),
            sagas,
            compensations,
        }
    }

    /// Records this service's metrics into `meter` (the app's registry).
    pub fn with_meter(mut self, meter: Meter) -> Self {
        self.compensations =
            Arc::new(CompensationRecovery { meter: meter.clone(), ..(*self.compensations).clone() });
        self.meter = meter;
        self
    }

    /// The stalled sagas' part, for its job.
    pub fn sagas(&self) -> &Arc<SagaRecovery> {
        &self.sagas
    }

    /// The failed compensations' part, for its job.
    pub fn compensations(&self) -> &Arc<CompensationRecovery> {
        &self.compensations
    }

    /// See [`SagaRecovery::resume_stalled`].
    ///
    /// # Errors
    /// As it says.
    pub async fn resume_stalled(&self) -> Result<usize, AppError> {
        self.sagas.resume_stalled().await
    }

    /// See [`SagaRecovery::stalled_for_operator`].
    ///
    /// # Errors
    /// As it says.
    pub async fn stalled_for_operator(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        self.sagas.stalled_for_operator(actor).await
    }

    /// See [`CompensationRecovery::retry_compensations`].
    ///
    /// # Errors
    /// As it says.
    pub async fn retry_compensations(&self) -> Result<CompensationReport, AppError> {
        self.compensations.retry_compensations().await
    }

    /// See [`CompensationRecovery::compensations_exhausted`].
    ///
    /// # Errors
    /// As it says.
    pub async fn compensations_exhausted(&self, actor: &Actor) -> Result<Vec<Order>, AppError> {
        self.compensations.compensations_exhausted(actor).await
    }

    /// What waits for an operator, by kind, for `/metrics` (`operator_attention{kind}`):
    /// approvals and refunds whose outcome stayed unknown after every attempt, and sagas
    /// stalled-saga recovery gave up on. Counted up to 1 000 of each.
    ///
    /// # Errors
    /// `Unavailable` when the database fails.
    pub async fn needs_operator(&self) -> Result<Vec<(&'static str, usize)>, AppError> {
        let max = self.settings.lookups.max_attempts;
        let exhausted =
            |payments: Vec<Payment>| payments.iter().filter(|p| p.reconcile_attempts >= max).count();
        let confirmations =
            exhausted(self.payments.with_status(PaymentStatus::ConfirmationRequired, 1000).await?);
        let refunds = exhausted(self.payments.with_status(PaymentStatus::RefundPending, 1000).await?);
        let stalled = self.sagas.waiting_for_operator(1000).await?;
        Ok(vec![
            ("payment_unconfirmed", confirmations),
            ("refund_unresolved", refunds),
            ("saga_stalled", stalled),
        ])
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
