//! The pipeline's fixtures: events, settings, a mock store and broker that log what they
//! are asked, and a relay built on them.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::Duration;
use tokio::sync::Notify;

use super::super::*;
use crate::application::ports::{FastRecord, MockClock, MockEventPublisher, MockRelayStore, PublishOutcome};
use crate::domain::ids::EventId;
use crate::domain::outbox::{FailureCode, OutboxStatus, RetrySchedule};

pub(super) const LANE: i16 = 3;

pub(super) fn event(id: i64, aggregate: &str) -> OutboxRecord {
    OutboxRecord {
        id,
        event_id: EventId::new(),
        aggregate_type: "order".into(),
        aggregate_id: aggregate.into(),
        event_type: "order.test".into(),
        routing_key: "order.test".into(),
        payload: "{}".into(),
        correlation_id: None,
        status: OutboxStatus::Ready,
        retry_count: 0,
        failure_code: None,
        failure_reason: None,
        next_attempt_at: None,
        last_attempt_at: None,
        claimed_by: None,
        claimed_until: None,
        created_at: Utc::now(),
        published_at: None,
        dead_lettered_at: None,
        version: 1,
        lane: LANE,
        traceparent: None,
    }
}

pub(super) fn settings(batch_size: u32, send_margin: StdDuration) -> RelaySettings {
    RelaySettings {
        worker_id: "w".into(),
        lanes: 16,
        batch_size,
        lease: Duration::seconds(30),
        poll_interval: StdDuration::from_millis(100),
        retry_poll_interval: StdDuration::from_millis(100),
        trickle_wait: StdDuration::ZERO,
        schedule: RetrySchedule {
            max_retries: 5,
            backoff_base: Duration::seconds(1),
            backoff_cap: Duration::seconds(60),
        },
        send_margin,
    }
}

/// What the mocks saw, in order: `read n` (rows returned), `send id,id`, `record`.
pub(super) type Log = Arc<Mutex<Vec<String>>>;

/// A store whose one lane (`LANE`, held under epoch 1) holds `events`, handed out as the
/// real one does: the ids not yet recorded past those of the unrecorded batches, at most
/// `limit`, with a token naming them; records as `fenced` says (`true`: another worker
/// took the lane, nothing is recorded and the lane is reported fenced). `left` is what
/// is not recorded yet.
pub(super) fn store(
    events: Vec<OutboxRecord>,
    log: Log,
    recorded: Arc<Mutex<Vec<FastRecord>>>,
    fenced: bool,
) -> (MockRelayStore, Arc<Mutex<Vec<i64>>>) {
    store_with(events, log, recorded, fenced, Faults::default())
}

/// The database's failures a store is to answer with.
#[derive(Default)]
pub(super) struct Faults {
    /// This many records fail (unavailable) before they succeed.
    pub(super) records: usize,
    /// The read of this number (1: the first) fails, once.
    pub(super) read: Option<usize>,
}

pub(super) fn store_with(
    events: Vec<OutboxRecord>,
    log: Log,
    recorded: Arc<Mutex<Vec<FastRecord>>>,
    fenced: bool,
    faults: Faults,
) -> (MockRelayStore, Arc<Mutex<Vec<i64>>>) {
    let mut store = MockRelayStore::new();
    store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
    let left = Arc::new(Mutex::new(events.iter().map(|e| e.id).collect::<Vec<i64>>()));
    let (read_log, read_left) = (log.clone(), Arc::clone(&left));
    let mut reads = 0;
    store.expect_next_batch().returning(move |_, _, unrecorded, limit| {
        reads += 1;
        if faults.read == Some(reads) {
            read_log.lock().unwrap().push("read failed".into());
            return Err(RepoError::unavailable("connection reset"));
        }
        let taken: Vec<i64> = unrecorded.iter().flat_map(|t| t.get::<Vec<i64>>().unwrap().clone()).collect();
        let ids: Vec<i64> = read_left
            .lock()
            .unwrap()
            .iter()
            .filter(|id| !taken.contains(id))
            .take(limit as usize)
            .copied()
            .collect();
        read_log.lock().unwrap().push(format!("read {}", ids.len()));
        if ids.is_empty() {
            return Ok(None);
        }
        let rows = events.iter().filter(|e| ids.contains(&e.id)).cloned().collect();
        // As the real store says: more when a batch read before is not recorded yet (its
        // lane was not read afresh) or when this one left events.
        let more = !taken.is_empty() || read_left.lock().unwrap().len() > ids.len();
        Ok(Some(FastBatch { rows, waiting: Vec::new(), token: BatchToken::new(ids), more }))
    });
    let (record_log, record_left) = (log, Arc::clone(&left));
    let mut refusals = faults.records;
    store.expect_record_batches().returning(move |_, record, _| {
        if refusals > 0 {
            refusals -= 1;
            record_log.lock().unwrap().push("record failed".into());
            return Err(RepoError::unavailable("connection reset"));
        }
        record_log.lock().unwrap().push("record".into());
        recorded.lock().unwrap().push(record.clone());
        if fenced {
            return Ok(vec![LANE]);
        }
        let done: Vec<i64> =
            record.batches.iter().flat_map(|t| t.get::<Vec<i64>>().unwrap().clone()).collect();
        record_left.lock().unwrap().retain(|id| !done.contains(id));
        Ok(Vec::new())
    });
    store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
    (store, left)
}

/// A broker that confirms every message but those of `failing` event ids (nacked).
pub(super) fn publisher(log: Log, failing: Vec<i64>) -> MockEventPublisher {
    broker(log, failing, None)
}

/// A broker that confirms everything, while a commit wakes the relay during each send.
pub(super) fn publisher_while_committing(log: Log, wake: Arc<Notify>) -> MockEventPublisher {
    broker(log, Vec::new(), Some(wake))
}

/// Logs each send, nacks the events of `failing`, and signals `commit` (if any) as it sends.
pub(super) fn broker(log: Log, failing: Vec<i64>, commit: Option<Arc<Notify>>) -> MockEventPublisher {
    let mut publisher = MockEventPublisher::new();
    publisher.expect_ready().returning(|| Ok(()));
    publisher.expect_send().returning(move |batch| {
        let ids: Vec<String> = batch.iter().map(|r| r.id.to_string()).collect();
        log.lock().unwrap().push(format!("send {}", ids.join(",")));
        if let Some(wake) = &commit {
            wake.notify_one();
        }
        let outcomes = batch
            .iter()
            .map(|r| {
                if failing.contains(&r.id) {
                    PublishOutcome::Failed { code: FailureCode::Nacked, reason: "nacked".into() }
                } else {
                    PublishOutcome::Confirmed
                }
            })
            .collect();
        Box::pin(std::future::ready(outcomes))
    });
    publisher
}

/// A broker that confirms every message `delay` after it was sent.
pub(super) fn slow_publisher(log: Log, delay: StdDuration) -> MockEventPublisher {
    let mut publisher = MockEventPublisher::new();
    publisher.expect_ready().returning(|| Ok(()));
    publisher.expect_send().returning(move |batch| {
        let ids: Vec<String> = batch.iter().map(|r| r.id.to_string()).collect();
        log.lock().unwrap().push(format!("send {}", ids.join(",")));
        let outcomes = vec![PublishOutcome::Confirmed; batch.len()];
        Box::pin(async move {
            tokio::time::sleep(delay).await;
            outcomes
        })
    });
    publisher
}

pub(super) fn relay(
    store: MockRelayStore,
    publisher: MockEventPublisher,
    settings: RelaySettings,
) -> OutboxRelay {
    woken_relay(store, publisher, settings, Arc::new(Notify::new()))
}

/// A relay woken through `wake`, as commits wake it.
pub(super) fn woken_relay(
    store: MockRelayStore,
    publisher: MockEventPublisher,
    settings: RelaySettings,
    wake: Arc<Notify>,
) -> OutboxRelay {
    let mut clock = MockClock::new();
    clock.expect_now().returning(Utc::now);
    OutboxRelay::new(Arc::new(store), Arc::new(publisher), Arc::new(clock), settings, wake)
}

pub(super) fn sent(log: &Log) -> Vec<i64> {
    log.lock()
        .unwrap()
        .iter()
        .filter_map(|l| l.strip_prefix("send "))
        .flat_map(|ids| ids.split(',').map(|id| id.parse::<i64>().unwrap()).collect::<Vec<_>>())
        .collect()
}
