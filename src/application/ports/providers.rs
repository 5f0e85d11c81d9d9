//! The outside services the saga calls: payment, settlement, notification.
//!
//! Each port states how its outcomes map onto the saga: a business refusal is an outcome
//! (declined, failed), an unreachable provider is a [`GatewayError::Unavailable`], and a
//! payment whose outcome cannot be known is [`ApprovalOutcome::Unknown`] — never guessed.

use std::fmt;

use async_trait::async_trait;

use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::money::Money;
use crate::domain::notification::FailurePolicy;

/// A behaviour a mock provider is asked to show (SPEC §4, `X-Mock-Scenario`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Decline,
    Timeout,
    Fail,
    /// Fail this many times, then succeed.
    AutoRetry(u32),
    Manual,
    Ignore,
}

/// Requested mock behaviours, one per target. Empty means "everything succeeds".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scenario {
    pub payment: Option<Behaviour>,
    pub settlement: Option<Behaviour>,
    pub notification: Option<Behaviour>,
    pub refund: Option<Behaviour>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown scenario `{0}`; expected a comma-separated list of payment=decline|timeout, settlement=fail, notification=auto_retry[:N]|manual|ignore, refund=fail"
)]
pub struct ScenarioError(pub String);

impl Scenario {
    /// Parses `target=behaviour[,target=behaviour...]`; whitespace around parts is ignored.
    ///
    /// # Errors
    /// [`ScenarioError`] naming the first part that is not a known target/behaviour pair.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        let mut scenario = Scenario::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || ScenarioError(part.chars().take(64).collect());
            let (target, behaviour) = part.split_once('=').ok_or_else(bad)?;
            let (target, behaviour) = (target.trim(), behaviour.trim());
            match (target, behaviour) {
                ("payment", "decline") => scenario.payment = Some(Behaviour::Decline),
                ("payment", "timeout") => scenario.payment = Some(Behaviour::Timeout),
                ("settlement", "fail") => scenario.settlement = Some(Behaviour::Fail),
                ("refund", "fail") => scenario.refund = Some(Behaviour::Fail),
                ("notification", "manual") => scenario.notification = Some(Behaviour::Manual),
                ("notification", "ignore") => scenario.notification = Some(Behaviour::Ignore),
                ("notification", b) if b == "auto_retry" || b.starts_with("auto_retry:") => {
                    let times = match b.strip_prefix("auto_retry:") {
                        None => 1,
                        Some(n) => n.parse::<u32>().ok().filter(|n| *n <= 1000).ok_or_else(bad)?,
                    };
                    scenario.notification = Some(Behaviour::AutoRetry(times));
                }
                _ => return Err(bad()),
            }
        }
        Ok(scenario)
    }

    pub fn is_empty(&self) -> bool {
        *self == Scenario::default()
    }
}

impl fmt::Display for Scenario {
    /// The canonical spelling, which [`Scenario::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        let name = |b: Behaviour| match b {
            Behaviour::Decline => "decline".to_string(),
            Behaviour::Timeout => "timeout".to_string(),
            Behaviour::Fail => "fail".to_string(),
            Behaviour::AutoRetry(n) => format!("auto_retry:{n}"),
            Behaviour::Manual => "manual".to_string(),
            Behaviour::Ignore => "ignore".to_string(),
        };
        for (target, behaviour) in [
            ("payment", self.payment),
            ("settlement", self.settlement),
            ("notification", self.notification),
            ("refund", self.refund),
        ] {
            if let Some(b) = behaviour {
                parts.push(format!("{target}={}", name(b)));
            }
        }
        f.write_str(&parts.join(","))
    }
}

/// A provider could not be used; the caller may retry later.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// The provider refused for a business reason (4xx): retrying will not help.
    #[error("rejected by provider: {code}: {message}")]
    Rejected { code: String, message: String },
    /// 5xx, refused connection or timeout on a call that is safe to repeat.
    #[error("provider unavailable: {0}")]
    Unavailable(String),
}

/// Ask the provider to take the money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovePayment {
    pub order_id: OrderId,
    pub customer_id: String,
    /// Sent as `Idempotency-Key`: asking twice never charges twice.
    pub payment_request_id: String,
    pub amount: Money,
    pub scenario: Scenario,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        code: String,
        provider_transaction_id: Option<String>,
    },
    /// The call timed out: the provider may or may not have charged. Reconcile, never
    /// compensate or retry blindly.
    Unknown {
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Approved {
        provider_transaction_id: String,
    },
    Declined {
        provider_transaction_id: Option<String>,
        code: String,
    },
    Cancelled {
        provider_transaction_id: String,
    },
    /// The provider never took this request: it is safe to approve again with the same key.
    NotFound,
}

/// Cancel (compensation) or refund an approved payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelPayment {
    pub payment_id: PaymentId,
    pub payment_request_id: String,
    pub provider_transaction_id: String,
    pub amount: Money,
    pub reason: String,
    pub scenario: Scenario,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait PaymentGateway: Send + Sync {
    /// Asks the provider to approve; idempotent by `payment_request_id`.
    ///
    /// # Errors
    /// `Unavailable` when the provider cannot be reached after bounded retries (nothing
    /// was charged, or the same key makes a later attempt safe). A decline is an outcome.
    async fn approve(&self, request: &ApprovePayment) -> Result<ApprovalOutcome, GatewayError>;

    /// Asks the provider what became of a request (reconciliation).
    ///
    /// # Errors
    /// `Unavailable` when the provider cannot be reached.
    async fn lookup(
        &self,
        payment_request_id: &str,
        scenario: &Scenario,
    ) -> Result<LookupOutcome, GatewayError>;

    /// Cancels or refunds an approved payment; idempotent by `payment_request_id`.
    ///
    /// # Errors
    /// `Rejected` when the provider refuses (recorded, not retried); `Unavailable` when it
    /// cannot be reached (retried later).
    async fn cancel(&self, request: &CancelPayment) -> Result<(), GatewayError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettlementRequest {
    pub order_id: OrderId,
    pub payment_id: PaymentId,
    pub amount: Money,
    pub scenario: Scenario,
}

impl SettlementRequest {
    /// The key a settlement provider deduplicates by: one settlement per payment, however
    /// often a resumed saga asks.
    pub fn idempotency_key(&self) -> String {
        format!("settle-{}", self.payment_id)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettlementOutcome {
    Succeeded,
    Failed { reason: String },
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait SettlementGateway: Send + Sync {
    /// Requests settlement of an approved payment; idempotent by `payment_id`.
    ///
    /// # Errors
    /// `Unavailable` when the settlement service cannot be reached. A refusal is
    /// [`SettlementOutcome::Failed`].
    async fn settle(&self, request: &SettlementRequest) -> Result<SettlementOutcome, GatewayError>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRequest {
    pub order_id: OrderId,
    pub customer_id: String,
    /// 1 for the first send, 2 for the first retry, ...
    pub attempt: i32,
    pub scenario: Scenario,
}

impl NotificationRequest {
    /// The key a notifier deduplicates by: an attempt resumed after a crash (its outcome
    /// never recorded) is the same attempt, not a second message to the customer.
    pub fn idempotency_key(&self) -> String {
        format!("notify-{}-{}", self.order_id, self.attempt)
    }
}

/// A send that did not go through, with what should happen next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("notification failed ({policy}): {reason}")]
pub struct NotifyFailure {
    pub policy: FailurePolicy,
    pub reason: String,
}

#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Notifier: Send + Sync {
    /// Tells the customer their order went through.
    ///
    /// # Errors
    /// [`NotifyFailure`] with the policy the failure calls for.
    async fn send(&self, request: &NotificationRequest) -> Result<(), NotifyFailure>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_parse_and_print_canonically() {
        let s = Scenario::parse(" payment=decline , notification=auto_retry:3,refund=fail").unwrap();
        assert_eq!(s.payment, Some(Behaviour::Decline));
        assert_eq!(s.notification, Some(Behaviour::AutoRetry(3)));
        assert_eq!(s.to_string(), "payment=decline,notification=auto_retry:3,refund=fail");
        assert_eq!(Scenario::parse(&s.to_string()).unwrap(), s);
        assert_eq!(
            Scenario::parse("notification=auto_retry").unwrap().notification,
            Some(Behaviour::AutoRetry(1))
        );
        assert!(Scenario::parse("").unwrap().is_empty());
    }

    #[test]
    fn unknown_scenarios_are_refused() {
        for bad in ["payment=explode", "payment", "x=y", "notification=auto_retry:-1", "settlement=decline"] {
            assert!(Scenario::parse(bad).is_err(), "{bad}");
        }
    }
}
