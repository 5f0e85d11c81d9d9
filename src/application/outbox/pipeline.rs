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
//! - **Quiet.** Nor is a trickle followed by another read at all when it took everything
//!   committed before it and no commit has woken the relay since: the drain ends, and the
//!   next commit's wake-up starts the next one. Every read takes the wake-ups signalled
//!   before it (a commit signals once it is visible), so one that comes later is news.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;

use super::report::{RelayError, RelayReport, Resend};
pub(super) use super::stages::{Aggregate, Batch, Round, Stages, aggregate_of, verdicts_for};
use crate::application::ports::{BatchToken, HeldLane, OutboxRecord, PendingVerdicts, PublishOutcome};

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

/// How a pipeline ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
    /// Nothing more to read, everything read recorded.
    Dry,
    /// The lanes held changed: look at them again before the next drain.
    LanesChanged,
    /// The lease ran short of a send's margin: nothing more is sent until it is renewed.
    Lapsed,
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
    relay: &'a dyn Stages,
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
    /// The last read said the lanes may hold more that committed before it.
    more: bool,
    /// A read found the lanes held changed.
    lanes_changed: bool,
    /// A read failed: nothing more is read, what was sent is recorded, then this is the
    /// pipeline's outcome.
    read_failed: Option<RelayError>,
    total: RelayReport,
}

impl<'a> Pipeline<'a> {
    pub(super) fn new(relay: &'a dyn Stages, held: Vec<HeldLane>, reads: Reads) -> Self {
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
            more: true,
            lanes_changed: false,
            read_failed: None,
            total: RelayReport::default(),
        }
    }

    fn batch_mut(&mut self, slot: Slot) -> &mut Batch {
        let at = (slot.batch - self.first) as usize;
        &mut self.batches[at]
    }

    fn row(&self, slot: Slot) -> &Arc<OutboxRecord> {
        &self.batches[(slot.batch - self.first) as usize].round.rows[slot.row]
    }

    /// The trickle rule: a small batch is not followed by another read until everything
    /// before it is recorded.
    fn is_trickle(&self, rows: usize) -> bool {
        rows * 2 < self.relay.batch_size()
    }

    /// The quiet rule: after a trickle that took everything committed before it was read,
    /// and no commit since (`woken`: a wake-up came), the next read would find nothing.
    fn is_quiet(&self, woken: bool) -> bool {
        self.trickle && !self.more && !woken
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
            && self.unrecorded() + self.relay.batch_size()
                <= UNRECORDED_BATCHES * self.relay.batch_size()
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
            sent: 0,
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
        self.more = batch.round.more;
        self.batches.push_back(batch);
    }

    /// Takes in the broker's verdicts on a group: counts them, and sends each aggregate's
    /// next event on a confirm, or holds the rest of its chain back on a failure.
    fn take_verdicts(&mut self, slots: Vec<Slot>, outcomes: Vec<PublishOutcome>) {
        let now = self.relay.now();
        self.sent_open -= slots.len();
        for (slot, outcome) in slots.into_iter().zip(verdicts_for(outcomes)) {
            // Counted on a borrowed row (no copy of its payload), then applied to its batch.
            let (key, delta, failure) = {
                let row = self.row(slot);
                let read_at = self.batches[(slot.batch - self.first) as usize].read_at;
                let mut delta = RelayReport::default();
                let failure = match outcome {
                    PublishOutcome::Confirmed => {
                        delta.published = 1;
                        self.relay.confirmed(row, now);
                        None
                    }
                    PublishOutcome::Failed { code, reason } => {
                        Some(self.relay.failed(row, code, &reason, read_at, &mut delta))
                    }
                };
                (aggregate_of(row), delta, failure)
            };
            let batch = self.batch_mut(slot);
            batch.open -= 1;
            batch.confirmed_at = now;
            batch.report.add(delta);
            if let Some(failure) = failure {
                batch.failures.push(failure);
                self.failed.insert(key.clone());
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
        for &slot in &slots {
            self.batch_mut(slot).sent += 1;
        }
        let records: Vec<Arc<OutboxRecord>> = slots.iter().map(|&s| Arc::clone(self.row(s))).collect();
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
        let hungry = self.unsent() < self.relay.batch_size();
        if finished > 0 && !(read && hungry) {
            let batches: Vec<Batch> = self.batches.drain(..finished).collect();
            self.first += finished as u64;
            let relay = self.relay;
            self.db = Some(Box::pin(async move { DbTurn::Recorded(relay.record(batches).await) }));
        } else if read {
            // Taken before the read: what it signalled is visible to the read.
            if self.is_quiet(self.relay.woken()) {
                self.dry = true;
                return;
            }
            self.reads_done += 1;
            let unrecorded: Vec<BatchToken> = self.batches.iter().map(|b| b.round.token.clone()).collect();
            let relay = self.relay;
            let held = self.held.clone();
            let lost = self.lost.clone();
            self.db = Some(Box::pin(async move {
                // Renewing (when due) here keeps a long drain's lease alive.
                match relay.held_lanes().await {
                    Ok(now_held) if now_held != held => return DbTurn::LanesChanged,
                    Ok(_) => {}
                    Err(err) => return DbTurn::Read(Err(err.into())),
                }
                let lanes: Vec<HeldLane> = held.into_iter().filter(|h| !lost.contains(&h.lane)).collect();
                DbTurn::Read(relay.read(&lanes, &unrecorded).await)
            }));
        }
    }

    /// Runs the pipeline until nothing more is to be read and everything read is recorded,
    /// or the lease runs short (what is not recorded then is left to the lanes' next owner).
    /// With what it did, how it ended.
    ///
    /// # Errors
    /// The database failed: the batches not yet recorded are sent again next time.
    pub(super) async fn run(mut self, stop: &CancellationToken) -> Result<(RelayReport, Ended), RelayError> {
        loop {
            if self.sending.is_none() && !self.ready.is_empty() && !self.send_ready() {
                return Ok((self.lapse().await, Ended::Lapsed));
            }
            if self.db.is_none() {
                self.next_db_turn(stop);
            }
            if self.sending.is_none() && self.db.is_none() && self.in_flight.is_empty() {
                if let Some(err) = self.read_failed.take() {
                    return Err(err);
                }
                let ended = if self.lanes_changed { Ended::LanesChanged } else { Ended::Dry };
                return Ok((self.total, ended));
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
                Wake::Verdicts(slots, outcomes) => self.take_verdicts(slots, outcomes),
                Wake::Idle => {}
                Wake::Db(turn) => self.db_turn(turn)?,
            }
        }
    }

    /// What the database's turn did: a read admitted (or the lanes found dry or changed), a
    /// record's report taken; a failed read ends the reading, a failed record the run.
    fn db_turn(&mut self, turn: DbTurn) -> Result<(), RelayError> {
        self.db = None;
        match turn {
            DbTurn::Read(Ok(Some(round))) => self.admit(round),
            DbTurn::Read(Ok(None)) => self.dry = true,
            DbTurn::LanesChanged => {
                self.dry = true;
                self.lanes_changed = true;
            }
            // A failed read ends the reading, not the pipeline: what is on the wire gets its
            // verdicts and its record, so it is not sent again.
            DbTurn::Read(Err(err)) => {
                tracing::warn!(error = %crate::application::error::Chain(&err), "outbox read failed; recording what was sent before it");
                self.dry = true;
                self.read_failed.get_or_insert(err);
            }
            DbTurn::Recorded(Err(err)) => {
                // The record's own batches are counted by it; those behind it cannot be
                // recorded before it, and are sent again too.
                let resent: usize = self.batches.iter().map(Batch::reached_broker).sum();
                self.relay.resending(Resend::RecordFailed, resent);
                return Err(err);
            }
            DbTurn::Recorded(Ok((report, fenced))) => {
                self.lost.extend(fenced);
                self.total.add(report);
            }
        }
        Ok(())
    }

    /// The lease runs short of the time a send may take: nothing more goes out. What is on
    /// the wire gets its verdicts, and the batches they finish are recorded — the record is
    /// fenced by the lanes' epochs, so it writes nothing for a lane another worker took
    /// meanwhile (whose owner sends those events again, counted `lane_lost`), and spares a
    /// second copy of every event of a lane still ours. The rest is left to the lanes' next
    /// owner — this worker again, once it renews — from the last recorded position.
    async fn lapse(mut self) -> RelayReport {
        // A turn under way finishes: a record cut short is rolled back by the database, but
        // its outcome tells which cursors moved.
        if let Some(turn) = self.db.take()
            && let DbTurn::Recorded(Ok((report, fenced))) = turn.await
        {
            self.total.add(report);
            self.lost.extend(fenced);
        }
        while let Some((slots, outcomes)) = self.in_flight.next().await {
            self.take_verdicts(slots, outcomes);
        }
        let finished = self.finished();
        if finished > 0 {
            let batches: Vec<Batch> = self.batches.drain(..finished).collect();
            self.first += finished as u64;
            // A record that fails counts its own batches as sent again.
            match self.relay.record(batches).await {
                Ok((report, _)) => self.total.add(report),
                Err(err) => tracing::warn!(
                    error = %crate::application::error::Chain(&err),
                    "outbox record after a lapsed lease failed"
                ),
            }
        }
        let lost: usize = self.batches.iter().map(|b| b.round.rows.len()).sum();
        self.total.lost_claims += lost as u64;
        let resent: usize = self.batches.iter().map(Batch::reached_broker).sum();
        self.relay.resending(Resend::LeaseLapsed, resent);
        self.total.resent += resent as u64;
        tracing::warn!(
            lost,
            resent,
            "outbox lane lease lapsed mid-drain; nothing more was sent, what was on the wire recorded"
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
