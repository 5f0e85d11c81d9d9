//! The fast path's pipeline (docs/relay-design.md, "Pipeline"): batches read from the lanes
//! a relay holds flow through the broker without waiting for each other, and are recorded
//! in the order they were read.
//!
//! - **Read.** The next batch is read while fewer than `batch_size` events wait to be sent
//!   (before a record, if both are due), as long as at most [`UNRECORDED_BATCHES`] batches'
//!   worth are unrecorded: the broker has the next events at hand when confirms free its
//!   window, and a crash makes the lanes' next owner send at most that much again. A read
//!   counts what the batches not yet recorded took of each lane.
//! - **Send.** An event leaves as soon as no earlier event of its aggregate awaits the
//!   broker's verdict. The events of one aggregate form a *chain*: its next link is sent
//!   when the one before it is confirmed, and a failure holds the rest of the chain back
//!   (to the slow path, behind the failed one). Events of different aggregates never wait
//!   for each other, so how many events an aggregate has does not change the rate.
//! - **Record.** A batch is recorded (one fenced transaction) once every event of it has a
//!   verdict, and only after the batches read before it; finished batches waiting their
//!   turn are recorded together.
//! - **One statement at a time.** Reads and records are the database's turns, never run at
//!   once: a read's count of what is unrecorded cannot change under it.
//! - **Trickle.** After a batch of less than half `batch_size`, nothing more is read until
//!   every batch before it is recorded: the events that commit meanwhile make the next
//!   read fuller, and overlapping tiny batches costs the database statements per event.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use super::relay::{OutboxRelay, RelayError, RelayReport, Round};
use crate::application::ports::{
    DeliveryFailure, FastProgress, HeldLane, OutboxRecord, PendingVerdicts, PublishOutcome,
};

/// An aggregate: `(aggregate_type, aggregate_id)`.
pub(super) type Aggregate = (String, String);

pub(super) fn aggregate_of(row: &OutboxRecord) -> Aggregate {
    (row.aggregate_type.clone(), row.aggregate_id.clone())
}

/// How many batches' worth of events may be read and not yet recorded: what keeps the
/// broker busy while the database reads and records, and the most a crash makes the lanes'
/// next owner send again (`UNRECORDED_BATCHES × batch_size` duplicates at worst).
pub const UNRECORDED_BATCHES: usize = 4;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One event of the pipeline: row `row` of batch number `batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    batch: u64,
    row: usize,
}

/// A batch read and not yet recorded, with what became of its events so far.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) round: Round,
    /// Its events still without a verdict (sent or waiting to be).
    open: usize,
    /// When it was read: its failures' attempt time (their backoff runs from it).
    pub(super) read_at: DateTime<Utc>,
    /// When the broker's last verdict on it arrived: its `publishedAt`.
    pub(super) confirmed_at: DateTime<Utc>,
    pub(super) report: RelayReport,
    pub(super) failures: Vec<DeliveryFailure>,
    pub(super) held_back: Vec<i64>,
}

impl Batch {
    /// What recording it writes.
    pub(super) fn progress(batches: &[Batch]) -> FastProgress {
        let mut latest = HashMap::new();
        let mut progress = FastProgress {
            attempted_at: batches.first().map_or_else(Utc::now, |b| b.read_at),
            ..FastProgress::default()
        };
        for b in batches {
            for (_, next) in b.round.pages.values() {
                // A later batch's position in a lane supersedes an earlier one's.
                latest.insert(next.lane, next.clone());
            }
            progress.failures.extend(b.failures.iter().cloned());
            progress.held_back.extend(b.held_back.iter().copied());
        }
        progress.progress = latest.into_values().collect();
        progress.progress.sort_by_key(|c| c.lane);
        progress
    }
}

/// What the database's turn came to.
enum DbTurn {
    /// A batch read (`None`: nothing more to send now).
    Read(Result<Option<Round>, RelayError>),
    /// The lanes held changed since the pipeline started: it reads no more.
    LanesChanged,
    /// Batches recorded, and the lanes whose progress was fenced off.
    Recorded(Result<(RelayReport, Vec<i16>), RelayError>),
}

/// What woke the pipeline.
enum Wake {
    /// A group of events is with the broker, verdicts to come.
    Sent(Vec<Slot>, PendingVerdicts),
    /// The broker's verdicts on a group.
    Verdicts(Vec<Slot>, Vec<PublishOutcome>),
    Db(DbTurn),
    /// Nothing left in flight.
    Idle,
}

/// How far a pipeline may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reads {
    /// One batch (`run_once`).
    One,
    /// Until the lanes have nothing more.
    UntilDry,
}

/// The fast path of one drain: batches in read order, chains of aggregates, groups on the
/// wire, and the database's turn.
pub(super) struct Pipeline<'a> {
    relay: &'a OutboxRelay,
    held: Vec<HeldLane>,
    batches: VecDeque<Batch>,
    /// The number of `batches[0]`.
    first: u64,
    /// Per aggregate: its events without a verdict, oldest first; the first is sent or
    /// ready, the rest wait for it.
    chains: HashMap<Aggregate, VecDeque<Slot>>,
    /// Aggregates with a failure in this drain: their later events are held back.
    failed: HashSet<Aggregate>,
    /// Events free to go, in read order.
    ready: Vec<Slot>,
    /// Events sent whose verdict has not come yet.
    sent_open: usize,
    sending: Option<Boxed<'a, (Vec<Slot>, PendingVerdicts)>>,
    in_flight: FuturesUnordered<Boxed<'a, (Vec<Slot>, Vec<PublishOutcome>)>>,
    db: Option<Boxed<'a, DbTurn>>,
    /// Lanes whose progress was fenced off (another worker owns them now): read no more.
    lost: HashSet<i16>,
    reads: Reads,
    reads_done: usize,
    /// A read came back empty or the lanes changed: read no more.
    dry: bool,
    /// The last read was small: read again once everything before it is recorded.
    trickle: bool,
    /// A read found the lanes held changed.
    lanes_changed: bool,
    total: RelayReport,
}

impl<'a> Pipeline<'a> {
    pub(super) fn new(relay: &'a OutboxRelay, held: Vec<HeldLane>, reads: Reads) -> Self {
        Pipeline {
            relay,
            held,
            batches: VecDeque::new(),
            first: 0,
            chains: HashMap::new(),
            failed: HashSet::new(),
            ready: Vec::new(),
            sent_open: 0,
            sending: None,
            in_flight: FuturesUnordered::new(),
            db: None,
            lost: HashSet::new(),
            reads,
            reads_done: 0,
            dry: false,
            trickle: false,
            lanes_changed: false,
            total: RelayReport::default(),
        }
    }

    fn batch_mut(&mut self, slot: Slot) -> &mut Batch {
        let at = (slot.batch - self.first) as usize;
        &mut self.batches[at]
    }

    fn row(&self, slot: Slot) -> &OutboxRecord {
        &self.batches[(slot.batch - self.first) as usize].round.rows[slot.row]
    }

    /// The trickle rule: a small batch is not followed by another read until everything
    /// before it is recorded.
    fn is_trickle(&self, rows: usize) -> bool {
        rows * 2 < self.relay.settings().batch_size as usize
    }

    /// Events read and not recorded yet: at most [`UNRECORDED_BATCHES`] batches' worth.
    fn unrecorded(&self) -> usize {
        self.batches.iter().map(|b| b.round.rows.len()).sum()
    }

    /// Events read and not sent yet (ready, or waiting in a chain).
    fn unsent(&self) -> usize {
        self.batches.iter().map(|b| b.open).sum::<usize>() - self.sent_open
    }

    /// Whether to read the next batch now.
    fn may_read(&self, stop: &CancellationToken) -> bool {
        let limit_reached = match self.reads {
            Reads::One => self.reads_done >= 1,
            Reads::UntilDry => false,
        };
        !self.dry
            && !limit_reached
            && !stop.is_cancelled()
            && self.unrecorded() + self.relay.settings().batch_size as usize
                <= UNRECORDED_BATCHES * self.relay.settings().batch_size as usize
            // After a trickle, everything before it is recorded first.
            && (!self.trickle || self.batches.is_empty())
    }

    /// Admits a batch read: each event joins its aggregate's chain, and goes out at once if
    /// it heads it. An aggregate waiting on the slow path, or failed in this drain, has its
    /// events held back.
    fn admit(&mut self, round: Round) {
        let number = self.first + self.batches.len() as u64;
        let now = self.relay.now();
        let mut batch = Batch {
            open: 0,
            read_at: now,
            confirmed_at: now,
            report: RelayReport { claimed: round.rows.len(), ..RelayReport::default() },
            failures: Vec::new(),
            held_back: Vec::new(),
            round,
        };
        for (i, row) in batch.round.rows.iter().enumerate() {
            let key = aggregate_of(row);
            if batch.round.waiting.contains(&key) || self.failed.contains(&key) {
                batch.held_back.push(row.id);
                continue;
            }
            batch.open += 1;
            let slot = Slot { batch: number, row: i };
            let chain = self.chains.entry(key).or_default();
            chain.push_back(slot);
            if chain.len() == 1 {
                self.ready.push(slot);
            }
        }
        self.trickle = self.is_trickle(batch.round.rows.len());
        self.batches.push_back(batch);
    }

    /// Takes in the broker's verdicts on a group: counts them, and sends each aggregate's
    /// next event on a confirm, or holds the rest of its chain back on a failure.
    fn settle(&mut self, slots: Vec<Slot>, outcomes: Vec<PublishOutcome>) {
        let now = self.relay.now();
        self.sent_open -= slots.len();
        for (slot, outcome) in slots.into_iter().zip(super::relay::verdicts_for(outcomes)) {
            let row = self.row(slot).clone();
            let key = aggregate_of(&row);
            let relay = self.relay;
            let batch = self.batch_mut(slot);
            batch.open -= 1;
            batch.confirmed_at = now;
            match outcome {
                PublishOutcome::Confirmed => {
                    batch.report.published += 1;
                    relay.confirmed(&row, now);
                }
                PublishOutcome::Failed { code, reason } => {
                    let failure = relay.failed(&row, code, &reason, batch.read_at, &mut batch.report);
                    batch.failures.push(failure);
                    self.failed.insert(key.clone());
                }
            }
            let Some(chain) = self.chains.get_mut(&key) else { continue };
            chain.pop_front();
            if self.failed.contains(&key) {
                let rest: Vec<Slot> = chain.drain(..).collect();
                for held in rest {
                    let id = self.row(held).id;
                    let batch = self.batch_mut(held);
                    batch.open -= 1;
                    batch.held_back.push(id);
                }
            } else if let Some(&next) = chain.front() {
                self.ready.push(next);
                continue;
            }
            self.chains.remove(&key);
        }
    }

    /// Hands the ready events to the broker, if the lease holds long enough for their
    /// verdicts. `false`: it does not, and nothing more may be sent.
    fn send_ready(&mut self) -> bool {
        if !self.relay.may_send() {
            return false;
        }
        let slots = std::mem::take(&mut self.ready);
        self.sent_open += slots.len();
        let records: Vec<OutboxRecord> = slots.iter().map(|&s| self.row(s).clone()).collect();
        let publisher = self.relay.publisher();
        self.sending = Some(Box::pin(async move {
            let pending = publisher.send(&records).await;
            (slots, pending)
        }));
        true
    }

    /// How many batches at the front have every verdict.
    fn finished(&self) -> usize {
        self.batches.iter().take_while(|b| b.open == 0).count()
    }

    /// Gives the database its next turn: recording the finished batches first, else reading.
    fn next_db_turn(&mut self, stop: &CancellationToken) {
        let finished = self.finished();
        let read = self.may_read(stop);
        let hungry = self.unsent() < self.relay.settings().batch_size as usize;
        if finished > 0 && !(read && hungry) {
            let batches: Vec<Batch> = self.batches.drain(..finished).collect();
            self.first += finished as u64;
            let relay = self.relay;
            self.db = Some(Box::pin(async move { DbTurn::Recorded(relay.record(batches).await) }));
        } else if read {
            self.reads_done += 1;
            let mut skip: HashMap<i16, usize> = HashMap::new();
            for b in &self.batches {
                for (lane, (ids, _)) in &b.round.pages {
                    *skip.entry(*lane).or_default() += ids.len();
                }
            }
            let relay = self.relay;
            let held = self.held.clone();
            let lost = self.lost.clone();
            self.db = Some(Box::pin(async move {
                // Renewing (when due) here keeps a long drain's lease alive.
                match relay.lanes().await {
                    Ok(now_held) if now_held != held => return DbTurn::LanesChanged,
                    Ok(_) => {}
                    Err(err) => return DbTurn::Read(Err(err.into())),
                }
                let lanes: Vec<HeldLane> = held.into_iter().filter(|h| !lost.contains(&h.lane)).collect();
                DbTurn::Read(relay.prepare(&lanes, &skip).await)
            }));
        }
    }

    /// Runs the pipeline until nothing more is to be read and everything read is recorded,
    /// or the lease runs short (what is not recorded then is left to the lanes' next owner).
    /// With what it did, whether the lanes held must be looked at again before the next
    /// drain (they changed, or the lease ran short).
    ///
    /// # Errors
    /// The database failed: the batches not yet recorded are sent again next time.
    pub(super) async fn run(mut self, stop: &CancellationToken) -> Result<(RelayReport, bool), RelayError> {
        loop {
            if self.sending.is_none() && !self.ready.is_empty() && !self.send_ready() {
                return Ok((self.lapse().await, true));
            }
            if self.db.is_none() {
                self.next_db_turn(stop);
            }
            if self.sending.is_none() && self.db.is_none() && self.in_flight.is_empty() {
                return Ok((self.total, self.lanes_changed));
            }
            let wake = tokio::select! {
                r = next_of(&mut self.sending) => Wake::Sent(r.0, r.1),
                r = self.in_flight.next(), if !self.in_flight.is_empty() => match r {
                    Some((slots, outcomes)) => Wake::Verdicts(slots, outcomes),
                    None => Wake::Idle,
                },
                r = next_of(&mut self.db) => Wake::Db(r),
            };
            match wake {
                Wake::Sent(slots, pending) => {
                    self.sending = None;
                    self.in_flight.push(Box::pin(async move { (slots, pending.await) }));
                }
                Wake::Verdicts(slots, outcomes) => self.settle(slots, outcomes),
                Wake::Idle => {}
                Wake::Db(turn) => {
                    self.db = None;
                    match turn {
                        DbTurn::Read(Ok(Some(round))) => self.admit(round),
                        DbTurn::Read(Ok(None)) => self.dry = true,
                        DbTurn::LanesChanged => {
                            self.dry = true;
                            self.lanes_changed = true;
                        }
                        DbTurn::Read(Err(err)) | DbTurn::Recorded(Err(err)) => return Err(err),
                        DbTurn::Recorded(Ok((report, fenced))) => {
                            self.lost.extend(fenced);
                            self.total.add(report);
                        }
                    }
                }
            }
        }
    }

    /// The lease runs short of the time a send may take: nothing more goes out and nothing
    /// unrecorded is recorded (another worker may already be sending these lanes); their
    /// cursors are forgotten, and the next owner — this worker again, once it renews — sends
    /// them from the last recorded position.
    async fn lapse(mut self) -> RelayReport {
        // A turn under way finishes: a record cut short is rolled back by the database, but
        // its outcome tells which cursors moved.
        if let Some(turn) = self.db.take()
            && let DbTurn::Recorded(Ok((report, _))) = turn.await
        {
            self.total.add(report);
        }
        let lost: usize = self.batches.iter().map(|b| b.round.rows.len()).sum();
        self.relay.forget(self.batches.iter().flat_map(|b| b.round.pages.keys().copied())).await;
        self.total.lost_claims += lost as u64;
        tracing::warn!(
            lost,
            "outbox lane lease lapsed mid-drain; nothing more was sent and nothing more recorded"
        );
        self.total
    }
}

/// Awaits the future in `slot`, or never when there is none.
async fn next_of<T>(slot: &mut Option<Boxed<'_, T>>) -> T {
    match slot {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    //! The pipeline against mock ports: which events go out, in what order, and what is
    //! recorded, whatever order the broker's verdicts and the database's answers come in.

    use std::sync::{Arc, Mutex};
    use std::time::Duration as StdDuration;

    use chrono::Duration;
    use tokio::sync::Notify;

    use super::*;
    use crate::application::outbox::{OutboxRelay, RelaySettings};
    use crate::application::ports::{
        FastBatch, LaneCursor, MockClock, MockEventPublisher, MockOutboxStore, OutboxRecord,
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
    /// real one does: the lane's pending ids past `skip`, at most `per_lane`; records as
    /// `fenced` says (`true`: another worker took the lane, nothing is recorded).
    fn store(
        events: Vec<OutboxRecord>,
        log: Log,
        recorded: Arc<Mutex<Vec<FastProgress>>>,
        fenced: bool,
    ) -> MockOutboxStore {
        let mut store = MockOutboxStore::new();
        store.expect_lease_lanes().returning(|_, _, _, _| Ok(vec![HeldLane { lane: LANE, epoch: 1 }]));
        store.expect_lane_cursors().returning(|held| {
            Ok(held
                .iter()
                .map(|h| LaneCursor { lane: h.lane, epoch: h.epoch, ..Default::default() })
                .collect())
        });
        let all = Arc::new(Mutex::new(Some(events.clone())));
        let read_log = log.clone();
        store.expect_fast_batch().returning(move |cursors, skip, per_lane| {
            let c = &mut cursors[0];
            if c.pending.is_empty() && skip[0] == 0 {
                // The first fill takes the whole lane; later ones find nothing new.
                c.pending = all.lock().unwrap().take().unwrap_or_default().iter().map(|e| e.id).collect();
                c.current = Some("snapshot".into());
                c.complete = true;
            }
            let ids: Vec<i64> = c.pending.iter().skip(skip[0]).take(per_lane as usize).copied().collect();
            let rows: Vec<OutboxRecord> = events.iter().filter(|e| ids.contains(&e.id)).cloned().collect();
            read_log.lock().unwrap().push(format!("read {}", rows.len()));
            Ok(FastBatch { rows, waiting: Vec::new() })
        });
        let record_log = log;
        store.expect_record_fast().returning(move |_, progress, _| {
            record_log.lock().unwrap().push("record".into());
            recorded.lock().unwrap().push(progress.clone());
            Ok(if fenced { Vec::new() } else { progress.progress.iter().map(|c| c.lane).collect() })
        });
        store.expect_claim().returning(|_, _, _, _, _| Ok(Vec::new()));
        store
    }

    /// A broker that confirms every message but those of `failing` event ids (nacked).
    fn publisher(log: Log, failing: Vec<i64>) -> MockEventPublisher {
        let mut publisher = MockEventPublisher::new();
        publisher.expect_ready().returning(|| Ok(()));
        publisher.expect_send().returning(move |batch| {
            let ids: Vec<String> = batch.iter().map(|r| r.id.to_string()).collect();
            log.lock().unwrap().push(format!("send {}", ids.join(",")));
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

    fn relay(store: MockOutboxStore, publisher: MockEventPublisher, settings: RelaySettings) -> OutboxRelay {
        let mut clock = MockClock::new();
        clock.expect_now().returning(Utc::now);
        OutboxRelay::new(
            Arc::new(store),
            Arc::new(publisher),
            Arc::new(clock),
            settings,
            Arc::new(Notify::new()),
        )
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
        let store = store(events, log.clone(), Arc::clone(&recorded), false);
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
        let last = recorded.last().unwrap().progress.iter().find(|c| c.lane == LANE).unwrap().clone();
        assert_eq!(last.done.as_deref(), Some("snapshot"), "the lane's whole difference is done");
    }

    #[tokio::test]
    async fn an_aggregates_next_event_waits_for_the_confirm_of_the_one_before() {
        let events = vec![event(1, "a"), event(2, "a"), event(3, "b"), event(4, "a")];
        let (log, recorded) = (Log::default(), Arc::default());
        let store = store(events, log.clone(), recorded, false);
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
    async fn a_lane_taken_over_is_forgotten_and_its_batch_counted_lost() {
        let events: Vec<OutboxRecord> = (1..=6).map(|i| event(i, &format!("agg-{i}"))).collect();
        let (log, recorded) = (Log::default(), Arc::default());
        let store = store(events, log.clone(), recorded, true);
        let relay = relay(store, publisher(log.clone(), vec![]), settings(2, StdDuration::from_millis(10)));
        let report = relay.run_once().await.unwrap();
        assert_eq!(report.lost_claims, 2, "the batch sent is not recorded: {report:?}");
        assert!(relay.cursors.lock().await.is_empty(), "the lane's position is read again from the store");
    }

    #[tokio::test]
    async fn a_lease_too_short_for_a_send_sends_and_records_nothing() {
        let events: Vec<OutboxRecord> = (1..=4).map(|i| event(i, &format!("agg-{i}"))).collect();
        let (log, recorded) = (Log::default(), Arc::new(Mutex::new(Vec::new())));
        let store = store(events, log.clone(), Arc::clone(&recorded), false);
        // The margin a send needs is longer than the lease itself.
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_secs(3600)));
        let report = relay.drain(&CancellationToken::new()).await.unwrap();
        assert!(sent(&log).is_empty());
        assert!(recorded.lock().unwrap().is_empty());
        assert_eq!(report.published, 0);
        assert_eq!(report.lost_claims, 4, "the batch read is left to the lanes' next owner");
    }

    #[tokio::test]
    async fn a_trickle_is_recorded_before_the_next_read() {
        // One event where a batch holds eight: a trickle.
        let events = vec![event(1, "a")];
        let (log, recorded) = (Log::default(), Arc::default());
        let store = store(events, log.clone(), recorded, false);
        let relay = relay(store, publisher(log.clone(), vec![]), settings(8, StdDuration::from_millis(10)));
        relay.drain(&CancellationToken::new()).await.unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(&log[..4], &["read 1", "send 1", "record", "read 0"], "{log:?}");
    }
}
