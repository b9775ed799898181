//! Each core's log cleaner: it compacts the logs of the compacted topics
//! (`cleanup.policy` `compact` or `compact,delete`) whose partitions the
//! core owns, one cleaning at a time, in a task queue with a small share
//! of the core (see `runtime.rs`), so produce and fetch keep their latency.
//!
//! Which log, by Kafka's rules: among the logs with dirty records, the one
//! with the highest dirty ratio once it reaches `min.cleanable.dirty.ratio`,
//! or any whose last cleaning is `max.compaction.lag.ms` old; when none is
//! due, a log that had no look for `log.cleaner.backoff.ms` is given a pass
//! that only removes tombstones whose `delete.retention.ms` is up (storage
//! does nothing when none is). Every replica cleans its own copy: leaders
//! and followers alike, below the high watermark they know.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::config::CleanerConfig;
use crate::metrics::{CleanerLogSnapshot, CleanerSnapshot};
use crate::partition::Partition;
use crate::shard::Shard;

/// How long the loop waits at most before reading its settings again.
const TICK: Duration = Duration::from_secs(1);

/// Keys one core's map holds: its share of `log.cleaner.dedupe.buffer.size`.
pub fn key_map_entries(config: &CleanerConfig, cores: usize) -> usize {
    let share = config.dedupe_buffer_bytes / cores.max(1) as u64;
    (share / CleanerConfig::KEY_MAP_ENTRY_BYTES).max(1) as usize
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// What the loop knows of one log between its passes.
#[derive(Default)]
struct Seen {
    /// The last cleaning that did something.
    cleaned: Option<Instant>,
    /// The last look at it (a cleaning or a pass that found nothing).
    looked: Option<Instant>,
}

pub async fn cleaner_loop(shard: Rc<Shard>) {
    let started = Instant::now();
    let mut seen: HashMap<*const Partition, Seen> = HashMap::new();
    loop {
        let config = shard.config.cleaner;
        let backoff = Duration::from_millis(config.backoff_ms);
        if !config.enable {
            if shard.stopping.sleep_unless_raised(TICK).await {
                return;
            }
            continue;
        }
        let now_ms = wall_ms();
        let partitions = shard.open_partitions();
        seen.retain(|key, _| partitions.iter().any(|p| Rc::as_ptr(p) == *key));
        let mut due: Option<(f64, Rc<Partition>)> = None;
        let mut sweep: Option<Rc<Partition>> = None;
        let mut backlog = 0u64;
        let mut looked_at = Vec::new();
        for partition in &partitions {
            let (policy, compaction) = partition.cleanup();
            if !policy.compact {
                continue;
            }
            // segment.ms seals a quiet partition's last records too.
            if let Err(error) = partition.log().roll_if_idle().await {
                tracing::warn!(topic = %partition.topic(), partition = partition.index(), %error, "rolling a quiet segment failed");
            }
            let Some(cleanable) = partition.cleanable(now_ms).await else {
                continue;
            };
            let entry = seen.entry(Rc::as_ptr(partition)).or_default();
            looked_at.push(CleanerLogSnapshot {
                topic: partition.topic().to_string(),
                partition: partition.index(),
                dirty_bytes: cleanable.dirty_bytes,
                cleanable_bytes: cleanable.clean_bytes + cleanable.dirty_bytes,
                since_cleaned_ms: entry.cleaned.map(|at| at.elapsed().as_millis() as u64),
            });
            let since_cleaned = entry.cleaned.unwrap_or(started).elapsed();
            let ratio = cleanable.dirty_ratio();
            let lagging = u128::try_from(compaction.max_lag_ms)
                .is_ok_and(|lag| since_cleaned.as_millis() >= lag);
            if cleanable.dirty_bytes > 0 && (ratio >= compaction.min_dirty_ratio || lagging) {
                backlog += 1;
                if due.as_ref().is_none_or(|(best, _)| ratio > *best) {
                    due = Some((ratio, partition.clone()));
                }
            } else if entry.looked.is_none_or(|at| at.elapsed() >= backoff) && sweep.is_none() {
                sweep = Some(partition.clone());
            }
        }
        LOGS.with(|logs| *logs.borrow_mut() = looked_at);
        CLEANER.with(|stats| stats.borrow_mut().backlog = backlog);
        let Some(partition) = due.map(|(_, p)| p).or(sweep) else {
            if shard.stopping.sleep_unless_raised(TICK.min(backoff)).await {
                return;
            }
            continue;
        };
        let entries = key_map_entries(&config, shard.cores);
        let rate = config.io_bytes_per_second / shard.cores.max(1) as f64;
        let began = Instant::now();
        let result = partition.clean(now_ms, entries, rate).await;
        let entry = seen.entry(Rc::as_ptr(&partition)).or_default();
        entry.looked = Some(Instant::now());
        match result {
            Ok(Some(outcome)) => {
                entry.cleaned = Some(Instant::now());
                CLEANER.with(|stats| add(&mut stats.borrow_mut(), &outcome, began.elapsed()));
            }
            Ok(None) => {}
            Err(error) => {
                tracing::error!(topic = %partition.topic(), partition = partition.index(), %error, "cleaning failed; the log is as it was");
                CLEANER.with(|stats| stats.borrow_mut().failures += 1);
            }
        }
        // Let the core's other work run between cleanings.
        glommio::yield_if_needed().await;
        if shard.stopping.is_raised() {
            return;
        }
    }
}

fn add(stats: &mut CleanerSnapshot, outcome: &storage::CleanOutcome, took: Duration) {
    stats.runs += 1;
    stats.bytes_read += outcome.bytes_read;
    stats.bytes_written += outcome.bytes_written;
    stats.records_removed += outcome.records_removed;
    stats.busy_us += took.as_micros() as u64;
}

thread_local! {
    static CLEANER: std::cell::RefCell<CleanerSnapshot> = std::cell::RefCell::new(CleanerSnapshot::default());
    static LOGS: std::cell::RefCell<Vec<CleanerLogSnapshot>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This core's cleaner counters.
pub fn stats() -> CleanerSnapshot {
    CLEANER.with(|stats| *stats.borrow())
}

/// The compacted logs of this core as its cleaner last saw them.
pub fn logs() -> Vec<CleanerLogSnapshot> {
    LOGS.with(|logs| logs.borrow().clone())
}
