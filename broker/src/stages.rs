//! Where a replicated `acks=all` batch spends its time, per core: each
//! stage's latency histogram, counted in thread-local cells where the
//! stage ends (no atomics, nothing shared), read by a scrape
//! (`/metrics`: `strom_replication_stage_seconds`). A batch's way, in
//! order:
//!
//! 1. the leader appends it and makes it durable ([`Stage::LeaderLocalDurable`]);
//! 2. a follower's fetch, waiting at the leader, returns with it
//!    ([`Stage::LeaderFollowerFetch`]: the whole time a follower's fetch
//!    spent at the leader, its long-poll wait included);
//! 3. the follower appends it and makes it durable
//!    ([`Stage::FollowerAppendDurable`]), then fetches again, which tells
//!    the leader its position;
//! 4. the leader's high watermark passes it on every ISR member's word
//!    ([`Stage::LeaderIsrWait`]: from the batch durable here to `acks=all`
//!    holding);
//! 5. the produce's task resumes and answers ([`Stage::AnswerAfterAcks`]).

use std::cell::Cell;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Upper bounds (inclusive, microseconds) of the buckets; the last bucket
/// counts everything slower.
pub const STAGE_BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000, 30_000_000,
];
const BUCKETS: usize = STAGE_BOUNDS_US.len() + 1;

/// A stage of a replicated batch's way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stage {
    LeaderLocalDurable,
    LeaderFollowerFetch,
    FollowerAppendDurable,
    LeaderIsrWait,
    AnswerAfterAcks,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::LeaderLocalDurable,
        Stage::LeaderFollowerFetch,
        Stage::FollowerAppendDurable,
        Stage::LeaderIsrWait,
        Stage::AnswerAfterAcks,
    ];

    /// The `stage` label.
    pub fn name(self) -> &'static str {
        match self {
            Stage::LeaderLocalDurable => "leader_local_durable",
            Stage::LeaderFollowerFetch => "leader_follower_fetch",
            Stage::FollowerAppendDurable => "follower_append_durable",
            Stage::LeaderIsrWait => "leader_isr_wait",
            Stage::AnswerAfterAcks => "answer_after_acks",
        }
    }

    /// Its place in [`Stage::ALL`] (the variants' order).
    fn slot(self) -> usize {
        self as usize
    }
}

#[derive(Default)]
struct Counters {
    buckets: [Cell<u64>; BUCKETS],
    sum_us: Cell<u64>,
}

thread_local! {
    static STAGES: [Counters; 5] = Default::default();
}

/// Counts one pass through `stage` that took `elapsed`.
pub fn record(stage: Stage, elapsed: Duration) {
    let us = elapsed.as_micros().min(u128::from(u64::MAX)) as u64;
    let bucket = STAGE_BOUNDS_US.partition_point(|bound| *bound < us);
    STAGES.with(|stages| {
        let counters = &stages[stage.slot()];
        let cell = &counters.buckets[bucket];
        cell.set(cell.get().wrapping_add(1));
        counters.sum_us.set(counters.sum_us.get().wrapping_add(us));
    });
}

/// Counts one pass through `stage` that began at `since`.
pub fn record_since(stage: Stage, since: Instant) {
    record(stage, since.elapsed());
}

/// One stage's histogram on one core (or summed over cores).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageSnapshot {
    pub stage: Stage,
    /// Count per bucket of [`STAGE_BOUNDS_US`], then slower (not
    /// cumulative).
    pub buckets: Vec<u64>,
    pub sum_us: u64,
}

impl StageSnapshot {
    pub fn add(&mut self, other: &StageSnapshot) {
        for (sum, count) in self.buckets.iter_mut().zip(&other.buckets) {
            *sum += count;
        }
        self.sum_us += other.sum_us;
    }
}

/// This core's histograms of the stages it has counted.
pub fn snapshot() -> Vec<StageSnapshot> {
    STAGES.with(|stages| {
        Stage::ALL
            .iter()
            .zip(stages.iter())
            .filter(|(_, c)| c.buckets.iter().any(|b| b.get() > 0))
            .map(|(stage, c)| StageSnapshot {
                stage: *stage,
                buckets: c.buckets.iter().map(Cell::get).collect(),
                sum_us: c.sum_us.get(),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_stage_has_its_own_slot() {
        for (i, stage) in Stage::ALL.iter().enumerate() {
            assert_eq!(stage.slot(), i, "{stage:?}");
        }
    }

    #[test]
    fn passes_land_in_their_buckets_and_sum() {
        record(Stage::LeaderIsrWait, Duration::from_micros(40));
        record(Stage::LeaderIsrWait, Duration::from_micros(3_000));
        record(Stage::LeaderIsrWait, Duration::from_secs(60));
        let taken = snapshot();
        let isr = taken
            .iter()
            .find(|s| s.stage == Stage::LeaderIsrWait)
            .expect("counted");
        assert_eq!(isr.buckets[0], 1, "40 us is at most 50 us");
        assert_eq!(isr.buckets[6], 1, "3 ms is in the 5 ms bucket");
        assert_eq!(isr.buckets[BUCKETS - 1], 1, "a minute is past every bound");
        assert_eq!(isr.sum_us, 40 + 3_000 + 60_000_000);
        assert!(taken.iter().all(|s| s.stage == Stage::LeaderIsrWait));
    }
}
