//! The cluster's `_probe`: figures for `/metrics` that come from the
//! committed metadata and from the active controller's decisions: ISR
//! shrinks and expands, leader elections, time partitions spent without
//! a leader, and how long a failed broker went unheard before it was
//! fenced.
//!
//! Every node applies the same metadata changes, so a change counted on
//! each node would be counted once per node and a sum over the brokers
//! would multiply it. Each change is counted by one node only:
//! - an ISR change or a leader election by the broker that leads the
//!   partition after it (as Kafka's leaders count `IsrShrinksPerSec`);
//! - the time a partition had no leader by the active controller, since
//!   no broker leads it meanwhile;
//! - a fence for silence by the active controller that decided it.
//!
//! Counted only once the broker serves (registered and caught up with
//! the metadata): the changes it replays at start happened before, and
//! were counted then. Updated by the quorum or metadata follower thread,
//! read by the admin thread: plain atomics, no lock on the request path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::metadata::{MetadataImage, PartitionState};

/// Upper bounds (inclusive, microseconds) of the buckets of
/// [`ClusterProbe`]'s durations, from 100 ms to an hour; the last bucket
/// counts everything longer. A failover takes about a session timeout
/// (seconds); a partition whose last in-sync replica is down stays
/// without a leader until it returns (minutes).
pub const UNAVAILABLE_BOUNDS_US: [u64; 12] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    30_000_000,
    60_000_000,
    300_000_000,
    900_000_000,
    3_600_000_000,
];
const UNAVAILABLE_BUCKETS: usize = UNAVAILABLE_BOUNDS_US.len() + 1;

/// A histogram over [`UNAVAILABLE_BOUNDS_US`] (then +Inf).
#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; UNAVAILABLE_BUCKETS],
    sum_us: AtomicU64,
}

impl Histogram {
    fn record(&self, duration: Duration) {
        let us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        let bucket = UNAVAILABLE_BOUNDS_US.partition_point(|bound| *bound < us);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            sum_us: self.sum_us.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts per bucket of [`UNAVAILABLE_BOUNDS_US`], then
/// longer (not cumulative), and their sum.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: Vec<u64>,
    pub sum_us: u64,
}

/// What one published image changed for the partitions that `node`
/// leads in it (see [`changes`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Partitions whose ISR lost a replica (one count per partition per
    /// change, however many replicas left).
    pub isr_shrinks: u64,
    /// Partitions whose ISR gained a replica.
    pub isr_expands: u64,
    /// Partitions `node` leads now and did not lead before.
    pub leader_elections: u64,
    /// Those of them whose ISR did not have `node` before: it may lack
    /// records that were committed (unclean.leader.election.enable).
    pub unclean_leader_elections: u64,
}

/// The changes from `old` to `new` that `node` counts: those of the
/// partitions it leads in `new`. A partition new in `new` (its topic
/// created, or deleted and created again) changed nothing.
pub fn changes(old: &MetadataImage, new: &MetadataImage, node: i32) -> Changes {
    let mut changes = Changes::default();
    for (name, topic) in &new.topics {
        let old_topic = old
            .topics
            .get(name)
            .filter(|t| t.topic_id == topic.topic_id);
        let Some(old_topic) = old_topic else {
            continue;
        };
        for (index, state) in topic.partitions.iter().enumerate() {
            if state.leader != node {
                continue;
            }
            let Some(before) = old_topic.partitions.get(index) else {
                continue;
            };
            count(&mut changes, before, state, node);
        }
    }
    changes
}

fn count(changes: &mut Changes, before: &PartitionState, after: &PartitionState, node: i32) {
    if before.partition_epoch == after.partition_epoch {
        return;
    }
    let shrunk = before.isr.iter().any(|r| !after.isr.contains(r));
    let expanded = after.isr.iter().any(|r| !before.isr.contains(r));
    changes.isr_shrinks += u64::from(shrunk);
    changes.isr_expands += u64::from(expanded);
    if before.leader != node {
        changes.leader_elections += 1;
        changes.unclean_leader_elections += u64::from(!before.isr.contains(&node));
    }
}

/// Every figure of a [`ClusterProbe`], read at once for a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeSnapshot {
    pub isr_shrinks: u64,
    pub isr_expands: u64,
    pub leader_elections: u64,
    pub unclean_leader_elections: u64,
    /// On the active controller: partitions that got a leader again, and
    /// how long each had none.
    pub offline: HistogramSnapshot,
    /// On the active controller: brokers fenced for silence, and how long
    /// each had gone unheard.
    pub fenced_unheard: HistogramSnapshot,
    /// On the active controller: leaderships taken from brokers fenced
    /// for silence (moved, or left without a leader).
    pub failover_partitions: u64,
}

/// This node's share of the cluster's events (see the module doc).
#[derive(Default)]
pub struct ClusterProbe {
    isr_shrinks: AtomicU64,
    isr_expands: AtomicU64,
    leader_elections: AtomicU64,
    unclean_leader_elections: AtomicU64,
    offline: Histogram,
    fenced_unheard: Histogram,
    failover_partitions: AtomicU64,
    /// Partitions without a leader in the last image published here:
    /// topic -> index -> when this node published the change that took
    /// the leader. Kept on every node (any voter may become the active
    /// controller); bounded by the partitions of the image.
    leaderless_since: Mutex<HashMap<String, HashMap<i32, Instant>>>,
}

/// Whether this node counts what an image changed, and which share.
#[derive(Debug, Clone, Copy)]
pub struct Counting {
    /// The broker serves: it is registered and caught up.
    pub serving: bool,
    /// This node is the active controller.
    pub controller: bool,
}

impl ClusterProbe {
    /// `new` replaces `old` as the image published on `node`: counts what
    /// changed for the partitions `node` leads, and on the active
    /// controller how long each partition that got a leader back had none.
    pub fn published(&self, old: &MetadataImage, new: &MetadataImage, node: i32, on: Counting) {
        let now = Instant::now();
        if on.serving {
            let c = changes(old, new, node);
            self.isr_shrinks.fetch_add(c.isr_shrinks, Ordering::Relaxed);
            self.isr_expands.fetch_add(c.isr_expands, Ordering::Relaxed);
            self.leader_elections
                .fetch_add(c.leader_elections, Ordering::Relaxed);
            self.unclean_leader_elections
                .fetch_add(c.unclean_leader_elections, Ordering::Relaxed);
        }
        let mut since = self.leaderless_since.lock().expect("leaderless lock");
        since.retain(|name, by_index| {
            let Some(topic) = new.topics.get(name) else {
                return false;
            };
            by_index.retain(|index, at| {
                let led = topic.partition(*index).is_some_and(|p| p.leader >= 0);
                if led && on.serving && on.controller {
                    self.offline.record(now.saturating_duration_since(*at));
                }
                !led && topic.partition(*index).is_some()
            });
            !by_index.is_empty()
        });
        for (name, topic) in &new.topics {
            for (index, state) in topic.partitions.iter().enumerate() {
                if state.leader >= 0 {
                    continue;
                }
                if !since.contains_key(name) {
                    since.insert(name.clone(), HashMap::new());
                }
                let by_index = since.get_mut(name).expect("inserted above");
                by_index.entry(index as i32).or_insert(now);
            }
        }
    }

    /// On the active controller: broker fenced because it went unheard
    /// for `unheard`, taking `leaderships` partitions from it.
    pub fn fenced_for_silence(&self, unheard: Duration, leaderships: u64) {
        self.fenced_unheard.record(unheard);
        self.failover_partitions
            .fetch_add(leaderships, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ProbeSnapshot {
        ProbeSnapshot {
            isr_shrinks: self.isr_shrinks.load(Ordering::Relaxed),
            isr_expands: self.isr_expands.load(Ordering::Relaxed),
            leader_elections: self.leader_elections.load(Ordering::Relaxed),
            unclean_leader_elections: self.unclean_leader_elections.load(Ordering::Relaxed),
            offline: self.offline.snapshot(),
            fenced_unheard: self.fenced_unheard.snapshot(),
            failover_partitions: self.failover_partitions.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::testing::topic_meta;
    use crate::metadata::MetadataRecord;

    /// A partition of replicas 1, 2, 3 with `leader` and `isr`, at
    /// partition epoch `epoch`.
    fn state(leader: i32, isr: &[i32], epoch: i32) -> PartitionState {
        PartitionState {
            leader,
            isr: isr.to_vec(),
            partition_epoch: epoch,
            ..PartitionState::new(vec![1, 2, 3])
        }
    }

    /// An image with topic `t` (id 42) of one partition in `state`.
    fn image(state: PartitionState) -> MetadataImage {
        let mut topic = topic_meta("t", &[0]);
        topic.partitions = vec![state];
        let mut image = MetadataImage::new(1);
        image.apply(&MetadataRecord::TopicCreated(topic));
        image
    }

    /// What each of nodes 1, 2 and 3 counts for the change `before` to
    /// `after`: (shrinks, expands, elections, unclean elections).
    fn check(before: PartitionState, after: PartitionState, expected: [(u64, u64, u64, u64); 3]) {
        let (old, new) = (image(before), image(after));
        let counted: Vec<_> = (1..=3)
            .map(|node| {
                let c = changes(&old, &new, node);
                (
                    c.isr_shrinks,
                    c.isr_expands,
                    c.leader_elections,
                    c.unclean_leader_elections,
                )
            })
            .collect();
        assert_eq!(counted, expected);
    }

    #[test]
    fn each_change_is_counted_by_the_leader_after_it_only() {
        let none = (0, 0, 0, 0);
        // A follower falls out of the ISR, then catches up.
        check(
            state(1, &[1, 2, 3], 1),
            state(1, &[1, 2], 2),
            [(1, 0, 0, 0), none, none],
        );
        check(
            state(1, &[1, 2], 2),
            state(1, &[1, 2, 3], 3),
            [(0, 1, 0, 0), none, none],
        );
        // The leader is fenced: the next in-sync replica leads, without it.
        check(
            state(1, &[1, 2, 3], 1),
            state(2, &[2, 3], 2),
            [none, (1, 0, 1, 0), none],
        );
        // Two replicas leave at once: one shrink.
        check(
            state(1, &[1, 2, 3], 1),
            state(1, &[1], 2),
            [(1, 0, 0, 0), none, none],
        );
        // The last in-sync replica is fenced: no leader, nothing counted;
        // it comes back and leads again: an election.
        check(state(1, &[1], 1), state(-1, &[1], 2), [none, none, none]);
        check(
            state(-1, &[1], 2),
            state(1, &[1], 3),
            [(0, 0, 1, 0), none, none],
        );
        // Unclean: a replica out of the ISR takes over.
        check(
            state(-1, &[1], 2),
            state(3, &[3], 3),
            [none, none, (1, 1, 1, 1)],
        );
        // A preferred-leader move: an election, the ISR unchanged.
        check(
            state(2, &[1, 2, 3], 1),
            state(1, &[1, 2, 3], 2),
            [(0, 0, 1, 0), none, none],
        );
        // The same state published again: nothing.
        check(
            state(1, &[1, 2], 2),
            state(1, &[1, 2], 2),
            [none, none, none],
        );
    }

    #[test]
    fn a_created_or_recreated_topic_changed_nothing() {
        let new = image(state(1, &[1], 1));
        assert_eq!(changes(&MetadataImage::new(1), &new, 1), Changes::default());
        let mut old = image(state(1, &[1, 2, 3], 0));
        let mut recreated = topic_meta("t", &[0]);
        recreated.topic_id = 7;
        old.apply(&MetadataRecord::TopicDeleted {
            name: "t".to_string(),
        });
        old.apply(&MetadataRecord::TopicCreated(recreated));
        assert_eq!(changes(&old, &new, 1), Changes::default());
    }

    #[test]
    fn the_active_controller_times_partitions_without_a_leader() {
        let probe = ClusterProbe::default();
        let controller = Counting {
            serving: true,
            controller: true,
        };
        let led = image(state(1, &[1], 1));
        let offline = image(state(-1, &[1], 2));
        probe.published(&led, &offline, 2, controller);
        assert_eq!(probe.snapshot().offline.buckets.iter().sum::<u64>(), 0);
        // Published again while it has no leader: still the first time.
        probe.published(&offline, &offline, 2, controller);
        probe.published(&offline, &led, 2, controller);
        let offline_times = probe.snapshot().offline;
        assert_eq!(offline_times.buckets.iter().sum::<u64>(), 1);
        assert_eq!(offline_times.buckets.len(), UNAVAILABLE_BUCKETS);
        // A node that is not the controller keeps the time, counts none.
        let follower = ClusterProbe::default();
        let voter = Counting {
            serving: true,
            controller: false,
        };
        follower.published(&led, &offline, 3, voter);
        follower.published(&offline, &led, 3, voter);
        assert_eq!(
            follower.snapshot(),
            ProbeSnapshot {
                offline: HistogramSnapshot {
                    buckets: vec![0; UNAVAILABLE_BUCKETS],
                    sum_us: 0,
                },
                fenced_unheard: HistogramSnapshot {
                    buckets: vec![0; UNAVAILABLE_BUCKETS],
                    sum_us: 0,
                },
                ..ProbeSnapshot::default()
            }
        );
        assert!(follower.leaderless_since.lock().unwrap().is_empty());
    }

    #[test]
    fn changes_replayed_before_serving_are_not_counted() {
        let probe = ClusterProbe::default();
        let starting = Counting {
            serving: false,
            controller: true,
        };
        probe.published(
            &image(state(1, &[1, 2, 3], 1)),
            &image(state(1, &[1], 2)),
            1,
            starting,
        );
        assert_eq!(probe.snapshot().isr_shrinks, 0);
    }
}
