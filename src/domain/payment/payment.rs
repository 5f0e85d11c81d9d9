//! The payment aggregate and its transition functions.

use chrono::{DateTime, Utc};

use super::error::PaymentError;
use super::event::PaymentEvent;
use super::status::{PaymentAction, PaymentStatus};
use crate::domain::ids::{OrderId, PaymentId};
use crate::domain::money::Money;

/// The deterministic request id of an order's `attempt`-th payment. The provider receives it
/// as `Idempotency-Key`, so asking twice for the same attempt can never charge twice.
pub fn payment_request_id(order_id: OrderId, attempt: i32) -> String {
    format!("pay-{order_id}-{attempt}")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payment {
    pub id: PaymentId,
    pub order_id: OrderId,
    pub attempt: i32,
    pub payment_request_id: String,
    pub amount: Money,
    pub status: PaymentStatus,
    pub provider_transaction_id: Option<String>,
    pub decline_code: Option<String>,
    pub refund_failure_reason: Option<String>,
    /// Look-ups made while the outcome is unknown (`CONFIRMATION_REQUIRED`).
    pub reconcile_attempts: i32,
    /// When reconciliation may ask the provider next.
    pub next_reconcile_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
}

impl Payment {
    /// A new payment attempt, `REQUESTED`, not yet sent to the provider.
    pub fn request(order_id: OrderId, attempt: i32, amount: Money, now: DateTime<Utc>) -> Self {
        Payment {
            id: PaymentId::new(),
            order_id,
            attempt,
            payment_request_id: payment_request_id(order_id, attempt),
            amount,
            status: PaymentStatus::Requested,
            provider_transaction_id: None,
            decline_code: None,
            refund_failure_reason: None,
            reconcile_attempts: 0,
            next_reconcile_at: None,
            created_at: now,
            updated_at: now,
            version: 0,
        }
    }

    /// A new attempt the customer authorized at a provider that asks first (Toss's
    /// checkout): `provider_key` (the widget's `paymentKey`) is what the charge confirms,
    /// and the provider's transaction id once approved.
    pub fn request_authorized(
        order_id: OrderId,
        attempt: i32,
        amount: Money,
        provider_key: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Payment {
            provider_transaction_id: Some(provider_key.into()),
            ..Payment::request(order_id, attempt, amount, now)
        }
    }

    fn guard(&self, action: PaymentAction, allowed: bool) -> Result<(), PaymentError> {
        if allowed { Ok(()) } else { Err(PaymentError::InvalidTransition { from: self.status, action }) }
    }

    fn move_to(&mut self, status: PaymentStatus, now: DateTime<Utc>) {
        self.status = status;
        self.updated_at = now;
    }

    fn undecided(&self) -> bool {
        matches!(self.status, PaymentStatus::Requested | PaymentStatus::ConfirmationRequired)
    }

    pub fn approve(
        &mut self,
        provider_transaction_id: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::Approve, self.undecided())?;
        let provider_transaction_id = provider_transaction_id.into();
        self.provider_transaction_id = Some(provider_transaction_id.clone());
        self.move_to(PaymentStatus::Approved, now);
        Ok(vec![PaymentEvent::Approved { provider_transaction_id }])
    }

    pub fn decline(
        &mut self,
        code: impl Into<String>,
        provider_transaction_id: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::Decline, self.undecided())?;
        let code = code.into();
        self.decline_code = Some(code.clone());
        if provider_transaction_id.is_some() {
            self.provider_transaction_id = provider_transaction_id;
        }
        self.move_to(PaymentStatus::Declined, now);
        Ok(vec![PaymentEvent::Declined { code }])
    }

    /// The provider did not answer in time: the outcome is unknown until reconciled.
    pub fn require_confirmation(&mut self, now: DateTime<Utc>) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::RequireConfirmation, self.status == PaymentStatus::Requested)?;
        self.move_to(PaymentStatus::ConfirmationRequired, now);
        Ok(vec![])
    }

    /// Reconciliation asked the provider about an open outcome (an approval or a refund)
    /// and learned nothing final; `next` is when it may ask again.
    pub fn record_reconcile_attempt(
        &mut self,
        next: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(
            PaymentAction::RecordReconcileAttempt,
            matches!(self.status, PaymentStatus::ConfirmationRequired | PaymentStatus::RefundPending),
        )?;
        self.reconcile_attempts += 1;
        self.next_reconcile_at = Some(next);
        self.updated_at = now;
        Ok(vec![])
    }

    /// Compensation: the provider cancelled an approved payment.
    pub fn cancel(
        &mut self,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::Cancel, self.status == PaymentStatus::Approved)?;
        self.move_to(PaymentStatus::Cancelled, now);
        Ok(vec![PaymentEvent::Cancelled { reason: reason.into() }])
    }

    /// A refund's intent, committed before the provider is asked: from here on the
    /// worker finds the refund even if its answer is never recorded. The look-up counters
    /// start afresh for it.
    pub fn begin_refund(&mut self, now: DateTime<Utc>) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::BeginRefund, self.status == PaymentStatus::Approved)?;
        self.reconcile_attempts = 0;
        self.next_reconcile_at = None;
        self.move_to(PaymentStatus::RefundPending, now);
        Ok(vec![])
    }

    /// The provider refunded the payment.
    pub fn refund(&mut self, now: DateTime<Utc>) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::Refund, self.status == PaymentStatus::RefundPending)?;
        self.refund_failure_reason = None;
        self.next_reconcile_at = None;
        self.move_to(PaymentStatus::Refunded, now);
        Ok(vec![PaymentEvent::Refunded])
    }

    /// The provider refused the refund: recorded, and the payment is `APPROVED` again.
    pub fn record_refund_failure(
        &mut self,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::RecordRefundFailure, self.status == PaymentStatus::RefundPending)?;
        let reason = reason.into();
        self.refund_failure_reason = Some(reason.clone());
        self.next_reconcile_at = None;
        self.move_to(PaymentStatus::Approved, now);
        Ok(vec![PaymentEvent::RefundFailed { reason }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn payment_in(status: PaymentStatus) -> Payment {
        let mut p =
            Payment::request(OrderId::new(), 1, Money::new(100, "KRW".parse().unwrap()).unwrap(), now());
        p.status = status;
        p
    }

    type Action = fn(&mut Payment) -> Result<Vec<PaymentEvent>, PaymentError>;

    #[test]
    fn transition_table() {
        use PaymentStatus::*;
        let actions: [(&str, Action); 8] = [
            ("approve", |p| p.approve("tx", now())),
            ("decline", |p| p.decline("CARD", None, now())),
            ("require_confirmation", |p| p.require_confirmation(now())),
            ("cancel", |p| p.cancel("x", now())),
            ("begin_refund", |p| p.begin_refund(now())),
            ("refund", |p| p.refund(now())),
            ("refund_failure", |p| p.record_refund_failure("x", now())),
            ("reconcile_attempt", |p| p.record_reconcile_attempt(now(), now())),
        ];
        #[rustfmt::skip]
        let expected: [(PaymentStatus, [Option<PaymentStatus>; 8]); 7] = [
            (Requested, [Some(Approved), Some(Declined), Some(ConfirmationRequired), None, None, None, None, None]),
            (Approved, [None, None, None, Some(Cancelled), Some(RefundPending), None, None, None]),
            (Declined, [None; 8]),
            (ConfirmationRequired, [Some(Approved), Some(Declined), None, None, None, None, None, Some(ConfirmationRequired)]),
            (Cancelled, [None; 8]),
            (RefundPending, [None, None, None, None, None, Some(Refunded), Some(Approved), Some(RefundPending)]),
            (Refunded, [None; 8]),
        ];
        for (from, row) in expected {
            for ((name, action), next) in actions.iter().zip(row) {
                let mut p = payment_in(from);
                let result = action(&mut p);
                match next {
                    Some(next) => {
                        assert!(result.is_ok(), "{from} {name}: {result:?}");
                        assert_eq!(p.status, next, "{from} {name}");
                    }
                    None => {
                        assert_eq!(
                            result,
                            Err(PaymentError::InvalidTransition {
                                from,
                                action: match *name {
                                    "approve" => PaymentAction::Approve,
                                    "decline" => PaymentAction::Decline,
                                    "require_confirmation" => PaymentAction::RequireConfirmation,
                                    "cancel" => PaymentAction::Cancel,
                                    "begin_refund" => PaymentAction::BeginRefund,
                                    "refund" => PaymentAction::Refund,
                                    "refund_failure" => PaymentAction::RecordRefundFailure,
                                    _ => PaymentAction::RecordReconcileAttempt,
                                }
                            }),
                            "{from} {name}"
                        );
                        assert_eq!(p.status, from);
                    }
                }
            }
        }
    }

    #[test]
    fn an_authorized_attempt_carries_the_customers_key_until_approved_with_it() {
        let mut p = Payment::request_authorized(
            OrderId::new(),
            1,
            Money::new(100, "KRW".parse().unwrap()).unwrap(),
            "tgen_1",
            now(),
        );
        assert_eq!(
            (p.status, p.provider_transaction_id.as_deref()),
            (PaymentStatus::Requested, Some("tgen_1"))
        );
        p.approve("tgen_1", now()).unwrap();
        assert_eq!(p.status, PaymentStatus::Approved);
    }

    #[test]
    fn request_id_is_deterministic_per_order_and_attempt() {
        let order = OrderId::new();
        assert_eq!(payment_request_id(order, 1), payment_request_id(order, 1));
        assert_ne!(payment_request_id(order, 1), payment_request_id(order, 2));
    }

    #[test]
    fn refund_failure_is_recorded_and_payment_is_approved_again() {
        let mut p = payment_in(PaymentStatus::Approved);
        assert_eq!(p.begin_refund(now()), Ok(vec![]));
        assert_eq!(p.status, PaymentStatus::RefundPending);
        let events = p.record_refund_failure("card expired", now()).unwrap();
        assert_eq!(events[0].event_type(), "payment.refund_failed");
        assert_eq!(p.status, PaymentStatus::Approved);
        assert_eq!(p.refund_failure_reason.as_deref(), Some("card expired"));
    }
}
