//! The pipeline against mock ports: which events go out, in what order, and what is
//! recorded, whatever order the broker's verdicts and the database's answers come in.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use chrono::Duration;
use tokio::sync::Notify;

use super::super::*;
use crate::application::ports::MockRelayStore;

use super::fixtures::*;

#[tokio::test]
async fn a_failure_holds_back_the_later_events_of_its_aggregate_in_later_batches() {
    // Batches of two: [a1, b1], [a2, c1], [a3, b2]. a1 is nacked.
    let events =
        vec![event(1, "a"), event(2, "b"), event(3, "a"), event(4, "c"), event(5, "a"), event(6, "b")];
    let (log, recorded) = (Log::default(), Arc::default());
    let (store, left) = store(events, log.clone(), Arc::clone(&recorded), false);
    let relay = relay(store, publisher(log.clone(), vec![1]), settings(2, StdDuration::from_millis(10)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();

    let sent = sent(&log);
    assert!(!sent.contains(&3) && !sent.contains(&5), "nothing of a after its failure: {sent:?}");
    let position = |id| sent.iter().position(|&s| s == id).unwrap();
    assert!(position(2) < position(6), "b in order: {sent:?}");
    assert_eq!(report.published, 3, "b1, c1, b2");
    assert_eq!(report.retried, 1);
    let recorded = recorded.lock().unwrap();
    let failures: Vec<i64> = recorded.iter().flat_map(|p| p.failures.iter().map(|f| f.id)).collect();
    let mut held: Vec<i64> = recorded.iter().flat_map(|p| p.held_back.clone()).collect();
    held.sort_unstable();
    assert_eq!(failures, vec![1]);
    assert_eq!(held, vec![3, 5], "a2 and a3 to the slow path, behind a1");
    assert!(left.lock().unwrap().is_empty(), "every batch recorded: {:?}", left.lock().unwrap());
}

#[tokio::test]
async fn an_aggregates_next_event_waits_for_the_confirm_of_the_one_before() {
    let events = vec![event(1, "a"), event(2, "a"), event(3, "b"), event(4, "a")];
    let (log, recorded) = (Log::default(), Arc::default());
    let (store, _) = store(events, log.clone(), recorded, false);
    let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 4);
    let sends: Vec<String> = log.lock().unwrap().iter().filter(|l| l.starts_with("send")).cloned().collect();
    assert_eq!(sends, vec!["send 1,3", "send 2", "send 4"], "one event of a per send, b beside the first");
}

#[tokio::test]
async fn a_lane_taken_over_records_nothing_and_its_batch_counts_lost() {
    let events: Vec<OutboxRecord> = (1..=6).map(|i| event(i, &format!("agg-{i}"))).collect();
    let (log, recorded) = (Log::default(), Arc::default());
    let (store, left) = store(events, log.clone(), recorded, true);
    let relay = relay(store, publisher(log.clone(), vec![]), settings(2, StdDuration::from_millis(10)));
    let report = relay.run_once().await.unwrap();
    assert_eq!(report.lost_claims, 2, "the batch sent is not recorded: {report:?}");
    assert_eq!(report.resent, 2, "and its next owner sends it again: counted");
    assert_eq!(left.lock().unwrap().len(), 6, "nothing recorded: the lane's next owner sends it all");
}

/// Issue 57: a record the database refused sent its batches again. It is tried again:
/// nothing goes out twice.
#[tokio::test]
async fn a_record_refused_once_is_tried_again_and_nothing_goes_out_twice() {
    let events: Vec<OutboxRecord> = (1..=6).map(|i| event(i, &format!("agg-{i}"))).collect();
    let (log, recorded) = (Log::default(), Arc::default());
    let faults = Faults { records: 2, read: None };
    let (store, left) = store_with(events, log.clone(), recorded, false, faults);
    let relay = relay(store, publisher(log.clone(), vec![]), settings(2, StdDuration::from_millis(10)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 6);
    assert_eq!(report.resent, 0);
    let mut sent = sent(&log);
    sent.sort_unstable();
    assert_eq!(sent, vec![1, 2, 3, 4, 5, 6], "each once: {:?}", log.lock().unwrap());
    assert!(left.lock().unwrap().is_empty(), "all recorded");
    let failed = log.lock().unwrap().iter().filter(|l| *l == "record failed").count();
    assert_eq!(failed, 2, "the refusals were met");
}

/// Issue 57: a failed read dropped the batches read before it (on the wire, or about to
/// be), unrecorded, to be read and sent again. It ends the reading only: what was read is
/// sent and recorded, then the round fails, and the next one sends only what is left.
#[tokio::test]
async fn a_failed_read_records_what_went_out_before_it() {
    let events: Vec<OutboxRecord> = (1..=6).map(|i| event(i, &format!("agg-{i}"))).collect();
    let (log, recorded) = (Log::default(), Arc::default());
    let faults = Faults { records: 0, read: Some(2) };
    let (store, left) = store_with(events, log.clone(), recorded, false, faults);
    let relay = relay(store, publisher(log.clone(), vec![]), settings(2, StdDuration::from_millis(10)));
    let failed = relay.drain(&CancellationToken::new()).await;
    assert!(matches!(failed, Err(RelayError::Store(_))), "the round reports the read's failure");
    assert_eq!(left.lock().unwrap().len(), 4, "the first batch recorded: {:?}", log.lock().unwrap());
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 4);
    let mut sent = sent(&log);
    sent.sort_unstable();
    assert_eq!(sent, vec![1, 2, 3, 4, 5, 6], "each once: {:?}", log.lock().unwrap());
}

/// Issue 57: a lease that ran short while a batch was on the wire left the batch
/// unrecorded, and its events were sent twice. Its verdicts are awaited and it is
/// recorded (fenced by the lane's epoch); only what was not sent is left.
#[tokio::test]
async fn a_lease_running_short_mid_flight_records_what_was_on_the_wire() {
    // x1, y1 in the first batch, x2, y2 behind them in the second.
    let events = vec![event(1, "x"), event(2, "y"), event(3, "x"), event(4, "y")];
    let (log, recorded) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
    let (store, left) = store(events, log.clone(), Arc::clone(&recorded), false);
    // A one-second lease is trusted for 0.9 s, and a send needs 0.5 s of it: the
    // confirms, 0.6 s after the first send, come when no more may be sent.
    let mut settings = settings(2, StdDuration::from_millis(500));
    settings.lease = Duration::seconds(1);
    let publisher = slow_publisher(log.clone(), StdDuration::from_millis(600));
    let relay = relay(store, publisher, settings);
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(sent(&log), vec![1, 2], "nothing sent once the lease ran short");
    assert_eq!(report.published, 2);
    assert_eq!(report.resent, 0, "nothing will be sent twice: {report:?}");
    assert_eq!(*left.lock().unwrap(), vec![3, 4], "the first batch recorded: {:?}", log.lock().unwrap());
}

#[tokio::test]
async fn a_lease_too_short_for_a_send_sends_and_records_nothing() {
    let events: Vec<OutboxRecord> = (1..=4).map(|i| event(i, &format!("agg-{i}"))).collect();
    let (log, recorded) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
    let (store, _) = store(events, log.clone(), Arc::clone(&recorded), false);
    // The margin a send needs is longer than the lease itself.
    let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_secs(3600)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert!(sent(&log).is_empty());
    let reads = log.lock().unwrap().iter().filter(|l| l.starts_with("read")).count();
    assert_eq!(reads, 1, "the drain ends until the lease is renewed, not reading the batch again");
    assert!(recorded.lock().unwrap().is_empty());
    assert_eq!(report.published, 0);
    assert_eq!(report.lost_claims, 4, "the batch read is left to the lanes' next owner");
    assert_eq!(report.resent, 0, "nothing was sent: nothing goes out twice");
}

#[tokio::test]
async fn a_trickle_is_recorded_before_the_next_read() {
    // One event where a batch holds eight: a trickle; a commit comes while it is sent.
    let events = vec![event(1, "a")];
    let (log, recorded, wake) = (Log::default(), Arc::default(), Arc::new(Notify::new()));
    let (store, _) = store(events, log.clone(), recorded, false);
    let publisher = publisher_while_committing(log.clone(), wake.clone());
    let relay = woken_relay(store, publisher, settings(8, StdDuration::from_millis(10)), wake);
    relay.drain(&CancellationToken::new()).await.unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(log, ["read 1", "send 1", "record", "read 0"]);
}

/// When a relay that a commit woke reads next, after `trickle_wait`, in tokio's paused
/// (virtual) time.
async fn read_after_a_wake_up(trickle_wait: StdDuration) -> StdDuration {
    let reads: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let mut store = MockRelayStore::new();
    store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
    store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
    store.expect_next_retry_at().returning(|| Ok(None));
    store.expect_release_lanes().returning(|_| Ok(()));
    let at = Arc::clone(&reads);
    store.expect_next_batch().returning(move |_, _, _, _| {
        at.lock().unwrap().push(tokio::time::Instant::now());
        Ok(None)
    });
    let mut settings = settings(8, StdDuration::from_millis(10));
    settings.trickle_wait = trickle_wait;
    settings.poll_interval = StdDuration::from_secs(60);
    let wake = Arc::new(Notify::new());
    let relay = woken_relay(store, publisher(Log::default(), vec![]), settings, Arc::clone(&wake));
    let stop = CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run_until_stopped(stop).await }
    });
    let reads_so_far = |n: usize| {
        let reads = Arc::clone(&reads);
        async move {
            while reads.lock().unwrap().len() < n {
                tokio::time::sleep(StdDuration::from_micros(100)).await;
            }
        }
    };
    // The drain at start, then a commit's wake-up.
    reads_so_far(1).await;
    let woken = tokio::time::Instant::now();
    wake.notify_one();
    reads_so_far(2).await;
    stop.cancel();
    task.await.unwrap();
    let read = reads.lock().unwrap()[1];
    read - woken
}

#[tokio::test(start_paused = true)]
async fn a_wake_up_waits_for_the_commits_close_behind_it() {
    let waited = read_after_a_wake_up(StdDuration::from_millis(5)).await;
    assert!(waited >= StdDuration::from_millis(5), "read {waited:?} after the wake-up");
    let at_once = read_after_a_wake_up(StdDuration::ZERO).await;
    assert!(at_once < StdDuration::from_millis(1), "no wait configured: read {at_once:?} after");
}
