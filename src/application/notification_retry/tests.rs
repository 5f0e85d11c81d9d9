//! The notification retries' unit tests, against mock ports.

use chrono::{DateTime, Utc};

use super::*;
use crate::application::ports::{
    MockClock, MockNotificationRepository, MockNotifier, MockOrderRepository, MockUnitOfWork, OrderContext,
};
use crate::domain::ids::OrderId;
use crate::domain::notification::FailurePolicy;
use crate::domain::order::{NewOrder, NewOrderItem, OrderSource};

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

fn failed_order() -> OrderRecord {
    let mut order = Order::place(
        OrderId::new(),
        NewOrder {
            customer_id: "alice".into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency: "KRW".into(),
            items: vec![NewOrderItem { sku: "A".into(), quantity: 1, unit_price: 10 }],
        },
        now(),
    )
    .unwrap();
    order.status = OrderStatus::Failed;
    order.failure_stage = Some(FailureStage::Notification);
    let mut n = Notification::new(order.id, now());
    let policy = RetryPolicy::new(5, Duration::seconds(1));
    n.record_failure(FailurePolicy::AutoRetry, "smtp", &policy, now() - Duration::minutes(1)).unwrap();
    OrderRecord {
        refunds: Vec::new(),
        order,
        payment: None,
        settlement: None,
        notification: Some(n),
        steps: vec![],
        context: OrderContext::default(),
    }
}

fn service(
    orders: MockOrderRepository,
    notifications: MockNotificationRepository,
    uow: MockUnitOfWork,
    notifier: MockNotifier,
) -> NotificationRetry {
    let mut clock = MockClock::new();
    clock.expect_now().returning(now);
    NotificationRetry::new(
        Arc::new(orders),
        Arc::new(notifications),
        Arc::new(uow),
        Arc::new(notifier),
        Arc::new(clock),
        NotificationRetrySettings {
            policy: RetryPolicy::new(5, Duration::seconds(1)),
            lease: Duration::minutes(5),
            batch: 10,
            interval: StdDuration::from_secs(30),
        },
    )
}

#[tokio::test]
async fn a_lost_claim_is_skipped_and_sends_nothing() {
    let record = failed_order();
    let n = record.notification.clone().unwrap();
    let mut notifications = MockNotificationRepository::new();
    let due = n.clone();
    notifications.expect_due().returning(move |_, _| Ok(vec![due.clone()]));
    notifications.expect_find().returning(move |_| Ok(Some(n.clone())));
    let mut orders = MockOrderRepository::new();
    orders.expect_get().returning(move |_| Ok(Some(record.clone())));
    let mut uow = MockUnitOfWork::new();
    uow.expect_commit().times(1).returning(|_| Err(RepoError::Conflict));
    let mut notifier = MockNotifier::new();
    notifier.expect_send().never();

    let report =
        service(orders, notifications, uow, notifier).retry_due(&Actor::system("test")).await.unwrap();
    assert_eq!((report.claimed, report.skipped), (0, 1));
}

#[tokio::test]
async fn a_successful_retry_completes_the_order_with_one_event() {
    let record = failed_order();
    let n = record.notification.clone().unwrap();
    let mut notifications = MockNotificationRepository::new();
    let due = n.clone();
    notifications.expect_due().returning(move |_, _| Ok(vec![due.clone()]));
    notifications.expect_find().returning(move |_| Ok(Some(n.clone())));
    let mut orders = MockOrderRepository::new();
    orders.expect_get().returning(move |_| Ok(Some(record.clone())));
    let committed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = committed.clone();
    let mut uow = MockUnitOfWork::new();
    uow.expect_commit().times(2).returning(move |c| {
        sink.lock().unwrap().push(c);
        Ok(())
    });
    let mut notifier = MockNotifier::new();
    notifier.expect_send().times(1).withf(|r| r.attempt == 2).returning(|_| Ok(()));

    let report =
        service(orders, notifications, uow, notifier).retry_due(&Actor::system("test")).await.unwrap();
    assert_eq!((report.claimed, report.succeeded), (1, 1));
    let commits = committed.lock().unwrap();
    assert_eq!(commits[0].notifications.len(), 1, "the claim");
    assert!(commits[0].outbox.is_empty());
    let events: Vec<_> = commits[1].outbox.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(events, vec!["order.completed"]);
    assert_eq!(commits[1].orders[0].status, OrderStatus::Completed);
}
