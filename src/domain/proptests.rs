//! Property tests of the state machines: random action sequences never panic, a refused
//! action changes nothing, and each aggregate's invariants hold after every step.

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;

use crate::domain::ids::OrderId;
use crate::domain::money::Money;
use crate::domain::notification::{FailurePolicy, Notification, NotificationStatus};
use crate::domain::order::{FailureStage, NewOrder, NewOrderItem, Order, OrderSource, OrderStatus};
use crate::domain::payment::{Payment, PaymentStatus, Refund, RefundStatus};
use crate::domain::retry::RetryPolicy;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn order() -> Order {
    Order::place(
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
    .unwrap()
}

fn stage() -> impl Strategy<Value = FailureStage> {
    prop_oneof![Just(FailureStage::Payment), Just(FailureStage::Settlement), Just(FailureStage::Notification)]
}

proptest! {
    #[test]
    fn orders_keep_their_invariants(actions in proptest::collection::vec((0u8..8, stage()), 0..40)) {
        let mut o = order();
        for (action, stage) in actions {
            let before = o.clone();
            let result = match action {
                0 => o.approve_payment(now()),
                1 => o.await_confirmation(now()),
                2 => o.request_settlement(now()),
                3 => o.complete(now()),
                4 => o.fail(stage, crate::domain::order::FailureReason::PaymentDeclined, now()),
                5 => o.compensate(now()),
                6 => o.await_payment(now()),
                _ => o.refund(now()),
            };
            if result.is_err() {
                prop_assert_eq!(&o, &before, "a refused action changes nothing");
            }
            match o.status {
                OrderStatus::Failed => prop_assert!(o.failure_stage.is_some()),
                OrderStatus::Created | OrderStatus::PaymentApproved | OrderStatus::SettlementRequested
                | OrderStatus::PendingConfirmation | OrderStatus::AwaitingPayment | OrderStatus::Completed => {
                    prop_assert!(o.failure_stage.is_none())
                }
                OrderStatus::Cancelled => {}
            }
            prop_assert_eq!(o.total, before.total, "the amount never changes");
        }
    }

    #[test]
    fn payments_keep_their_invariants(actions in proptest::collection::vec((0u8..9, -2i64..14), 0..40)) {
        let mut p = Payment::request(OrderId::new(), 1, Money::new(10, "KRW".parse().unwrap()).unwrap(), now());
        // Every refund the payment handed out, as its caller keeps them.
        let mut refunds: Vec<Refund> = Vec::new();
        for (action, amount) in actions {
            let before = p.clone();
            let pending = refunds.iter().rposition(|r| r.status == RefundStatus::Pending);
            let result = match action {
                0 => p.approve("tx", now()),
                1 => p.decline("NO", None, now()),
                2 => p.require_confirmation(now()),
                3 => p.cancel("x", now()),
                4 => p.begin_refund((amount != 13).then_some(amount), "r", "a", None, now()).map(|r| {
                    refunds.push(r);
                    vec![]
                }),
                5 => match pending {
                    Some(i) => p.refund(&mut refunds[i], None, now()),
                    None => Ok(vec![]),
                },
                6 => match pending {
                    Some(i) => p.record_refund_failure(&mut refunds[i], "x", now()),
                    None => Ok(vec![]),
                },
                7 => p.record_provider_refund(amount, None, "dashboard", now()).map(|(r, e)| {
                    refunds.push(r);
                    e
                }),
                _ => p.record_reconcile_attempt(now(), now()),
            };
            if result.is_err() {
                prop_assert_eq!(&p, &before);
            }
            if matches!(
                p.status,
                PaymentStatus::Approved | PaymentStatus::Cancelled | PaymentStatus::Refunded | PaymentStatus::PartiallyRefunded
            ) {
                prop_assert!(p.provider_transaction_id.is_some(), "money taken is traceable at the provider");
            }
            if !(action == 4 && result.is_ok()) {
                // Only a new refund's intent starts its look-up counters afresh.
                prop_assert!(p.reconcile_attempts >= before.reconcile_attempts);
            }
            let succeeded: i64 =
                refunds.iter().filter(|r| r.status == RefundStatus::Succeeded).map(|r| r.amount.minor()).sum();
            prop_assert_eq!(p.refunded_amount, succeeded, "the payment's refunded amount is its refunds' sum");
            prop_assert!((0..=p.amount.minor()).contains(&p.refunded_amount), "never more than the amount");
            prop_assert!(refunds.iter().filter(|r| r.status == RefundStatus::Pending).count() <= 1);
            prop_assert_eq!(p.status == PaymentStatus::Refunded, p.balance() == 0 && p.refunded_amount > 0);
        }
    }

    #[test]
    fn notifications_keep_their_invariants(
        actions in proptest::collection::vec((0u8..6, 0u8..3), 0..40),
        max_attempts in 1i32..6,
    ) {
        let retry = RetryPolicy::new(max_attempts, Duration::seconds(1));
        let mut n = Notification::new(OrderId::new(), now());
        for (action, policy) in actions {
            let policy = [FailurePolicy::AutoRetry, FailurePolicy::ManualIntervention, FailurePolicy::Ignore][policy as usize];
            let before = n.clone();
            let result = match action {
                0 => n.mark_sent(now()),
                1 => n.record_failure(policy, "x", &retry, now()),
                2 => n.claim(now() + Duration::minutes(1), now()),
                3 => n.reprocess(now() + Duration::minutes(1), now()),
                4 => n.ignore(now()),
                _ => n.release_claim(now()),
            };
            if result.is_err() {
                prop_assert_eq!(&n, &before);
            }
            prop_assert_eq!(n.claimed_until.is_some(), n.status == NotificationStatus::Processing);
            prop_assert_eq!(n.next_attempt_at.is_some(), n.status == NotificationStatus::RetryScheduled);
            prop_assert!(n.attempts >= before.attempts);
            if result.is_ok() && action == 1 && n.status == NotificationStatus::RetryScheduled {
                prop_assert!(n.attempts < max_attempts, "a failure never schedules past the attempts");
            }
        }
    }

    #[test]
    fn placing_never_panics_and_totals_are_exact(
        items in proptest::collection::vec((any::<i64>(), any::<i64>()), 0..5),
        currency in "[A-Z]{3}|[a-z]{3}|.{0,5}",
    ) {
        let input = NewOrder {
            customer_id: "c".into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency,
            items: items.iter().map(|(q, p)| NewOrderItem { sku: "s".into(), quantity: *q, unit_price: *p }).collect(),
        };
        if let Ok(order) = Order::place(OrderId::new(), input, now()) {
            let exact: i128 = items.iter().map(|(q, p)| i128::from(*q) * i128::from(*p)).sum();
            prop_assert_eq!(i128::from(order.total.minor()), exact);
            prop_assert!(items.iter().all(|(q, p)| *q > 0 && *p >= 0));
        }
    }
}
