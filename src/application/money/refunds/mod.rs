//! Refunds, full or partial (docs/spec.md §3–§5, §7, §10): each refund is a record of its
//! own with its own amount and its own idempotency key at the provider (`refund-{refundId}`).
//! The payment keeps the sum of its succeeded refunds: `PARTIALLY_REFUNDED` while a balance
//! is left, `REFUNDED` (and the order `CANCELLED`) at 0; `payment.refunded` per refund. A
//! refusal by the provider is recorded on the refund (`FAILED`) and the payment
//! (`refundFailureReason`, `payment.refund_failed`); the balance is unchanged.
//!
//! Never more than the amount, under any concurrency: a refund's intent is the payment's
//! transition to `REFUND_PENDING` (one refund pending at a time) committed with a
//! conditional update on the version it was checked against, and a refund succeeds only
//! through the payment's transition, which refuses an amount past the balance.
//!
//! Money never moves unrecorded: the refund's intent is committed before the provider is
//! asked, and its outcome after. A refund left pending — the process died, the database
//! refused the outcome, the provider could not be reached — is finished by
//! [`Refunds::resolve_pending`] in the worker, by asking again with the same key (the
//! provider answers a key it carried out with its first answer); bounded, then left to an
//! operator. A request asked again with the same request key (an HTTP `Idempotency-Key`, an
//! inbound event's id) is the same refund, never a second one.

mod decide;
mod outcome;
mod provider;
mod request;
mod resolve;

pub use provider::ProviderRefunds;

use std::sync::Arc;

use crate::application::AppError;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::ports::{
    Clock, InboxEntry, OrderRecord, OrderRepository, PaymentGateway, PaymentRepository, SagaRuns, Scenario,
    UnitOfWork,
};
use crate::domain::ids::OrderId;
use crate::domain::order::OrderStatus;
use crate::domain::payment::PaymentStatus;
use crate::domain::retry::RetryPolicy;

/// What to refund.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefundRequest {
    /// Recorded on the refund, in the audit log, and sent to the provider.
    pub reason: Option<String>,
    /// How much, in minor units; `None`: the whole remaining balance.
    pub amount: Option<i64>,
    /// The caller's key for this request: asked again with it, the request is the same
    /// refund (answered as it stands, or finished with the same provider key), never a
    /// second one. An HTTP `Idempotency-Key` scoped to the caller, or an inbound event's id.
    pub request_key: Option<String>,
    /// The inbound message asking for it, recorded in the same transaction as the outcome.
    pub inbox: Option<InboxEntry>,
    /// The inbound message asking for it (its id), carried by the refund's events as
    /// `causationId` (docs/spec.md §12).
    pub causation_id: Option<String>,
    /// Overrides the order's mock refund behaviour if it names one.
    pub scenario: Scenario,
}

/// How a refund ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundOutcome {
    /// The refund succeeded (now, or before, for a request asked again).
    Refunded(OrderRecord),
    /// The provider refused; recorded on the refund and the payment.
    Rejected { record: OrderRecord, reason: String },
    /// The provider's answer is not known (unreachable, timed out): the refund is recorded
    /// and pending, the worker finishes it with the same key — the request is accepted,
    /// and asking again would not make it sooner.
    Pending { record: OrderRecord, reason: String },
}

pub struct Refunds {
    orders: Arc<dyn OrderRepository>,
    pending: Arc<dyn PaymentRepository>,
    uow: Arc<dyn UnitOfWork>,
    payments: Arc<dyn PaymentGateway>,
    clock: Arc<dyn Clock>,
    /// A refund holds the order's saga lease: one runner at a time per order.
    leases: SagaLeases,
    settings: RefundSettings,
}

/// How refunds whose outcome is unknown are followed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundSettings {
    /// The order's saga lease while a refund runs.
    pub lease: chrono::Duration,
    /// Attempts at a refund whose outcome is unknown before an operator must decide, and
    /// their spacing.
    pub retry: RetryPolicy,
}

/// The reason a refund is recorded with when its request gave none.
const DEFAULT_REASON: &str = "refund requested";

fn changed_concurrently() -> AppError {
    AppError::Conflict { code: "REFUND_NOT_ALLOWED", message: "the order changed concurrently".into() }
}

impl Refunds {
    pub fn new(
        orders: Arc<dyn OrderRepository>,
        runs: Arc<dyn SagaRuns>,
        pending: Arc<dyn PaymentRepository>,
        uow: Arc<dyn UnitOfWork>,
        payments: Arc<dyn PaymentGateway>,
        clock: Arc<dyn Clock>,
        settings: RefundSettings,
    ) -> Self {
        let leases = SagaLeases::new(runs, clock.clone(), settings.lease);
        Refunds { orders, pending, uow, payments, clock, leases, settings }
    }

    /// Whether an order can be refunded now: `COMPLETED` with a balance left on an
    /// `APPROVED` or `PARTIALLY_REFUNDED` payment, or with a refund pending (asking again
    /// finishes it first).
    pub fn refundable(record: &OrderRecord) -> bool {
        record.order.status == OrderStatus::Completed
            && record.payment.as_ref().is_some_and(|p| {
                matches!(
                    p.status,
                    PaymentStatus::Approved | PaymentStatus::PartiallyRefunded | PaymentStatus::RefundPending
                )
            })
    }

    /// The order's saga lease, for one runner at a time.
    ///
    /// # Errors
    /// `NotFound` without such an order; `Conflict` `ORDER_BUSY` while another runner holds it.
    /// Why the leases of `order_ids` could not be held: one of them does not exist, or
    /// another runner holds one.
    async fn not_held(&self, order_ids: &[OrderId]) -> AppError {
        for order_id in order_ids {
            match self.orders.get(*order_id).await {
                Ok(Some(_)) => {}
                Ok(None) => return AppError::NotFound("order"),
                Err(err) => return err.into(),
            }
        }
        AppError::order_busy()
    }

    async fn load(&self, order_id: OrderId) -> Result<OrderRecord, AppError> {
        self.orders.get(order_id).await?.ok_or(AppError::NotFound("order"))
    }
}

/// What the provider said to a refund.
enum RefundAnswer {
    Refunded(crate::application::ports::CancelReceipt),
    Refused {
        code: String,
        message: String,
        /// The provider has the payment cancelled already (by a cancel we never recorded).
        already_cancelled: bool,
    },
    /// No answer we can act on (unreachable, timed out, broke the protocol).
    Unknown(String),
    /// Refused: the balance it was sent with is not the provider's (nothing moved).
    StaleBalance(String),
}

/// What an operator found a pending refund to be, in the provider's own books.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorDecision {
    /// The provider made it (its key of the cancel, if the operator has it).
    Made { transaction_key: Option<String> },
    /// The provider never made it: the refund fails, the balance is unchanged.
    NotMade,
}

/// Whether a refund refused for a stale balance may be asked again against the new one
/// (once per request: a provider whose books still disagree after its cancels are recorded
/// is an operator's matter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Restate {
    Once,
    No,
}

/// How one round of [`Refunds::resolve_pending`] went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PendingRefundReport {
    pub refunded: usize,
    pub refused: usize,
    pub still_unknown: usize,
    pub busy: usize,
}
