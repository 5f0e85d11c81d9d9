//! What a step decided ([`StepOutcome`]): built by each step's pure decision function
//! from (record, provider answer, now), committed by the one `commit_step`.

use chrono::{DateTime, Utc};

use super::steps::{NextAction, next_action};
use crate::application::ports::{Changes, OrderRecord};
use crate::domain::notification::Notification;
use crate::domain::order::Order;
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::settlement::Settlement;

/// Whether the call running the saga has already committed something (the order placed,
/// the customer's authorization recorded): then a failure later is not an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moved {
    Already,
    NotYet,
}

pub(super) enum Progress {
    /// The step committed; decide again.
    Continue,
    /// The saga waits (for reconciliation, a retry or an operator).
    Stop,
    /// Someone else changed the order first: reload and decide again.
    Reload,
}

/// What one step decided: the changes to commit in one transaction and the state they
/// lead to. `Orchestrator::commit_step` commits it for every step alike.
pub(super) struct StepOutcome {
    pub(super) changes: Changes,
    pub(super) order: Order,
    /// The step's aggregate as it is after the commit; `None` leaves the record's as is.
    pub(super) payment: Option<Payment>,
    pub(super) settlement: Option<Settlement>,
    pub(super) notification: Option<Notification>,
    pub(super) progress: Progress,
}

impl StepOutcome {
    pub(super) fn new(changes: Changes, order: Order, progress: Progress) -> Self {
        StepOutcome { changes, order, payment: None, settlement: None, notification: None, progress }
    }
}

/// docs/spec.md §4: intent -> call -> outcome, with the next step's intent in the outcome's
/// own commit. When the state `outcome` leads to has a settlement or a notification to
/// request and none exists yet, its intent (`REQUESTED` / `PENDING`) joins the commit —
/// one transaction fewer per step, and a crash after the commit finds the same intent a
/// commit of its own would have left.
pub(super) fn with_next_intent(record: &OrderRecord, outcome: &mut StepOutcome, now: DateTime<Utc>) {
    let payment = outcome.payment.as_ref().or(record.payment.as_ref());
    let settlement = outcome.settlement.as_ref().or(record.settlement.as_ref());
    let notification = outcome.notification.as_ref().or(record.notification.as_ref());
    match next_action(&outcome.order, payment, settlement, notification) {
        NextAction::RequestSettlement if settlement.is_none() => {
            let Some(payment) = payment.filter(|p| p.status == PaymentStatus::Approved) else { return };
            let mut intent = Settlement::request(outcome.order.id, payment.id, payment.amount, now);
            outcome.changes.insert_settlement(&mut intent);
            outcome.settlement = Some(intent);
        }
        NextAction::SendNotification if notification.is_none() => {
            let mut intent = Notification::new(outcome.order.id, now);
            outcome.changes.insert_notification(&mut intent);
            outcome.notification = Some(intent);
        }
        _ => {}
    }
}

/// A record in a given state, for the steps' table tests.
#[cfg(test)]
pub(super) fn record_in(
    status: crate::domain::order::OrderStatus,
    payment: Option<crate::domain::payment::PaymentStatus>,
) -> crate::application::ports::OrderRecord {
    use crate::domain::ids::OrderId;
    use crate::domain::order::{NewOrder, NewOrderItem, OrderSource};
    let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default();
    let input = NewOrder {
        customer_id: "alice".into(),
        source: OrderSource::Api,
        meeting_id: None,
        currency: "KRW".into(),
        items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 500 }],
    };
    let mut order = Order::place(OrderId::new(), input, now).expect("a valid order");
    order.status = status;
    let payment = payment.map(|s| {
        let mut p = Payment::request(order.id, 1, order.total, now);
        p.status = s;
        p.provider_transaction_id = Some("tx".into());
        p
    });
    crate::application::ports::OrderRecord {
        refunds: Vec::new(),
        order,
        payment,
        settlement: None,
        notification: None,
        steps: vec![],
        context: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::notification::NotificationStatus;
    use crate::domain::order::{FailureStage, OrderStatus};
    use crate::domain::settlement::SettlementStatus;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_100, 0).unwrap_or_default()
    }

    /// What `with_next_intent` adds to a step's commit, for every state a step can commit.
    #[test]
    fn the_next_steps_intent_joins_the_commit_exactly_when_it_is_due_and_missing() {
        use OrderStatus as O;
        use PaymentStatus as P;
        // (order, payment, a settlement exists, a notification exists, failure stage) ->
        // (settlement intent added, notification intent added)
        type Case = (O, Option<P>, bool, bool, Option<FailureStage>, bool, bool);
        let table: &[Case] = &[
            (O::PaymentApproved, Some(P::Approved), false, false, None, true, false),
            (O::PaymentApproved, Some(P::Approved), true, false, None, false, false),
            (O::SettlementRequested, Some(P::Approved), true, false, None, false, true),
            (O::SettlementRequested, Some(P::Approved), true, true, None, false, false),
            (O::Created, Some(P::Requested), false, false, None, false, false),
            (O::Created, None, false, false, None, false, false),
            (O::PendingConfirmation, Some(P::ConfirmationRequired), false, false, None, false, false),
            (O::Failed, Some(P::Declined), false, false, Some(FailureStage::Payment), false, false),
            (O::Failed, Some(P::Approved), true, false, Some(FailureStage::Settlement), false, false),
            (O::Failed, Some(P::Approved), true, true, Some(FailureStage::Notification), false, false),
            (O::Completed, Some(P::Approved), true, true, None, false, false),
            (O::Cancelled, Some(P::Cancelled), true, false, None, false, false),
        ];
        for &(status, payment, has_settlement, has_notification, stage, want_s, want_n) in table {
            let mut record = record_in(status, payment);
            record.order.failure_stage = stage;
            let payment = record.payment.clone();
            if has_settlement {
                let p = payment.as_ref().expect("a settlement follows a payment");
                record.settlement = Some(Settlement::request(record.order.id, p.id, p.amount, now()));
            }
            if has_notification {
                record.notification = Some(Notification::new(record.order.id, now()));
            }
            let mut outcome = StepOutcome::new(Changes::default(), record.order.clone(), Progress::Continue);
            with_next_intent(&record, &mut outcome, now());
            let case =
                format!("{status:?} {payment:?} settlement {has_settlement} notification {has_notification}");
            assert_eq!(outcome.changes.settlements.len(), usize::from(want_s), "{case}");
            assert_eq!(outcome.changes.notifications.len(), usize::from(want_n), "{case}");
            if want_s {
                let s = outcome.settlement.as_ref().expect("the intent is the outcome's settlement");
                let p = payment.as_ref().expect("approved");
                assert_eq!(
                    (s.status, s.payment_id, s.amount, s.order_id),
                    (SettlementStatus::Requested, p.id, p.amount, record.order.id),
                    "{case}"
                );
                assert_eq!(s.version, 1, "{case}: inserted");
            } else {
                assert!(outcome.settlement.is_none(), "{case}");
            }
            if want_n {
                let n = outcome.notification.as_ref().expect("the intent is the outcome's notification");
                assert_eq!(
                    (n.status, n.order_id, n.attempts),
                    (NotificationStatus::Pending, record.order.id, 0),
                    "{case}"
                );
            } else {
                assert!(outcome.notification.is_none(), "{case}");
            }
            assert!(
                outcome.changes.outbox.is_empty() && outcome.changes.audit.is_empty(),
                "{case}: an intent announces nothing"
            );
        }
    }

    /// The intent follows the state the step leads to, not the one it started from.
    #[test]
    fn the_intent_follows_the_outcomes_state() {
        let record = record_in(OrderStatus::Created, Some(PaymentStatus::Requested));
        let mut approved = record.payment.clone().expect("requested");
        approved.status = PaymentStatus::Approved;
        let mut order = record.order.clone();
        order.status = OrderStatus::PaymentApproved;
        let mut outcome = StepOutcome::new(Changes::default(), order, Progress::Continue);
        outcome.payment = Some(approved.clone());
        with_next_intent(&record, &mut outcome, now());
        assert_eq!(outcome.settlement.map(|s| s.payment_id), Some(approved.id));
    }
}
