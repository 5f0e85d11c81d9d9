//! The fast path's batches: each lane's next ids from its cursor (`cursors`), a batch's rows
//! read by id, and batches recorded as one progress row per lane, fenced by the lane's
//! epoch.
//!
//! A batch handed out carries a [`BatchToken`] with its [`Pages`]: the relay hands the tokens
//! of the batches not yet recorded back to the next read (which reads past them), and to the
//! record (which moves the cursors past them). A cursor's ids are dropped only once
//! recorded, so a batch that is never recorded (a failed record, a lapsed lease, a crash) is
//! read again: duplicates, never a loss. A page also names the server incarnation its lane
//! was filled in (`cursors`): a batch read before a crash is not recorded after it.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;

use super::cursors::{LaneCursor, Mark};
use super::{fast_columns, fast_row, held_column};
use crate::adapters::persistence::{SeaOrmOutboxStore, repo_err};
use crate::application::ports::{BatchToken, FastBatch, FastRecord, HeldLane, OutboxRecord, RepoError};

mod record;

/// What a batch's token holds: per lane, what the batch took and where the lane stands
/// once it is done.
#[derive(Debug)]
struct Pages(Vec<Page>);

#[derive(Debug)]
struct Page {
    lane: i16,
    epoch: i64,
    /// The last id the batch took of the lane (ids are taken in ascending order).
    last: i64,
    /// The PostgreSQL server's incarnation the lane was filled in (`None` on SQLite).
    incarnation: Option<String>,
    /// The lane's position once the batch is done.
    next: Mark,
}

impl SeaOrmOutboxStore {
    /// The next batch of `worker` over `held` (the port's `next_batch`).
    pub(super) async fn next_batch(
        &self,
        worker: &str,
        held: &[HeldLane],
        unrecorded: &[BatchToken],
        limit: u32,
    ) -> Result<Option<FastBatch>, RepoError> {
        if held.is_empty() {
            return Ok(None);
        }
        let mine = self.cursors.of(worker);
        let mut guard = mine.lock().await;
        let state = &mut *guard;
        let cursors = &mut state.lanes;
        // A lane no longer held, or taken again since (a new epoch), starts from its record.
        cursors.retain(|lane, c| held.iter().any(|h| h.lane == *lane && h.epoch == c.epoch));
        let missing: Vec<HeldLane> =
            held.iter().filter(|h| !cursors.contains_key(&h.lane)).copied().collect();
        if !missing.is_empty() {
            for c in self.recorded_cursors(&missing).await? {
                cursors.insert(c.lane, c);
            }
        }
        // Per lane: the last id that batches not yet recorded took (read past it).
        let mut past: HashMap<i16, i64> = HashMap::new();
        for page in unrecorded.iter().filter_map(|t| t.get::<Pages>()).flat_map(|p| &p.0) {
            if held.contains(&HeldLane { lane: page.lane, epoch: page.epoch })
                && page.incarnation == state.incarnation
            {
                let last = past.entry(page.lane).or_insert(page.last);
                *last = std::cmp::max(*last, page.last);
            }
        }
        let mut lanes: Vec<LaneCursor> = held.iter().filter_map(|h| cursors.remove(&h.lane)).collect();
        let filled_in = state.incarnation.clone();
        let batch = self.take_batch(&mut lanes, &past, limit as usize, &mut state.incarnation).await;
        if filled_in.is_some() && filled_in != state.incarnation {
            // The server recovered from a crash since these cursors were filled: every lane
            // starts again from its record.
            state.lanes.clear();
        } else {
            state.lanes.extend(lanes.into_iter().map(|c| (c.lane, c)));
        }
        batch
    }

    /// A batch carries at most `limit` events over all lanes (what a crash can make the
    /// lanes' next owner send again), shared evenly among the lanes that have events
    /// ([`shares`]).
    async fn take_batch(
        &self,
        cursors: &mut [LaneCursor],
        past: &HashMap<i16, i64>,
        limit: usize,
        incarnation: &mut Option<String>,
    ) -> Result<Option<FastBatch>, RepoError> {
        let even = (limit / cursors.len().max(1)).max(1);
        // A lane with a batch not yet recorded is not refilled: its next difference starts
        // once that batch is recorded.
        let empty: Vec<usize> = (0..cursors.len())
            .filter(|&i| cursors[i].pending.is_empty() && !past.contains_key(&cursors[i].lane))
            .collect();
        // A lane filled now has its first even share of rows read by the fill itself (PostgreSQL):
        // at a trickle, where every lane is filled afresh, a batch is one statement.
        let mut read = if empty.is_empty() {
            HashMap::new()
        } else {
            self.fill(cursors, &empty, even, incarnation).await?
        };
        // Per lane, where its ids past the batches not yet recorded start, and how many.
        let starts: Vec<usize> = cursors
            .iter()
            .map(|c| {
                let floor = past.get(&c.lane).copied().unwrap_or(i64::MIN);
                c.pending.partition_point(|&id| id <= floor)
            })
            .collect();
        let left: Vec<usize> =
            cursors.iter().zip(&starts).map(|(c, &start)| c.pending.len() - start).collect();
        let shares = shares(&left, limit);
        let mut pages = Vec::new();
        let mut ids = Vec::new();
        // Whether a lane may hold more that committed before this read: one not filled by it
        // (its ids come from an older snapshot, or it waits for a batch to be recorded), or
        // one whose ids this batch did not all take.
        let mut more = empty.len() < cursors.len();
        for ((c, start), share) in cursors.iter().zip(starts).zip(shares) {
            let taken = ids.len();
            ids.extend(c.pending.range(start..).copied().take(share));
            more |= !c.complete || c.pending.back().is_some_and(|id| Some(id) != ids[taken..].last());
            let Some(&last) = ids[taken..].last() else { continue };
            let mut next = Mark { upto_id: last, ..c.mark.clone() };
            if next.current.is_some() && c.complete && c.pending.back() == Some(&last) {
                // The whole difference is done: its snapshot is the lane's new floor.
                next.done = next.current.take();
                next.upto_id = 0;
            }
            pages.push(Page { lane: c.lane, epoch: c.epoch, last, incarnation: incarnation.clone(), next });
        }
        if ids.is_empty() {
            return Ok(None);
        }
        let mut found = Vec::with_capacity(ids.len());
        let mut unread = Vec::new();
        for id in &ids {
            match read.remove(id) {
                Some(row) => found.push(row),
                None => unread.push(*id),
            }
        }
        if !unread.is_empty() {
            // By id alone, the primary key's plan whatever the statistics: a `NOT o.slow` here
            // let a table without statistics (truncated, restored, not analyzed yet) be read
            // through the whole of `idx_outbox_fast` for every batch (docs/decisions.md). A row
            // moved to the slow path since its lane was filled is dropped instead.
            let mut values = Vec::new();
            let by_id = self.in_ids("o.id", &unread, &mut values);
            let statement = self.statement(
                &format!("SELECT {}, {} FROM outbox_events o WHERE {by_id}", fast_columns(), held_column()),
                values,
            );
            for result in self.fast.query_all_raw(statement).await.map_err(repo_err)? {
                found.extend(fast_row(&result, 0)?);
            }
        }
        let mut waiting: Vec<(String, String)> = found
            .iter()
            .filter(|(_, held)| *held)
            .map(|(row, _)| (row.aggregate_type.clone(), row.aggregate_id.clone()))
            .collect();
        let mut rows: Vec<OutboxRecord> = found.into_iter().map(|(row, _)| row).collect();
        rows.sort_by_key(|r| (r.lane, r.id));
        waiting.sort_unstable();
        waiting.dedup();
        Ok(Some(FastBatch { rows, waiting, token: BatchToken::new(Pages(pages)), more }))
    }

    /// Records `record`'s batches (the port's `record_batches`), then moves `worker`'s
    /// cursors past them: the lanes recorded drop the ids done, the lanes fenced off are
    /// forgotten.
    pub(super) async fn record_batches(
        &self,
        worker: &str,
        record: &FastRecord,
        now: DateTime<Utc>,
    ) -> Result<Vec<i16>, RepoError> {
        // Per lane, the last batch's page: a later batch's position supersedes an earlier one's.
        let mut latest: BTreeMap<i16, &Page> = BTreeMap::new();
        for page in record.batches.iter().filter_map(|t| t.get::<Pages>()).flat_map(|p| &p.0) {
            latest.insert(page.lane, page);
        }
        if latest.is_empty() {
            return Ok(Vec::new());
        }
        let pages: Vec<&Page> = latest.values().copied().collect();
        let recorded = self.write_progress(worker, &pages, record, now).await?;
        let mine = self.cursors.of(worker);
        let mut guard = mine.lock().await;
        let cursors = &mut guard.lanes;
        let mut fenced = Vec::new();
        for page in pages {
            if !recorded.contains(&page.lane) {
                // Another worker owns the lane now, or the server crashed since the batch was
                // read: the lane's position is read again from its record.
                cursors.remove(&page.lane);
                fenced.push(page.lane);
                continue;
            }
            if let Some(c) = cursors.get_mut(&page.lane).filter(|c| c.epoch == page.epoch) {
                while c.pending.front().is_some_and(|&id| id <= page.last) {
                    c.pending.pop_front();
                }
                c.mark = page.next.clone();
            }
        }
        Ok(fenced)
    }
}

/// How many of its `left` ids each lane gives a batch of at most `limit`: an even share
/// each, a lane with fewer giving what it has and the rest going to the lanes with more —
/// so that the last events of a drain, left in a few lanes, still go in full batches.
fn shares(left: &[usize], limit: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..left.len()).collect();
    order.sort_by_key(|&i| left[i]);
    let mut shares = vec![0; left.len()];
    let mut room = limit;
    for (k, &i) in order.iter().enumerate() {
        // The lanes still to serve share what room is left; the fewest-first order hands
        // what one lane cannot use on to the lanes after it.
        let share = left[i].min(room / (order.len() - k));
        shares[i] = share;
        room -= share;
    }
    shares
}

#[cfg(test)]
mod tests {
    use super::shares;

    #[test]
    fn lanes_share_a_batch_evenly_and_hand_on_what_they_cannot_use() {
        assert_eq!(shares(&[100, 100, 100, 100], 8), vec![2, 2, 2, 2]);
        assert_eq!(shares(&[1, 20], 8), vec![1, 7]);
        assert_eq!(shares(&[0, 3, 100, 1], 16), vec![0, 3, 12, 1]);
        assert_eq!(shares(&[5, 5, 5], 100), vec![5, 5, 5], "fewer than the limit: all of them");
        assert_eq!(shares(&[100, 100, 100], 8), vec![2, 3, 3], "never more than the limit");
        assert_eq!(shares(&[], 8), Vec::<usize>::new());
    }
}
