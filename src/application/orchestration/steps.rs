//! The saga's step table: what to do next is a pure function of the stored state.
//!
//! Because the decision reads only what was committed, running the saga again after a
//! crash, a redelivery or a reconciliation resumes exactly where it stopped: a step whose
//! outcome is stored is never attempted again.

use crate::application::ports::OrderRecord;
use crate::domain::notification::{Notification, NotificationStatus};
use crate::domain::order::{FailureStage, Order, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus};
use crate::domain::settlement::{Settlement, SettlementStatus};

/// The next thing the saga must do for an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAction {
    /// Ask the provider to approve payment attempt `attempt`.
    ApprovePayment { attempt: i32 },
    /// Ask for settlement of the approved payment.
    RequestSettlement,
    /// Tell the customer.
    SendNotification,
    /// Undo the approved payment of an order whose settlement failed.
    Compensate,
    /// The payment outcome is unknown: only reconciliation (or a provider callback) may move on.
    AwaitConfirmation,
    /// The provider needs the customer's authorization first (Toss's checkout): only the
    /// customer's `POST /api/orders/{id}/payment`, or the window running out, moves on.
    AwaitPayment,
    /// A notification retry or an operator is needed.
    AwaitRetryOrOperator,
    /// Nothing left to do.
    Done,
}

impl NextAction {
    /// Nothing for a saga run to do now: the order is finished or waits on someone else
    /// (reconciliation, a notification retry, an operator).
    pub fn runs_nothing(&self) -> bool {
        matches!(
            self,
            NextAction::Done
                | NextAction::AwaitConfirmation
                | NextAction::AwaitPayment
                | NextAction::AwaitRetryOrOperator
        )
    }
}

/// The next action of a loaded order, from everything stored about it.
pub fn next_action_of(record: &OrderRecord) -> NextAction {
    next_action(
        &record.order,
        record.payment.as_ref(),
        record.settlement.as_ref(),
        record.notification.as_ref(),
    )
}

/// Decides the next action from the stored state.
pub fn next_action(
    order: &Order,
    payment: Option<&Payment>,
    settlement: Option<&Settlement>,
    notification: Option<&Notification>,
) -> NextAction {
    match order.status {
        OrderStatus::Created | OrderStatus::AwaitingPayment => match payment {
            None if order.status == OrderStatus::AwaitingPayment => NextAction::AwaitPayment,
            None => NextAction::ApprovePayment { attempt: 1 },
            // An attempt that never got an answer is asked again with the same key.
            Some(p) if p.status == PaymentStatus::Requested => {
                NextAction::ApprovePayment { attempt: p.attempt }
            }
            Some(p) if p.status == PaymentStatus::ConfirmationRequired => NextAction::AwaitConfirmation,
            // A decided payment with the order still before its payment cannot be committed
            // (they are written together); wait rather than guess.
            Some(_) => NextAction::AwaitRetryOrOperator,
        },
        OrderStatus::PendingConfirmation => NextAction::AwaitConfirmation,
        // Not yet asked, or asked and its answer not stored (a crash between the call and its
        // outcome), or a retry claimed: the same settlement, under its id.
        OrderStatus::PaymentApproved
            if settlement.is_none_or(|s| s.status == SettlementStatus::Requested) =>
        {
            NextAction::RequestSettlement
        }
        OrderStatus::PaymentApproved => NextAction::AwaitRetryOrOperator,
        // Not yet told, or its first attempt's intent committed and its outcome not (a crash
        // between the two): sent under that notification's id.
        OrderStatus::SettlementRequested
            if notification.is_none_or(|n| n.status == NotificationStatus::Pending) =>
        {
            NextAction::SendNotification
        }
        OrderStatus::SettlementRequested => NextAction::AwaitRetryOrOperator,
        OrderStatus::Failed => match order.failure_stage {
            Some(FailureStage::Settlement)
                if payment.is_some_and(|p| p.status == PaymentStatus::Approved) =>
            {
                NextAction::Compensate
            }
            Some(FailureStage::Notification) => NextAction::AwaitRetryOrOperator,
            _ => NextAction::Done,
        },
        OrderStatus::Completed | OrderStatus::Cancelled => NextAction::Done,
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::domain::ids::{OrderId, PaymentId};
    use crate::domain::money::Money;
    use crate::domain::order::{NewOrder, NewOrderItem, OrderSource};
    use crate::domain::settlement::Settlement;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn order(status: OrderStatus, stage: Option<FailureStage>) -> Order {
        let mut o = Order::place(
            OrderId::new(),
            NewOrder {
                customer_id: "c".into(),
                source: OrderSource::Api,
                meeting_id: None,
                currency: "KRW".into(),
                items: vec![NewOrderItem { sku: "s".into(), quantity: 1, unit_price: 10 }],
            },
            now(),
        )
        .unwrap();
        o.status = status;
        o.failure_stage = stage;
        o
    }

    fn payment(o: &Order, status: PaymentStatus) -> Payment {
        let mut p = Payment::request(o.id, 1, o.total, now());
        p.status = status;
        p
    }

    #[test]
    fn an_order_awaiting_the_customers_authorization_waits_until_it_is_given() {
        let o = order(OrderStatus::AwaitingPayment, None);
        assert_eq!(next_action(&o, None, None, None), NextAction::AwaitPayment);
        assert!(NextAction::AwaitPayment.runs_nothing());
        // The customer authorized it: its intent is committed, the charge goes on (again,
        // after a crash) with the same attempt.
        let p = payment(&o, PaymentStatus::Requested);
        assert_eq!(next_action(&o, Some(&p), None, None), NextAction::ApprovePayment { attempt: 1 });
        let p = payment(&o, PaymentStatus::ConfirmationRequired);
        assert_eq!(next_action(&o, Some(&p), None, None), NextAction::AwaitConfirmation);
    }

    #[test]
    fn the_happy_path_walks_forward() {
        let o = order(OrderStatus::Created, None);
        assert_eq!(next_action(&o, None, None, None), NextAction::ApprovePayment { attempt: 1 });
        let o = order(OrderStatus::PaymentApproved, None);
        let p = payment(&o, PaymentStatus::Approved);
        assert_eq!(next_action(&o, Some(&p), None, None), NextAction::RequestSettlement);
        let o = order(OrderStatus::SettlementRequested, None);
        let s = Settlement::request(o.id, PaymentId::new(), Money::zero(o.currency), now());
        assert_eq!(next_action(&o, Some(&p), Some(&s), None), NextAction::SendNotification);
        let o = order(OrderStatus::Completed, None);
        assert_eq!(next_action(&o, Some(&p), Some(&s), None), NextAction::Done);
    }

    /// docs/spec.md §13: the notification's intent is committed before its first attempt;
    /// found `PENDING` (a crash between the call and its outcome), it is sent again under its
    /// own id — never a second notification.
    #[test]
    fn a_pending_notification_is_sent_again_not_made_anew() {
        use crate::domain::notification::{Notification, NotificationStatus};
        let o = order(OrderStatus::SettlementRequested, None);
        let p = payment(&o, PaymentStatus::Approved);
        let s = Settlement::request(o.id, PaymentId::new(), Money::zero(o.currency), now());
        let mut n = Notification::new(o.id, now());
        assert_eq!(next_action(&o, Some(&p), Some(&s), Some(&n)), NextAction::SendNotification);
        for waiting in [NotificationStatus::RetryScheduled, NotificationStatus::ManualInterventionRequired] {
            n.status = waiting;
            assert_eq!(next_action(&o, Some(&p), Some(&s), Some(&n)), NextAction::AwaitRetryOrOperator);
        }
    }

    #[test]
    fn settlement_failure_compensates_an_approved_payment_once() {
        let o = order(OrderStatus::Failed, Some(FailureStage::Settlement));
        let approved = payment(&o, PaymentStatus::Approved);
        assert_eq!(next_action(&o, Some(&approved), None, None), NextAction::Compensate);
        let cancelled = payment(&o, PaymentStatus::Cancelled);
        assert_eq!(next_action(&o, Some(&cancelled), None, None), NextAction::Done);
    }

    #[test]
    fn unknown_outcomes_wait_for_reconciliation_and_are_never_compensated() {
        let o = order(OrderStatus::PendingConfirmation, None);
        let p = payment(&o, PaymentStatus::ConfirmationRequired);
        assert_eq!(next_action(&o, Some(&p), None, None), NextAction::AwaitConfirmation);
        let o = order(OrderStatus::Created, None);
        assert_eq!(next_action(&o, Some(&p), None, None), NextAction::AwaitConfirmation);
    }

    #[test]
    fn failures_that_need_no_undo_are_done_or_wait() {
        let o = order(OrderStatus::Failed, Some(FailureStage::Payment));
        assert_eq!(next_action(&o, None, None, None), NextAction::Done);
        let o = order(OrderStatus::Failed, Some(FailureStage::Notification));
        assert_eq!(next_action(&o, None, None, None), NextAction::AwaitRetryOrOperator);
    }
}
