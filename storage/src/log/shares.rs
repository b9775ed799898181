//! What one log gets of the budgets its core's logs share through their
//! [`Context`] (batch cache, journal, read-ahead).

use crate::config::LogConfig;
use crate::context::Context;
use crate::limits::{
    JOURNAL_KEEP_FACTOR, READ_AHEAD_BYTES_MAX, SHARD_CACHE_BYTES_MAX, SHARD_JOURNAL_KEPT_BYTES_MAX,
};

/// The cache bound of one log when `open_logs` share the context.
pub(super) fn cache_bytes_max(open_logs: usize, config: &LogConfig) -> usize {
    config
        .cache_bytes_max
        .min(SHARD_CACHE_BYTES_MAX / open_logs.max(1))
}

/// The unwritten bytes a journaling log keeps in memory before it writes
/// them out to its segment file: four times its `strom.journal.bytes`
/// (fewer, larger segment writes), lowered to its share of
/// [`SHARD_JOURNAL_KEPT_BYTES_MAX`] when many logs are open, but never
/// below `strom.journal.bytes` itself. With the default 64 KiB, 16
/// partitions on a core keep 256 KiB each and 1,000 keep 64 KiB each.
pub(super) fn journal_keep_bytes(open_logs: usize, config: &LogConfig) -> u64 {
    let share = SHARD_JOURNAL_KEPT_BYTES_MAX / open_logs.max(1) as u64;
    (config.journal_bytes * JOURNAL_KEEP_FACTOR)
        .min(share)
        .max(config.journal_bytes)
}

/// Counts a log as open in its context while it lives.
pub(super) struct OpenLogGuard(Context);

impl OpenLogGuard {
    pub(super) fn new(ctx: &Context) -> Self {
        let open = &ctx.shared().open_logs;
        open.set(open.get() + 1);
        OpenLogGuard(ctx.clone())
    }
}

impl Drop for OpenLogGuard {
    fn drop(&mut self) {
        let open = &self.0.shared().open_logs;
        open.set(open.get().saturating_sub(1));
    }
}

/// Bytes of the context's read-ahead budget ([`READ_AHEAD_BYTES_MAX`])
/// held by one window.
pub(super) struct ReadAheadBudget {
    ctx: Context,
    bytes: usize,
}

impl ReadAheadBudget {
    pub(super) fn take(ctx: &Context, bytes: usize) -> Option<Self> {
        let used = &ctx.shared().read_ahead_bytes;
        (used.get() + bytes <= READ_AHEAD_BYTES_MAX).then(|| {
            used.set(used.get() + bytes);
            ReadAheadBudget {
                ctx: ctx.clone(),
                bytes,
            }
        })
    }
}

impl Drop for ReadAheadBudget {
    fn drop(&mut self) {
        let used = &self.ctx.shared().read_ahead_bytes;
        used.set(used.get() - self.bytes);
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
        let at = |open: usize, config: &LogConfig| journal_keep_bytes(open, config);
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
    }
}
