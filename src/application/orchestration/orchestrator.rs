//! The [`Orchestrator`] itself: what it holds and how it is set. Its use cases are in
//! `service` (placing an order, starting a run) and `run` (one run's steps), each an
//! `impl Orchestrator` of its own.

use std::sync::Arc;

use crate::application::meter::Meter;
use crate::application::orchestration::lease::SagaLeases;
use crate::application::ports::{
    CardKeyIn, Clock, Notifier, OrderRepository, PaymentGateway, PaymentMethodRepository, ProviderCustomers,
    SettlementGateway, UnitOfWork,
};
use crate::domain::retry::RetryPolicy;

/// A run never takes more steps than the saga has; the bound only guards against a bug
/// turning into a loop.
pub(super) const MAX_STEPS_PER_RUN: usize = 8;

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
    /// `http.dialects.commerce.hold_expiry`: how long an order held in `CREATED` (the
    /// commerce dialect's) waits for its client's `orchestrate` before it fails.
    pub hold_expiry: chrono::Duration,
}

/// How the checkout waits for the customer (docs/spec.md §10; `checkout.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckoutSettings {
    /// `payment.toss.confirm_window`: how long an order may wait for its payment.
    pub window: chrono::Duration,
}

pub struct Orchestrator {
    pub(super) orders: Arc<dyn OrderRepository>,
    pub(super) uow: Arc<dyn UnitOfWork>,
    pub(super) payments: Arc<dyn PaymentGateway>,
    pub(super) settlements: Arc<dyn SettlementGateway>,
    pub(super) notifier: Arc<dyn Notifier>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: SagaSettings,
    pub(super) leases: SagaLeases,
    pub(super) meter: Meter,
    /// Saved cards, for a provider that charges registrations with one (Toss's billing).
    pub(super) cards: Option<Arc<dyn PaymentMethodRepository>>,
    /// The provider's customer keys, for its checkout widget (Toss).
    pub(super) customers: Option<Arc<dyn ProviderCustomers>>,
    /// Charges a keyed-in card, where the provider allows it (Toss with a test key).
    pub(super) key_in: Option<Arc<dyn CardKeyIn>>,
}
