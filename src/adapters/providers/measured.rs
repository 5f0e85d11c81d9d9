//! Every provider call timed and counted: `provider_call_duration_seconds{provider,
//! operation,outcome}` (a histogram, so its `_count` is the call count). A decorator around
//! any gateway, so that the simulated and the external providers are measured alike.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use tracing::Instrument;

use crate::application::meter::Meter;
use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, CancelError, CancelPayment, CancelReceipt, CardKeyIn, GatewayError,
    IssuedCard, KeyInCharge, LookupOutcome, NotificationRequest, Notifier, NotifyFailure, PaymentGateway,
    ProviderCustomers, ProviderLedger, Scenario, SettlementGateway, SettlementOutcome, SettlementRequest,
};

/// A gateway whose calls are measured, labelled `provider` (`mock`, `external`,
/// `simulated`).
pub struct Measured<T: ?Sized> {
    inner: Arc<T>,
    provider: &'static str,
    meter: Meter,
}

impl<T: ?Sized> Measured<T> {
    pub fn new(inner: Arc<T>, provider: &'static str, meter: Meter) -> Self {
        Measured { inner, provider, meter }
    }

    /// The call's span, a child of the saga step's.
    fn span(&self, operation: &'static str) -> tracing::Span {
        tracing::info_span!("provider.call", otel.name = %format!("{} {operation}", self.provider), provider = self.provider, operation)
    }

    fn record(&self, operation: &'static str, outcome: &'static str, started: Instant) {
        let elapsed = started.elapsed().as_secs_f64();
        let provider = self.provider;
        self.meter.record(|| {
            metrics::histogram!(
                "provider_call_duration_seconds",
                "provider" => provider,
                "operation" => operation,
                "outcome" => outcome
            )
            .record(elapsed)
        });
    }
}

fn gateway_error(err: &GatewayError) -> &'static str {
    match err {
        GatewayError::Rejected { .. } => "rejected",
        GatewayError::Unavailable(_) => "unavailable",
    }
}

/// A cancel's error label: its own refusals are refusals.
fn cancel_error(err: &CancelError) -> &'static str {
    match err {
        CancelError::Gateway(err) => gateway_error(err),
        CancelError::AlreadyCancelled { .. } | CancelError::StaleBalance { .. } => "rejected",
    }
}

/// A charge's outcome label.
fn charged(result: &Result<ApprovalOutcome, GatewayError>) -> &'static str {
    match result {
        Ok(ApprovalOutcome::Approved { .. }) => "approved",
        Ok(ApprovalOutcome::Declined { .. }) => "declined",
        Ok(ApprovalOutcome::Unknown { .. }) => "unknown",
        Err(err) => gateway_error(err),
    }
}

#[async_trait]
impl PaymentGateway for Measured<dyn PaymentGateway> {
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        let started = Instant::now();
        let result = self.inner.approve(request).instrument(self.span("approve")).await;
        let outcome = charged(&result);
        self.record("approve", outcome, started);
        result
    }

    async fn lookup(
        &self,
        payment_request_id: &str,
        scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError> {
        let started = Instant::now();
        let result = self.inner.lookup(payment_request_id, scenario).instrument(self.span("lookup")).await;
        let outcome = match &result {
            Ok(LookupOutcome::Approved { .. }) => "approved",
            Ok(LookupOutcome::Declined { .. }) => "declined",
            Ok(LookupOutcome::Cancelled { .. }) => "cancelled",
            Ok(LookupOutcome::PartlyCancelled { .. }) => "partly_cancelled",
            Ok(LookupOutcome::NotFound) => "not_found",
            Err(err) => gateway_error(err),
        };
        self.record("lookup", outcome, started);
        result
    }

    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, CancelError> {
        let started = Instant::now();
        let result = self.inner.cancel(request).instrument(self.span("cancel")).await;
        let outcome = match &result {
            Ok(_) => "cancelled",
            Err(err) => cancel_error(err),
        };
        self.record("cancel", outcome, started);
        result
    }
}

#[async_trait]
impl ProviderLedger for Measured<dyn ProviderLedger> {
    async fn ledger_page(
        &self,
        day: chrono::NaiveDate,
        after: Option<String>,
    ) -> Result<crate::application::ports::LedgerPage, GatewayError> {
        let started = Instant::now();
        let result = self.inner.ledger_page(day, after).instrument(self.span("ledger")).await;
        let outcome = match &result {
            Ok(_) => "read",
            Err(err) => gateway_error(err),
        };
        self.record("ledger", outcome, started);
        result
    }

    async fn settlement_page(
        &self,
        day: chrono::NaiveDate,
        page: u32,
    ) -> Result<crate::application::ports::SettlementPage, GatewayError> {
        let started = Instant::now();
        let result = self.inner.settlement_page(day, page).instrument(self.span("settlements")).await;
        let outcome = match &result {
            Ok(_) => "read",
            Err(err) => gateway_error(err),
        };
        self.record("settlements", outcome, started);
        result
    }
}

#[async_trait]
impl ProviderCustomers for Measured<dyn ProviderCustomers> {
    fn customer_key(&self, customer_id: &str) -> String {
        self.inner.customer_key(customer_id)
    }

    async fn issue_billing_key(
        &self,
        auth_key: &str,
        customer_key: &str,
    ) -> Result<IssuedCard, GatewayError> {
        let started = Instant::now();
        let result =
            self.inner.issue_billing_key(auth_key, customer_key).instrument(self.span("issue")).await;
        let outcome = match &result {
            Ok(_) => "issued",
            Err(err) => gateway_error(err),
        };
        self.record("issue", outcome, started);
        result
    }
}

#[async_trait]
impl CardKeyIn for Measured<dyn CardKeyIn> {
    async fn key_in(&self, charge: &KeyInCharge) -> Result<ApprovalOutcome, GatewayError> {
        let started = Instant::now();
        let result = self.inner.key_in(charge).instrument(self.span("key_in")).await;
        let outcome = charged(&result);
        self.record("key_in", outcome, started);
        result
    }
}

#[async_trait]
impl SettlementGateway for Measured<dyn SettlementGateway> {
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError> {
        let started = Instant::now();
        let result = self.inner.settle(request).instrument(self.span("settle")).await;
        let outcome = match &result {
            Ok(SettlementOutcome::Succeeded) => "succeeded",
            Ok(SettlementOutcome::Failed { .. }) => "failed",
            Ok(SettlementOutcome::Retry { .. }) => "unavailable",
            Err(err) => gateway_error(err),
        };
        self.record("settle", outcome, started);
        result
    }
}

#[async_trait]
impl Notifier for Measured<dyn Notifier> {
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure> {
        let started = Instant::now();
        let result = self.inner.send(request).instrument(self.span("send")).await;
        self.record("send", if result.is_ok() { "sent" } else { "failed" }, started);
        result
    }
}
