//! The partition log: append, durability, reads, truncation, retention and
//! recovery over a directory of segments.
//!
//! A `Log` lives on one glommio executor, opened with that core's
//! [`Context`]. Appends are assigned offsets and
//! made visible to readers synchronously (through the batch cache); one
//! writer task per log coalesces unwritten batches into large O_DIRECT
//! writes, a bounded number in flight (page-aligned, so concurrent writes
//! never share a page), and calls fdatasync per the flush policy.
//! Everyone waiting for durability while a sync runs is covered by the next
//! one: group commit.

mod append;
pub mod clean;
mod epochs;
mod journal_link;
mod lookup;
mod read;
mod recovery;
mod retention;
mod shares;
mod sync;
mod truncate;
mod writer;

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use glommio::sync::Semaphore;
use tracing::{error, info};

use self::journal_link::{journal_tombstone, JournalCapture};
use self::read::ReadAhead;
use self::shares::OpenLogGuard;
#[cfg(feature = "fault-injection")]
use self::sync::SyncHold;
use self::writer::InFlightWrite;
use crate::cache::BatchCache;
use crate::checkpoint::Checkpoint;
use crate::config::LogConfig;
use crate::context::Context;
use crate::error::{IoContext, Result, StorageError};
use crate::fs_sync::FsSync;
use crate::journal::Journal;
use crate::segment::{Cut, Segment};
use crate::signal::Signal;

/// How the caller wants an append stamped.
#[derive(Debug, Clone, Copy)]
pub struct AppendOptions {
    /// Written into the batch's partition leader epoch field.
    pub leader_epoch: i32,
    /// Set for topics with `message.timestamp.type=LogAppendTime`.
    pub log_append_time_ms: Option<i64>,
}

impl Default for AppendOptions {
    fn default() -> Self {
        Self {
            leader_epoch: -1,
            log_append_time_ms: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: u64,
    pub last_offset: u64,
    pub max_timestamp: i64,
    pub log_append_time_ms: Option<i64>,
}

/// A record found by a timestamp lookup: its offset and its own timestamp
/// (a LogAppendTime batch's records carry the batch's timestamp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FoundRecord {
    pub offset: u64,
    pub timestamp: i64,
}

/// Whole batches read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    pub bytes: Bytes,
    /// The offset after the last batch returned (`from` when empty).
    pub next_offset: u64,
}

/// Upper bounds (inclusive, microseconds) of the fdatasync latency
/// buckets in [`LogStats::sync_latency_buckets`]; the last bucket counts
/// everything slower.
pub const SYNC_LATENCY_BOUNDS_US: [u64; 12] = [
    50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 500_000,
];

/// Counters of one log's I/O, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    pub writes: u64,
    pub bytes_written: u64,
    pub syncs: u64,
    /// Time spent in fdatasync, summed over `syncs`.
    pub sync_latency_us_total: u64,
    /// fdatasync count per latency bucket ([`SYNC_LATENCY_BOUNDS_US`], then slower).
    pub sync_latency_buckets: [u64; SYNC_LATENCY_BOUNDS_US.len() + 1],
    /// Reads answered from the batch cache, and from the segment files.
    pub reads_cached: u64,
    pub reads_disk: u64,
    /// Disk reads served (in part) by a window read ahead.
    pub reads_ahead_used: u64,
    /// Appended bytes not yet written (bounded by `strom.pending.bytes`).
    pub pending_bytes: usize,
    /// Bytes in the batch cache (bounded by `strom.cache.bytes` and this
    /// log's share of `SHARD_CACHE_BYTES_MAX`, plus what is unwritten).
    pub cached_bytes: usize,
}

/// What `open` found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub clean: bool,
    pub segments_scanned: usize,
    pub indexes_rebuilt: usize,
    pub cut: Option<Cut>,
    pub segments_dropped: usize,
}

/// What one retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
}

/// A handle to one partition log; clones share it.
#[derive(Clone)]
pub struct Log {
    inner: Rc<Inner>,
}

struct Inner {
    dir: PathBuf,
    /// The core's storage context: journal, syncs, budgets, clock.
    ctx: Context,
    config: RefCell<LogConfig>,
    state: RefCell<State>,
    /// Serialises appends with rolls, truncation and close; fair (FIFO).
    append_lock: append::AppendLock,
    /// Notified on every change that a waiter could be waiting for.
    changed: Signal,
    writer: RefCell<Option<glommio::Task<()>>>,
    recovery: RecoveryReport,
    _open: OpenLogGuard,
    /// The context's filesystem-wide sync, looked up on first use.
    fs_sync: std::cell::OnceCell<Rc<FsSync>>,
    /// The context's journal for the data directory, looked up on first use.
    journal: std::cell::OnceCell<Rc<Journal>>,
    /// The next window of a reader going through the segment files.
    read_ahead: RefCell<Option<ReadAhead>>,
    /// The leader-epoch cache (see `epochs.rs`).
    epochs: RefCell<crate::epoch_cache::EpochCache>,
    /// One write of the epoch cache's file at a time.
    epochs_lock: Semaphore,
    /// One write of the checkpoint file at a time (they share its
    /// temporary file), see [`Log::write_checkpoint`].
    checkpoint_lock: Semaphore,
    /// The ticket of the last checkpoint made from the state, and of the
    /// last one written.
    checkpoint_tickets: std::cell::Cell<u64>,
    checkpoint_written: std::cell::Cell<u64>,
    /// Bumped by every truncation and cleaning swap: windows read ahead
    /// before it are stale.
    truncations: std::cell::Cell<u64>,
    /// One cleaning of the log at a time (see `clean.rs`).
    clean_lock: Semaphore,
    /// The cleaner's record (`strom.cleaner`), once read.
    cleaner_record: RefCell<Option<clean::CleanerRecord>>,
    /// Held while segments leave the list: a cleaning's swap, and
    /// retention or a moved log start removing the oldest segments.
    swap_lock: Semaphore,
    /// Set by `inject_sync_failure`: the next fdatasync reports EIO.
    #[cfg(feature = "fault-injection")]
    fail_next_sync: std::cell::Cell<bool>,
    /// Set by `inject_space_failure`: the next segment write finds no space.
    #[cfg(feature = "fault-injection")]
    fail_next_space: std::cell::Cell<bool>,
    #[cfg(feature = "fault-injection")]
    sync_hold: std::cell::RefCell<SyncHold>,
}

struct State {
    /// Sorted by base offset; the last one is active.
    segments: Vec<Segment>,
    log_start_offset: u64,
    next_offset: u64,
    /// Offsets below this are written to their segment file.
    written_offset: u64,
    /// Offsets below this are synced.
    durable_offset: u64,
    /// Bytes of the active segment below this are durable, in the segment
    /// file or in the journal.
    durable_position: u64,
    /// The writer writes out everything up to this offset even when the
    /// journal would let it wait (rolls, backpressure, journal chunks being
    /// retired).
    write_out_to: u64,
    recovery_point: u64,
    /// `flush()` asks for a sync up to here regardless of policy.
    sync_requested: u64,
    pending_bytes: usize,
    unsynced_bytes: u64,
    unsynced_since: Option<Instant>,
    /// Active segment bytes copied into submitted writes.
    submitted_position: u64,
    /// The partial page at `submitted_position`, which the next write
    /// starts with (empty when that position is page-aligned).
    tail: Vec<u8>,
    in_flight: std::collections::VecDeque<InFlightWrite>,
    /// A sync round is running; writes go on beside it, and the next round
    /// starts when it ends.
    sync_running: bool,
    /// The log asked its journal for the next round (see
    /// [`Journal::want`]); the writer starts no sync round meanwhile.
    journal_wanted: bool,
    /// What a running journal round took of this log.
    journal_capture: Option<JournalCapture>,
    /// A truncation is under way: no journal round takes the log's bytes
    /// (a record after its tombstone would bring cut bytes back).
    truncating: bool,
    next_write_id: u64,
    cache: BatchCache,
    failure: Option<String>,
    /// The last write failed for want of space (see [`SPACE_RETRY_MS`]):
    /// appends are refused until space returns, nothing is fenced.
    no_space: Option<String>,
    closing: bool,
    /// [`Log::delete`] has begun: what still runs on the log (a roll, a
    /// sync round, a journal round) may fail on its removed files, and such
    /// a failure concerns data that is going anyway.
    deleting: bool,
    closed: bool,
    stats: LogStats,
}

impl State {
    fn active(&self) -> &Segment {
        self.segments.last().expect("a log always has a segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log always has a segment")
    }

    /// Index of the segment that holds `offset` (the last one starting at
    /// or before it).
    fn segment_for(&self, offset: u64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }
}

impl Log {
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.recovery
    }

    pub fn config(&self) -> LogConfig {
        self.inner.config.borrow().clone()
    }

    /// Replaces the configuration; takes effect for the next append, write,
    /// sync and retention pass.
    pub fn set_config(&self, config: LogConfig) {
        *self.inner.config.borrow_mut() = config.effective();
        self.inner.changed.notify_all();
    }

    /// The log end offset: the offset the next append gets.
    pub fn next_offset(&self) -> u64 {
        self.inner.state.borrow().next_offset
    }

    pub fn start_offset(&self) -> u64 {
        self.inner.state.borrow().log_start_offset
    }

    /// Offsets below this are synced to disk.
    pub fn durable_offset(&self) -> u64 {
        self.inner.state.borrow().durable_offset
    }

    /// Offsets below this are written to their segment file.
    pub fn written_offset(&self) -> u64 {
        self.inner.state.borrow().written_offset
    }

    /// Offsets below this are kept as the flush policy promises: synced
    /// for `always`, written to the file for `interval` and `never`. What
    /// [`Log::wait_durable`] waits for.
    pub fn kept_offset(&self) -> u64 {
        let always = self.inner.config.borrow().flush == crate::config::FlushPolicy::Always;
        kept_offset(&self.inner.state.borrow(), always)
    }

    pub fn stats(&self) -> LogStats {
        let state = self.inner.state.borrow();
        LogStats {
            pending_bytes: state.pending_bytes,
            cached_bytes: state.cache.bytes(),
            ..state.stats
        }
    }

    /// Makes the next fdatasync of this log fail with EIO, as a dying disk
    /// would. For tests of the fencing behaviour only.
    #[cfg(feature = "fault-injection")]
    pub fn inject_sync_failure(&self) {
        self.inner.fail_next_sync.set(true);
    }

    /// Makes the next segment write of this log fail with ENOSPC before
    /// anything of it is submitted, as a full disk would. For tests of the
    /// out-of-space behaviour only.
    #[cfg(feature = "fault-injection")]
    pub fn inject_space_failure(&self) {
        self.inner.fail_next_space.set(true);
    }

    /// Holds every sync round that finishes from now on before it marks
    /// anything durable, until [`Log::release_one_sync`] lets one through
    /// or [`Log::release_syncs`] ends the hold: a slow device, for tests of
    /// what goes on while a round runs.
    #[cfg(feature = "fault-injection")]
    pub fn hold_syncs(&self) {
        self.inner.sync_hold.borrow_mut().holding = true;
    }

    /// Lets one held sync round finish.
    #[cfg(feature = "fault-injection")]
    pub fn release_one_sync(&self) {
        self.inner.sync_hold.borrow_mut().passes += 1;
        self.inner.changed.notify_all();
    }

    /// Ends the hold; held rounds finish.
    #[cfg(feature = "fault-injection")]
    pub fn release_syncs(&self) {
        self.inner.sync_hold.borrow_mut().holding = false;
        self.inner.changed.notify_all();
    }

    /// Sync rounds waiting in a hold.
    #[cfg(feature = "fault-injection")]
    pub fn held_syncs(&self) -> u32 {
        self.inner.sync_hold.borrow().waiting
    }

    /// Bytes in all segments.
    pub fn size_bytes(&self) -> u64 {
        self.inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|s| s.size)
            .sum()
    }

    pub fn segment_count(&self) -> usize {
        self.inner.state.borrow().segments.len()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<u64> {
        let state = self.inner.state.borrow();
        state.segments.iter().map(|s| s.base_offset).collect()
    }

    /// Marks the log failed: no more appends or acknowledgements.
    fn fence(&self, e: StorageError) -> StorageError {
        fence_inner(&self.inner, e.to_string());
        e
    }

    /// [`Log::fence`], except for a failure for space, which refuses only
    /// the operation at hand.
    /// Writes `checkpoint`, made from the state just before (with no
    /// await since), after any other write of the file still running: a
    /// roll, retention, truncation and close each write one, and may run
    /// at once. One made before a checkpoint already written is skipped:
    /// that one was made from a later state, which carries its changes.
    async fn write_checkpoint(&self, checkpoint: Checkpoint) -> Result<()> {
        let ticket = self.inner.checkpoint_tickets.get() + 1;
        self.inner.checkpoint_tickets.set(ticket);
        let _permit = self
            .inner
            .checkpoint_lock
            .acquire_permit(1)
            .await
            .map_err(|_| StorageError::Closed {
                path: self.inner.dir.clone(),
            })?;
        if self.inner.checkpoint_written.get() > ticket {
            return Ok(());
        }
        checkpoint.write(&self.inner.dir).await?;
        self.inner.checkpoint_written.set(ticket);
        Ok(())
    }

    fn fence_unless_space(&self, e: StorageError) -> StorageError {
        if e.is_out_of_space() {
            return e;
        }
        self.fence(e)
    }

    /// Writes and syncs everything, stops the writer, writes the indexes of
    /// the active segment and a clean checkpoint, so the next open scans
    /// nothing. Further calls on any clone fail with `Closed`.
    pub async fn close(&self) -> Result<()> {
        let _permit = self.lock_appends().await?;
        if self.inner.state.borrow().closed {
            return Ok(());
        }
        let flushed = self.flush().await;
        self.inner.state.borrow_mut().closing = true;
        self.inner.changed.notify_all();
        let writer = self.inner.writer.borrow_mut().take();
        if let Some(writer) = writer {
            writer.await;
        }
        flushed?;
        self.check_failure()?;
        let job = self
            .inner
            .state
            .borrow_mut()
            .active_mut()
            .prepare_seal(&self.inner.dir);
        let sealed = job.run().await;
        let checkpoint = {
            let mut s = self.inner.state.borrow_mut();
            s.closed = true;
            Checkpoint {
                recovery_point: s.next_offset,
                log_start_offset: s.log_start_offset,
                next_offset: s.next_offset,
                clean: true,
            }
        };
        self.inner.changed.notify_all();
        sealed?;
        self.write_checkpoint(checkpoint).await?;
        self.inner.append_lock.close();
        // Routine: the broker logs one line for all of them.
        tracing::debug!(dir = %self.inner.dir.display(), next_offset = checkpoint.next_offset, "log closed cleanly");
        Ok(())
    }

    /// Stops the log and removes its directory with every file in it.
    pub async fn delete(&self) -> Result<()> {
        {
            let mut s = self.inner.state.borrow_mut();
            s.closing = true;
            s.deleting = true;
            // Unwritten batches are discarded with the log: the writer has
            // nothing left to drain.
            s.cache.clear();
            s.submitted_position = s.active().size;
            s.tail.clear();
            s.written_offset = s.next_offset;
            s.pending_bytes = 0;
        }
        self.inner.changed.notify_all();
        // What holds the swap lock (retention, a cleaning's swap) or the
        // append lock (a roll, a truncation) ends first, failing fast on
        // the closing log: nothing may create or remove a file in the
        // directory while it goes. In the order a cleaning's swap takes
        // them, swap lock first.
        let swapping = self.inner.swap_lock.acquire_permit(1).await.ok();
        let appends = self.lock_appends().await.ok();
        self.inner.append_lock.close();
        let writer = self.inner.writer.borrow_mut().take();
        if let Some(writer) = writer {
            writer.await;
        }
        self.inner.state.borrow_mut().closed = true;
        let dir = self.inner.dir.clone();
        // A topic created again under this name must not receive this
        // log's journal records at the next start.
        if self.inner.journal.get().is_some() {
            journal_tombstone(&self.inner).await?;
        }
        // No open of a file in it may be in flight when it goes.
        crate::file::await_opens(&dir).await;
        std::fs::remove_dir_all(&dir).ctx("remove directory", &dir, 0)?;
        drop((appends, swapping));
        info!(dir = %dir.display(), "log deleted");
        Ok(())
    }
}

fn fence_inner(inner: &Inner, reason: String) {
    let mut state = inner.state.borrow_mut();
    let first = state.failure.is_none();
    let deleting = state.deleting;
    if first {
        state.failure = Some(reason.clone());
    }
    drop(state);
    inner.changed.notify_all();
    if !first {
        return;
    }
    if deleting {
        // Waiters still wake and fail; nothing that is kept is in doubt.
        info!(dir = %inner.dir.display(), %reason, "an operation of a log being deleted failed");
        return;
    }
    error!(dir = %inner.dir.display(), %reason, "log fenced: refusing further appends and acknowledgements");
    crate::fence::fenced(&inner.dir, &reason);
}

/// [`Log::kept_offset`] of `state` under a flush policy that is or is not
/// `always`.
fn kept_offset(state: &State, always: bool) -> u64 {
    if always {
        state.durable_offset
    } else {
        state.written_offset
    }
}
