//! Where a lane stands for the relay that holds it — the store's, not the relay's: each
//! relay's lane cursors (by worker id) are kept here, in memory, read from the lane's newest
//! progress row when the relay first reads the lane or the lane's epoch changed, and filled
//! with the ids of the lane's next snapshot difference (PostgreSQL) or past its mark
//! (SQLite); on PostgreSQL the fill also reads the rows of each lane's first slice, so a
//! batch of lanes filled afresh (a trickle) needs no second statement. A cursor drops ids
//! only when their batch is recorded (`fast`).
//!
//! A relay's cursors hold only while the server that filled them runs: the fill reads the
//! server's incarnation (`outbox_incarnation`, an unlogged table that crash recovery
//! empties), and a relay that finds it changed forgets every cursor and reads its lanes
//! again from their records. A crash can lose WAL never flushed — a rolled-back producer
//! transaction's — and hand its transaction id out again, to an event that a snapshot taken
//! before the crash counts as done (docs/decisions.md, "A database crash resets the relay's
//! cursors").

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock};

use sea_orm::{ConnectionTrait, FromQueryResult, Value};

use super::{
    FILL, IdRow, OUTBOX_COLUMNS, ProgressRow, bigints, fast_columns, fast_row, held_column, smallints, texts,
};
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{HeldLane, OutboxRecord, RepoError};

/// A lane's position as one progress row records it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Mark {
    /// Every event of the lane visible in this snapshot is done (PostgreSQL; `None`: none).
    pub(super) done: Option<String>,
    /// The snapshot whose difference from `done` is being worked through.
    pub(super) current: Option<String>,
    /// Within `current` (SQLite: overall), every event up to this id is done.
    pub(super) upto_id: i64,
}

/// Where a lane's fast path stands for the relay that holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct LaneCursor {
    pub(super) lane: i16,
    /// The lane's epoch when it was read: a cursor of another epoch is read again.
    pub(super) epoch: i64,
    /// As recorded.
    pub(super) mark: Mark,
    /// Ids of the difference not yet recorded, ascending (at most [`FILL`] of them).
    pub(super) pending: VecDeque<i64>,
    /// Whether `pending` holds the rest of the difference (SQLite: every id past the mark when
    /// it was filled); else more follows past it.
    pub(super) complete: bool,
}

/// The fill's statement on PostgreSQL ($1–$4 the lanes' positions as arrays, $5 [`FILL`], $6
/// how many ids of each lane come with their rows); built once, one text for every fill.
/// Its row of lane -1 also reports the server's incarnation (NULL after a crash).
///
/// The lower bound `xmin(done)` keeps the scan on `idx_outbox_fast` to the events not yet
/// surely done; visibility decides each one. At most `FILL` ids per lane: a difference of a
/// million events is read in slices, so that memory stays bounded; the next slice starts past
/// `upto`. A lane starting a difference takes this statement's own snapshot as its `cur` (one
/// snapshot for the whole statement, the one its reads see); a row of lane -1 reports it.
/// Each lane's ids come as one array (lane >= 0), and its first $6 ids also as rows (lane -2,
/// read by id), so that a lane filled afresh needs no second statement for its batch: one row
/// per lane and per event read, however long the difference. The difference `f` is computed
/// once (a CTE used twice is materialized); the read by id stays a lateral probe of the
/// primary key (its LIMIT keeps it from being planned as a join over the table).
static FILL_SQL: LazyLock<String> = LazyLock::new(|| {
    let nulls = vec!["NULL"; OUTBOX_COLUMNS.split(", ").count() + 1].join(", ");
    format!(
        "WITH f AS (SELECT l.lane, x.id, x.n \
           FROM (SELECT u.lane, NULLIF(u.done, '') AS done, NULLIF(u.cur, '') AS cur, u.upto \
             FROM unnest($1::smallint[], $2::text[], $3::text[], $4::bigint[]) AS u(lane, done, cur, upto)) l \
           CROSS JOIN LATERAL (SELECT o.id, row_number() OVER (ORDER BY o.id) AS n \
             FROM outbox_events o WHERE o.lane = l.lane AND NOT o.slow \
             AND o.txid >= COALESCE(pg_snapshot_xmin(l.done::pg_snapshot), '0'::xid8) \
             AND o.txid < pg_snapshot_xmax(COALESCE(l.cur::pg_snapshot, pg_current_snapshot())) \
             AND pg_visible_in_snapshot(o.txid, COALESCE(l.cur::pg_snapshot, pg_current_snapshot())) \
             AND (l.done IS NULL OR NOT pg_visible_in_snapshot(o.txid, l.done::pg_snapshot)) \
             AND o.id > l.upto \
           ORDER BY o.id LIMIT $5) x) \
         SELECT -2::smallint AS fill_lane, NULL::bigint[] AS fill_ids, NULL::text AS snap, \
           NULL::text AS incarnation, r.* FROM f \
           CROSS JOIN LATERAL (SELECT {}, {} FROM outbox_events o WHERE o.id = f.id LIMIT 1) r \
           WHERE f.n <= $6 \
         UNION ALL SELECT f.lane, array_agg(f.id ORDER BY f.id), NULL, NULL, {nulls} FROM f GROUP BY f.lane \
         UNION ALL SELECT -1::smallint, NULL, pg_current_snapshot()::text, \
           (SELECT i.token FROM outbox_incarnation i), {nulls}",
        fast_columns(),
        held_column()
    )
});

/// Rows a fill read with their ids, by id, each with whether it is held ([`fast_row`]).
pub(super) type ReadRows = HashMap<i64, (OutboxRecord, bool)>;

/// One relay's cursors, by lane, and the server incarnation they were filled in; locked
/// while it reads or records (one at a time in any case: the relay never overlaps them).
#[derive(Debug, Default)]
pub(super) struct RelayCursors {
    pub(super) lanes: HashMap<i16, LaneCursor>,
    /// The PostgreSQL server's incarnation as the last fill read it (`None`: no fill yet,
    /// or SQLite).
    pub(super) incarnation: Option<String>,
}

/// Each relay's cursors in this process, by worker id.
#[derive(Default)]
pub(super) struct Cursors(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<RelayCursors>>>>);

impl Cursors {
    pub(super) fn of(&self, worker: &str) -> Arc<tokio::sync::Mutex<RelayCursors>> {
        // A poisoned lock holds a plain map: keep using it.
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(worker.to_owned()).or_default().clone()
    }

    /// Forgets `worker`'s cursors (it gave its lanes back).
    pub(super) fn forget(&self, worker: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(worker);
    }
}

impl SeaOrmOutboxStore {
    /// Each lane's cursor as its newest progress row left it (a lane never published starts
    /// before its first event).
    pub(super) async fn recorded_cursors(&self, held: &[HeldLane]) -> Result<Vec<LaneCursor>, RepoError> {
        if held.is_empty() {
            return Ok(Vec::new());
        }
        // One index probe per lane (`(lane, id)`), however long the progress log is.
        let newest = held
            .iter()
            .map(|h| format!("(SELECT MAX(q.id) FROM outbox_progress q WHERE q.lane = {})", h.lane))
            .collect::<Vec<_>>()
            .join(", ");
        let rows = ProgressRow::find_by_statement(self.statement(
            &format!(
                "SELECT p.lane, p.done, p.cur, p.upto_id FROM outbox_progress p WHERE p.id IN ({newest})"
            ),
            vec![],
        ))
        .all(&self.fast)
        .await
        .map_err(repo_err)?;
        let latest: HashMap<i16, ProgressRow> = rows.into_iter().map(|r| (r.lane, r)).collect();
        Ok(held
            .iter()
            .map(|h| match latest.get(&h.lane) {
                Some(p) => LaneCursor {
                    lane: h.lane,
                    epoch: h.epoch,
                    mark: Mark { done: p.done.clone(), current: p.cur.clone(), upto_id: p.upto_id },
                    ..Default::default()
                },
                None => LaneCursor { lane: h.lane, epoch: h.epoch, ..Default::default() },
            })
            .collect())
    }

    /// Fills the `pending` ids of `cursors[which]` from snapshot differences: a cursor in the
    /// middle of one resumes it past `upto_id`; the others start one from a new snapshot. A
    /// lane whose difference is empty moves `done` on to it (in the cursor only).
    ///
    /// # Errors
    /// Also when the server is not the incarnation `known` names (it recovered from a crash
    /// since): `known` then names the new one, and the cursors must be read again.
    async fn fill_from_snapshots(
        &self,
        cursors: &mut [LaneCursor],
        which: &[usize],
        first: usize,
        known: &mut Option<String>,
    ) -> Result<ReadRows, RepoError> {
        for &i in which {
            if cursors[i].mark.current.is_none() {
                cursors[i].mark.upto_id = 0;
            }
        }
        // One statement text whatever the lanes (parsed once, cached): the lanes' positions
        // go in as arrays, unnested in SQL.
        let chosen: Vec<&LaneCursor> = which.iter().map(|&i| &cursors[i]).collect();
        let values: Vec<Value> = vec![
            smallints(chosen.iter().map(|c| c.lane)),
            texts(chosen.iter().map(|c| c.mark.done.clone())),
            texts(chosen.iter().map(|c| c.mark.current.clone())),
            bigints(chosen.iter().map(|c| c.mark.upto_id)),
            (FILL as i64).into(),
            (first as i64).into(),
        ];
        let results = self.fast.query_all_raw(self.statement(&FILL_SQL, values)).await.map_err(repo_err)?;
        let (mut snapshot, mut incarnation): (Option<String>, Option<String>) = (None, None);
        let mut by_lane: HashMap<i16, VecDeque<i64>> = HashMap::new();
        let mut read = ReadRows::new();
        // By position ([`FILL_SQL`]'s columns: lane, ids, snapshot, incarnation, then a row's).
        for result in results {
            match result.try_get_by_index::<i16>(0).map_err(repo_err)? {
                -1 => {
                    snapshot = result.try_get_by_index(2).map_err(repo_err)?;
                    incarnation = result.try_get_by_index(3).map_err(repo_err)?;
                }
                -2 => {
                    if let Some((row, held)) = fast_row(&result, 4)? {
                        read.insert(row.id, (row, held));
                    }
                }
                lane => {
                    let ids: Option<Vec<i64>> = result.try_get_by_index(1).map_err(repo_err)?;
                    by_lane.insert(lane, ids.unwrap_or_default().into());
                }
            }
        }
        let snapshot = snapshot.ok_or_else(|| RepoError::unavailable("no snapshot reported"))?;
        let incarnation = match incarnation {
            Some(token) => token,
            None => self.new_incarnation().await?,
        };
        if known.as_ref().is_some_and(|k| *k != incarnation) {
            *known = Some(incarnation);
            return Err(RepoError::unavailable(
                "the database recovered from a crash since the outbox lanes were read: \
                 reading them again from their records",
            ));
        }
        *known = Some(incarnation);
        for &i in which {
            let c = &mut cursors[i];
            if c.mark.current.is_none() {
                c.mark.current = Some(snapshot.clone());
            }
            match by_lane.remove(&c.lane) {
                Some(pending) => {
                    c.complete = pending.len() < FILL;
                    c.pending = pending;
                }
                None => {
                    // Nothing between the two snapshots: the newer one is done.
                    c.mark.done = c.mark.current.take();
                    c.mark.upto_id = 0;
                    c.complete = true;
                }
            }
        }
        Ok(read)
    }

    /// The server's incarnation after a crash emptied it: a new token, or the one another
    /// relay wrote first.
    async fn new_incarnation(&self) -> Result<String, RepoError> {
        self.db
            .execute_unprepared(
                "INSERT INTO outbox_incarnation (token) VALUES (gen_random_uuid()::text) ON CONFLICT DO NOTHING",
            )
            .await
            .map_err(repo_err)?;
        let row = self
            .db
            .query_one_raw(self.statement("SELECT token FROM outbox_incarnation", vec![]))
            .await
            .map_err(repo_err)?
            .ok_or_else(|| RepoError::unavailable("the server's incarnation vanished as it was written"))?;
        row.try_get("", "token").map_err(repo_err)
    }

    /// Fills the `pending` ids of `cursors[which]` (each empty): on PostgreSQL from snapshot
    /// differences, on SQLite (one writer: ids in commit order) with the ids past the mark.
    /// On PostgreSQL the first `first` ids of each lane come with their rows: those it returns
    /// (SQLite: none).
    ///
    /// # Errors
    /// Also when the PostgreSQL server is not the incarnation `known` names
    /// ([`Self::fill_from_snapshots`]).
    pub(super) async fn fill(
        &self,
        cursors: &mut [LaneCursor],
        which: &[usize],
        first: usize,
        known: &mut Option<String>,
    ) -> Result<ReadRows, RepoError> {
        if self.is_postgres() {
            return self.fill_from_snapshots(cursors, which, first, known).await;
        }
        for &i in which {
            let c = &mut cursors[i];
            let ids = IdRow::find_by_statement(self.statement(
                "SELECT id FROM outbox_events WHERE NOT slow AND lane = $1 AND id > $2 ORDER BY id LIMIT $3",
                vec![c.lane.into(), c.mark.upto_id.into(), (FILL as i64).into()],
            ))
            .all(&self.fast)
            .await
            .map_err(repo_err)?;
            // One writer at a time, so ids come in commit order: fewer than asked for are all
            // there is past the mark until the next commit (which wakes the relay).
            c.complete = ids.len() < FILL;
            c.pending = ids.into_iter().map(|r| r.id).collect();
        }
        Ok(ReadRows::new())
    }
}
