//! Whether this broker's data dir takes writes, as the appends found it,
//! and log lines for failures that repeat.
//!
//! A broker has one data dir, so one flag per process: a partition whose
//! append is refused for want of space raises it (any core), the agent
//! tells the active controller with every heartbeat while it is up (the
//! controller moves the broker's leaderships away and takes it out of the
//! ISRs, as Kafka does for an offline log dir), and lowers it once the
//! filesystem has room again. The replica goes on serving what it holds,
//! and rejoins each ISR by itself once it caught up.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Free space beyond the storage reserve after which a data dir that ran
/// full is taken to take writes again: room for some batches, so that the
/// broker does not rejoin and leave again at every freed block.
pub const ROOM_AGAIN_BYTES: u64 = 16 << 20;

/// A failure of one kind is logged at most once per this interval; the
/// line says how many were not logged since the last one.
pub const REPEAT_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// This process's data dir, as appends found it.
pub struct StorageHealth {
    /// Wall time (ms since the Unix epoch) of the first refusal since the
    /// data dir last took writes; 0 while it takes them.
    full_since_ms: AtomicU64,
    /// Called once when the data dir starts refusing writes (the agent
    /// heartbeats at once).
    on_full: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

static HEALTH: StorageHealth = StorageHealth {
    full_since_ms: AtomicU64::new(0),
    on_full: OnceLock::new(),
};

impl StorageHealth {
    /// The process's one data dir.
    pub fn get() -> &'static StorageHealth {
        &HEALTH
    }

    /// Registers what to do when the data dir starts refusing writes.
    pub fn on_full(&self, callback: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_full.set(callback);
    }

    /// An append was refused for want of space.
    pub fn refused_for_space(&self) {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_millis() as u64)
            .max(1);
        if self
            .full_since_ms
            .compare_exchange(0, now_ms, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::error!(
                "the data dir refuses writes for want of space: this broker leaves the ISRs and \
                 hands over its leaderships until space returns (reads go on)"
            );
            if let Some(callback) = self.on_full.get() {
                callback();
            }
        }
    }

    /// Whether the data dir refuses writes.
    pub fn is_full(&self) -> bool {
        self.full_since_ms.load(Ordering::Acquire) != 0
    }

    /// While the data dir refuses writes: lowers the flag once the
    /// filesystem of `data_dir` has [`ROOM_AGAIN_BYTES`] free beyond the
    /// reserve. Whether it refuses writes after the check.
    pub fn check_room(&self, data_dir: &Path) -> bool {
        let since = self.full_since_ms.load(Ordering::Acquire);
        if since == 0 {
            return false;
        }
        let room = storage::free_bytes(data_dir)
            .is_some_and(|free| free >= storage::limits::SPACE_RESERVE_BYTES + ROOM_AGAIN_BYTES);
        if room
            && self
                .full_since_ms
                .compare_exchange(since, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            tracing::info!(
                data_dir = %data_dir.display(),
                "the data dir has room again: this broker takes writes and rejoins the ISRs as it catches up"
            );
            return false;
        }
        true
    }
}

thread_local! {
    /// When each kind of repeated failure was last logged on this thread,
    /// and how many were not logged since.
    static REPEATS: RefCell<HashMap<&'static str, (Instant, u64)>> = RefCell::new(HashMap::new());
}

/// Whether a failure of kind `kind` should be logged now: the first one
/// is, then at most one per [`REPEAT_LOG_INTERVAL`]. `Some(n)`: log it,
/// saying `n` like it were not logged since the last line.
pub fn log_now(kind: &'static str) -> Option<u64> {
    let now = Instant::now();
    REPEATS.with(|repeats| {
        let mut repeats = repeats.borrow_mut();
        match repeats.get_mut(kind) {
            Some((last, suppressed)) if now.duration_since(*last) < REPEAT_LOG_INTERVAL => {
                *suppressed += 1;
                None
            }
            Some((last, suppressed)) => {
                let not_logged = *suppressed;
                *last = now;
                *suppressed = 0;
                Some(not_logged)
            }
            None => {
                repeats.insert(kind, (now, 0));
                Some(0)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_failure_is_logged_once_per_interval_with_a_count() {
        assert_eq!(log_now("test-kind"), Some(0));
        for _ in 0..1_000 {
            assert_eq!(log_now("test-kind"), None);
        }
        assert_eq!(log_now("other-kind"), Some(0), "kinds are counted apart");
        REPEATS.with(|r| r.borrow_mut().get_mut("test-kind").unwrap().0 -= REPEAT_LOG_INTERVAL);
        assert_eq!(log_now("test-kind"), Some(1_000));
    }
}
