//! What one log gets of the budgets its core's logs share (batch cache,
//! journal).

use crate::config::LogConfig;
use crate::limits::{JOURNAL_KEEP_FACTOR, SHARD_CACHE_BYTES_MAX, SHARD_JOURNAL_KEPT_BYTES_MAX};

thread_local! {
    /// Logs open on this executor.
    static OPEN_LOGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The cache bound of one log on this executor now.
pub(super) fn cache_bytes_max(config: &LogConfig) -> usize {
    let open = OPEN_LOGS.with(|n| n.get()).max(1);
    config.cache_bytes_max.min(SHARD_CACHE_BYTES_MAX / open)
}

/// The unwritten bytes a journaling log keeps in memory before it writes
/// them out to its segment file: four times its `strom.journal.bytes`
/// (fewer, larger segment writes), lowered to its share of
/// [`SHARD_JOURNAL_KEPT_BYTES_MAX`] when many logs are open, but never
/// below `strom.journal.bytes` itself. With the default 64 KiB, 16
/// partitions on a core keep 256 KiB each and 1,000 keep 64 KiB each.
pub(super) fn journal_keep_bytes(config: &LogConfig) -> u64 {
    let open = OPEN_LOGS.with(|n| n.get()).max(1) as u64;
    let share = SHARD_JOURNAL_KEPT_BYTES_MAX / open;
    (config.journal_bytes * JOURNAL_KEEP_FACTOR)
        .min(share)
        .max(config.journal_bytes)
}

/// Counts a log as open on this executor while it lives.
pub(super) struct OpenLogGuard;

impl OpenLogGuard {
    pub(super) fn new() -> Self {
        OPEN_LOGS.with(|n| n.set(n.get() + 1));
        OpenLogGuard
    }
}

impl Drop for OpenLogGuard {
    fn drop(&mut self) {
        OPEN_LOGS.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_keep_four_times_their_threshold_within_their_core_s_budget() {
        let with = |journal_bytes: u64| LogConfig {
            journal_bytes,
            ..LogConfig::default()
        };
        let at = |open: usize, config: &LogConfig| {
            OPEN_LOGS.with(|n| n.set(open));
            journal_keep_bytes(config)
        };
        let default = LogConfig::default();
        assert_eq!(default.journal_bytes, 64 << 10);
        assert_eq!(at(1, &default), 256 << 10);
        assert_eq!(at(16, &default), 256 << 10);
        assert_eq!(at(128, &default), 128 << 10);
        // Never below the threshold itself, however many logs share.
        assert_eq!(at(1_000, &default), 64 << 10);
        assert_eq!(at(1, &with(8 << 20)), 16 << 20);
        assert_eq!(at(4, &with(8 << 20)), 8 << 20);
        assert_eq!(at(1_000, &with(4096)), 16 << 10);
        assert_eq!(at(1_000, &with(0)), 0);
        OPEN_LOGS.with(|n| n.set(0));
    }
}
