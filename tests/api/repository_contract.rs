//! The storage ports' contract, run against SQLite and PostgreSQL alike: round trips,
//! conditional updates, claiming and marking of outbox rows, idempotency keys.

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Duration, DurationRound, TimeDelta, Utc};
use orchestrator::adapters::persistence::{SeaOrmIdempotencyStore, SeaOrmOutboxStore, SeaOrmStore};
use orchestrator::application::ports::{
    AuditRecord, Changes, DeliveryFailure, FastBatch, FastRecord, IdempotencyBegin, IdempotencyStore,
    NewOutboxEvent, OrderContext, OrderFilter, OrderRepository, OutboxFilter, OutboxOperations, OutboxUpkeep,
    RelayStore, RepoError, Scenario, StoredResponse, UnitOfWork,
};
use orchestrator::domain::audit::AuditAction;
use orchestrator::domain::ids::{EventId, OrderId};
use orchestrator::domain::order::{
    NewOrder, NewOrderItem, Order, OrderSource, OrderStatus, SagaStep, StepStatus,
};
use orchestrator::domain::outbox::{FailureCode, FailureOutcome, OutboxStatus};
use orchestrator::domain::payment::Payment;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use crate::helpers::{Backend, TestDb, claim_as, scalar};
use crate::on_both_databases;

fn now() -> DateTime<Utc> {
    Utc::now().duration_trunc(TimeDelta::microseconds(1)).unwrap()
}

/// Numbers as the service would take them from the store's sequence (docs/spec.md §3):
/// unique within the test's database.
pub(crate) fn next_number() -> i64 {
    static NEXT: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

fn new_order(customer: &str) -> Order {
    let order = Order::place(
        OrderId::new(),
        NewOrder {
            customer_id: customer.into(),
            source: OrderSource::Api,
            meeting_id: None,
            currency: "EUR".into(),
            items: vec![
                NewOrderItem { sku: "A".into(), quantity: 2, unit_price: 250 },
                NewOrderItem { sku: "B".into(), quantity: 1, unit_price: 100 },
            ],
        },
        now(),
    )
    .unwrap();
    Order { number: next_number(), ..order }
}

fn event(aggregate: &str, event_type: &str) -> NewOutboxEvent {
    NewOutboxEvent {
        event_id: EventId::new(),
        aggregate_type: "order".into(),
        aggregate_id: aggregate.into(),
        event_type: event_type.into(),
        routing_key: event_type.into(),
        payload: format!("{{\"eventType\":\"{event_type}\"}}"),
        correlation_id: Some("corr".into()),
        created_at: now(),
    }
}

struct Stores {
    _db: TestDb,
    conn: DatabaseConnection,
    orders: SeaOrmStore,
    outbox: SeaOrmOutboxStore,
    keys: SeaOrmIdempotencyStore,
    wake: Arc<Notify>,
}

async fn stores(backend: Backend) -> Option<Stores> {
    let db = TestDb::create(backend).await?;
    let conn = db.connect().await;
    let wake = Arc::new(Notify::new());
    Some(Stores {
        orders: SeaOrmStore::new(conn.clone(), wake.clone()),
        outbox: SeaOrmOutboxStore::new(conn.clone(), wake.clone()),
        keys: SeaOrmIdempotencyStore::new(conn.clone()),
        conn,
        wake,
        _db: db,
    })
}

async fn insert(s: &Stores, order: &mut Order, events: Vec<NewOutboxEvent>) {
    let mut changes = Changes::default();
    changes.insert_order(
        order,
        OrderContext {
            scenario: Scenario::parse("settlement=fail").unwrap(),
            correlation_id: Some("c-1".into()),
            causation_id: Some("registration-1".into()),
            customer_email: Some("alice@example.com".into()),
            description: Some("정산 FAIL_SETTLEMENT 설명".into()),
        },
    );
    changes.outbox = events;
    s.orders.commit(changes).await.unwrap();
    on_the_slow_path(&s.conn).await;
}

/// Moves every event to the per-event slow path — where a failure, a held-back event or a
/// migration puts it — whose claims, marks, retries and repairs these tests pin down.
async fn on_the_slow_path(conn: &DatabaseConnection) {
    use sea_orm::ConnectionTrait;
    conn.execute_unprepared("UPDATE outbox_events SET slow = TRUE WHERE NOT slow").await.unwrap();
}

async fn an_order_round_trips_with_its_context(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut order = new_order("alice");
    let mut payment = Payment { number: next_number(), ..Payment::request(order.id, 1, order.total, now()) };
    insert(&s, &mut order, vec![]).await;
    let mut changes = Changes::default();
    payment.approve("tx-1", now()).unwrap();
    order.approve_payment(now()).unwrap();
    changes.insert_payment(&mut payment);
    changes.update_order(&mut order);
    changes.step(order.id, SagaStep::Payment, StepStatus::Success, Some("ok".into()), now());
    s.orders.commit(changes).await.unwrap();

    let record = s.orders.get(order.id).await.unwrap().expect("stored");
    assert_eq!(record.order, order, "every field survives, version included");
    assert_eq!(record.payment, Some(payment));
    assert_eq!(record.context.scenario, Scenario::parse("settlement=fail").unwrap());
    assert_eq!(record.context.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(record.context.description.as_deref(), Some("정산 FAIL_SETTLEMENT 설명"));
    assert_eq!(s.orders.find_by_number(order.number).await.unwrap(), Some(order.id));
    assert_eq!(s.orders.find_by_number(order.number + 1_000_000).await.unwrap(), None);
    assert_eq!(record.steps.len(), 1);
    assert_eq!(record.steps[0].step, SagaStep::Payment);
    assert!(s.orders.get(OrderId::new()).await.unwrap().is_none());
}

async fn a_stale_update_conflicts_and_writes_nothing(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut order = new_order("alice");
    insert(&s, &mut order, vec![]).await;
    let mut stale = order.clone();

    let mut changes = Changes::default();
    order.approve_payment(now()).unwrap();
    changes.update_order(&mut order);
    s.orders.commit(changes).await.unwrap();

    let mut changes = Changes::default();
    stale
        .fail(
            orchestrator::domain::order::FailureStage::Payment,
            orchestrator::domain::order::FailureReason::PaymentDeclined,
            now(),
        )
        .unwrap();
    changes.update_order(&mut stale);
    changes.step(stale.id, SagaStep::Payment, StepStatus::Failed, None, now());
    changes.outbox.push(event(&stale.id.to_string(), "order.failed"));
    changes.audit.push(AuditRecord {
        action: AuditAction::OrderPlaced,
        entity_type: "order".into(),
        entity_id: stale.id.to_string(),
        actor: "t".into(),
        detail: None,
        created_at: now(),
    });
    assert_eq!(s.orders.commit(changes).await, Err(RepoError::Conflict));
    let record = s.orders.get(order.id).await.unwrap().unwrap();
    assert_eq!(record.order.status, OrderStatus::PaymentApproved, "the winner's write stands");
    assert!(record.steps.is_empty(), "the loser's step was rolled back");
    assert_eq!(crate::helpers::count(&s.conn, "outbox_events").await, 0, "and its events");
    assert_eq!(crate::helpers::count(&s.conn, "audit_log").await, 0, "and its audit");

    // Inserting the same order twice is a conflict too.
    let mut again = record.order.clone();
    again.version = 0;
    let mut changes = Changes::default();
    changes.insert_order(&mut again, OrderContext::default());
    assert_eq!(s.orders.commit(changes).await, Err(RepoError::Conflict));
}

/// PostgreSQL commits a change set as one statement (issue 46) unless its parameters would
/// not fit one; such a set (6 000 audit rows, 36 000 values) takes the statement-by-statement
/// path, with the same all-or-nothing answer.
async fn a_change_set_too_big_for_one_statement_commits_and_conflicts_alike(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut order = new_order("alice");
    insert(&s, &mut order, vec![]).await;
    let audit = |n: usize| {
        (0..n)
            .map(|i| AuditRecord {
                action: AuditAction::OrderPlaced,
                entity_type: "order".into(),
                entity_id: format!("{}-{i}", order.id),
                actor: "t".into(),
                detail: None,
                created_at: now(),
            })
            .collect::<Vec<_>>()
    };
    let mut stale = order.clone();
    stale.version -= 1;
    stale.approve_payment(now()).unwrap();
    let mut changes = Changes::default();
    changes.update_order(&mut stale);
    changes.audit = audit(6_000);
    changes.outbox.push(event(&order.id.to_string(), "payment.approved"));
    assert_eq!(s.orders.commit(changes).await, Err(RepoError::Conflict));
    assert_eq!(crate::helpers::count(&s.conn, "audit_log").await, 0, "nothing of the loser's");
    assert_eq!(crate::helpers::count(&s.conn, "outbox_events").await, 0);

    let mut fresh = order.clone();
    fresh.approve_payment(now()).unwrap();
    let mut changes = Changes::default();
    changes.update_order(&mut fresh);
    changes.audit = audit(6_000);
    changes.outbox.push(event(&order.id.to_string(), "payment.approved"));
    s.orders.commit(changes).await.unwrap();
    assert_eq!(crate::helpers::count(&s.conn, "audit_log").await, 6_000);
    assert_eq!(crate::helpers::count(&s.conn, "outbox_events").await, 1);
    let record = s.orders.get(order.id).await.unwrap().unwrap();
    assert_eq!(record.order.status, OrderStatus::PaymentApproved);
}

async fn listing_filters_and_pages(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut ids = Vec::new();
    for customer in ["alice", "bob", "alice", "alice"] {
        let mut o = new_order(customer);
        insert(&s, &mut o, vec![]).await;
        ids.push((customer, o.id));
    }
    let filter = |customer: Option<&str>, before: Option<OrderId>, limit| OrderFilter {
        status: None,
        customer_id: customer.map(str::to_owned),
        number: None,
        source: None,
        before,
        limit,
        ..OrderFilter::default()
    };
    let alice: Vec<OrderId> = ids.iter().rev().filter(|(c, _)| *c == "alice").map(|(_, id)| *id).collect();
    let page = s.orders.list(&filter(Some("alice"), None, 2)).await.unwrap();
    assert_eq!(page.iter().map(|o| o.id).collect::<Vec<_>>(), alice[..2]);
    assert_eq!(page[0].items.len(), 2, "items are loaded");
    let next = s.orders.list(&filter(Some("alice"), Some(page[1].id), 2)).await.unwrap();
    assert_eq!(next.iter().map(|o| o.id).collect::<Vec<_>>(), alice[2..]);
    let created = OrderFilter { status: Some(OrderStatus::Created), ..filter(None, None, 10) };
    assert_eq!(s.orders.list(&created).await.unwrap().len(), 4);
    let completed = OrderFilter { status: Some(OrderStatus::Completed), ..filter(None, None, 10) };
    assert!(s.orders.list(&completed).await.unwrap().is_empty());
    // By the API it came through, and by its number (issue 67: the number the support desk
    // is given).
    let api = OrderFilter { source: Some(OrderSource::Api), ..filter(None, None, 10) };
    assert_eq!(s.orders.list(&api).await.unwrap().len(), 4);
    let meeting = OrderFilter { source: Some(OrderSource::Meeting), ..filter(None, None, 10) };
    assert!(s.orders.list(&meeting).await.unwrap().is_empty());
    let all = s.orders.list(&filter(None, None, 10)).await.unwrap();
    let numbered = OrderFilter { number: Some(all[1].number), ..filter(None, None, 10) };
    let found: Vec<OrderId> = s.orders.list(&numbered).await.unwrap().iter().map(|o| o.id).collect();
    assert_eq!(found, [all[1].id]);
}

async fn committing_events_wakes_the_relay(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut order = new_order("alice");
    let id = order.id.to_string();
    insert(&s, &mut order, vec![event(&id, "order.created")]).await;
    tokio::time::timeout(std::time::Duration::from_secs(1), s.wake.notified())
        .await
        .expect("the relay is woken after a commit with events");
}

async fn claims_take_only_the_head_of_each_aggregate(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut a = new_order("alice");
    let mut b = new_order("bob");
    let (a_id, b_id) = (a.id.to_string(), b.id.to_string());
    insert(&s, &mut a, vec![event(&a_id, "one"), event(&a_id, "two"), event(&a_id, "three")]).await;
    insert(&s, &mut b, vec![event(&b_id, "one")]).await;

    let t = now();
    let first = claim_as(&s.outbox, "w1", 10, t, t + Duration::minutes(5)).await;
    let claimed: Vec<(String, String)> =
        first.iter().map(|e| (e.aggregate_id.clone(), e.event_type.clone())).collect();
    assert_eq!(claimed, vec![(a_id.clone(), "one".into()), (b_id.clone(), "one".into())]);
    assert!(
        first.iter().all(|e| e.status == OutboxStatus::Processing && e.claimed_by.as_deref() == Some("w1"))
    );
    // While "one" is in flight, "two" is not claimable, by anyone.
    assert!(claim_as(&s.outbox, "w2", 10, t, t + Duration::minutes(5)).await.is_empty());

    // Only the owner's mark counts.
    let ids: Vec<i64> = first.iter().map(|e| e.id).collect();
    assert_eq!(s.outbox.mark_published(&ids, "w2", t).await.unwrap(), 0);
    assert_eq!(s.outbox.mark_published(&ids, "w1", t).await.unwrap(), 2);
    let second = claim_as(&s.outbox, "w2", 10, t, t + Duration::minutes(5)).await;
    assert_eq!(second.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), vec!["two"]);

    // A failure waits its backoff, and the aggregate's later event waits behind it.
    let retry_at = t + Duration::seconds(10);
    let failure = DeliveryFailure {
        id: second[0].id,
        outcome: FailureOutcome::Retry { retry_count: 1, next_attempt_at: retry_at },
        code: FailureCode::Nacked,
        reason: "nack".into(),
    };
    assert_eq!(s.outbox.mark_failed(std::slice::from_ref(&failure), "w2", t).await.unwrap(), 1);
    assert!(
        claim_as(&s.outbox, "w1", 10, t, t + Duration::minutes(5)).await.is_empty(),
        "not due, and 'three' waits"
    );
    let due = claim_as(&s.outbox, "w1", 10, retry_at, retry_at + Duration::minutes(5)).await;
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].event_type, "two");
    assert_eq!(due[0].retry_count, 1);
    assert_eq!(due[0].failure_code, Some(FailureCode::Nacked));

    // Dead-lettered: it blocks "three" until an operator acts.
    let dead = DeliveryFailure {
        id: due[0].id,
        outcome: FailureOutcome::DeadLetter { retry_count: 4 },
        code: FailureCode::Unroutable,
        reason: "312 NO_ROUTE".into(),
    };
    assert_eq!(s.outbox.mark_failed(&[dead], "w1", retry_at).await.unwrap(), 1);
    let later = retry_at + Duration::hours(1);
    assert!(
        claim_as(&s.outbox, "w1", 10, later, later).await.is_empty(),
        "a dead letter blocks its aggregate"
    );
    let stats = s.outbox.stats().await.unwrap();
    assert_eq!(stats.blocked_aggregates, 1);
    assert_eq!(stats.dead_letters_by_type, vec![("two".to_owned(), 1)]);
    let count = |status| stats.by_status.iter().find(|(s, _)| *s == status).unwrap().1;
    assert_eq!(
        (count(OutboxStatus::Published), count(OutboxStatus::DeadLetter), count(OutboxStatus::Ready)),
        (2, 1, 1)
    );
    assert!(stats.oldest_ready_created_at.is_some());

    let audit = AuditRecord {
        action: AuditAction::OutboxDiscard,
        entity_type: "outbox_event".into(),
        entity_id: String::new(),
        actor: "ops".into(),
        detail: Some("poison".into()),
        created_at: later,
    };
    let ids = [due[0].id, first[0].id];
    assert_eq!(
        s.outbox.resolve_dead_letters(&ids, true, later, audit).await.unwrap(),
        vec![due[0].id],
        "only dead letters move"
    );
    let unblocked = claim_as(&s.outbox, "w1", 10, later, later + Duration::minutes(5)).await;
    assert_eq!(unblocked.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>(), vec!["three"]);
    assert_eq!(crate::helpers::count(&s.conn, "audit_log").await, 1);
}

async fn republished_dead_letters_start_afresh(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut a = new_order("alice");
    let a_id = a.id.to_string();
    insert(&s, &mut a, vec![event(&a_id, "one")]).await;
    let t = now();
    let claimed = claim_as(&s.outbox, "w", 10, t, t).await;
    let dead = DeliveryFailure {
        id: claimed[0].id,
        outcome: FailureOutcome::DeadLetter { retry_count: 4 },
        code: FailureCode::Nacked,
        reason: "nack".into(),
    };
    s.outbox.mark_failed(&[dead], "w", t).await.unwrap();
    let audit = AuditRecord {
        action: AuditAction::OutboxRepublish,
        entity_type: "outbox_event".into(),
        entity_id: String::new(),
        actor: "ops".into(),
        detail: None,
        created_at: t,
    };
    assert_eq!(
        s.outbox.resolve_dead_letters(&[claimed[0].id], false, t, audit.clone()).await.unwrap(),
        vec![claimed[0].id]
    );
    let again = claim_as(&s.outbox, "w", 10, t, t).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].retry_count, 0, "the retry budget is reset");
    // Not a dead letter any more: a second republish moves nothing.
    assert!(s.outbox.resolve_dead_letters(&[claimed[0].id], false, t, audit).await.unwrap().is_empty());
}

/// Issue 11 item 6: a republished dead letter wakes the relay (no waiting for the idle
/// poll); once published, the earlier failure is cleared; the earliest retry of any worker
/// is visible to an idle relay.
async fn repairs_wake_the_relay_and_publishing_clears_the_failure(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let woken = || async {
        tokio::time::timeout(std::time::Duration::from_millis(50), s.wake.notified()).await.is_ok()
    };
    let mut a = new_order("alice");
    let a_id = a.id.to_string();
    insert(&s, &mut a, vec![event(&a_id, "one"), event(&a_id, "two")]).await;
    assert!(woken().await, "a commit with events wakes the relay");
    let t = now();
    assert_eq!(s.outbox.next_retry_at().await.unwrap(), None);
    let claimed = claim_as(&s.outbox, "w", 1, t, t + Duration::minutes(5)).await;
    let retry_at = t + Duration::seconds(7);
    let retry = DeliveryFailure {
        id: claimed[0].id,
        outcome: FailureOutcome::Retry { retry_count: 1, next_attempt_at: retry_at },
        code: FailureCode::Nacked,
        reason: "nack".into(),
    };
    s.outbox.mark_failed(&[retry], "w", t).await.unwrap();
    assert_eq!(s.outbox.next_retry_at().await.unwrap(), Some(retry_at), "visible to every relay");
    let claimed = claim_as(&s.outbox, "w", 1, retry_at, retry_at + Duration::minutes(5)).await;
    let dead = DeliveryFailure {
        id: claimed[0].id,
        outcome: FailureOutcome::DeadLetter { retry_count: 2 },
        code: FailureCode::Nacked,
        reason: "nack".into(),
    };
    s.outbox.mark_failed(&[dead], "w", t).await.unwrap();
    assert!(!woken().await, "nothing became publishable");
    let audit = AuditRecord {
        action: AuditAction::OutboxRepublish,
        entity_type: "outbox_event".into(),
        entity_id: String::new(),
        actor: "ops".into(),
        detail: None,
        created_at: t,
    };
    s.outbox.resolve_dead_letters(&[claimed[0].id], false, t, audit).await.unwrap();
    assert!(woken().await, "a republish wakes the relay");
    let again = claim_as(&s.outbox, "w", 1, t, t + Duration::minutes(5)).await;
    assert_eq!(again[0].failure_code, Some(FailureCode::Nacked), "still shown while unpublished");
    // A claim whose lease ran out is due at once: recovering it wakes the relay.
    let mut b = new_order("bob");
    let b_id = b.id.to_string();
    insert(&s, &mut b, vec![event(&b_id, "lost")]).await;
    assert!(woken().await);
    let lost = claim_as(&s.outbox, "dead-worker", 10, t, t).await;
    assert_eq!(lost.len(), 1);
    assert_eq!(s.outbox.recover_expired(t + Duration::seconds(1)).await.unwrap(), 1);
    assert!(woken().await, "a recovered lease wakes the relay");
    s.outbox.mark_published(&[again[0].id], "w", t).await.unwrap();
    let published = s.outbox.get(again[0].id).await.unwrap().unwrap();
    assert_eq!(published.status, OutboxStatus::Published);
    assert_eq!((published.failure_code, published.failure_reason), (None, None), "cleared once published");
}

async fn concurrent_claims_never_overlap(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    for _ in 0..10 {
        let mut o = new_order("alice");
        let id = o.id.to_string();
        let events = (0..20).map(|i| event(&format!("{id}-{i}"), "e")).collect();
        insert(&s, &mut o, events).await;
    }
    // Four relays claiming at once, each leasing lanes for its claim and giving them back:
    // the lanes change hands under the claims, and the rows' own claims keep them apart.
    let store = Arc::new(s.outbox.clone());
    let claimed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..4 {
        let (store, claimed) = (store.clone(), claimed.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..10_000 {
                if claimed.load(std::sync::atomic::Ordering::SeqCst) >= 200 {
                    return mine;
                }
                let t = now();
                let batch = claim_as(&*store, &format!("w{w}"), 16, t, t + Duration::minutes(5)).await;
                let ids: Vec<i64> = batch.iter().map(|e| e.id).collect();
                assert_eq!(store.mark_published(&ids, &format!("w{w}"), t).await.unwrap(), ids.len() as u64);
                claimed.fetch_add(ids.len(), std::sync::atomic::Ordering::SeqCst);
                mine.extend(ids);
                if batch.is_empty() {
                    // Another relay holds the lanes right now.
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            }
            panic!("w{w}: 10 000 claims and the rows are still not all claimed");
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(all.len(), 200, "every row claimed");
    assert_eq!(unique.len(), 200, "no row claimed twice");
}

async fn expired_leases_are_recovered_and_old_rows_purged(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let mut o = new_order("alice");
    let id = o.id.to_string();
    insert(&s, &mut o, vec![event(&format!("{id}-1"), "a"), event(&format!("{id}-2"), "b")]).await;
    let t = now();
    let claimed = claim_as(&s.outbox, "dead-worker", 10, t, t + Duration::seconds(30)).await;
    assert_eq!(claimed.len(), 2);
    assert_eq!(s.outbox.recover_expired(t + Duration::seconds(10)).await.unwrap(), 0, "lease still valid");
    assert_eq!(s.outbox.recover_expired(t + Duration::seconds(31)).await.unwrap(), 2);
    // The dead worker's late mark must not overwrite the recovery.
    assert_eq!(s.outbox.mark_published(&[claimed[0].id], "dead-worker", t).await.unwrap(), 0);
    let later = t + Duration::seconds(31);
    let reclaimed = claim_as(&s.outbox, "w2", 10, later, later + Duration::minutes(5)).await;
    assert_eq!(reclaimed.len(), 2);
    assert!(
        reclaimed.iter().all(|e| e.failure_code == Some(FailureCode::LeaseExpired) && e.retry_count == 1)
    );
    s.outbox.mark_published(&[reclaimed[0].id, reclaimed[1].id], "w2", later).await.unwrap();
    assert_eq!(s.outbox.purge(later - Duration::seconds(1), later, 100).await.unwrap(), 0, "too young");
    assert_eq!(s.outbox.purge(later + Duration::seconds(1), later, 1).await.unwrap(), 1, "bounded batch");
    assert_eq!(s.outbox.purge(later + Duration::seconds(1), later, 100).await.unwrap(), 1);
}

async fn idempotency_keys_reserve_complete_and_take_over(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let t = now();
    let order = OrderId::new();
    let lease = t + Duration::seconds(60);
    assert_eq!(
        s.keys.begin("alice", "k", "fp", order, t, lease).await.unwrap(),
        IdempotencyBegin::Started { order_id: order }
    );
    assert_eq!(
        s.keys.begin("alice", "k", "fp", OrderId::new(), t, lease).await.unwrap(),
        IdempotencyBegin::InProgress
    );
    assert_eq!(
        s.keys.begin("alice", "k", "other", OrderId::new(), t, lease).await.unwrap(),
        IdempotencyBegin::InProgress,
        "busy comes first"
    );
    // Scoped to the caller.
    assert!(matches!(
        s.keys.begin("bob", "k", "fp", OrderId::new(), t, lease).await.unwrap(),
        IdempotencyBegin::Started { .. }
    ));
    // A lease that ran out is taken over, resuming the same order id.
    let later = lease + Duration::seconds(1);
    assert_eq!(
        s.keys.begin("alice", "k", "fp", OrderId::new(), later, later + Duration::seconds(60)).await.unwrap(),
        IdempotencyBegin::Started { order_id: order }
    );
    let response = StoredResponse { status: 201, body: "{\"id\":1}".into() };
    s.keys.complete("alice", "k", &response, later).await.unwrap();
    assert_eq!(
        s.keys.begin("alice", "k", "other", OrderId::new(), later, later).await.unwrap(),
        IdempotencyBegin::Mismatch
    );
    assert_eq!(
        s.keys.begin("alice", "k", "fp", OrderId::new(), later, later).await.unwrap(),
        IdempotencyBegin::Completed(response)
    );
    // Released without a response: a retry takes over at once; forgotten: starts afresh.
    s.keys.release("bob", "k", false).await.unwrap();
    assert!(matches!(
        s.keys.begin("bob", "k", "fp", OrderId::new(), t, lease).await.unwrap(),
        IdempotencyBegin::Started { .. }
    ));
    s.keys.release("bob", "k", true).await.unwrap();
    let fresh = OrderId::new();
    assert_eq!(
        s.keys.begin("bob", "k", "new", fresh, t, lease).await.unwrap(),
        IdempotencyBegin::Started { order_id: fresh }
    );
    assert_eq!(s.keys.purge(t + Duration::seconds(1)).await.unwrap(), 2);
}

async fn lanes_are_shared_fairly_and_a_dead_workers_lanes_taken_over(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let t = now();
    let lease = Duration::minutes(5);
    let all: Vec<i16> = (0..16).collect();
    let lease_at = |worker: &'static str, at: DateTime<Utc>| {
        let outbox = &s.outbox;
        async move {
            outbox
                .lease_lanes(worker, 16, at, at + lease)
                .await
                .unwrap()
                .into_iter()
                .map(|h| h.lane)
                .collect::<Vec<i16>>()
        }
    };
    assert_eq!(lease_at("w1", t).await, all, "alone, a worker holds every lane");
    assert_eq!(lease_at("w2", t).await, Vec::<i16>::new(), "nothing is free yet");
    assert_eq!(lease_at("w1", t).await, (0..8).collect::<Vec<_>>(), "w1 gives back its highest half");
    assert_eq!(lease_at("w2", t).await, (8..16).collect::<Vec<_>>());
    assert_eq!(lease_at("w3", t).await, Vec::<i16>::new());
    assert_eq!(lease_at("w1", t).await, (0..6).collect::<Vec<_>>(), "a third of 16, rounded up");
    assert_eq!(lease_at("w2", t).await, (8..14).collect::<Vec<_>>());
    assert_eq!(lease_at("w3", t).await, vec![6, 7, 14, 15]);

    // w1 dies. Before its lease runs out nobody may take its lanes; after, the others do.
    let before = t + Duration::minutes(4);
    assert_eq!(lease_at("w2", before).await, (8..14).collect::<Vec<_>>());
    assert_eq!(lease_at("w3", before).await, vec![6, 7, 14, 15]);
    let after = t + Duration::minutes(6);
    let w2 = lease_at("w2", after).await;
    let w3 = lease_at("w3", after).await;
    let mut union: Vec<i16> = w2.iter().chain(&w3).copied().collect();
    union.sort_unstable();
    assert_eq!(union, all, "every lane has an owner again: w2 {w2:?}, w3 {w3:?}");
    assert_eq!((w2.len(), w3.len()), (8, 8), "and they share them evenly");

    // A graceful stop gives the lanes back at once.
    s.outbox.release_lanes("w3").await.unwrap();
    assert_eq!(lease_at("w2", after).await, all);
}

async fn a_worker_that_lost_its_lane_claims_nothing_there(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let t = now();
    let mut order = new_order("alice");
    let aggregate = order.id.to_string();
    insert(&s, &mut order, vec![event(&aggregate, "order.completed")]).await;
    let stored = s.outbox.for_aggregate("order", &aggregate).await.unwrap();
    let lane = orchestrator::domain::outbox::lanes::lane_of("order", &aggregate, 16);
    assert_eq!(stored[0].lane, lane, "an event is stored in its aggregate's lane");

    let held: Vec<i16> = s
        .outbox
        .lease_lanes("w1", 16, t, t + Duration::seconds(30))
        .await
        .unwrap()
        .iter()
        .map(|h| h.lane)
        .collect();
    assert!(held.contains(&lane));
    // w1 is paused past its lease; w2 takes every lane over.
    let later = t + Duration::minutes(1);
    assert_eq!(s.outbox.lease_lanes("w2", 16, later, later + Duration::minutes(5)).await.unwrap().len(), 16);
    let until = later + Duration::minutes(5);
    let stale = s.outbox.claim("w1", &held, 10, later, until).await.unwrap();
    assert!(stale.is_empty(), "the old owner's view of its lanes is fenced");
    let fresh = s.outbox.claim("w2", &[lane], 10, later, until).await.unwrap();
    assert_eq!(fresh.len(), 1, "the new owner claims the row");
    // w1 wakes up and renews: it holds nothing until w2 gives lanes back.
    assert!(s.outbox.lease_lanes("w1", 16, later, later + Duration::minutes(5)).await.unwrap().is_empty());
    assert!(s.outbox.claim("w2", &[], 10, later, later).await.unwrap().is_empty());
}

/// The fast path's cursor is the store's: a batch read ahead starts past the unrecorded
/// ones whose tokens it is given, an unrecorded batch is handed out again, and a batch
/// recorded after its lanes changed hands is fenced — its events go to the next owner.
async fn fast_batches_read_ahead_and_a_fenced_record_leaves_them_to_the_next_owner(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let t = now();
    let events = (0..40).map(|i| event(&format!("agg-{i}"), "order.completed")).collect();
    s.orders.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
    let ids = |b: &FastBatch| b.rows.iter().map(|r| r.id).collect::<Vec<_>>();
    let record = |b: &FastBatch| FastRecord {
        batches: vec![b.token.clone()],
        failures: vec![],
        held_back: vec![],
        attempted_at: t,
    };
    let held = s.outbox.lease_lanes("w1", 16, t, t + Duration::seconds(30)).await.unwrap();
    // At most 16 events per batch.
    let first = s.outbox.next_batch("w1", &held, &[], 16).await.unwrap().unwrap();
    let second =
        s.outbox.next_batch("w1", &held, std::slice::from_ref(&first.token), 16).await.unwrap().unwrap();
    assert!(ids(&first).iter().all(|id| !ids(&second).contains(id)), "read ahead, past the first");
    let again = s.outbox.next_batch("w1", &held, &[], 16).await.unwrap().unwrap();
    assert_eq!(ids(&again), ids(&first), "a batch not recorded is handed out again");

    assert!(s.outbox.record_batches("w1", &record(&first), t).await.unwrap().is_empty());
    // w1 is paused past its lease; w2 takes every lane over.
    let later = t + Duration::minutes(1);
    let held2 = s.outbox.lease_lanes("w2", 16, later, later + Duration::minutes(5)).await.unwrap();
    assert_eq!(held2.len(), 16);
    let mut fenced = s.outbox.record_batches("w1", &record(&second), later).await.unwrap();
    fenced.sort_unstable();
    let mut lanes: Vec<i16> = second.rows.iter().map(|r| r.lane).collect();
    lanes.dedup();
    assert_eq!(fenced, lanes, "every lane of the late record is fenced off");

    let (mut seen, mut tokens) = (Vec::new(), Vec::new());
    while let Some(batch) = s.outbox.next_batch("w2", &held2, &tokens, 1_000).await.unwrap() {
        seen.extend(ids(&batch));
        tokens.push(batch.token);
        assert!(seen.len() <= 40, "no event twice");
    }
    seen.sort_unstable();
    let mut expected: Vec<i64> = s
        .outbox
        .list(&OutboxFilter { limit: 100, ..Default::default() })
        .await
        .unwrap()
        .iter()
        .map(|r| r.id)
        .filter(|id| !ids(&first).contains(id))
        .collect();
    expected.sort_unstable();
    assert_eq!(seen, expected, "the next owner sends all but what was recorded, the fenced batch included");
}

/// A batch says whether its lanes may hold more that committed before it was read: not
/// when it took every event there was (a trickle's relay then waits for the next commit's
/// wake-up), but when a lane had more than the batch took, or was not read afresh because a
/// batch before is not recorded yet.
async fn a_batch_says_whether_its_lanes_hold_more(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    let t = now();
    let record = |b: &FastBatch| FastRecord {
        batches: vec![b.token.clone()],
        failures: vec![],
        held_back: vec![],
        attempted_at: t,
    };
    let commit = |n: usize, tag: &'static str| {
        let events = (0..n).map(|i| event(&format!("{tag}-{i}"), "order.completed")).collect();
        s.orders.commit(Changes { outbox: events, ..Default::default() })
    };
    let held = s.outbox.lease_lanes("w1", 16, t, t + Duration::seconds(30)).await.unwrap();
    commit(3, "few").await.unwrap();
    let all = s.outbox.next_batch("w1", &held, &[], 256).await.unwrap().unwrap();
    assert_eq!(all.rows.len(), 3);
    assert!(!all.more, "the batch took every event there was");
    assert!(s.outbox.record_batches("w1", &record(&all), t).await.unwrap().is_empty());

    // 40 events over 16 lanes, one per lane per batch: some lane has more.
    commit(40, "many").await.unwrap();
    let first = s.outbox.next_batch("w1", &held, &[], 16).await.unwrap().unwrap();
    assert!(first.more, "a lane had more than the batch took");
    let mut tokens = vec![first.token.clone()];
    let mut last = first;
    while let Some(batch) = s.outbox.next_batch("w1", &held, &tokens, 1_000).await.unwrap() {
        assert!(batch.more, "read past a batch not recorded: its lanes were not read afresh");
        tokens.push(batch.token.clone());
        last = batch;
    }
    let done = FastRecord { batches: tokens, failures: vec![], held_back: vec![], attempted_at: t };
    assert!(s.outbox.record_batches("w1", &done, t).await.unwrap().is_empty());
    assert!(last.more);
    assert!(s.outbox.next_batch("w1", &held, &[], 1_000).await.unwrap().is_none(), "all 43 recorded");

    commit(1, "one").await.unwrap();
    let one = s.outbox.next_batch("w1", &held, &[], 256).await.unwrap().unwrap();
    assert_eq!((one.rows.len(), one.more), (1, false), "a trickle of one, every lane read afresh");
}

/// A batch takes up to its limit over the lanes that have events: a lane with few gives its
/// share to the others, so that a drain's last events, left in a few lanes, still go in
/// full batches (not a lane's even share of the limit each).
async fn a_batch_fills_up_from_the_lanes_that_have_more(backend: Backend) {
    let Some(s) = stores(backend).await else {
        return;
    };
    use orchestrator::domain::outbox::lanes::lane_of;
    let t = now();
    let busy = "busy".to_owned();
    let quiet =
        (0..).map(|i| format!("quiet-{i}")).find(|a| lane_of("order", a, 16) != lane_of("order", &busy, 16));
    let quiet = quiet.unwrap_or_default();
    let mut events = vec![event(&quiet, "order.completed")];
    events.extend((0..20).map(|_| event(&busy, "order.completed")));
    s.orders.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
    let held = s.outbox.lease_lanes("w1", 16, t, t + Duration::seconds(30)).await.unwrap();

    let first = s.outbox.next_batch("w1", &held, &[], 8).await.unwrap().unwrap();
    let of = |b: &FastBatch, a: &str| b.rows.iter().filter(|r| r.aggregate_id == a).count();
    assert_eq!(
        (of(&first, &quiet), of(&first, &busy)),
        (1, 7),
        "the quiet lane's share goes to the busy one"
    );
    assert!(first.more);
    let rest =
        s.outbox.next_batch("w1", &held, std::slice::from_ref(&first.token), 32).await.unwrap().unwrap();
    assert_eq!((of(&rest, &quiet), of(&rest, &busy)), (0, 13), "the rest in one batch");
    let ids: Vec<i64> =
        first.rows.iter().chain(&rest.rows).filter(|r| r.aggregate_id == busy).map(|r| r.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "the busy aggregate's events in order");
}

on_both_databases!(
    an_order_round_trips_with_its_context,
    a_batch_fills_up_from_the_lanes_that_have_more,
    a_batch_says_whether_its_lanes_hold_more,
    fast_batches_read_ahead_and_a_fenced_record_leaves_them_to_the_next_owner,
    a_stale_update_conflicts_and_writes_nothing,
    a_change_set_too_big_for_one_statement_commits_and_conflicts_alike,
    listing_filters_and_pages,
    committing_events_wakes_the_relay,
    claims_take_only_the_head_of_each_aggregate,
    republished_dead_letters_start_afresh,
    repairs_wake_the_relay_and_publishing_clears_the_failure,
    concurrent_claims_never_overlap,
    expired_leases_are_recovered_and_old_rows_purged,
    idempotency_keys_reserve_complete_and_take_over,
    lanes_are_shared_fairly_and_a_dead_workers_lanes_taken_over,
    a_worker_that_lost_its_lane_claims_nothing_there,
);

/// The relay stalled for seconds per batch once PostgreSQL switched the cached claim
/// statement to a generic plan (after its fifth execution). Every session of the outbox's
/// pool must plan each execution with its bound values: no generic plan, however often a
/// statement runs. The fast path's statements, on a pool of their own, are the opposite:
/// planned once per session (planned anew each time they cost a trickle three times their
/// execution), and their one plan reads `idx_outbox_fast`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_statements_never_run_on_a_generic_plan_on_postgres() {
    use sea_orm::{ConnectionTrait, Statement};
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    // One connection per pool: the statistics below are per session.
    let (conn, fast, outbox, orders) = relay_pools(&db).await;
    let events = (0..20).map(|i| event(&format!("agg-{i}"), "order.completed")).collect();
    orders.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
    on_the_slow_path(&conn).await;
    for _ in 0..10 {
        let t = now();
        let claimed = claim_as(&outbox, "w", 2, t, t + Duration::minutes(5)).await;
        let ids: Vec<i64> = claimed.iter().map(|r| r.id).collect();
        outbox.mark_published(&ids, "w", t).await.unwrap();
    }
    // The fast path's statements too: the snapshot difference, the fenced record.
    let t = now();
    let held = outbox.lease_lanes("w", 16, t, t + Duration::minutes(5)).await.unwrap();
    for i in 0..10 {
        let events = (0..4).map(|j| event(&format!("fast-{i}-{j}"), "order.completed")).collect();
        orders.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
        let batch = outbox.next_batch("w", &held, &[], 256).await.unwrap().unwrap();
        assert_eq!(batch.rows.len(), 4, "round {i}");
        let record =
            FastRecord { batches: vec![batch.token], failures: vec![], held_back: vec![], attempted_at: t };
        assert!(outbox.record_batches("w", &record, t).await.unwrap().is_empty(), "nothing fenced");
    }
    let prepared = |conn: sea_orm::DatabaseConnection, like: &'static str| async move {
        conn.query_all_raw(Statement::from_string(
            conn.get_database_backend(),
            format!("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements WHERE {like}"),
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            let statement: String = row.try_get("", "statement").unwrap();
            let generic: i64 = row.try_get("", "generic_plans").unwrap();
            let custom: i64 = row.try_get("", "custom_plans").unwrap();
            (statement, generic, custom)
        })
        .collect::<Vec<_>>()
    };
    let slow = prepared(conn.clone(), "statement LIKE 'UPDATE outbox_events%'").await;
    assert!(!slow.is_empty(), "the claim and mark statements are prepared and cached");
    for (statement, generic, custom) in slow {
        assert_eq!(generic, 0, "generic plan used for {statement}");
        if statement.starts_with("UPDATE outbox_events SET status") {
            // The claim and the mark ran often enough for PostgreSQL to consider a generic plan.
            assert!(custom >= 10, "{custom} custom plans for {statement}");
        }
    }
    let hot = prepared(
        fast.clone(),
        "statement LIKE 'INSERT INTO outbox_progress%' OR statement LIKE 'WITH f AS%'",
    )
    .await;
    assert_eq!(hot.len(), 2, "the fill and the record, on the fast path's pool: {hot:?}");
    for (statement, generic, custom) in &hot {
        assert_eq!(*custom, 0, "planned anew: {statement}");
        assert!(*generic >= 10, "{generic} runs of the kept plan for {statement}");
    }
    // The fill's kept plan reads the lanes' differences on their index.
    let fill = &hot.iter().find(|(s, _, _)| s.starts_with("WITH f AS")).unwrap().0;
    let plan = fast
        .query_all_raw(Statement::from_string(
            fast.get_database_backend(),
            "SELECT name FROM pg_prepared_statements WHERE statement LIKE 'WITH f AS%'",
        ))
        .await
        .unwrap();
    let name: String = plan[0].try_get("", "name").unwrap();
    let explained = fast
        .query_all_raw(Statement::from_string(
            fast.get_database_backend(),
            format!(
                "EXPLAIN EXECUTE {name}('{{3}}'::smallint[], '{{\"\"}}'::text[], '{{\"\"}}'::text[], '{{0}}'::bigint[], 16384, 64)"
            ),
        ))
        .await;
    match explained {
        Ok(rows) => {
            let text: Vec<String> =
                rows.iter().map(|r| r.try_get::<String>("", "QUERY PLAN").unwrap()).collect();
            assert!(text.iter().any(|l| l.contains("idx_outbox_fast")), "{fill}\n{}", text.join("\n"));
        }
        Err(err) => panic!("EXPLAIN EXECUTE {name}: {err}\n{fill}"),
    }
    // Each of those batches was read whole by the fill that found it (every lane filled
    // afresh, as at a trickle): the read by id never ran.
    let by_id =
        prepared(fast, "statement LIKE 'SELECT o.id, %AS held FROM outbox_events o WHERE o.id = ANY%'").await;
    assert!(by_id.is_empty(), "a batch read by id after its fill");
}

/// A snapshot difference larger than one slice of ids (16 384) is read slice by slice:
/// every event exactly once, in id order, and the lane's floor moves only at its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_difference_bigger_than_a_slice_is_read_whole_on_postgres() {
    use orchestrator::domain::outbox::lanes::lane_of;
    let Some(s) = stores(Backend::Postgres).await else { return };
    let aggregates: Vec<String> =
        (0..).map(|i| format!("agg-{i}")).filter(|a| lane_of("order", a, 16) == 5).take(17_000).collect();
    for chunk in aggregates.chunks(2_000) {
        let events = chunk.iter().map(|a| event(a, "order.completed")).collect();
        s.orders.commit(Changes { outbox: events, ..Default::default() }).await.unwrap();
    }
    let t = now();
    let held = s.outbox.lease_lanes("w", 16, t, t + Duration::minutes(5)).await.unwrap();
    let mut seen = Vec::new();
    while let Some(batch) = s.outbox.next_batch("w", &held, &[], 4_096 * 16).await.unwrap() {
        seen.extend(batch.rows.iter().map(|r| r.id));
        let record =
            FastRecord { batches: vec![batch.token], failures: vec![], held_back: vec![], attempted_at: t };
        s.outbox.record_batches("w", &record, t).await.unwrap();
        assert!(seen.len() <= 17_000, "no event twice");
    }
    assert_eq!(seen.len(), 17_000, "every event once");
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "in id order");
    let stats = s.outbox.stats().await.unwrap();
    let published = stats.by_status.iter().find(|(st, _)| *st == OutboxStatus::Published).unwrap().1;
    assert_eq!(published, 17_000, "and the lane's progress covers them all");
}

/// A fast-path record whose events all went out commits without waiting for the WAL flush
/// (`synchronous_commit` off for its own transaction: docs/decisions.md). The setting must
/// end with that transaction: left on a pooled connection it would make the next commit on
/// it (an order's events, a slow-path failure) lose data to a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_asynchronous_commit_ends_with_its_transaction_on_postgres() {
    use sea_orm::{ConnectionTrait, Statement};
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    db.connect().await; // migrated
    // One connection: every statement below runs on the session the record ran on.
    let conn =
        orchestrator::adapters::persistence::connect_outbox(&db.url, 1, Default::default()).await.unwrap();
    let outbox = SeaOrmOutboxStore::new(conn.clone(), Arc::new(Notify::new()));
    let orders = SeaOrmStore::new(conn.clone(), Arc::new(Notify::new()));
    let synchronous_commit = || async {
        let row = conn
            .query_one_raw(Statement::from_string(conn.get_database_backend(), "SHOW synchronous_commit"))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<String>("", "synchronous_commit").unwrap()
    };
    assert_eq!(synchronous_commit().await, "on", "the server's default");
    let t = now();
    let held = outbox.lease_lanes("w", 16, t, t + Duration::minutes(5)).await.unwrap();
    let commit_four = |from: usize| {
        let events = (from..from + 4).map(|i| event(&format!("agg-{i}"), "order.completed")).collect();
        orders.commit(Changes { outbox: events, ..Default::default() })
    };

    // Every event out: the asynchronous record.
    commit_four(0).await.unwrap();
    let batch = outbox.next_batch("w", &held, &[], 256).await.unwrap().unwrap();
    assert_eq!(batch.rows.len(), 4);
    let record =
        FastRecord { batches: vec![batch.token], failures: vec![], held_back: vec![], attempted_at: t };
    assert!(outbox.record_batches("w", &record, t).await.unwrap().is_empty(), "nothing fenced");
    assert_eq!(synchronous_commit().await, "on", "the record's setting ended with its transaction");
    let published = |stats: orchestrator::application::ports::OutboxStats| {
        stats.by_status.iter().find(|(st, _)| *st == OutboxStatus::Published).map_or(0, |s| s.1)
    };
    assert_eq!(published(outbox.stats().await.unwrap()), 4, "and it recorded the batch");

    // One refused: the synchronous record, in a transaction of its own.
    commit_four(4).await.unwrap();
    let batch = outbox.next_batch("w", &held, &[], 256).await.unwrap().unwrap();
    let refused = batch.rows[0].id;
    let record = FastRecord {
        batches: vec![batch.token],
        failures: vec![DeliveryFailure {
            id: refused,
            outcome: FailureOutcome::Retry { retry_count: 1, next_attempt_at: t + Duration::seconds(5) },
            code: FailureCode::Nacked,
            reason: "nack".into(),
        }],
        held_back: vec![],
        attempted_at: t,
    };
    assert!(outbox.record_batches("w", &record, t).await.unwrap().is_empty(), "nothing fenced");
    assert_eq!(synchronous_commit().await, "on");
    assert_eq!(published(outbox.stats().await.unwrap()), 7, "all but the refused one");
    let retrying = outbox
        .list(&OutboxFilter { status: Some(OutboxStatus::RetryWait), limit: 10, ..Default::default() })
        .await
        .unwrap();
    assert_eq!(retrying.iter().map(|r| r.id).collect::<Vec<_>>(), vec![refused]);
}

/// Adds `by` to every transaction id in a snapshot's text (`xmin:xmax:xip,...`).
fn shifted_snapshot(snapshot: &str, by: u64) -> String {
    snapshot
        .split(':')
        .map(|part| {
            part.split(',')
                .filter(|n| !n.is_empty())
                .map(|n| (n.parse::<u64>().unwrap() + by).to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// What `app outbox rebase` run by operator `ops` at `at` audits.
fn rebase_audit(at: DateTime<Utc>) -> AuditRecord {
    AuditRecord {
        action: AuditAction::OutboxRebase,
        entity_type: "outbox".into(),
        entity_id: String::new(),
        actor: "cli:ops".into(),
        detail: None,
        created_at: at,
    }
}

/// A restore from a logical dump (`pg_dump`) brings another server's transaction ids with
/// the rows: here the dump of a server a million ids ahead of this one. Relayed as it is,
/// the restored progress log would count this server's new events as sent. `serve` refuses
/// to start on it; `rebase_restored` (`app outbox rebase`) keeps what the old server sent as
/// sent and sends the rest, after which new events flow and nothing is sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_restored_from_another_server_is_refused_then_made_its_own_on_postgres() {
    use sea_orm::{ConnectionTrait, FromQueryResult, Statement};
    #[derive(FromQueryResult)]
    struct Progress {
        id: i64,
        done: Option<String>,
        cur: Option<String>,
    }
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let conn = db.connect().await;
    let outbox = SeaOrmOutboxStore::new(conn.clone(), Arc::new(Notify::new()));
    let orders = SeaOrmStore::new(conn.clone(), Arc::new(Notify::new()));
    let t = now();
    let held = outbox.lease_lanes("w", 16, t, t + Duration::minutes(5)).await.unwrap();
    let record =
        |token| FastRecord { batches: vec![token], failures: vec![], held_back: vec![], attempted_at: t };
    let commit =
        |events: Vec<NewOutboxEvent>| orders.commit(Changes { outbox: events, ..Default::default() });
    assert!(!outbox.restored_history().await.unwrap(), "a history of its own");

    // On the old server: a1 and b1 sent and recorded, a2 committed after.
    commit(vec![event("agg-a", "order.created"), event("agg-b", "order.created")]).await.unwrap();
    let batch = outbox.next_batch("w", &held, &[], 64).await.unwrap().expect("a1, b1");
    assert_eq!(batch.rows.len(), 2);
    assert!(outbox.record_batches("w", &record(batch.token), t).await.unwrap().is_empty());
    commit(vec![event("agg-a", "order.completed")]).await.unwrap();
    // Dumped there and restored here: the same rows, ids a million ahead of this server.
    const AHEAD: u64 = 1_000_000;
    conn.execute_unprepared(&format!(
        "UPDATE outbox_events SET txid = (txid::text::bigint + {AHEAD})::text::xid8"
    ))
    .await
    .unwrap();
    let progress = Progress::find_by_statement(Statement::from_string(
        conn.get_database_backend(),
        "SELECT id, done, cur FROM outbox_progress",
    ))
    .all(&conn)
    .await
    .unwrap();
    assert!(!progress.is_empty());
    for p in progress {
        conn.execute_raw(Statement::from_sql_and_values(
            conn.get_database_backend(),
            "UPDATE outbox_progress SET done = $1, cur = $2 WHERE id = $3",
            [
                p.done.map(|s| shifted_snapshot(&s, AHEAD)).into(),
                p.cur.map(|s| shifted_snapshot(&s, AHEAD)).into(),
                p.id.into(),
            ],
        ))
        .await
        .unwrap();
    }
    assert!(outbox.restored_history().await.unwrap(), "another server's history");

    // The service refuses to start on it, naming the repair.
    let refused = orchestrator::startup::Application::build(crate::helpers::settings(&db, &[])).await;
    let message = match refused {
        Err(err) => err.to_string(),
        Ok(_) => panic!("the service started on another server's history"),
    };
    assert!(message.contains("app outbox rebase"), "{message}");

    let audit = rebase_audit(t);
    let rebased = outbox.rebase_restored(audit.clone()).await.unwrap();
    assert_eq!(
        rebased,
        orchestrator::application::ports::RestoredRebase { restored: true, kept_sent: 2, to_send: 1 }
    );
    let audited = "action = 'OUTBOX_REBASE' AND actor = 'cli:ops' \
                   AND detail = '2 event(s) kept as sent, 1 to send'";
    assert_eq!(crate::helpers::count_where(&conn, "audit_log", audited).await, 1, "the repair is audited");
    assert!(!outbox.restored_history().await.unwrap(), "its own history now");
    assert!(!outbox.rebase_restored(audit).await.unwrap().restored, "a second run changes nothing");
    assert_eq!(crate::helpers::count(&conn, "audit_log").await, 1, "and audits nothing");

    // New events flow; what the old server sent is not sent again; a2 goes first.
    commit(vec![event("agg-c", "order.created")]).await.unwrap();
    let mut sent = Vec::new();
    for _ in 0..4 {
        match outbox.next_batch("w", &held, &[], 64).await {
            Ok(Some(batch)) => {
                sent.extend(batch.rows.iter().map(|r| format!("{} {}", r.aggregate_id, r.event_type)));
                assert!(outbox.record_batches("w", &record(batch.token), t).await.unwrap().is_empty());
            }
            Ok(None) => {}
            // The relay that read the old history learns of the new incarnation and reads
            // its lanes again.
            Err(err) => eprintln!("read after the rebase: {err}"),
        }
    }
    sent.sort();
    assert_eq!(sent, vec!["agg-a order.completed", "agg-c order.created"]);
    let stats = outbox.stats().await.unwrap();
    let published = stats.by_status.iter().find(|(s, _)| *s == OutboxStatus::Published).unwrap().1;
    let ready = stats.by_status.iter().find(|(s, _)| *s == OutboxStatus::Ready).unwrap().1;
    assert_eq!((published, ready), (4, 0), "{stats:?}");
}

#[tokio::test]
async fn a_sqlite_history_is_always_its_own() {
    let Some(db) = TestDb::create(Backend::Sqlite).await else { return };
    let outbox = SeaOrmOutboxStore::new(db.connect().await, Arc::new(Notify::new()));
    assert!(!outbox.restored_history().await.unwrap());
    assert_eq!(outbox.rebase_restored(rebase_audit(now())).await.unwrap(), Default::default());
    assert_eq!(crate::helpers::count(&db.connect().await, "audit_log").await, 0, "nothing audited");
}

/// The relay's pool names its sessions, so that an operator tells them apart in
/// `pg_stat_activity` (and the bench measures their CPU); a name in the URL wins.
#[tokio::test]
async fn each_pool_names_its_sessions_on_postgres() {
    use orchestrator::adapters::persistence::{self, APPLICATION_NAME, OUTBOX_APPLICATION_NAME};
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let name = |conn: sea_orm::DatabaseConnection| async move {
        scalar::<String>(&conn, "SELECT current_setting('application_name')").await
    };
    let outbox = persistence::connect_outbox(&db.url, 1, Default::default()).await.unwrap();
    assert_eq!(name(outbox).await, OUTBOX_APPLICATION_NAME);
    assert_eq!(name(persistence::connect(&db.url, 1).await.unwrap()).await, APPLICATION_NAME);
    let separator = if db.url.contains('?') { '&' } else { '?' };
    let named = format!("{}{separator}application_name=billing", db.url);
    assert_eq!(
        name(persistence::connect_outbox(&named, 1, Default::default()).await.unwrap()).await,
        "billing"
    );
}

/// A pooled connection is pinged before use only once it has sat idle for
/// [`persistence::PING_AFTER_IDLE`]: one the server cut meanwhile (a restart, an operator's
/// `pg_terminate_backend`, a proxy's idle timeout) is replaced, and the statement succeeds on a
/// new session instead of failing on the dead one. Every pool the service opens is built so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_cut_while_idle_is_replaced_before_use_on_postgres() {
    use orchestrator::adapters::persistence::{self, PING_AFTER_IDLE};
    use sea_orm::ConnectionTrait;
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let admin = sea_orm::Database::connect(db.admin_url()).await.unwrap();
    let pools = [
        persistence::connect(&db.url, 1).await.unwrap(),
        persistence::connect_outbox(&db.url, 1, Default::default()).await.unwrap(),
        persistence::connect_fast_path(&db.url, 1, Default::default()).await.unwrap(),
    ];
    for pool in pools {
        let before = scalar::<i32>(&pool, "SELECT pg_backend_pid()").await;
        admin.execute_unprepared(&format!("SELECT pg_terminate_backend({before})")).await.unwrap();
        tokio::time::sleep(PING_AFTER_IDLE + std::time::Duration::from_millis(200)).await;
        let after = scalar::<i32>(&pool, "SELECT pg_backend_pid()").await;
        assert_ne!(before, after, "a new session");
    }
    let _ = admin.close().await;
}

/// A relay looks at the slow path on every drain; at a trickle nearly every look finds
/// nothing due. The claim (planned afresh on every run, for its bound values) runs only when
/// a cheap look on the fast path's pool found a due row: the look that finds nothing costs
/// no claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slow_path_is_claimed_only_when_a_row_is_due_on_postgres() {
    use sea_orm::{ConnectionTrait, Statement};
    let Some(db) = TestDb::create(Backend::Postgres).await else { return };
    let (conn, _, outbox, orders) = relay_pools(&db).await;
    let claims_run = || async {
        conn.query_all_raw(Statement::from_string(
            conn.get_database_backend(),
            "SELECT 1 FROM pg_prepared_statements WHERE statement LIKE 'UPDATE outbox_events SET status = $1, claimed_by%'",
        ))
        .await
        .unwrap()
        .len()
    };
    // A fast-path event only: nothing on the slow path.
    orders
        .commit(Changes { outbox: vec![event("agg-1", "order.completed")], ..Default::default() })
        .await
        .unwrap();
    for _ in 0..3 {
        let t = now();
        assert!(claim_as(&outbox, "w", 8, t, t + Duration::minutes(5)).await.is_empty());
    }
    assert_eq!(claims_run().await, 0, "no claim where nothing is due");
    // A slow-path row due: claimed.
    on_the_slow_path(&conn).await;
    let t = now();
    assert_eq!(claim_as(&outbox, "w", 8, t, t + Duration::minutes(5)).await.len(), 1);
    assert_eq!(claims_run().await, 1);
}

/// The relay's two PostgreSQL pools on `db` (migrated here), one connection each, and the
/// stores on them as the service wires them: (the outbox's pool, the fast path's, the
/// outbox store, the order store).
async fn relay_pools(
    db: &TestDb,
) -> (DatabaseConnection, DatabaseConnection, SeaOrmOutboxStore, SeaOrmStore) {
    use orchestrator::adapters::persistence::{connect_fast_path, connect_outbox};
    db.connect().await; // migrated
    let conn = connect_outbox(&db.url, 1, Default::default()).await.unwrap();
    let fast = connect_fast_path(&db.url, 1, Default::default()).await.unwrap();
    let outbox =
        SeaOrmOutboxStore::new(conn.clone(), Arc::new(Notify::new())).with_fast_path_pool(fast.clone());
    let orders = SeaOrmStore::new(conn.clone(), Arc::new(Notify::new()));
    (conn, fast, outbox, orders)
}
