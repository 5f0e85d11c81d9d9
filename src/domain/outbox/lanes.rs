//! Lanes: every aggregate maps to one of `outbox.lanes` lanes by a stable hash of (aggregate
//! type, aggregate id); a lane is relayed by one worker at a time, and live workers share the
//! lanes fairly. Both rules are pure so that they are tested without a database.

/// `outbox.lanes` when unset.
pub const DEFAULT_LANES: u16 = 16;

/// The most lanes `outbox.lanes` may ask for.
pub const MAX_LANES: u16 = 1024;

/// The lane of an aggregate among `lanes` (at least 1): FNV-1a (64 bit) over the type, a
/// unit separator and the id. Stable across versions and platforms — rows store it, so a
/// change here would split an aggregate's events over two lanes (pinned by a test).
pub fn lane_of(aggregate_type: &str, aggregate_id: &str, lanes: u16) -> i16 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    for byte in aggregate_type.bytes().chain([0x1f]).chain(aggregate_id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    // Below `lanes` <= MAX_LANES, so it fits an i16.
    (hash % u64::from(lanes.max(1))) as i16
}

/// What a worker does with its lanes when it renews them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanePlan {
    /// Lanes above its fair share, to give back (its highest).
    pub release: Vec<i16>,
    /// How many free or expired lanes to take, up to its fair share.
    pub acquire: usize,
}

/// A worker holding `held` of `total` lanes while `live_workers` workers (itself included)
/// are alive holds `ceil(total / live_workers)` after this plan.
pub fn plan(held: &[i16], total: usize, live_workers: usize) -> LanePlan {
    let share = total.div_ceil(live_workers.max(1));
    if held.len() > share {
        let mut sorted = held.to_vec();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        sorted.truncate(held.len() - share);
        LanePlan { release: sorted, acquire: 0 }
    } else {
        LanePlan { release: Vec::new(), acquire: share - held.len() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lane_of_an_aggregate_never_changes() {
        // Pinned values (computed by an independent FNV-1a): rows store their lane, so this
        // function is part of the data format.
        for (aggregate_type, id, lane) in [
            ("order", "0193a4f2-7c1e-7d2a-9b1f-3c5d7e9f1a2b", 2),
            ("order", "", 8),
            ("", "", 14),
            ("order", "a", 11),
            ("registration", "m-1:user-7", 7),
        ] {
            assert_eq!(lane_of(aggregate_type, id, 16), lane, "{aggregate_type}/{id}");
        }
        assert_eq!(lane_of("order", "a", 1), 0);
        assert_eq!(lane_of("order", "a", 0), 0, "no lanes means one");
    }

    #[test]
    fn type_and_id_are_separated() {
        assert_ne!(lane_of("ab", "c", MAX_LANES), lane_of("a", "bc", MAX_LANES));
    }

    #[test]
    fn aggregates_spread_over_the_lanes() {
        let mut per_lane = [0u32; 16];
        for i in 0..16_000 {
            per_lane[lane_of("order", &format!("order-{i}"), 16) as usize] += 1;
        }
        for (lane, n) in per_lane.iter().enumerate() {
            assert!((800..1200).contains(n), "lane {lane} got {n} of 16 000");
        }
    }

    #[test]
    fn workers_converge_on_a_fair_share() {
        let held = |n: i16| (0..n).collect::<Vec<_>>();
        for (held_now, total, live, release, acquire) in [
            (held(0), 16, 1, vec![], 16),
            (held(16), 16, 1, vec![], 0),
            (held(16), 16, 2, vec![15, 14, 13, 12, 11, 10, 9, 8], 0),
            (held(0), 16, 2, vec![], 8),
            (held(6), 16, 3, vec![], 0),
            (held(8), 16, 3, vec![7, 6], 0),
            (held(2), 16, 4, vec![], 2),
            (held(0), 16, 0, vec![], 16),
            (held(1), 2, 4, vec![], 0),
        ] {
            let p = plan(&held_now, total, live);
            assert_eq!(p, LanePlan { release, acquire }, "held {held_now:?} of {total}, {live} live");
        }
    }
}
