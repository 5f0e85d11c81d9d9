//! What a provider's answer to a refund means for that refund (docs/spec.md §3, refunds):
//! a pure function of (record, refund, answer, settings, now), table-tested below; the
//! `Refunds` service calls the provider, asks this, and commits what it says.

use chrono::{DateTime, Utc};

use super::{RefundAnswer, RefundSettings};
use crate::application::audit::{self, entity};
use crate::application::envelopes::EventWriter;
use crate::application::error::broken_invariant;
use crate::application::ports::{CancelReceipt, Changes, OrderRecord};
use crate::application::{Actor, AppError};
use crate::domain::audit::AuditAction;
use crate::domain::ids::RefundId;
use crate::domain::order::{Order, SagaStep, StepStatus};
use crate::domain::payment::{Payment, PaymentStatus, Refund};
use crate::domain::retry::NextAttempt;

/// What the answer comes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The provider refunded it: recorded, announced.
    Refunded,
    /// The provider refused it: recorded as failed, announced; `already_cancelled` when the
    /// provider has the payment cancelled already (its cancels are then recorded).
    Rejected { reason: String, already_cancelled: bool },
    /// No answer to act on: the refund stays pending, the attempt counted.
    Pending { reason: String },
}

/// The changes to commit and the state they lead to.
pub(super) struct Decided {
    pub(super) changes: Changes,
    pub(super) order: Order,
    pub(super) payment: Payment,
    pub(super) refund: Refund,
    pub(super) verdict: Verdict,
}

pub(super) fn pending_refund(record: &OrderRecord, refund_id: RefundId) -> Result<&Refund, AppError> {
    record
        .refunds
        .iter()
        .find(|r| r.id == refund_id)
        .ok_or_else(|| broken_invariant(format!("refund {refund_id} is not the payment's")))
}

/// What `answer` means for the pending refund `refund_id` of `record`, added to `changes`
/// (an operator's audit, say).
///
/// # Errors
/// A broken invariant when the record holds no such pending refund or payment.
pub(super) fn decide(
    record: &OrderRecord,
    refund_id: RefundId,
    answer: RefundAnswer,
    actor: &Actor,
    settings: &RefundSettings,
    now: DateTime<Utc>,
    changes: Changes,
) -> Result<Decided, AppError> {
    let mut draft = Draft {
        record,
        actor,
        now,
        payment: record.payment.clone().ok_or_else(|| broken_invariant("no payment"))?,
        refund: pending_refund(record, refund_id)?.clone(),
        order: record.order.clone(),
        changes,
    };
    let verdict = match answer {
        RefundAnswer::Refunded(receipt) => draft.refunded(&receipt)?,
        RefundAnswer::Refused { code, message, already_cancelled } => {
            draft.refused(format!("{code}: {message}"), already_cancelled)?
        }
        // A stale balance is restated before this (`finish`); were it to come here, the
        // refund stays pending, as for an answer we cannot act on.
        RefundAnswer::Unknown(cause) | RefundAnswer::StaleBalance(cause) => {
            draft.still_open(&cause, settings)?
        }
    };
    let Draft { changes, order, payment, refund, .. } = draft;
    Ok(Decided { changes, order, payment, refund, verdict })
}

/// The refund's record as the decision moves it, and the changes that say so.
struct Draft<'a> {
    record: &'a OrderRecord,
    actor: &'a Actor,
    now: DateTime<Utc>,
    order: Order,
    payment: Payment,
    refund: Refund,
    changes: Changes,
}

impl Draft<'_> {
    fn audit(&mut self, action: AuditAction, detail: String) {
        let order_id = self.order.id;
        self.changes.audit.push(audit::record(
            action,
            entity::ORDER,
            order_id,
            self.actor,
            Some(detail),
            self.now,
        ));
    }

    /// The provider refunded it: the payment (and, once all is refunded, the order) moves,
    /// a step, an audit row (two where the provider's balance is not ours) and the events.
    fn refunded(&mut self, receipt: &CancelReceipt) -> Result<Verdict, AppError> {
        let now = self.now;
        let payment_events = self
            .payment
            .refund(&mut self.refund, receipt.transaction_key.clone(), now)
            .map_err(broken_invariant)?;
        let order_events = if self.payment.status == PaymentStatus::Refunded {
            self.order.refund(now).map_err(broken_invariant)?
        } else {
            vec![]
        };
        self.changes.update_payment(&mut self.payment);
        self.changes.update_refund(&mut self.refund);
        if !order_events.is_empty() {
            self.changes.update_order(&mut self.order);
        }
        let (refund, payment) = (&self.refund, &self.payment);
        let summary = format!(
            "refunded {} ({} of {} refunded, balance {}): {}",
            refund.amount.minor(),
            payment.refunded_amount,
            payment.amount.minor(),
            payment.balance(),
            refund.reason
        );
        let refund_id = refund.id;
        self.changes.step(
            self.order.id,
            SagaStep::Compensation,
            StepStatus::Success,
            Some(summary.clone()),
            now,
        );
        self.audit(AuditAction::Refunded, format!("refund {refund_id}: {summary}"));
        if let Some(theirs) = receipt.balance_after.filter(|b| *b != self.payment.balance()) {
            // The provider's books and ours disagree: recorded for an operator.
            let ours = self.payment.balance();
            self.audit(
                AuditAction::RefundBalanceMismatch,
                format!("refund {refund_id}: the provider's balance after it is {theirs}, ours {ours}"),
            );
        }
        let mut events = EventWriter::new(&self.order, self.record, now);
        events.payment(&self.payment, &payment_events).order(&order_events);
        self.changes.outbox = events.finish();
        Ok(Verdict::Refunded)
    }

    /// The provider refused it: the refund failed (recorded, announced), the balance as it was.
    fn refused(&mut self, why: String, already_cancelled: bool) -> Result<Verdict, AppError> {
        let now = self.now;
        let payment_events = self
            .payment
            .record_refund_failure(&mut self.refund, why.clone(), now)
            .map_err(broken_invariant)?;
        self.changes.update_payment(&mut self.payment);
        self.changes.update_refund(&mut self.refund);
        let summary = format!("refund of {} refused: {why}", self.refund.amount.minor());
        self.changes.step(self.order.id, SagaStep::Compensation, StepStatus::Failed, Some(summary), now);
        self.audit(AuditAction::RefundFailed, format!("refund {}: {why}", self.refund.id));
        let mut events = EventWriter::new(&self.order, self.record, now);
        events.payment(&self.payment, &payment_events);
        self.changes.outbox = events.finish();
        Ok(Verdict::Rejected { reason: why, already_cancelled })
    }

    /// No answer to act on: the attempt counted, the next one scheduled, an operator told
    /// once the attempts are spent; the refund stays pending.
    fn still_open(&mut self, cause: &str, settings: &RefundSettings) -> Result<Verdict, AppError> {
        let next =
            self.payment.record_unsettled_lookup(&settings.retry, self.now).map_err(broken_invariant)?;
        self.changes.update_payment(&mut self.payment);
        if next == NextAttempt::Operator {
            let detail = format!(
                "refund {} outcome still unknown after {} attempts ({cause}); an operator must decide",
                self.refund.id, self.payment.reconcile_attempts
            );
            self.audit(AuditAction::RefundUnresolved, detail);
        }
        let reason = format!("payment provider: {cause}; the refund is pending and will be completed");
        Ok(Verdict::Pending { reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::ports::CancelReceipt;
    use crate::domain::ids::OrderId;
    use crate::domain::order::{NewOrder, NewOrderItem, OrderSource, OrderStatus};
    use crate::domain::payment::RefundStatus;
    use crate::domain::retry::RetryPolicy;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    fn settings(max_attempts: i32) -> RefundSettings {
        RefundSettings {
            lease: chrono::Duration::seconds(30),
            retry: RetryPolicy::new(max_attempts, chrono::Duration::minutes(1)),
        }
    }

    /// A completed order of 1 000 whose payment has a refund of `amount` pending.
    fn pending(amount: i64) -> (OrderRecord, RefundId) {
        let input = NewOrder {
            customer_id: "alice".into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency: "KRW".into(),
            items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 1000 }],
        };
        let mut order = Order::place(OrderId::new(), input, now()).expect("a valid order");
        order.status = OrderStatus::Completed;
        let mut payment = Payment::request(order.id, 1, order.total, now());
        payment.approve("tx-1", now()).expect("approved");
        let refund =
            payment.begin_refund(Some(amount), "changed my mind", "alice", None, now()).expect("pending");
        let id = refund.id;
        let record = OrderRecord {
            refunds: vec![refund],
            order,
            payment: Some(payment),
            settlement: None,
            notification: None,
            steps: vec![],
            context: Default::default(),
        };
        (record, id)
    }

    fn refunded(balance_after: Option<i64>) -> RefundAnswer {
        RefundAnswer::Refunded(CancelReceipt { transaction_key: Some("ck-1".into()), balance_after })
    }

    fn refused(already_cancelled: bool) -> RefundAnswer {
        RefundAnswer::Refused { code: "NOT_CANCELABLE".into(), message: "no".into(), already_cancelled }
    }

    /// Every kind of provider answer × a partial and a whole refund: the verdict, what the
    /// refund, the payment and the order become, and what is stepped, audited and announced.
    type Row = (
        i64,
        fn() -> RefundAnswer,
        i32,
        &'static str,
        RefundStatus,
        PaymentStatus,
        OrderStatus,
        Vec<AuditAction>,
        Vec<&'static str>,
    );

    #[test]
    fn every_answer_to_every_refund() {
        use AuditAction as A;
        use OrderStatus::{Cancelled, Completed};
        use PaymentStatus as P;
        use RefundStatus as R;
        let unknown = || RefundAnswer::Unknown("timeout".into());
        #[rustfmt::skip]
        let table: Vec<Row> = vec![
            // amount, answer, max attempts -> verdict, refund, payment, order, audit, events
            (400, || refunded(Some(600)), 5, "refunded", R::Succeeded, P::PartiallyRefunded, Completed, vec![A::Refunded], vec!["payment.refunded"]),
            (1000, || refunded(Some(0)), 5, "refunded", R::Succeeded, P::Refunded, Cancelled, vec![A::Refunded], vec!["payment.refunded", "order.cancelled"]),
            (400, || refunded(Some(0)), 5, "refunded", R::Succeeded, P::PartiallyRefunded, Completed, vec![A::Refunded, A::RefundBalanceMismatch], vec!["payment.refunded"]),
            (1000, || refunded(None), 5, "refunded", R::Succeeded, P::Refunded, Cancelled, vec![A::Refunded], vec!["payment.refunded", "order.cancelled"]),
            (400, || refused(false), 5, "rejected", R::Failed, P::Approved, Completed, vec![A::RefundFailed], vec!["payment.refund_failed"]),
            (1000, || refused(true), 5, "rejected, already cancelled", R::Failed, P::Approved, Completed, vec![A::RefundFailed], vec!["payment.refund_failed"]),
            (400, unknown, 5, "pending", R::Pending, P::RefundPending, Completed, vec![], vec![]),
            (1000, unknown, 1, "pending", R::Pending, P::RefundPending, Completed, vec![A::RefundUnresolved], vec![]),
            (400, || RefundAnswer::StaleBalance("restated".into()), 5, "pending", R::Pending, P::RefundPending, Completed, vec![], vec![]),
        ];
        for row in table {
            check(row);
        }
    }

    /// One row of the table: the decision, and the changes it commits.
    fn check(
        (amount, answer, max, verdict, refund_status, payment_status, order_status, audit, events): Row,
    ) {
        let (record, id) = pending(amount);
        let decided =
            decide(&record, id, answer(), &Actor::system("t"), &settings(max), now(), Changes::default())
                .expect("a pending refund");
        let case = format!("{amount} {verdict} (max {max})");
        let got = match &decided.verdict {
            Verdict::Refunded => "refunded",
            Verdict::Rejected { already_cancelled: false, .. } => "rejected",
            Verdict::Rejected { already_cancelled: true, .. } => "rejected, already cancelled",
            Verdict::Pending { .. } => "pending",
        };
        assert_eq!(got, verdict, "{case}");
        assert_eq!(decided.refund.status, refund_status, "{case}");
        assert_eq!(decided.payment.status, payment_status, "{case}");
        assert_eq!(decided.order.status, order_status, "{case}");
        let audited: Vec<AuditAction> = decided.changes.audit.iter().map(|a| a.action).collect();
        assert_eq!(audited, audit, "{case}");
        let announced: Vec<&str> = decided.changes.outbox.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(announced, events, "{case}");
        let pending = matches!(decided.verdict, Verdict::Pending { .. });
        assert_eq!(decided.changes.steps.len(), usize::from(!pending), "{case}: a decided refund is a step");
        assert_eq!(decided.changes.payments.len(), 1, "{case}: the payment is written");
        assert_eq!(decided.changes.refunds.len(), usize::from(!pending), "{case}");
        if pending {
            let next = decided.payment.next_reconcile_at.expect("the next attempt is due later");
            assert_eq!(
                next,
                now() + chrono::Duration::minutes(1),
                "{case}: the first retry after retry_after"
            );
        }
    }

    #[test]
    fn a_refund_the_record_does_not_hold_is_a_broken_invariant() {
        let (record, _) = pending(400);
        let other = RefundId::new();
        let result = decide(
            &record,
            other,
            refunded(None),
            &Actor::system("t"),
            &settings(5),
            now(),
            Changes::default(),
        );
        assert!(matches!(result, Err(AppError::Internal(_))));
    }
}
