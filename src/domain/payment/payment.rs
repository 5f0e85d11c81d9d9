//! The payment aggregate and its transition functions.

use chrono::{DateTime, Utc};

use super::error::PaymentError;
use super::event::PaymentEvent;
use super::refund::{PROVIDER_ACTOR, Refund, refund_key};
use super::status::{PaymentAction, PaymentStatus, RefundStatus};
use crate::domain::ids::{OrderId, PaymentId, RefundId};
use crate::domain::money::Money;
use crate::domain::retry::{NextAttempt, RetryPolicy};

/// The deterministic request id of an order's `attempt`-th payment. The provider receives it
/// as `Idempotency-Key`, so asking twice for the same attempt can never charge twice.
/// The decline code of a customer's authorization the provider refused for this order (its
/// orderId or amount are not the checkout's): the customer's error, never ours.
pub const AUTHORIZATION_MISMATCH: &str = "AUTHORIZATION_MISMATCH";

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
    /// A card keyed in for this attempt (the momo dialect's key-in): the card lived only in
    /// the first run's memory, so any later run asks the provider what it holds under the
    /// request id and never charges (a fact of the attempt, set when it is requested).
    pub keyed_in: bool,
    pub decline_code: Option<String>,
    pub refund_failure_reason: Option<String>,
    /// The sum of its succeeded refunds; never more than `amount`.
    pub refunded_amount: i64,
    /// When the provider approved it.
    pub approved_at: Option<DateTime<Utc>>,
    /// Look-ups made while the outcome is unknown (`CONFIRMATION_REQUIRED`).
    pub reconcile_attempts: i32,
    /// When reconciliation may ask the provider next.
    pub next_reconcile_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub version: i64,
    /// The payment's number (docs/spec.md §3), as an order's: given before it is first
    /// stored (0 until then).
    pub number: i64,
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
            keyed_in: false,
            decline_code: None,
            refund_failure_reason: None,
            refunded_amount: 0,
            approved_at: None,
            reconcile_attempts: 0,
            next_reconcile_at: None,
            created_at: now,
            updated_at: now,
            version: 0,
            number: 0,
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

    /// A new attempt charged to a card keyed in with the order: the first run charges it,
    /// and no other run may (see [`Payment::keyed_in`]).
    pub fn request_keyed_in(order_id: OrderId, attempt: i32, amount: Money, now: DateTime<Utc>) -> Self {
        Payment { keyed_in: true, ..Payment::request(order_id, attempt, amount, now) }
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
        self.approved_at = Some(now);
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

    /// The provider refused the customer's authorization for this order (a key from another
    /// checkout, or authorized for another amount): DECLINED with
    /// [`AUTHORIZATION_MISMATCH`], and the key is let go — a key is the payment's only once
    /// the provider confirmed it for this order, so another order's rightful confirm is
    /// never blocked by it.
    ///
    /// # Errors
    /// `InvalidTransition` unless `REQUESTED` or `CONFIRMATION_REQUIRED`.
    pub fn refuse_authorization(&mut self, now: DateTime<Utc>) -> Result<Vec<PaymentEvent>, PaymentError> {
        let events = self.decline(AUTHORIZATION_MISMATCH, None, now)?;
        self.provider_transaction_id = None;
        Ok(events)
    }

    /// The provider did not answer in time: the outcome is unknown until reconciled.
    pub fn require_confirmation(&mut self, now: DateTime<Utc>) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::RequireConfirmation, self.status == PaymentStatus::Requested)?;
        self.move_to(PaymentStatus::ConfirmationRequired, now);
        Ok(vec![])
    }

    /// Reconciliation asked the provider about an open outcome (an approval or a refund)
    /// and learned nothing final; `next` is when it may ask again.
    /// A look-up that settled nothing: counted, the next one scheduled by `retry` (once the
    /// attempts are spent, none is due any more and the time kept is the backoff's); what
    /// follows, by the one retry rule.
    ///
    /// # Errors
    /// As [`Payment::record_reconcile_attempt`].
    pub fn record_unsettled_lookup(
        &mut self,
        retry: &RetryPolicy,
        now: DateTime<Utc>,
    ) -> Result<NextAttempt, PaymentError> {
        let attempts = self.reconcile_attempts.saturating_add(1);
        let next = retry.after(attempts, None, now);
        let at = match next {
            NextAttempt::At(at) => at,
            NextAttempt::Operator => now + retry.delay_after(attempts),
        };
        self.record_reconcile_attempt(at, now)?;
        Ok(next)
    }

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

    /// What can still be refunded: the amount less every succeeded refund.
    pub fn balance(&self) -> i64 {
        self.amount.minor() - self.refunded_amount
    }

    fn refundable(&self) -> bool {
        matches!(self.status, PaymentStatus::Approved | PaymentStatus::PartiallyRefunded)
    }

    /// Where a payment stands once no refund is pending: by what has been refunded.
    fn status_without_pending_refund(&self) -> PaymentStatus {
        match (self.refunded_amount, self.balance()) {
            (0, _) => PaymentStatus::Approved,
            (_, 0) => PaymentStatus::Refunded,
            _ => PaymentStatus::PartiallyRefunded,
        }
    }

    fn check_refund_amount(&self, requested: i64) -> Result<(), PaymentError> {
        let balance = self.balance();
        if requested <= 0 || requested > balance {
            return Err(PaymentError::RefundAmountInvalid { requested, balance });
        }
        Ok(())
    }

    fn new_refund(&self, amount: i64, reason: String, actor: String, now: DateTime<Utc>) -> Refund {
        let id = RefundId::new();
        Refund {
            id,
            payment_id: self.id,
            order_id: self.order_id,
            amount: Money::new(amount, self.amount.currency())
                .unwrap_or_else(|_| Money::zero(self.amount.currency())),
            reason,
            status: RefundStatus::Pending,
            idempotency_key: refund_key(id),
            request_key: None,
            causation_id: None,
            provider_transaction_key: None,
            failure_reason: None,
            actor,
            created_at: now,
            updated_at: now,
            version: 0,
        }
    }

    /// A refund's intent, committed before the provider is asked: `amount` of the balance
    /// (`None`: all of it). From here on the worker finds the refund even if its answer is
    /// never recorded; one refund is pending at a time, and the look-up counters start
    /// afresh for it.
    ///
    /// # Errors
    /// `InvalidTransition` unless `APPROVED` or `PARTIALLY_REFUNDED`; `RefundAmountInvalid`
    /// unless `0 < amount <= balance`.
    pub fn begin_refund(
        &mut self,
        amount: Option<i64>,
        reason: impl Into<String>,
        actor: impl Into<String>,
        request_key: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Refund, PaymentError> {
        self.guard(PaymentAction::BeginRefund, self.refundable())?;
        let amount = amount.unwrap_or(self.balance());
        self.check_refund_amount(amount)?;
        let mut refund = self.new_refund(amount, reason.into(), actor.into(), now);
        refund.request_key = request_key;
        self.reconcile_attempts = 0;
        self.next_reconcile_at = None;
        self.move_to(PaymentStatus::RefundPending, now);
        Ok(refund)
    }

    fn check_pending(&self, refund: &Refund) -> Result<(), PaymentError> {
        if refund.payment_id != self.id || refund.status != RefundStatus::Pending {
            return Err(PaymentError::NotThePendingRefund { refund: refund.id });
        }
        Ok(())
    }

    /// The provider made the pending `refund` (its key of the cancel, if it gives one):
    /// `PARTIALLY_REFUNDED` while a balance is left, `REFUNDED` at 0.
    ///
    /// # Errors
    /// `InvalidTransition` unless `REFUND_PENDING`; `NotThePendingRefund`; `RefundAmountInvalid`
    /// if it would refund more than the amount.
    pub fn refund(
        &mut self,
        refund: &mut Refund,
        transaction_key: Option<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::Refund, self.status == PaymentStatus::RefundPending)?;
        self.check_pending(refund)?;
        self.check_refund_amount(refund.amount.minor())?;
        refund.succeed(transaction_key, now)?;
        self.refunded_amount += refund.amount.minor();
        self.refund_failure_reason = None;
        self.next_reconcile_at = None;
        self.move_to(self.status_without_pending_refund(), now);
        Ok(vec![PaymentEvent::Refunded {
            refund_id: refund.id,
            amount: refund.amount.minor(),
            refunded_amount: self.refunded_amount,
            balance: self.balance(),
            reason: refund.reason.clone(),
            causation_id: refund.causation_id.clone(),
        }])
    }

    /// The provider refused the pending `refund`: recorded on it and on the payment, whose
    /// balance is unchanged.
    ///
    /// # Errors
    /// `InvalidTransition` unless `REFUND_PENDING`; `NotThePendingRefund`.
    pub fn record_refund_failure(
        &mut self,
        refund: &mut Refund,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<Vec<PaymentEvent>, PaymentError> {
        self.guard(PaymentAction::RecordRefundFailure, self.status == PaymentStatus::RefundPending)?;
        self.check_pending(refund)?;
        let reason = reason.into();
        refund.fail(reason.clone(), now)?;
        self.refund_failure_reason = Some(reason.clone());
        self.next_reconcile_at = None;
        self.move_to(self.status_without_pending_refund(), now);
        Ok(vec![PaymentEvent::RefundFailed { refund_id: refund.id, amount: refund.amount.minor(), reason }])
    }

    /// A refund made outside the service (the provider's dashboard), learnt from its
    /// webhook or its ledger: recorded as a succeeded refund by [`PROVIDER_ACTOR`].
    ///
    /// # Errors
    /// `InvalidTransition` unless `APPROVED` or `PARTIALLY_REFUNDED`; `RefundAmountInvalid`
    /// unless `0 < amount <= balance`.
    pub fn record_provider_refund(
        &mut self,
        amount: i64,
        transaction_key: Option<String>,
        reason: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Result<(Refund, Vec<PaymentEvent>), PaymentError> {
        self.guard(PaymentAction::RecordProviderRefund, self.refundable())?;
        self.check_refund_amount(amount)?;
        let mut refund = self.new_refund(amount, reason.into(), PROVIDER_ACTOR.into(), now);
        let before = self.status;
        self.status = PaymentStatus::RefundPending;
        match self.refund(&mut refund, transaction_key, now) {
            Ok(events) => Ok((refund, events)),
            Err(err) => {
                self.status = before;
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_authorization_declines_and_lets_the_key_go() {
        let mut p = Payment::request_authorized(
            OrderId::new(),
            1,
            Money::new(100, "KRW".parse().unwrap()).unwrap(),
            "tgen_alices_key",
            now(),
        );
        let events = p.refuse_authorization(now()).unwrap();
        assert_eq!(events, vec![PaymentEvent::Declined { code: AUTHORIZATION_MISMATCH.into() }]);
        assert_eq!((p.status, p.provider_transaction_id.as_deref()), (PaymentStatus::Declined, None));
        assert!(matches!(p.refuse_authorization(now()), Err(PaymentError::InvalidTransition { .. })));
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn payment_in(status: PaymentStatus) -> Payment {
        let mut p =
            Payment::request(OrderId::new(), 1, Money::new(100, "KRW".parse().unwrap()).unwrap(), now());
        p.status = status;
        if status == PaymentStatus::PartiallyRefunded {
            p.refunded_amount = 20;
        }
        p
    }

    type Action = fn(&mut Payment) -> Result<Vec<PaymentEvent>, PaymentError>;

    /// A pending refund of 40 of the payment's 100.
    fn pending_refund(p: &Payment) -> Refund {
        let mut q = p.clone();
        q.status = PaymentStatus::Approved;
        q.refunded_amount = 0;
        q.begin_refund(Some(40), "r", "alice", None, now()).unwrap()
    }

    #[test]
    fn transition_table() {
        use PaymentStatus::*;
        let actions: [(&str, PaymentAction, Action); 9] = [
            ("approve", PaymentAction::Approve, |p| p.approve("tx", now())),
            ("decline", PaymentAction::Decline, |p| p.decline("CARD", None, now())),
            ("require_confirmation", PaymentAction::RequireConfirmation, |p| p.require_confirmation(now())),
            ("cancel", PaymentAction::Cancel, |p| p.cancel("x", now())),
            ("begin_refund", PaymentAction::BeginRefund, |p| {
                p.begin_refund(Some(10), "r", "alice", None, now()).map(|_| vec![])
            }),
            ("refund", PaymentAction::Refund, |p| {
                let mut r = pending_refund(p);
                p.refund(&mut r, None, now())
            }),
            ("refund_failure", PaymentAction::RecordRefundFailure, |p| {
                let mut r = pending_refund(p);
                p.record_refund_failure(&mut r, "x", now())
            }),
            ("reconcile_attempt", PaymentAction::RecordReconcileAttempt, |p| {
                p.record_reconcile_attempt(now(), now())
            }),
            ("provider_refund", PaymentAction::RecordProviderRefund, |p| {
                p.record_provider_refund(40, Some("tk".into()), "dashboard", now()).map(|(_, e)| e)
            }),
        ];
        #[rustfmt::skip]
        let expected: [(PaymentStatus, [Option<PaymentStatus>; 9]); 8] = [
            (Requested, [Some(Approved), Some(Declined), Some(ConfirmationRequired), None, None, None, None, None, None]),
            (Approved, [None, None, None, Some(Cancelled), Some(RefundPending), None, None, None, Some(PartiallyRefunded)]),
            (Declined, [None; 9]),
            (ConfirmationRequired, [Some(Approved), Some(Declined), None, None, None, None, None, Some(ConfirmationRequired), None]),
            (Cancelled, [None; 9]),
            (RefundPending, [None, None, None, None, None, Some(PartiallyRefunded), Some(Approved), Some(RefundPending), None]),
            (Refunded, [None; 9]),
            (PartiallyRefunded, [None, None, None, None, Some(RefundPending), None, None, None, Some(PartiallyRefunded)]),
        ];
        for (from, row) in expected {
            for ((name, action_name, action), next) in actions.iter().zip(row) {
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
                            Err(PaymentError::InvalidTransition { from, action: *action_name }),
                            "{from} {name}"
                        );
                        assert_eq!(p.status, from);
                    }
                }
            }
        }
    }

    #[test]
    fn partial_refunds_add_up_to_the_amount_and_never_past_it() {
        let mut p = payment_in(PaymentStatus::Approved);
        let mut first = p.begin_refund(Some(30), "one ticket", "alice", None, now()).unwrap();
        assert_eq!(first.idempotency_key, format!("refund-{}", first.id));
        let events = p.refund(&mut first, Some("tk1".into()), now()).unwrap();
        assert_eq!(
            events,
            vec![PaymentEvent::Refunded {
                refund_id: first.id,
                amount: 30,
                refunded_amount: 30,
                balance: 70,
                reason: "one ticket".into(),
                causation_id: None,
            }]
        );
        assert_eq!((p.status, p.refunded_amount, p.balance()), (PaymentStatus::PartiallyRefunded, 30, 70));
        assert_eq!(first.status, RefundStatus::Succeeded);
        assert_eq!(first.provider_transaction_key.as_deref(), Some("tk1"));

        for too_much in [0, -1, 71] {
            assert_eq!(
                p.begin_refund(Some(too_much), "r", "alice", None, now()),
                Err(PaymentError::RefundAmountInvalid { requested: too_much, balance: 70 })
            );
            assert_eq!(p.status, PaymentStatus::PartiallyRefunded);
        }
        // No amount: the whole balance.
        let mut rest = p.begin_refund(None, "the rest", "ops", None, now()).unwrap();
        assert_eq!(rest.amount.minor(), 70);
        // A refund settled once cannot be settled again, nor one of another payment.
        assert_eq!(
            p.refund(&mut first, None, now()),
            Err(PaymentError::NotThePendingRefund { refund: first.id })
        );
        p.refund(&mut rest, None, now()).unwrap();
        assert_eq!((p.status, p.refunded_amount, p.balance()), (PaymentStatus::Refunded, 100, 0));
        assert!(p.begin_refund(None, "again", "alice", None, now()).is_err());
    }

    #[test]
    fn a_refused_refund_is_recorded_and_the_balance_is_unchanged() {
        let mut p = payment_in(PaymentStatus::Approved);
        let mut r = p.begin_refund(Some(30), "r", "alice", Some("req-1".into()), now()).unwrap();
        p.refund(&mut r, None, now()).unwrap();
        let mut refused = p.begin_refund(Some(50), "r", "alice", None, now()).unwrap();
        let events = p.record_refund_failure(&mut refused, "card expired", now()).unwrap();
        assert_eq!(events[0].event_type(), "payment.refund_failed");
        assert_eq!((p.status, p.refunded_amount), (PaymentStatus::PartiallyRefunded, 30));
        assert_eq!(refused.status, RefundStatus::Failed);
        assert_eq!(refused.failure_reason.as_deref(), Some("card expired"));
        assert_eq!(p.refund_failure_reason.as_deref(), Some("card expired"));
        assert_eq!(r.request_key.as_deref(), Some("req-1"));
    }

    #[test]
    fn a_refund_made_at_the_provider_is_recorded_by_the_provider() {
        let mut p = payment_in(PaymentStatus::Approved);
        let (refund, events) = p.record_provider_refund(100, Some("tk".into()), "dashboard", now()).unwrap();
        assert_eq!((refund.actor.as_str(), refund.status), (PROVIDER_ACTOR, RefundStatus::Succeeded));
        assert_eq!(p.status, PaymentStatus::Refunded);
        assert_eq!(events[0].event_type(), "payment.refunded");
        let mut q = payment_in(PaymentStatus::Approved);
        assert_eq!(
            q.record_provider_refund(101, None, "dashboard", now()).map(|_| ()),
            Err(PaymentError::RefundAmountInvalid { requested: 101, balance: 100 })
        );
        assert_eq!(q.status, PaymentStatus::Approved);
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
}
