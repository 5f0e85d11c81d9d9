//! The relay's unit tests: the lanes it is woken for, and the pipeline against mock ports.

mod lanes_interest {
    use super::super::*;

    #[test]
    fn a_relay_is_woken_for_its_own_lanes_only_once_it_holds_some() {
        let interest = LaneInterest::default();
        assert!(interest.wants(&[3]), "before any lease: every notification");
        interest.set(&[HeldLane { lane: 7, epoch: 1 }, HeldLane { lane: 2, epoch: 4 }]);
        assert!(interest.wants(&[7]));
        assert!(interest.wants(&[1, 2]));
        assert!(!interest.wants(&[3, 9]), "another worker's lanes");
        assert!(interest.wants(&[]), "a notification naming no lane (an operator's action)");
        interest.set(&[]);
        assert!(!interest.wants(&[7]), "no lane held: nothing to do for a commit");
    }
}

mod pipeline_tests {
    //! The pipeline against mock ports: which events go out, in what order, and what is
    //! recorded, whatever order the broker's verdicts and the database's answers come in.

    use std::sync::{Arc, Mutex};
    use std::time::Duration as StdDuration;

    use chrono::Duration;
    use tokio::sync::Notify;

    use super::super::*;
    use crate::application::ports::{
        BrokerUnavailable, Cause, FastRecord, MockClock, MockEventPublisher, MockRelayStore, PublishOutcome,
    };
    use crate::domain::ids::EventId;
    use crate::domain::outbox::{FailureCode, OutboxStatus, RetrySchedule};

    const LANE: i16 = 3;

    fn event(id: i64, aggregate: &str) -> OutboxRecord {
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

    fn settings(batch_size: u32, send_margin: StdDuration) -> RelaySettings {
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
    type Log = Arc<Mutex<Vec<String>>>;

    /// A store whose one lane (`LANE`, held under epoch 1) holds `events`, handed out as the
    /// real one does: the ids not yet recorded past those of the unrecorded batches, at most
    /// `limit`, with a token naming them; records as `fenced` says (`true`: another worker
    /// took the lane, nothing is recorded and the lane is reported fenced). `left` is what
    /// is not recorded yet.
    fn store(
        events: Vec<OutboxRecord>,
        log: Log,
        recorded: Arc<Mutex<Vec<FastRecord>>>,
        fenced: bool,
    ) -> (MockRelayStore, Arc<Mutex<Vec<i64>>>) {
        store_with(events, log, recorded, fenced, Faults::default())
    }

    /// The database's failures a store is to answer with.
    #[derive(Default)]
    struct Faults {
        /// This many records fail (unavailable) before they succeed.
        records: usize,
        /// The read of this number (1: the first) fails, once.
        read: Option<usize>,
    }

    fn store_with(
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
            let taken: Vec<i64> =
                unrecorded.iter().flat_map(|t| t.get::<Vec<i64>>().unwrap().clone()).collect();
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
    fn publisher(log: Log, failing: Vec<i64>) -> MockEventPublisher {
        broker(log, failing, None)
    }

    /// A broker that confirms everything, while a commit wakes the relay during each send.
    fn publisher_while_committing(log: Log, wake: Arc<Notify>) -> MockEventPublisher {
        broker(log, Vec::new(), Some(wake))
    }

    /// Logs each send, nacks the events of `failing`, and signals `commit` (if any) as it sends.
    fn broker(log: Log, failing: Vec<i64>, commit: Option<Arc<Notify>>) -> MockEventPublisher {
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
    fn slow_publisher(log: Log, delay: StdDuration) -> MockEventPublisher {
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

    fn relay(store: MockRelayStore, publisher: MockEventPublisher, settings: RelaySettings) -> OutboxRelay {
        woken_relay(store, publisher, settings, Arc::new(Notify::new()))
    }

    /// A relay woken through `wake`, as commits wake it.
    fn woken_relay(
        store: MockRelayStore,
        publisher: MockEventPublisher,
        settings: RelaySettings,
        wake: Arc<Notify>,
    ) -> OutboxRelay {
        let mut clock = MockClock::new();
        clock.expect_now().returning(Utc::now);
        OutboxRelay::new(Arc::new(store), Arc::new(publisher), Arc::new(clock), settings, wake)
    }

    fn sent(log: &Log) -> Vec<i64> {
        log.lock()
            .unwrap()
            .iter()
            .filter_map(|l| l.strip_prefix("send "))
            .flat_map(|ids| ids.split(',').map(|id| id.parse::<i64>().unwrap()).collect::<Vec<_>>())
            .collect()
    }

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
        let sends: Vec<String> =
            log.lock().unwrap().iter().filter(|l| l.starts_with("send")).cloned().collect();
        assert_eq!(
            sends,
            vec!["send 1,3", "send 2", "send 4"],
            "one event of a per send, b beside the first"
        );
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
}
