//! Drains against mock ports: lanes changing hands between drains, wake-ups and trickles
//! read without waiting, a dead broker backed off.

use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use tokio::sync::Notify;

use super::super::*;
use crate::application::ports::{BrokerUnavailable, Cause, MockEventPublisher, MockRelayStore};

use super::fixtures::*;

/// Workers started together: the first takes every lane, and gives most back once it
/// sees the others. While lanes change hands (the relay joined lately, or its last
/// renewal took or gave back lanes) a relay renews between drains within a fraction of
/// a second; within a drain, and once settled, every renewal interval (the lease's
/// third, at most 5 s).
#[tokio::test(start_paused = true)]
async fn lanes_change_hands_quickly_between_drains_only() {
    let held = |n: i16| (0..n).map(|lane| HeldLane { lane, epoch: 1 }).collect::<Vec<_>>();
    let answers = Arc::new(Mutex::new(vec![held(3), held(4), held(4), held(4), held(16)]));
    let renewals = Arc::new(Mutex::new(0));
    let mut store = MockRelayStore::new();
    let (next, count) = (Arc::clone(&answers), Arc::clone(&renewals));
    store.expect_lease_lanes().returning(move |_, _, _, _| {
        *count.lock().unwrap() += 1;
        Ok(next.lock().unwrap().pop().unwrap_or_else(|| held(3)))
    });
    // A lease of 30 s: renewed every 5 s once settled; joining for 6 s.
    let relay = relay(store, MockEventPublisher::new(), settings(8, StdDuration::from_millis(10)));
    let renewed = || *renewals.lock().unwrap();
    let step = StdDuration::from_millis(150);

    assert_eq!(relay.lanes().await.unwrap().len(), 16, "alone at first: every lane");
    tokio::time::advance(step).await;
    assert_eq!(Stages::held_lanes(&relay).await.unwrap().len(), 16);
    assert_eq!(renewed(), 1, "within a drain: no renewal before the interval");
    assert_eq!(relay.lanes().await.unwrap().len(), 4, "between drains: at once, the others seen");
    assert_eq!(renewed(), 2);
    tokio::time::advance(step).await;
    relay.lanes().await.unwrap();
    assert_eq!(renewed(), 3, "still joining: renewed again");

    tokio::time::advance(StdDuration::from_secs(7)).await;
    relay.lanes().await.unwrap();
    assert_eq!(renewed(), 4);
    tokio::time::advance(step).await;
    relay.lanes().await.unwrap();
    assert_eq!(renewed(), 4, "joined and unchanged: not before the renewal interval");
    tokio::time::advance(StdDuration::from_secs(5)).await;
    assert_eq!(Stages::held_lanes(&relay).await.unwrap().len(), 3, "a lane given back");
    assert_eq!(renewed(), 5, "within a drain: every renewal interval");
    tokio::time::advance(step).await;
    relay.lanes().await.unwrap();
    assert_eq!(renewed(), 6, "after a change: renewed at once between drains");
    tokio::time::advance(step).await;
    relay.lanes().await.unwrap();
    assert_eq!(renewed(), 6, "settled again");
}

#[tokio::test]
async fn a_quiet_trickle_ends_the_drain_without_reading_again() {
    // A trickle that took all there was, and no commit since: nothing to read.
    let events = vec![event(1, "a")];
    let (log, recorded) = (Log::default(), Arc::default());
    let (store, _) = store(events, log.clone(), recorded, false);
    let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 1);
    assert_eq!(*log.lock().unwrap(), ["read 1", "send 1", "record"]);
}

#[tokio::test]
async fn a_trickle_that_left_events_is_read_on_without_a_wake_up() {
    // The store says the first trickle left events (a lane read from an older snapshot):
    // they are read without any commit waking the relay; the second took the rest.
    let log = Log::default();
    let mut store = MockRelayStore::new();
    store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
    let reads = Arc::new(Mutex::new(vec![(2, false), (1, true)]));
    let read_log = log.clone();
    store.expect_next_batch().returning(move |_, _, _, _| {
        let Some((id, more)) = reads.lock().unwrap().pop() else {
            read_log.lock().unwrap().push("read 0".into());
            return Ok(None);
        };
        read_log.lock().unwrap().push("read 1".into());
        let rows = vec![event(id, &format!("agg-{id}"))];
        Ok(Some(FastBatch { rows, waiting: Vec::new(), token: BatchToken::new(vec![id]), more }))
    });
    let record_log = log.clone();
    store.expect_record_batches().returning(move |_, _, _| {
        record_log.lock().unwrap().push("record".into());
        Ok(Vec::new())
    });
    store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
    let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
    let report = relay.drain(&CancellationToken::new()).await.unwrap();
    assert_eq!(report.published, 2);
    assert_eq!(*log.lock().unwrap(), ["read 1", "send 1", "record", "read 1", "send 2", "record"]);
}

/// A broker that is down, tried by a relay that never leased a lane (nothing can be
/// read before the broker answers): in 30 s of virtual time, while commits wake it every
/// few milliseconds, the relay backs off up to its poll interval instead of trying again
/// every 10 ms (it tried ~87 times a second).
#[tokio::test(start_paused = true)]
async fn a_relay_backs_off_a_dead_broker_up_to_the_poll_interval_whatever_wakes_it() {
    let attempts: Arc<Mutex<Vec<tokio::time::Instant>>> = Arc::default();
    let mut publisher = MockEventPublisher::new();
    let seen = Arc::clone(&attempts);
    publisher.expect_ready().returning(move || {
        seen.lock().unwrap().push(tokio::time::Instant::now());
        Err(BrokerUnavailable(Cause::msg("connection refused")))
    });
    let mut store = MockRelayStore::new();
    store.expect_next_retry_at().returning(|| Ok(None));
    store.expect_release_lanes().returning(|_| Ok(()));
    let mut settings = settings(8, StdDuration::from_millis(10));
    settings.poll_interval = StdDuration::from_secs(10);
    let wake = Arc::new(Notify::new());
    let relay = woken_relay(store, publisher, settings, Arc::clone(&wake));
    let stop = CancellationToken::new();
    let started = tokio::time::Instant::now();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move { relay.run_until_stopped(stop).await }
    });
    while started.elapsed() < StdDuration::from_secs(30) {
        wake.notify_one();
        tokio::time::sleep(StdDuration::from_millis(5)).await;
    }
    stop.cancel();
    task.await.unwrap();
    let attempts = attempts.lock().unwrap().clone();
    assert!(
        (5..=12).contains(&attempts.len()),
        "about a dozen attempts in 30 s, not one every 10 ms: {}",
        attempts.len()
    );
    let gaps: Vec<StdDuration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] >= g[0] || g[1] >= StdDuration::from_secs(10)),
        "growing gaps: {gaps:?}"
    );
    assert!(
        gaps.iter().all(|g| *g <= StdDuration::from_secs(12)),
        "never longer than the poll interval and its jitter: {gaps:?}"
    );
}
