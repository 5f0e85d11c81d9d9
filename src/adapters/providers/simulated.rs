//! Simulated providers (mode `mock`): they succeed unless the order's scenario asks
//! otherwise (docs/spec.md §4), and they behave like real ones where it matters — the payment
//! simulator is idempotent by `paymentRequestId`, and a timed-out approval is remembered
//! as taken, so reconciliation finds it.
//!
//! Each counts its calls ([`ProviderCalls`]), so tests can prove that no step ever calls
//! a provider twice.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;

use crate::application::ports::{
    ApprovalOutcome, ApprovePayment, Behaviour, CancelError, CancelPayment, CancelReceipt, GatewayError,
    LookupOutcome, NotificationRequest, Notifier, NotifyFailure, PaymentGateway, Scenario, SettlementGateway,
    SettlementOutcome, SettlementRequest,
};
use crate::domain::notification::FailurePolicy;

/// Call counters of the simulated providers, and the idempotency keys whose effect they
/// carried out (a call repeated with a known key has no second effect).
#[derive(Debug, Default)]
pub struct ProviderCalls {
    pub approvals: AtomicU64,
    pub lookups: AtomicU64,
    pub cancels: AtomicU64,
    pub settlements: AtomicU64,
    pub notifications: AtomicU64,
    effects: Mutex<HashSet<String>>,
}

impl ProviderCalls {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::SeqCst)
    }

    /// Records the effect of `key`; `false` if it was carried out before.
    fn effect(&self, key: String) -> bool {
        self.effects.lock().unwrap_or_else(|e| e.into_inner()).insert(key)
    }

    /// How many distinct effects were carried out under keys starting with `prefix`
    /// (`settle-`, `notify-`, `cancel-`).
    pub fn effects(&self, prefix: &str) -> usize {
        self.effects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|k| k.starts_with(prefix))
            .count()
    }
}

#[derive(Default)]
struct Cancels {
    /// The payments (by `paymentRequestId`) it cancelled anything of.
    payments: HashSet<String>,
    by_key: HashMap<String, CancelReceipt>,
}

#[derive(Default)]
pub struct SimulatedPaymentGateway {
    /// What the "provider" decided per `paymentRequestId` (its idempotency store).
    decided: Mutex<HashMap<String, ApprovalOutcome>>,
    /// What it cancelled of each payment (by `paymentRequestId`), and the answer it gave each
    /// cancel's key (a key asked again gets the same answer, never a second cancel).
    cancelled: Mutex<Cancels>,
    calls: std::sync::Arc<ProviderCalls>,
}

impl SimulatedPaymentGateway {
    pub fn new(calls: std::sync::Arc<ProviderCalls>) -> Self {
        SimulatedPaymentGateway { decided: Mutex::default(), cancelled: Mutex::default(), calls }
    }

    fn decided(&self) -> std::sync::MutexGuard<'_, HashMap<String, ApprovalOutcome>> {
        // A poisoned lock only means another call panicked mid-insert; the map is intact.
        self.decided.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn transaction_id() -> String {
    format!("sim-{}", uuid::Uuid::now_v7().simple())
}

#[async_trait]
impl PaymentGateway for SimulatedPaymentGateway {
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError> {
        self.calls.approvals.fetch_add(1, Ordering::SeqCst);
        let mut decided = self.decided();
        if let Some(previous) = decided.get(&request.payment_request_id) {
            // Same Idempotency-Key: the first answer, never a second charge.
            return Ok(match previous {
                ApprovalOutcome::Unknown { .. } => {
                    ApprovalOutcome::Approved { provider_transaction_id: transaction_id() }
                }
                other => other.clone(),
            });
        }
        let outcome = match request.scenario.payment {
            Some(Behaviour::Decline) => ApprovalOutcome::Declined {
                code: "CARD_DECLINED".into(),
                provider_transaction_id: Some(transaction_id()),
            },
            Some(Behaviour::Timeout) => {
                ApprovalOutcome::Unknown { reason: "simulated provider timeout".into() }
            }
            _ => ApprovalOutcome::Approved { provider_transaction_id: transaction_id() },
        };
        decided.insert(request.payment_request_id.clone(), outcome.clone());
        Ok(outcome)
    }

    async fn lookup(
        &self,
        payment_request_id: &str,
        _scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError> {
        self.calls.lookups.fetch_add(1, Ordering::SeqCst);
        let mut decided = self.decided();
        let cancelled =
            self.cancelled.lock().unwrap_or_else(|e| e.into_inner()).payments.contains(payment_request_id);
        Ok(match decided.get(payment_request_id).cloned() {
            None => LookupOutcome::NotFound,
            Some(ApprovalOutcome::Approved { provider_transaction_id }) if cancelled => {
                // It keeps no amounts per payment but what it cancelled: partly cancelled
                // payments read as cancelled; the refund path never asks it, it uses the key.
                LookupOutcome::Cancelled { provider_transaction_id, cancels: Vec::new() }
            }
            // The simulated provider took the timed-out request and approved it.
            Some(ApprovalOutcome::Unknown { .. }) => {
                let provider_transaction_id = transaction_id();
                decided.insert(
                    payment_request_id.to_owned(),
                    ApprovalOutcome::Approved { provider_transaction_id: provider_transaction_id.clone() },
                );
                LookupOutcome::Approved { provider_transaction_id }
            }
            Some(ApprovalOutcome::Approved { provider_transaction_id }) => {
                LookupOutcome::Approved { provider_transaction_id }
            }
            Some(ApprovalOutcome::Declined { code, provider_transaction_id }) => {
                LookupOutcome::Declined { code, provider_transaction_id }
            }
        })
    }

    async fn cancel(&self, request: &CancelPayment) -> Result<CancelReceipt, CancelError> {
        self.calls.cancels.fetch_add(1, Ordering::SeqCst);
        match request.scenario.refund {
            Some(Behaviour::Fail) => Err(GatewayError::Rejected {
                code: "REFUND_REJECTED".into(),
                message: "simulated provider refused the cancellation".into(),
            }
            .into()),
            _ => {
                let mut cancelled = self.cancelled.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(first) = cancelled.by_key.get(&request.idempotency_key) {
                    // Same Idempotency-Key: the first answer, never a second cancel.
                    return Ok(first.clone());
                }
                // It keeps no payment's amount: the balance it checks is the one we send.
                if request.amount.minor() > request.balance.minor() {
                    return Err(GatewayError::Rejected {
                        code: "NOT_CANCELABLE_AMOUNT".into(),
                        message: "simulated provider: more than the balance".into(),
                    }
                    .into());
                }
                self.calls.effect(format!("cancel-{}", request.idempotency_key));
                cancelled.payments.insert(request.payment_request_id.clone());
                let receipt = CancelReceipt {
                    transaction_key: Some(format!("sim-cancel-{}", uuid::Uuid::now_v7().simple())),
                    balance_after: None,
                };
                cancelled.by_key.insert(request.idempotency_key.clone(), receipt.clone());
                Ok(receipt)
            }
        }
    }
}

pub struct SimulatedSettlementGateway {
    calls: std::sync::Arc<ProviderCalls>,
}

impl SimulatedSettlementGateway {
    pub fn new(calls: std::sync::Arc<ProviderCalls>) -> Self {
        SimulatedSettlementGateway { calls }
    }
}

#[async_trait]
impl SettlementGateway for SimulatedSettlementGateway {
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError> {
        self.calls.settlements.fetch_add(1, Ordering::SeqCst);
        Ok(match request.scenario.settlement {
            Some(Behaviour::Fail) => {
                SettlementOutcome::Failed { reason: "simulated settlement failure".into() }
            }
            _ => {
                self.calls.effect(request.idempotency_key());
                SettlementOutcome::Succeeded
            }
        })
    }
}

pub struct SimulatedNotifier {
    calls: std::sync::Arc<ProviderCalls>,
}

impl SimulatedNotifier {
    pub fn new(calls: std::sync::Arc<ProviderCalls>) -> Self {
        SimulatedNotifier { calls }
    }
}

#[async_trait]
impl Notifier for SimulatedNotifier {
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure> {
        self.calls.notifications.fetch_add(1, Ordering::SeqCst);
        let fail =
            |policy, reason: &str| Err(NotifyFailure { policy, reason: reason.into(), retry_after: None });
        match request.scenario.notification {
            // Fails the first N attempts, then succeeds.
            Some(Behaviour::AutoRetry(times)) if request.attempt <= times as i32 => {
                fail(FailurePolicy::AutoRetry, "simulated transient notification failure")
            }
            // Only the first send fails: an operator's reprocess goes through.
            Some(Behaviour::Manual) if request.attempt == 1 => {
                fail(FailurePolicy::ManualIntervention, "simulated failure needing an operator")
            }
            Some(Behaviour::Ignore) if request.attempt == 1 => {
                fail(FailurePolicy::Ignore, "simulated failure that may be ignored")
            }
            _ => {
                self.calls.effect(request.idempotency_key());
                Ok(())
            }
        }
    }
}
