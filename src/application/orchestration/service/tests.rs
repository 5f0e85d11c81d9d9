//! The saga's unit tests against mock ports: placing, running, resuming and holding orders.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use super::*;
use crate::application::orchestration::MAX_DESCRIPTION;
use crate::application::ports::{
    ApprovalOutcome, GatewayError, MockClock, MockNotifier, MockOrderRepository, MockPaymentGateway,
    MockSagaRuns, MockSettlementGateway, MockUnitOfWork, NotifyFailure, OrderContext, Placed, RepoError,
    Scenario, SettlementOutcome,
};
use crate::domain::notification::FailurePolicy;
use crate::domain::order::{FailureStage, NewOrder, NewOrderItem, Order, OrderStart, SagaStep, StepStatus};
use crate::domain::retry::RetryPolicy;

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

struct Mocks {
    orders: MockOrderRepository,
    runs: MockSagaRuns,
    uow: MockUnitOfWork,
    payments: MockPaymentGateway,
    settlements: MockSettlementGateway,
    notifier: MockNotifier,
    committed: Arc<Mutex<Vec<Changes>>>,
}

/// Numbers handed out as a sequence would: 1, 2, 3 …
fn numbered(orders: &mut MockOrderRepository) {
    let next = Arc::new(std::sync::atomic::AtomicI64::new(0));
    orders.expect_next_numbers().returning(move |kinds| {
        Ok(kinds.iter().map(|_| next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1).collect())
    });
}

/// Placements that succeed, numbered 100, 101 … (and recorded in `sink`).
fn placing(uow: &mut MockUnitOfWork, sink: Option<Arc<Mutex<Vec<Changes>>>>) {
    let next = Arc::new(std::sync::atomic::AtomicI64::new(100));
    uow.expect_commit_placing().returning(move |c, payment| {
        if let Some(sink) = &sink {
            sink.lock().unwrap().push(c);
        }
        let take = || next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(Placed { order_number: take(), payment_number: payment.then(take) })
    });
}

/// Leases always granted.
fn leasing() -> MockSagaRuns {
    let mut runs = MockSagaRuns::new();
    runs.expect_lease_saga().returning(|_, _, _| Ok(true));
    runs.expect_release_saga().returning(|_, _| Ok(()));
    runs
}

impl Mocks {
    /// Mocks where every commit succeeds and is recorded.
    fn new() -> Mocks {
        let committed = Arc::new(Mutex::new(Vec::new()));
        let mut uow = MockUnitOfWork::new();
        let sink = committed.clone();
        uow.expect_commit().returning(move |c| {
            sink.lock().unwrap().push(c);
            Ok(())
        });
        placing(&mut uow, Some(committed.clone()));
        let mut orders = MockOrderRepository::new();
        orders.expect_get().returning(|_| Ok(None));
        numbered(&mut orders);
        Mocks {
            orders,
            runs: leasing(),
            uow,
            payments: MockPaymentGateway::new(),
            settlements: MockSettlementGateway::new(),
            notifier: MockNotifier::new(),
            committed,
        }
    }

    fn build(mut self) -> (Orchestrator, Arc<Mutex<Vec<Changes>>>) {
        let runs = Arc::new(std::mem::take(&mut self.runs));
        self.build_on(runs)
    }

    /// The saga on these mocks, with `runs` for its leases.
    fn build_on(self, runs: Arc<dyn SagaRuns>) -> (Orchestrator, Arc<Mutex<Vec<Changes>>>) {
        let mut clock = MockClock::new();
        clock.expect_now().returning(now);
        let orchestrator = Orchestrator::new(
            Arc::new(self.orders),
            runs,
            Arc::new(self.uow),
            Arc::new(self.payments),
            Arc::new(self.settlements),
            Arc::new(self.notifier),
            Arc::new(clock),
            SagaSettings {
                notification_retry: RetryPolicy::new(5, Duration::seconds(60)),
                settlement_retry: RetryPolicy::new(5, Duration::seconds(60)),
                saga_lease: Duration::seconds(60),
                checkout: None,
                hold_expiry: Duration::hours(24),
            },
        );
        (orchestrator, self.committed)
    }
}

fn command() -> PlaceOrder {
    PlaceOrder {
        order_id: OrderId::new(),
        customer_id: None,
        source: OrderSource::Api,
        start: OrderStart::AwaitCheckout,
        meeting_id: None,
        currency: "KRW".into(),
        items: vec![NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 500 }],
        scenario: Scenario::default(),
        correlation_id: Some("corr-1".into()),
        inbox: None,
        customer_email: None,
        description: None,
        keyed_in: None,
        merchant: None,
        store_id: None,
    }
}

fn event_types(committed: &Mutex<Vec<Changes>>) -> Vec<String> {
    committed.lock().unwrap().iter().flat_map(|c| c.outbox.iter().map(|e| e.event_type.clone())).collect()
}

fn approved() -> Result<ApprovalOutcome, GatewayError> {
    Ok(ApprovalOutcome::Approved { provider_transaction_id: "tx-1".into() })
}

#[tokio::test]
async fn settlement_failure_compensates_exactly_once() {
    let mut m = Mocks::new();
    m.payments.expect_approve().times(1).returning(|_| approved());
    m.settlements
        .expect_settle()
        .times(1)
        .returning(|_| Ok(SettlementOutcome::Failed { reason: "bank closed".into() }));
    m.payments
        .expect_cancel()
        .times(1)
        .withf(|c| c.provider_transaction_id == "tx-1")
        .returning(|_| Ok(crate::application::ports::CancelReceipt::default()));
    m.notifier.expect_send().never();
    let (saga, committed) = m.build();

    let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::Cancelled);
    assert_eq!(record.payment.unwrap().status, PaymentStatus::Cancelled);
    assert_eq!(
        event_types(&committed),
        vec!["payment.approved", "settlement.failed", "order.failed", "payment.cancelled", "order.cancelled"]
    );
    let steps: Vec<_> = record.steps.iter().map(|s| (s.step, s.status)).collect();
    assert_eq!(
        steps,
        vec![
            (SagaStep::Payment, StepStatus::Success),
            (SagaStep::Settlement, StepStatus::Failed),
            (SagaStep::Compensation, StepStatus::Success),
        ]
    );
    let commits = committed.lock().unwrap();
    assert!(commits.iter().flat_map(|c| &c.outbox).all(|e| e.correlation_id.as_deref() == Some("corr-1")));
    assert!(commits.iter().flat_map(|c| &c.audit).any(|a| a.action == AuditAction::Compensated));
}

#[tokio::test]
async fn an_unknown_payment_outcome_is_neither_settled_nor_compensated() {
    let mut m = Mocks::new();
    m.payments
        .expect_approve()
        .times(1)
        .returning(|_| Ok(ApprovalOutcome::Unknown { reason: "timeout".into() }));
    m.settlements.expect_settle().never();
    m.payments.expect_cancel().never();
    m.notifier.expect_send().never();
    let (saga, committed) = m.build();

    let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::PendingConfirmation);
    assert_eq!(record.payment.unwrap().status, PaymentStatus::ConfirmationRequired);
    assert!(event_types(&committed).is_empty(), "nothing is announced before the outcome is known");
}

#[tokio::test]
async fn a_notification_failure_undoes_nothing() {
    let mut m = Mocks::new();
    m.payments.expect_approve().times(1).returning(|_| approved());
    m.settlements.expect_settle().times(1).returning(|_| Ok(SettlementOutcome::Succeeded));
    m.notifier.expect_send().times(1).returning(|_| {
        Err(NotifyFailure {
            policy: FailurePolicy::ManualIntervention,
            reason: "smtp down".into(),
            retry_after: None,
        })
    });
    m.payments.expect_cancel().never();
    let (saga, committed) = m.build();

    let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::Failed);
    assert_eq!(record.order.failure_stage, Some(FailureStage::Notification));
    assert_eq!(record.payment.unwrap().status, PaymentStatus::Approved);
    assert_eq!(event_types(&committed), vec!["payment.approved", "notification.failed", "order.failed"]);
    assert_eq!(
        record.steps.last().map(|s| (s.step, s.status)),
        Some((SagaStep::Compensation, StepStatus::Ready))
    );
}

#[tokio::test]
async fn a_lost_race_reloads_and_never_repeats_a_step() {
    let mut m = Mocks::new();
    // The payment commit loses to a concurrent run that approved and settled already.
    let mut uow = MockUnitOfWork::new();
    let calls = Arc::new(Mutex::new(0));
    let counter = calls.clone();
    uow.expect_commit().returning(move |c| {
        let mut n = counter.lock().unwrap();
        *n += 1;
        if c.payments.is_empty() { Ok(()) } else { Err(RepoError::Conflict) }
    });
    let placements = calls.clone();
    uow.expect_commit_placing().times(1).returning(move |_, _| {
        *placements.lock().unwrap() += 1;
        Ok(Placed { order_number: 1, payment_number: Some(1) })
    });
    m.uow = uow;
    let cmd = command();
    let order_id = cmd.order_id;
    let mut orders = MockOrderRepository::new();
    numbered(&mut orders);
    let mut seq = mockall::Sequence::new();
    orders.expect_get().times(1).in_sequence(&mut seq).returning(move |_| {
        let mut order = Order::place(
            order_id,
            NewOrder {
                customer_id: "alice".into(),
                source: OrderSource::Api,
                meeting_id: None,
                currency: "KRW".into(),
                items: vec![NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 500 }],
            },
            now(),
        )
        .unwrap();
        order.status = OrderStatus::Completed;
        let mut payment = Payment::request(order_id, 1, order.total, now());
        payment.approve("tx-other", now()).unwrap();
        Ok(Some(OrderRecord {
            refunds: Vec::new(),
            order,
            payment: Some(payment),
            settlement: None,
            notification: None,
            steps: vec![],
            context: OrderContext::default(),
        }))
    });
    m.orders = orders;
    m.payments.expect_approve().times(1).returning(|_| approved());
    m.settlements.expect_settle().never();
    m.notifier.expect_send().never();
    let (saga, _) = m.build();

    let record = saga.place_order(&Actor::customer("alice"), cmd).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::Completed, "the winner's state is returned");
    assert_eq!(record.payment.unwrap().provider_transaction_id.as_deref(), Some("tx-other"));
    assert_eq!(*calls.lock().unwrap(), 2, "order insert, then the lost payment commit");
}

#[tokio::test]
async fn a_customer_cannot_order_for_someone_else() {
    let mut m = Mocks::new();
    m.payments.expect_approve().never();
    let mut uow = MockUnitOfWork::new();
    uow.expect_commit()
        .times(1)
        .withf(|c| {
            c.new_orders.is_empty() && c.audit.len() == 1 && c.audit[0].action == AuditAction::OrderRejected
        })
        .returning(|_| Ok(()));
    m.uow = uow;
    let (saga, _) = m.build();
    let cmd = PlaceOrder { customer_id: Some("bob".into()), ..command() };
    let err = saga.place_order(&Actor::customer("alice"), cmd).await.unwrap_err();
    assert!(matches!(err, AppError::Forbidden { .. }));
}

#[tokio::test]
async fn a_commerce_order_is_held_in_created_without_a_lease_or_a_payment_number() {
    let mut m = Mocks::new();
    m.payments.expect_approve().never();
    m.settlements.expect_settle().never();
    m.notifier.expect_send().never();
    let (saga, committed) = m.build();
    let cmd = PlaceOrder {
        source: OrderSource::Commerce,
        start: OrderStart::Held,
        customer_id: Some("customer-1".into()),
        description: Some("FAIL_SETTLEMENT".into()),
        ..command()
    };

    let record = saga.place_order(&Actor::admin("commerce:tester"), cmd).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::Created);
    assert_eq!(record.order.number, 100, "numbered with the placement");
    assert!(record.payment.is_none() && record.steps.is_empty());
    assert_eq!(record.context.description.as_deref(), Some("FAIL_SETTLEMENT"));
    let commits = committed.lock().unwrap();
    assert_eq!(commits.len(), 1, "the placement only");
    let (_, context, lease) = &commits[0].new_orders[0];
    assert!(lease.is_none(), "no one drives a held order's saga");
    assert_eq!(context.description.as_deref(), Some("FAIL_SETTLEMENT"));
}

#[tokio::test]
async fn a_description_longer_than_its_column_is_refused() {
    let (saga, committed) = Mocks::new().build();
    let cmd = PlaceOrder { description: Some("d".repeat(MAX_DESCRIPTION + 1)), ..command() };
    let err = saga.place_order(&Actor::customer("alice"), cmd).await.unwrap_err();
    assert!(matches!(err, AppError::Validation { ref field, .. } if field == "description"), "{err:?}");
    assert!(committed.lock().unwrap().is_empty());
}

/// A saga lease store whose release never answers (the database gone, the pool waiting
/// for a connection); it grants every lease.
struct ReleaseHangs;

#[async_trait::async_trait]
impl SagaRuns for ReleaseHangs {
    async fn lease_saga(&self, _: OrderId, _: &SagaLease, _: DateTime<Utc>) -> Result<bool, RepoError> {
        Ok(true)
    }

    async fn release_saga(&self, _: OrderId, _: &str) -> Result<(), RepoError> {
        std::future::pending().await
    }

    async fn stalled(
        &self,
        _: DateTime<Utc>,
        _: DateTime<Utc>,
        _: i32,
        _: u32,
    ) -> Result<Vec<(OrderId, i32)>, RepoError> {
        Ok(Vec::new())
    }

    async fn note_resume(&self, _: OrderId, _: DateTime<Utc>) -> Result<(), RepoError> {
        Ok(())
    }

    async fn stalled_for_operator(&self, _: i32, _: u32) -> Result<Vec<Order>, RepoError> {
        Ok(Vec::new())
    }
}

/// The database failing under a run: the order was committed, so it is the answer, and
/// giving the lease back does not hold it behind a second pool timeout (it is given up
/// after `RELEASE_WAIT`; the lease runs out by itself and the worker resumes the order).
#[tokio::test(start_paused = true)]
async fn a_lease_that_cannot_be_given_back_does_not_hold_the_answer() {
    let mut m = Mocks::new();
    let mut uow = MockUnitOfWork::new();
    placing(&mut uow, None);
    uow.expect_commit().returning(|_| Err(RepoError::unavailable("the database went away")));
    m.uow = uow;
    m.payments.expect_approve().returning(|_| approved());
    let (saga, _) = m.build_on(Arc::new(ReleaseHangs));
    let started = tokio::time::Instant::now();

    let record = saga.place_order(&Actor::customer("alice"), command()).await.unwrap();

    assert_eq!(record.order.status, OrderStatus::Created, "the order as committed");
    assert_eq!(started.elapsed(), crate::application::orchestration::lease::RELEASE_WAIT, "virtual time");
}
