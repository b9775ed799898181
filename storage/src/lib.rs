//! Strom's partition log: segments of Kafka record batches on io_uring
//! O_DIRECT files, sparse offset and time indexes, recovery, retention and a
//! batch cache for tailing readers.
//!
//! Architecture invariant: storage knows nothing of requests, the network or
//! the cluster. It stores validated record batches and answers by offset and
//! timestamp; everything else is the broker's.

mod cache;
pub mod checkpoint;
pub mod clock;
pub mod config;
mod context;
pub mod epoch_cache;
mod error;
pub mod fence;
mod file;
mod fs_sync;
mod group_commit;
pub mod index;
pub mod journal;
pub mod limits;
mod log;
mod segment;
mod signal;

pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{ConfigError, FlushPolicy, FlushScope, LogConfig, LOG_CONFIG_KEYS};
pub use context::{Context, ContextConfig};
pub use error::{Result, StorageError};
pub use file::free_bytes;
pub use limits::SHARD_CACHE_BYTES_MAX;
pub use log::clean::{
    AbortedRange, CleanOptions, CleanOutcome, Cleanable, SwapMarker, SWAP_MARKER_FILE,
};
pub use log::{
    AppendInfo, AppendOptions, FoundRecord, Log, LogStats, ReadResult, RecoveryReport,
    RetentionOutcome, SYNC_LATENCY_BOUNDS_US,
};
pub use segment::Cut;

/// Whole-file helpers for small files a log's owner keeps beside the
/// segments (the broker's producer-state snapshots): read, write and sync,
/// sync the directory, remove. `.tmp` files in a log directory are removed
/// when the log opens.
pub mod small_file {
    pub use crate::file::{read_whole, remove, sync_dir, write_whole};
}
