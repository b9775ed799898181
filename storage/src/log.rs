//! The partition log: append, durability, reads, truncation, retention and
//! recovery over a directory of segments.
//!
//! A `Log` lives on one glommio executor. Appends are assigned offsets and
//! made visible to readers synchronously (through the batch cache); one
//! writer task per log coalesces unwritten batches into large O_DIRECT
//! writes, a bounded number in flight (page-aligned, so concurrent writes
//! never share a page), and calls fdatasync per the flush policy.
//! Everyone waiting for durability while a sync runs is covered by the next
//! one: group commit.

use std::cell::RefCell;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use glommio::sync::Semaphore;
use protocol::batch::{self, RecordBatch, HEADER_LEN};
use tracing::{error, info, warn};

use crate::cache::{BatchCache, CachedBatch, HEAD_LEN};
use crate::checkpoint::Checkpoint;
use crate::config::{FlushPolicy, FlushScope, LogConfig, PREALLOCATE_STEP_MAX};
use crate::error::{IoContext, Result, StorageError};
use crate::file::{self, PAGE};
use crate::fs_sync::FsSync;
use crate::journal::{self, Journal, Record};
use crate::segment::{self, Cut, Segment};
use crate::signal::Signal;

/// Bytes a disk read asks for beyond `max_bytes`, to cover the batches the
/// sparse index makes it skip.
const READ_SLACK_BYTES: usize = 64 << 10;
/// How often a log whose write failed for want of space tries it again
/// (appends also retry at once when `statvfs` shows room): a full disk
/// costs one failed fallocate a second, and writes resume within a second
/// of space returning.
const SPACE_RETRY_MS: u64 = 1_000;

/// Bytes read ahead at most at once on one thread (over all its logs).
pub const READ_AHEAD_BYTES_MAX: usize = 256 << 20;

/// How much one read from a segment file asks for.
fn read_window_len(max_bytes: usize) -> usize {
    max_bytes.saturating_add(READ_SLACK_BYTES).min(64 << 20)
}

/// A window being read ahead of a reader: the read after `offset` starts
/// at `position` of the segment based at `segment_base`. Dropping it
/// cancels the read and returns its bytes to the thread's budget.
struct ReadAhead {
    segment_base: u64,
    /// `Inner::truncations` when the window was read.
    truncations: u64,
    offset: u64,
    position: u64,
    window_len: usize,
    data: glommio::Task<Result<glommio::io::ReadResult>>,
    _budget: ReadAheadBudget,
}

thread_local! {
    static READ_AHEAD_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Bytes of the thread's read-ahead budget held by one window.
struct ReadAheadBudget(usize);

impl ReadAheadBudget {
    fn take(bytes: usize) -> Option<Self> {
        READ_AHEAD_BYTES.with(|used| {
            (used.get() + bytes <= READ_AHEAD_BYTES_MAX).then(|| {
                used.set(used.get() + bytes);
                ReadAheadBudget(bytes)
            })
        })
    }
}

impl Drop for ReadAheadBudget {
    fn drop(&mut self) {
        READ_AHEAD_BYTES.with(|used| used.set(used.get() - self.0));
    }
}

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

/// Bound on a stored batch's decompressed records when a timestamp lookup
/// walks them: produce refuses batches that expand past 32 x
/// `max.message.bytes`, at most 256 MiB, so a stored batch stays below.
const STORED_DECOMPRESSED_BYTES_MAX: usize = 256 << 20;

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
    config: RefCell<LogConfig>,
    state: RefCell<State>,
    /// Serialises appends with rolls, truncation and close.
    append_lock: Semaphore,
    /// Notified on every change that a waiter could be waiting for.
    changed: Signal,
    writer: RefCell<Option<glommio::Task<()>>>,
    recovery: RecoveryReport,
    _open: OpenLogGuard,
    /// The thread's filesystem-wide sync, looked up on first use.
    fs_sync: std::cell::OnceCell<Rc<FsSync>>,
    /// The thread's journal for the data directory, looked up on first use.
    journal: std::cell::OnceCell<Rc<Journal>>,
    /// The next window of a reader going through the segment files.
    read_ahead: RefCell<Option<ReadAhead>>,
    /// Bumped by every truncation: windows read ahead before it are stale.
    truncations: std::cell::Cell<u64>,
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

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How many of the segments at `bases` hold any bytes: a segment created
/// by a roll just before a crash holds none (or only preallocated zeros).
fn segments_holding_data(dir: &Path, bases: &[u64]) -> Result<usize> {
    // A batch header starts with its base offset and length, never all
    // zeros in a written batch.
    const PROBE_BYTES: usize = 64;
    let mut holding = 0;
    for &base in bases {
        let path = dir.join(crate::segment::file_name(base, "log"));
        let mut head = [0u8; PROBE_BYTES];
        let read = match std::fs::File::open(&path) {
            Ok(mut f) => {
                let mut filled = 0;
                loop {
                    match f.read(&mut head[filled..]) {
                        Ok(0) => break filled,
                        Ok(n) => filled += n,
                        Err(e) => return Err(StorageError::io("read", &path, 0, e)),
                    }
                    if filled == PROBE_BYTES {
                        break filled;
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(StorageError::io("open", &path, 0, e)),
        };
        if head[..read].iter().any(|&b| b != 0) {
            holding += 1;
        }
    }
    Ok(holding)
}

impl Log {
    /// Opens the log in `dir` (created if missing), recovering it: after a
    /// clean close nothing is scanned; otherwise every segment from the
    /// recovery point on is scanned batch by batch and a torn or corrupt
    /// tail is cut off.
    pub async fn open(dir: impl Into<PathBuf>, config: LogConfig) -> Result<Log> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).ctx("create directory", &dir, 0)?;
        // glommio resolves relative paths against no directory at all.
        let dir = std::fs::canonicalize(&dir).ctx("resolve directory", &dir, 0)?;
        file::probe_device(&dir).await?;
        // Journaled bytes go back into the segment files before any log of
        // the data directory is recovered.
        if let Some(data_dir) = dir.parent() {
            journal::replay_unless_live(data_dir)?;
        }
        let config = config.effective();
        let checkpoint = Checkpoint::read(&dir).await?;
        let mut bases = list_segments(&dir)?;
        bases.sort_unstable();

        let clean = checkpoint.is_some_and(|c| c.clean);
        let recovery_point = checkpoint.map_or(0, |c| c.recovery_point);
        let interval = u64::from(config.index_interval_bytes);
        let mut report = RecoveryReport {
            clean,
            ..RecoveryReport::default()
        };
        let mut segments: Vec<Segment> = Vec::with_capacity(bases.len());
        let mut rebuilt: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < bases.len() {
            let base = bases[i];
            let next_base = bases.get(i + 1).copied();
            let is_last = next_base.is_none();
            let trusted = clean || next_base.is_some_and(|nb| nb <= recovery_point);
            let mut loaded = None;
            if trusted {
                let (segment, problem) = Segment::open_trusted(&dir, base).await?;
                let clean_end_ok = !is_last
                    || checkpoint.is_some_and(|c| c.next_offset >= segment.next_offset)
                        && (segment.size > 0 || checkpoint.is_some_and(|c| c.next_offset == base));
                match problem {
                    None if clean_end_ok => {
                        let mut segment = segment;
                        if is_last {
                            if let Some(c) = checkpoint {
                                segment.next_offset = c.next_offset.max(segment.next_offset);
                            }
                        }
                        loaded = Some(segment);
                    }
                    problem => {
                        info!(
                            segment = %segment.path.display(),
                            reason = problem.as_deref().unwrap_or("log end not recorded"),
                            "rebuilding segment index by scanning"
                        );
                    }
                }
            }
            let segment = match loaded {
                Some(segment) => segment,
                None => {
                    report.segments_scanned += 1;
                    let (mut segment, cut) = Segment::scan_uncut(&dir, base, interval).await?;
                    if let Some(cut) = &cut {
                        // A torn write can only be the log's last: corrupt
                        // bytes with records after them were acknowledged
                        // once, and so were the records after them.
                        let holding = segments_holding_data(&dir, &bases[i + 1..])?;
                        if !cut.zero_filled && holding > 0 {
                            return Err(StorageError::CorruptSealed {
                                path: segment.path.clone(),
                                position: cut.position,
                                offset: cut.offset,
                                later_segments: holding,
                                reason: cut.reason.clone(),
                            });
                        }
                        segment.apply_cut(cut).await?;
                    }
                    if let Some(previous) = segments.last() {
                        if segment.size > 0 && segment.base_offset < previous.next_offset {
                            return Err(StorageError::Corrupt {
                                path: segment.path.clone(),
                                position: 0,
                                reason: format!(
                                    "segment starts at {} inside the previous one ending at {}",
                                    segment.base_offset, previous.next_offset
                                ),
                            });
                        }
                    }
                    if !is_last {
                        rebuilt.push(segments.len());
                        segment.finish_time_index();
                    }
                    if let Some(cut) = cut {
                        let dropped = bases.len() - i - 1;
                        if !cut.zero_filled && dropped > 0 {
                            warn!(
                                dir = %dir.display(),
                                segments = dropped,
                                "recovery: dropping the segments after the corrupt one"
                            );
                        }
                        for &later in &bases[i + 1..] {
                            Segment::remove_files(&dir, later).await?;
                        }
                        report.segments_dropped = dropped;
                        bases.truncate(i + 1);
                        rebuilt.retain(|&r| r != segments.len());
                        report.cut = Some(cut);
                    }
                    segment
                }
            };
            segments.push(segment);
            i += 1;
        }
        // A segment that was not last when scanned stays sealed; write its
        // rebuilt indexes so the next open trusts it.
        for &r in &rebuilt {
            if r + 1 < segments.len() {
                report.indexes_rebuilt += 1;
                // Best effort: on a full disk the rebuilt index stays in
                // memory and the next open rebuilds it again.
                if let Err(e) = segments[r].write_indexes(&dir).await {
                    warn!(dir = %dir.display(), error = %e, "could not write a rebuilt index");
                }
            }
        }

        let mut log_start_offset = checkpoint.map_or(0, |c| c.log_start_offset);
        if segments.is_empty() {
            let base = log_start_offset;
            segments.push(Segment::create(&dir, base).await?);
        }
        log_start_offset = log_start_offset.max(segments[0].base_offset);
        let active = segments.last().expect("at least one segment");
        let next_offset = active.next_offset;
        log_start_offset = log_start_offset.min(next_offset);
        if !clean {
            active
                .file
                .fdatasync()
                .await
                .ctx("fdatasync", &active.path, active.size)?;
        }
        let tail = active.read_tail_page().await?;
        let submitted_position = active.written_size;
        let durable_position = active.size;
        let recovery_point = active.base_offset;
        let state = State {
            segments,
            log_start_offset,
            next_offset,
            written_offset: next_offset,
            durable_offset: next_offset,
            durable_position,
            write_out_to: 0,
            recovery_point,
            sync_requested: next_offset,
            pending_bytes: 0,
            unsynced_bytes: 0,
            unsynced_since: None,
            submitted_position,
            tail,
            in_flight: std::collections::VecDeque::new(),
            sync_running: false,
            journal_wanted: false,
            journal_capture: None,
            truncating: false,
            next_write_id: 0,
            cache: BatchCache::default(),
            failure: None,
            no_space: None,
            closing: false,
            closed: false,
            stats: LogStats::default(),
        };
        // From here until a clean close, the next open must not trust the
        // active segment's (absent or stale) index files.
        let checkpoint = Checkpoint {
            recovery_point,
            log_start_offset,
            next_offset,
            clean: false,
        };
        if let Err(e) = checkpoint.write(&dir).await {
            // A full disk must not keep the log from opening for reads. With
            // no checkpoint at all the next open trusts nothing and scans.
            warn!(dir = %dir.display(), error = %e, "could not write the checkpoint; removing it");
            file::remove(&dir.join(crate::checkpoint::FILE_NAME)).await?;
        }
        // An open with nothing to scan (a clean stop, a new log) is
        // routine: the broker logs one line for all of them. A recovery
        // that scanned segments is worth a line of its own.
        let segments = state.segments.len();
        let scanned = report.segments_scanned;
        if scanned == 0 {
            tracing::debug!(dir = %dir.display(), clean, start_offset = log_start_offset, next_offset, segments, "log opened");
        } else {
            info!(dir = %dir.display(), clean, start_offset = log_start_offset, next_offset, segments, scanned, "log opened");
        }
        let inner = Rc::new(Inner {
            dir,
            config: RefCell::new(config),
            state: RefCell::new(state),
            append_lock: Semaphore::new(1),
            changed: Signal::default(),
            writer: RefCell::new(None),
            recovery: report,
            _open: OpenLogGuard::new(),
            fs_sync: std::cell::OnceCell::new(),
            journal: std::cell::OnceCell::new(),
            read_ahead: RefCell::new(None),
            truncations: std::cell::Cell::new(0),
            #[cfg(feature = "fault-injection")]
            fail_next_sync: std::cell::Cell::new(false),
            #[cfg(feature = "fault-injection")]
            fail_next_space: std::cell::Cell::new(false),
            #[cfg(feature = "fault-injection")]
            sync_hold: std::cell::RefCell::new(SyncHold::default()),
        });
        let writer = glommio::spawn_local(writer_loop(inner.clone()));
        *inner.writer.borrow_mut() = Some(writer);
        Ok(Log { inner })
    }

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

    /// The record with the largest timestamp (the first one when several
    /// share it), as Kafka answers ListOffsets MAX_TIMESTAMP since
    /// KAFKA-16310: the segments know the batch, its records are walked to
    /// find the record.
    pub async fn max_timestamp_record(&self) -> Result<Option<FoundRecord>> {
        let best = {
            let state = self.inner.state.borrow();
            state
                .segments
                .iter()
                .filter(|s| s.size > 0 && s.max_timestamp >= 0)
                .map(|s| (s.max_timestamp, s.offset_of_max_timestamp))
                .fold(None, |best: Option<(i64, u64)>, cur| match best {
                    Some(b) if b.0 >= cur.0 => Some(b),
                    _ => Some(cur),
                })
        };
        let Some((max_timestamp, batch_last_offset)) = best else {
            return Ok(None);
        };
        let fallback = FoundRecord {
            offset: batch_last_offset,
            timestamp: max_timestamp,
        };
        let from = batch_last_offset.max(self.start_offset());
        let end = self.next_offset();
        if from >= end {
            return Ok(Some(fallback));
        }
        // The batch holding `batch_last_offset` is the one that set the
        // maximum; one read of a batch suffices.
        let chunk = self.read(from, 1, end).await?;
        for item in batch::split_batches(chunk.bytes) {
            let batch = item.map_err(|e| self.corrupt_read_back(e.to_string()))?;
            if batch.header().max_timestamp != max_timestamp {
                continue;
            }
            let found = self.find_in_batch(&batch, |t| t == max_timestamp)?;
            return Ok(Some(found.unwrap_or(fallback)));
        }
        Ok(Some(fallback))
    }

    /// The first record of `batch` whose timestamp satisfies `wanted`.
    fn find_in_batch(
        &self,
        batch: &RecordBatch,
        wanted: impl FnMut(i64) -> bool,
    ) -> Result<Option<FoundRecord>> {
        let header = batch.header();
        let mut scratch = Vec::new();
        let found = protocol::records::find_record(
            batch.bytes(),
            header,
            STORED_DECOMPRESSED_BYTES_MAX,
            &mut scratch,
            wanted,
        )
        .map_err(|e| self.corrupt_read_back(e.to_string()))?;
        Ok(found.map(|(delta, timestamp)| FoundRecord {
            offset: header.base_offset as u64 + delta as u64,
            timestamp,
        }))
    }

    fn corrupt_read_back(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.inner.dir.clone(),
            position: 0,
            reason: format!("batch read back for a timestamp lookup: {reason}"),
        }
    }

    /// Takes the append lock, which serialises appends with rolls,
    /// truncation and close.
    async fn lock_appends(&self) -> Result<glommio::sync::Permit<'_>> {
        self.inner
            .append_lock
            .acquire_permit(1)
            .await
            .map_err(|_| StorageError::Closed {
                path: self.inner.dir.clone(),
            })
    }

    fn check_writable(&self, state: &State) -> Result<()> {
        if let Some(reason) = &state.failure {
            return Err(StorageError::Fenced {
                path: self.inner.dir.clone(),
                reason: reason.clone(),
            });
        }
        if state.closing || state.closed {
            return Err(StorageError::Closed {
                path: self.inner.dir.clone(),
            });
        }
        Ok(())
    }

    /// Refuses an append of `size` bytes while the log's last write failed
    /// for want of space, unless the filesystem now has room for it (then
    /// the writer retries at once).
    fn check_space(&self, size: usize) -> Result<()> {
        let reason = match &self.inner.state.borrow().no_space {
            None => return Ok(()),
            Some(reason) => reason.clone(),
        };
        // What the writer must still allocate: the unwritten bytes it holds
        // and this batch, past the active segment's preallocated end.
        let needed = {
            let state = self.inner.state.borrow();
            let active = state.active();
            (active.size + size as u64).saturating_sub(active.allocated)
        };
        let room = file::free_bytes(&self.inner.dir)
            .is_some_and(|free| free >= file::SPACE_RESERVE_BYTES + needed);
        if room {
            self.inner.state.borrow_mut().no_space = None;
            self.inner.changed.notify_all();
            return Ok(());
        }
        Err(self.space_error(reason))
    }

    fn space_error(&self, reason: String) -> StorageError {
        StorageError::NoSpace {
            op: "append",
            path: self.inner.dir.clone(),
            position: self.inner.state.borrow().next_offset,
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, reason),
        }
    }

    /// A waiter's answer once its condition or a failure came: fenced,
    /// out of space (when `reached` is false), or fine.
    fn check_failure_or_space(&self, reached: bool) -> Result<()> {
        self.check_failure()?;
        if reached {
            return Ok(());
        }
        let reason = self.inner.state.borrow().no_space.clone();
        match reason {
            Some(reason) => Err(self.space_error(reason)),
            None => Ok(()),
        }
    }

    /// Validates one v2 record batch, assigns its offsets and makes it
    /// visible to readers. Returns before the batch is durable; see
    /// [`Log::wait_durable`]. An invalid batch changes nothing.
    pub async fn append(&self, batch: Bytes, options: AppendOptions) -> Result<AppendInfo> {
        self.append_batch(RecordBatch::new(batch)?, options).await
    }

    /// [`Log::append`] of a batch already validated (its CRC checked once,
    /// where it was received): the same, without a second pass over the
    /// bytes.
    pub async fn append_batch(
        &self,
        batch: RecordBatch,
        options: AppendOptions,
    ) -> Result<AppendInfo> {
        let header = *batch.header();
        let batch = batch.into_bytes();
        let size = batch.len();
        let max = self.inner.config.borrow().max_message_bytes;
        if size > max as usize {
            return Err(StorageError::BatchTooLarge { size, max });
        }
        let _permit = self.lock_appends().await?;
        self.check_writable(&self.inner.state.borrow())?;
        self.check_space(size)?;

        // Backpressure: bounded memory of unwritten batches.
        let pending_max = self.inner.config.borrow().pending_bytes_max;
        let next = {
            let s = self.inner.state.borrow();
            (s.pending_bytes != 0 && s.pending_bytes + size > pending_max).then_some(s.next_offset)
        };
        if let Some(next) = next {
            // Journaled bytes would otherwise wait for more appends.
            request_write_out(&self.inner, next);
        }
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.pending_bytes == 0
                    || s.pending_bytes + size <= pending_max
                    || s.failure.is_some()
                    || s.no_space.is_some()
                    || s.closing
            })
            .await;
        self.check_writable(&self.inner.state.borrow())?;
        self.check_space(size)?;

        let now = now_ms();
        if self.needs_roll(&header, size, now) {
            self.roll().await?;
        }

        let mut state = self.inner.state.borrow_mut();
        let base_offset = state.next_offset;
        // Offsets only grow: a batch's last offset delta was checked, a
        // negative one would wrap to a jump of the log end.
        assert!(
            (0..=i32::MAX).contains(&header.last_offset_delta),
            "append of a batch with last offset delta {}",
            header.last_offset_delta
        );
        let (bytes, head) = stamp(batch, base_offset, &options);
        let last_offset = base_offset + header.last_offset_delta as u64;
        let mut header = header;
        header.base_offset = base_offset as i64;
        if let Some(ts) = options.log_append_time_ms {
            header.max_timestamp = ts;
        }
        let interval = u64::from(self.inner.config.borrow().index_interval_bytes);
        let active = state.active_mut();
        let position = active.size;
        active.track_batch(&header, position, size as u64, interval);
        state.cache.push(CachedBatch {
            base_offset,
            last_offset,
            position,
            bytes,
            head,
        });
        state.next_offset = last_offset + 1;
        state.pending_bytes += size;
        drop(state);
        want_journal(&self.inner);
        self.inner.changed.notify_all();
        Ok(AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: header.max_timestamp,
            log_append_time_ms: options.log_append_time_ms,
        })
    }

    fn needs_roll(&self, header: &batch::BatchHeader, size: usize, now: i64) -> bool {
        let config = self.inner.config.borrow();
        let state = self.inner.state.borrow();
        let active = state.active();
        if active.size == 0 {
            return false;
        }
        let last_relative =
            state.next_offset + header.last_offset_delta as u64 - active.base_offset;
        active.size + size as u64 > config.segment_bytes
            || (active.index.len() as u64 + 1) * 8 > config.segment_index_bytes
            || (active.time_index.entries().len() as u64 + 1) * 12 > config.segment_index_bytes
            || last_relative > i32::MAX as u64
            || segment_age_ms(active, header.max_timestamp, now) > config.segment_ms as i64
    }

    /// Seals the active segment and starts a new one at the log end. The
    /// caller holds the append lock.
    async fn roll(&self) -> Result<()> {
        self.wait_written(self.next_offset()).await?;
        let dir = self.inner.dir.clone();
        // The writer is idle (everything is written and appends are held);
        // the segment stays listed for readers while its seal runs.
        let (job, next_offset) = {
            let mut state = self.inner.state.borrow_mut();
            let active = state.active_mut();
            (active.prepare_seal(&dir), active.next_offset)
        };
        // A roll that fails for space leaves the active segment as it was
        // (sealing again is harmless): the append is refused, nothing fenced.
        if let Err(e) = job.run().await {
            return Err(self.fence_unless_space(e));
        }
        let segment = match Segment::create(&dir, next_offset).await {
            Ok(segment) => segment,
            Err(e) => return Err(self.fence_unless_space(e)),
        };
        let checkpoint = {
            let mut state = self.inner.state.borrow_mut();
            state.durable_offset = state.durable_offset.max(next_offset);
            state.segments.push(segment);
            state.tail.clear();
            state.submitted_position = 0;
            state.durable_position = 0;
            state.recovery_point = next_offset;
            state.unsynced_bytes = 0;
            state.unsynced_since = None;
            Checkpoint {
                recovery_point: next_offset,
                log_start_offset: state.log_start_offset,
                next_offset,
                clean: false,
            }
        };
        self.inner.changed.notify_all();
        checkpoint.write(&dir).await?;
        info!(dir = %dir.display(), base_offset = next_offset, "rolled to a new segment");
        Ok(())
    }

    /// Marks the log failed: no more appends or acknowledgements.
    fn fence(&self, e: StorageError) -> StorageError {
        fence_inner(&self.inner, e.to_string());
        e
    }

    /// [`Log::fence`], except for a failure for space, which refuses only
    /// the operation at hand.
    fn fence_unless_space(&self, e: StorageError) -> StorageError {
        if e.is_out_of_space() {
            return e;
        }
        self.fence(e)
    }

    async fn wait_written(&self, offset: u64) -> Result<()> {
        request_write_out(&self.inner, offset);
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.written_offset >= offset || s.failure.is_some() || s.no_space.is_some()
            })
            .await;
        let reached = self.inner.state.borrow().written_offset >= offset;
        self.check_failure_or_space(reached)
    }

    fn check_failure(&self) -> Result<()> {
        match &self.inner.state.borrow().failure {
            Some(reason) => Err(StorageError::Fenced {
                path: self.inner.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Resolves once `last_offset` is durable under the flush policy:
    /// synced for `always`, written to the file for `interval` and `never`.
    pub async fn wait_durable(&self, last_offset: u64) -> Result<()> {
        let always = self.inner.config.borrow().flush == FlushPolicy::Always;
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                let reached = if always {
                    s.durable_offset
                } else {
                    s.written_offset
                };
                reached > last_offset || s.failure.is_some() || s.no_space.is_some()
            })
            .await;
        let reached = {
            let s = self.inner.state.borrow();
            if always {
                s.durable_offset > last_offset
            } else {
                s.written_offset > last_offset
            }
        };
        self.check_failure_or_space(reached)
    }

    /// Writes and syncs everything appended so far, whatever the policy.
    pub async fn flush(&self) -> Result<()> {
        let target = {
            let mut state = self.inner.state.borrow_mut();
            state.sync_requested = state.sync_requested.max(state.next_offset);
            state.next_offset
        };
        self.inner.changed.notify_all();
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.durable_offset >= target || s.failure.is_some() || s.no_space.is_some()
            })
            .await;
        let reached = self.inner.state.borrow().durable_offset >= target;
        self.check_failure_or_space(reached)
    }

    /// Resolves once the log end passes `offset` (a record at `offset`
    /// exists), or the log closes. For long-polling fetches.
    pub async fn wait_for_append(&self, offset: u64) {
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.next_offset > offset || s.closing || s.closed
            })
            .await
    }

    /// Reads whole batches starting with the one that holds `from_offset`,
    /// up to `max_bytes` (the first batch is returned whole even when larger)
    /// and not past `upper_bound` (exclusive; a high watermark).
    pub async fn read(
        &self,
        from_offset: u64,
        max_bytes: usize,
        upper_bound: u64,
    ) -> Result<ReadResult> {
        let (start, end) = {
            let s = self.inner.state.borrow();
            (s.log_start_offset, s.next_offset)
        };
        if from_offset < start || from_offset > end {
            return Err(StorageError::OffsetOutOfRange {
                offset: from_offset,
                start,
                end,
            });
        }
        let upper = upper_bound.min(end);
        let empty = ReadResult {
            bytes: Bytes::new(),
            next_offset: from_offset,
        };
        if from_offset >= upper {
            return Ok(empty);
        }
        let cached = self
            .inner
            .state
            .borrow()
            .cache
            .read(from_offset, max_bytes, upper);
        if let Some(hit) = cached {
            self.inner.state.borrow_mut().stats.reads_cached += 1;
            return Ok(ReadResult {
                bytes: hit.bytes,
                next_offset: hit.next_offset.max(from_offset),
            });
        }
        self.inner.state.borrow_mut().stats.reads_disk += 1;
        let window_len = read_window_len(max_bytes);
        let truncations = self.inner.truncations.get();
        let mut from = from_offset;
        let mut index = self.inner.state.borrow().segment_for(from);
        // The window read ahead after the previous read, if this read
        // continues exactly where that one ended.
        let mut ahead = {
            let taken = self.inner.read_ahead.borrow_mut().take();
            let s = self.inner.state.borrow();
            taken.filter(|ahead| {
                ahead.offset == from
                    && ahead.truncations == truncations
                    && ahead.window_len == window_len
                    && s.segments.get(index).map(|seg| seg.base_offset) == Some(ahead.segment_base)
            })
        };
        loop {
            let (file, path, base_offset, mut start_position, limit, next_base) = {
                let s = self.inner.state.borrow();
                let Some(seg) = s.segments.get(index) else {
                    return Ok(empty);
                };
                let relative = from
                    .saturating_sub(seg.base_offset)
                    .min(u64::from(u32::MAX)) as u32;
                (
                    seg.file.clone(),
                    seg.path.clone(),
                    seg.base_offset,
                    u64::from(seg.index.lookup(relative)),
                    seg.written_size,
                    s.segments.get(index + 1).map(|n| n.base_offset),
                )
            };
            let mut first_window = None;
            if let Some(ahead) = ahead.take() {
                // A failed read-ahead is retried as an ordinary read, which
                // reports the error if it persists.
                if let Ok(data) = ahead.data.await {
                    start_position = ahead.position;
                    first_window = Some(data);
                    self.inner.state.borrow_mut().stats.reads_ahead_used += 1;
                }
            }
            let read = read_segment(
                (&file, &path),
                (start_position, limit),
                from,
                max_bytes,
                upper,
                first_window,
            )
            .await?;
            match read {
                SegmentRead::Found(result, end_position) => {
                    if self.inner.truncations.get() == truncations {
                        let at = (base_offset, truncations);
                        let span = (end_position, limit);
                        self.read_ahead(file, path, at, &result, span, window_len);
                    }
                    return Ok(result);
                }
                SegmentRead::Stop => return Ok(empty),
                SegmentRead::Exhausted => match next_base {
                    Some(next) if next < upper => {
                        from = from.max(next);
                        index += 1;
                    }
                    _ => return Ok(empty),
                },
            }
        }
    }

    /// Starts reading the window after a read from disk, so that a reader
    /// going through the log finds its next window read (or being read)
    /// while it handles this one. At most `READ_AHEAD_BYTES_MAX` per thread
    /// are read ahead; one window per log.
    fn read_ahead(
        &self,
        file: Rc<glommio::io::DmaFile>,
        path: PathBuf,
        (segment_base, truncations): (u64, u64),
        result: &ReadResult,
        (position, limit): (u64, u64),
        window_len: usize,
    ) {
        if position + HEADER_LEN as u64 > limit {
            return;
        }
        let want = (limit - position).min(window_len as u64) as usize;
        let Some(budget) = ReadAheadBudget::take(want) else {
            return;
        };
        let data = glommio::spawn_local(async move {
            file.read_at(position, want)
                .await
                .ctx("read", &path, position)
        });
        *self.inner.read_ahead.borrow_mut() = Some(ReadAhead {
            segment_base,
            truncations,
            offset: result.next_offset,
            position,
            window_len,
            data,
            _budget: budget,
        });
    }

    /// The first record whose timestamp is at or above `timestamp`, with
    /// its own timestamp, or `None` when every record is older. Compressed
    /// batches are decompressed as Kafka does.
    pub async fn offset_for_timestamp(&self, timestamp: i64) -> Result<Option<FoundRecord>> {
        let mut from = {
            let s = self.inner.state.borrow();
            let Some(seg) = s
                .segments
                .iter()
                .find(|seg| seg.size > 0 && seg.max_timestamp >= timestamp)
            else {
                return Ok(None);
            };
            let start = match seg.time_index.lookup(timestamp) {
                Some(relative) => seg.base_offset + u64::from(relative) + 1,
                None => seg.base_offset,
            };
            start.max(s.log_start_offset)
        };
        // Bounded: every pass advances `from` or returns.
        loop {
            let end = self.next_offset();
            if from >= end {
                return Ok(None);
            }
            let chunk = self.read(from, 256 << 10, end).await?;
            if chunk.bytes.is_empty() {
                return Ok(None);
            }
            for item in batch::split_batches(chunk.bytes.clone()) {
                let batch = item.map_err(|e| self.corrupt_read_back(e.to_string()))?;
                let header = batch.header();
                if header.max_timestamp < timestamp {
                    continue;
                }
                let below_from = from.saturating_sub(header.base_offset as u64);
                let mut index = 0u64;
                // Records before `from` (the log start inside a batch) are
                // gone for the client even though their batch remains.
                let found = self.find_in_batch(&batch, |t| {
                    let keep = index >= below_from && t >= timestamp;
                    index += 1;
                    keep
                })?;
                if let Some(found) = found {
                    return Ok(Some(found));
                }
            }
            if chunk.next_offset <= from {
                return Ok(None);
            }
            from = chunk.next_offset;
        }
    }

    /// Removes every record at or after `offset` (the whole batch holding
    /// it), e.g. for a follower diverged from its leader. Returns the new
    /// log end offset.
    pub async fn truncate_to(&self, offset: u64) -> Result<u64> {
        let _permit = self.lock_appends().await?;
        // Bytes read ahead may be cut and written again: reads in progress
        // see the bump and neither use nor start a window.
        self.inner.truncations.set(self.inner.truncations.get() + 1);
        self.inner.read_ahead.borrow_mut().take();
        self.check_writable(&self.inner.state.borrow())?;
        let _truncating = Truncating::new(&self.inner);
        self.wait_written(self.next_offset()).await?;
        let dir = self.inner.dir.clone();
        // Journal records past the cut must not come back at the next
        // start: with every byte in the segment file and synced, a
        // tombstone voids this log's records before the cut is made.
        if self.inner.journal.get().is_some() {
            let (file, path) = {
                let s = self.inner.state.borrow();
                (s.active().file.clone(), s.active().path.clone())
            };
            if let Err(e) = file.fdatasync().await.ctx("fdatasync", &path, 0) {
                return Err(self.fence(e));
            }
            if let Err(e) = journal_tombstone(&self.inner).await {
                return Err(self.fence(e));
            }
        }
        let (target, index) = {
            let s = self.inner.state.borrow();
            if offset >= s.next_offset {
                return Ok(s.next_offset);
            }
            let target = offset.max(s.log_start_offset);
            (target, s.segment_for(target))
        };
        // Take the later segments out first so no reader starts on them.
        let (removed, snapshot) = {
            let mut s = self.inner.state.borrow_mut();
            let removed: Vec<u64> = s
                .segments
                .drain(index + 1..)
                .map(|seg| seg.base_offset)
                .collect();
            // Nothing for the writer to do on this segment until the cut is
            // applied below.
            s.submitted_position = s.active().size;
            s.tail.clear();
            let seg = s.active();
            let relative = target
                .saturating_sub(seg.base_offset)
                .min(u64::from(u32::MAX)) as u32;
            let snapshot = CutSearch {
                file: seg.file.clone(),
                path: seg.path.clone(),
                base_offset: seg.base_offset,
                start_position: u64::from(seg.index.lookup(relative)),
                written_size: seg.written_size,
            };
            (removed, snapshot)
        };
        let cut = match find_cut(&snapshot, target).await {
            Ok(cut) => cut,
            Err(e) => return Err(self.fence(e)),
        };
        let synced = match &cut {
            Some(cut) => {
                file::truncate_and_sync(&snapshot.file, &snapshot.path, cut.position).await
            }
            None => snapshot
                .file
                .fdatasync()
                .await
                .ctx("fdatasync", &snapshot.path, 0),
        };
        if let Err(e) = synced {
            return Err(self.fence(e));
        }
        let new_end = {
            let mut s = self.inner.state.borrow_mut();
            let segment = s.active_mut();
            if let Some(cut) = &cut {
                apply_cut(segment, cut);
            }
            segment.next_offset
        };
        let tail = segment::read_tail_page(&snapshot.file, &snapshot.path, {
            let s = self.inner.state.borrow();
            s.active().written_size
        })
        .await
        .map_err(|e| self.fence(e))?;
        let checkpoint = {
            let mut s = self.inner.state.borrow_mut();
            s.tail = tail;
            s.submitted_position = s.active().written_size;
            s.next_offset = new_end;
            s.written_offset = new_end;
            s.durable_offset = new_end;
            s.durable_position = s.active().written_size;
            s.write_out_to = s.write_out_to.min(new_end);
            s.sync_requested = s.sync_requested.min(new_end);
            s.cache.drop_from(new_end);
            s.log_start_offset = s.log_start_offset.min(new_end);
            s.recovery_point = s.recovery_point.min(s.active().base_offset);
            Checkpoint {
                recovery_point: s.recovery_point,
                log_start_offset: s.log_start_offset,
                next_offset: new_end,
                clean: false,
            }
        };
        checkpoint.write(&dir).await?;
        for base in removed {
            Segment::remove_files(&dir, base).await?;
        }
        file::sync_dir(&dir).await?;
        // Again for reads that started while the cut was being made.
        self.inner.truncations.set(self.inner.truncations.get() + 1);
        self.inner.read_ahead.borrow_mut().take();
        self.inner.changed.notify_all();
        info!(dir = %dir.display(), requested = offset, next_offset = new_end, "log truncated");
        Ok(new_end)
    }

    /// Moves the log start offset forward (DeleteRecords): records below it
    /// are no longer served, and segments wholly below it are deleted.
    pub async fn advance_start_offset(&self, offset: u64) -> Result<u64> {
        let checkpoint = {
            let mut s = self.inner.state.borrow_mut();
            if offset > s.next_offset {
                return Err(StorageError::OffsetOutOfRange {
                    offset,
                    start: s.log_start_offset,
                    end: s.next_offset,
                });
            }
            if offset <= s.log_start_offset {
                return Ok(s.log_start_offset);
            }
            s.log_start_offset = offset;
            // Unwritten batches stay: the writer still owes them to the file.
            let keep_from = offset.min(s.written_offset);
            s.cache.drop_below(keep_from);
            Checkpoint {
                recovery_point: s.recovery_point,
                log_start_offset: offset,
                next_offset: s.next_offset,
                clean: false,
            }
        };
        checkpoint.write(&self.inner.dir).await?;
        self.delete_front_segments(|_, next_base, start| next_base <= start)
            .await?;
        Ok(offset)
    }

    /// Deletes whole non-active segments past `retention.ms` (by their
    /// newest record) or beyond `retention.bytes`, oldest first. Appends
    /// continue meanwhile: the segments leave the in-memory list at once
    /// and their files are removed afterwards.
    pub async fn enforce_retention(&self, now_ms: i64) -> Result<RetentionOutcome> {
        let config = self.inner.config.borrow().clone();
        let mut excess = if config.retention_bytes >= 0 {
            self.size_bytes() as i64 - config.retention_bytes
        } else {
            i64::MIN
        };
        self.delete_front_segments(|segment, _, _| {
            let expired = config.retention_ms >= 0
                && segment.max_timestamp < now_ms.saturating_sub(config.retention_ms);
            let oversized = excess != i64::MIN && excess - segment.size as i64 >= 0;
            if expired || oversized {
                if excess != i64::MIN {
                    excess -= segment.size as i64;
                }
                true
            } else {
                false
            }
        })
        .await
    }

    /// Deletes segments from the front while `doomed(segment, next segment
    /// base, log start)` holds, never the active one.
    async fn delete_front_segments(
        &self,
        mut doomed: impl FnMut(&Segment, u64, u64) -> bool,
    ) -> Result<RetentionOutcome> {
        let mut outcome = RetentionOutcome::default();
        let (removed, checkpoint) = {
            let mut s = self.inner.state.borrow_mut();
            let mut count = 0;
            while count + 1 < s.segments.len() {
                let next_base = s.segments[count + 1].base_offset;
                if !doomed(&s.segments[count], next_base, s.log_start_offset) {
                    break;
                }
                count += 1;
            }
            if count == 0 {
                return Ok(outcome);
            }
            let removed: Vec<Segment> = s.segments.drain(..count).collect();
            let new_start = s.segments[0].base_offset;
            s.log_start_offset = s.log_start_offset.max(new_start);
            let start = s.log_start_offset;
            let keep_from = start.min(s.written_offset);
            s.cache.drop_below(keep_from);
            let checkpoint = Checkpoint {
                recovery_point: s.recovery_point,
                log_start_offset: s.log_start_offset,
                next_offset: s.next_offset,
                clean: false,
            };
            (removed, checkpoint)
        };
        checkpoint.write(&self.inner.dir).await?;
        for segment in removed {
            outcome.segments_deleted += 1;
            outcome.bytes_deleted += segment.size;
            let base = segment.base_offset;
            drop(segment);
            Segment::remove_files(&self.inner.dir, base).await?;
            info!(dir = %self.inner.dir.display(), base_offset = base, "deleted segment");
        }
        file::sync_dir(&self.inner.dir).await?;
        Ok(outcome)
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
        checkpoint.write(&self.inner.dir).await?;
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
            // Unwritten batches are discarded with the log: the writer has
            // nothing left to drain.
            s.cache.clear();
            s.submitted_position = s.active().size;
            s.tail.clear();
            s.written_offset = s.next_offset;
            s.pending_bytes = 0;
        }
        self.inner.append_lock.close();
        self.inner.changed.notify_all();
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
        std::fs::remove_dir_all(&dir).ctx("remove directory", &dir, 0)?;
        info!(dir = %dir.display(), "log deleted");
        Ok(())
    }
}

fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let entries = std::fs::read_dir(dir).ctx("list directory", dir, 0)?;
    for entry in entries {
        let entry = entry.ctx("list directory", dir, 0)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
        } else if let Some(base) = segment::parse_base_offset(name, "log") {
            bases.push(base);
        }
    }
    // Index files without a log file are leftovers of a deletion.
    let entries = std::fs::read_dir(dir).ctx("list directory", dir, 0)?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let base = segment::parse_base_offset(name, "index")
            .or_else(|| segment::parse_base_offset(name, "timeindex"));
        if base.is_some_and(|b| !bases.contains(&b)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(bases)
}

enum SegmentRead {
    /// Batches found, and the file position just after the last one.
    Found(ReadResult, u64),
    /// Reached `upper_bound`.
    Stop,
    /// Nothing at or after `from` in this segment.
    Exhausted,
}

/// Reads whole batches from one segment file, starting the scan at
/// `position` (from the sparse index) and skipping batches below `from`.
/// Every batch returned has had its CRC checked.
async fn read_segment(
    (file, path): (&glommio::io::DmaFile, &Path),
    (mut position, limit): (u64, u64),
    from: u64,
    max_bytes: usize,
    upper: u64,
    mut first_window: Option<glommio::io::ReadResult>,
) -> Result<SegmentRead> {
    let window_len = read_window_len(max_bytes);
    loop {
        if position + HEADER_LEN as u64 > limit {
            return Ok(SegmentRead::Exhausted);
        }
        let want = (limit - position).min(window_len as u64) as usize;
        let data = match first_window.take() {
            Some(data) => data,
            None => file
                .read_at(position, want)
                .await
                .ctx("read", path, position)?,
        };
        let mut offset = 0usize;
        let mut first: Option<usize> = None;
        let mut end = 0usize;
        let mut next_offset = from;
        let corrupt = |at: usize, reason: String| StorageError::Corrupt {
            path: path.to_path_buf(),
            position: position + at as u64,
            reason,
        };
        while offset + HEADER_LEN <= data.len() {
            let header = batch::BatchHeader::parse(&data[offset..])
                .map_err(|e| corrupt(offset, e.to_string()))?;
            let size = header.size();
            if (header.last_offset() as u64) < from {
                offset += size;
                continue;
            }
            if header.base_offset as u64 >= upper {
                return Ok(match first {
                    Some(f) => SegmentRead::Found(
                        ReadResult {
                            bytes: Bytes::copy_from_slice(&data[f..end]),
                            next_offset,
                        },
                        position + end as u64,
                    ),
                    None => SegmentRead::Stop,
                });
            }
            if offset + size > data.len() {
                if first.is_none() {
                    let at = position + offset as u64;
                    let whole = file.read_at(at, size).await.ctx("read", path, at)?;
                    batch::validate(&whole).map_err(|e| corrupt(offset, e.to_string()))?;
                    return Ok(SegmentRead::Found(
                        ReadResult {
                            bytes: Bytes::copy_from_slice(&whole),
                            next_offset: header.last_offset() as u64 + 1,
                        },
                        at + size as u64,
                    ));
                }
                break;
            }
            if let Some(f) = first {
                if end - f + size > max_bytes {
                    break;
                }
            }
            batch::validate(&data[offset..offset + size])
                .map_err(|e| corrupt(offset, e.to_string()))?;
            first.get_or_insert(offset);
            end = offset + size;
            next_offset = header.last_offset() as u64 + 1;
            offset += size;
        }
        if let Some(f) = first {
            return Ok(SegmentRead::Found(
                ReadResult {
                    bytes: Bytes::copy_from_slice(&data[f..end]),
                    next_offset,
                },
                position + end as u64,
            ));
        }
        if offset == 0 {
            return Ok(SegmentRead::Exhausted);
        }
        position += offset as u64;
    }
}

struct CutSearch {
    file: Rc<glommio::io::DmaFile>,
    path: PathBuf,
    base_offset: u64,
    start_position: u64,
    written_size: u64,
}

/// Where a truncation cuts a segment: before the batch holding the target.
struct CutPoint {
    position: u64,
    new_end: u64,
    /// Max timestamp among the scanned batches kept before the cut.
    max_timestamp: i64,
    offset_of_max_timestamp: u64,
}

async fn find_cut(search: &CutSearch, target: u64) -> Result<Option<CutPoint>> {
    let mut position = search.start_position;
    let mut max_timestamp = -1i64;
    let mut offset_of_max_timestamp = search.base_offset;
    // Bounded by the segment size: each step moves past one batch.
    while position + HEADER_LEN as u64 <= search.written_size {
        let header_bytes =
            search
                .file
                .read_at(position, HEADER_LEN)
                .await
                .ctx("read", &search.path, position)?;
        let header =
            batch::BatchHeader::parse(&header_bytes).map_err(|e| StorageError::Corrupt {
                path: search.path.clone(),
                position,
                reason: e.to_string(),
            })?;
        if header.last_offset() as u64 >= target {
            return Ok(Some(CutPoint {
                position,
                new_end: (header.base_offset as u64).max(search.base_offset),
                max_timestamp,
                offset_of_max_timestamp,
            }));
        }
        if header.max_timestamp > max_timestamp {
            max_timestamp = header.max_timestamp;
            offset_of_max_timestamp = header.last_offset() as u64;
        }
        position += header.size() as u64;
    }
    Ok(None)
}

fn apply_cut(segment: &mut Segment, cut: &CutPoint) {
    segment.size = cut.position;
    segment.written_size = cut.position;
    segment.allocated = cut.position;
    segment.next_offset = cut.new_end;
    segment.index.truncate_to_position(cut.position);
    let relative_end = segment.relative(cut.new_end);
    segment.time_index.truncate_to_offset(relative_end);
    match segment.time_index.last() {
        Some(entry) if entry.timestamp >= cut.max_timestamp => {
            segment.max_timestamp = entry.timestamp;
            segment.offset_of_max_timestamp =
                segment.base_offset + u64::from(entry.relative_offset);
        }
        _ => {
            segment.max_timestamp = cut.max_timestamp;
            segment.offset_of_max_timestamp = cut.offset_of_max_timestamp;
        }
    }
    if cut.position == 0 {
        segment.first_timestamp = None;
        segment.max_timestamp = -1;
    }
    segment.bytes_since_index = 0;
}

/// Recent batches cached by all the logs of one executor (shard) together:
/// each log keeps at most its fair share of this (and at most its own
/// `strom.cache.bytes`), so a shard with many partitions stays bounded.
pub const SHARD_CACHE_BYTES_MAX: usize = 256 << 20;

thread_local! {
    /// Logs open on this executor.
    static OPEN_LOGS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The cache bound of one log on this executor now.
fn cache_bytes_max(config: &LogConfig) -> usize {
    let open = OPEN_LOGS.with(|n| n.get()).max(1);
    config.cache_bytes_max.min(SHARD_CACHE_BYTES_MAX / open)
}

/// The unwritten bytes all the logs of an executor keep in memory for its
/// journal at most, shared out as in [`journal_keep_bytes`].
pub const SHARD_JOURNAL_KEPT_BYTES_MAX: u64 = 16 << 20;

/// How many times its `strom.journal.bytes` a log keeps unwritten for the
/// journal at most (see [`journal_keep_bytes`]).
const JOURNAL_KEEP_FACTOR: u64 = 4;

/// The unwritten bytes a journaling log keeps in memory before it writes
/// them out to its segment file: four times its `strom.journal.bytes`
/// (fewer, larger segment writes), lowered to its share of
/// [`SHARD_JOURNAL_KEPT_BYTES_MAX`] when many logs are open, but never
/// below `strom.journal.bytes` itself. With the default 64 KiB, 16
/// partitions on a core keep 256 KiB each and 1,000 keep 64 KiB each.
fn journal_keep_bytes(config: &LogConfig) -> u64 {
    let open = OPEN_LOGS.with(|n| n.get()).max(1) as u64;
    let share = SHARD_JOURNAL_KEPT_BYTES_MAX / open;
    (config.journal_bytes * JOURNAL_KEEP_FACTOR)
        .min(share)
        .max(config.journal_bytes)
}

/// Counts a log as open on this executor while it lives.
struct OpenLogGuard;

impl OpenLogGuard {
    fn new() -> Self {
        OPEN_LOGS.with(|n| n.set(n.get() + 1));
        OpenLogGuard
    }
}

impl Drop for OpenLogGuard {
    fn drop(&mut self) {
        OPEN_LOGS.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Stamps base offset and leader epoch (and LogAppendTime) on a batch.
/// A batch the caller no longer shares is rewritten in place; a shared one
/// is left as is, with its rewritten first 16 bytes returned separately and
/// applied when the batch is copied out, so an append copies nothing.
fn stamp(
    batch: Bytes,
    base_offset: u64,
    options: &AppendOptions,
) -> (Bytes, Option<[u8; HEAD_LEN]>) {
    let rewrite = |bytes: &mut [u8]| {
        batch::set_base_offset(bytes, base_offset as i64);
        batch::set_partition_leader_epoch(bytes, options.leader_epoch);
    };
    match batch.try_into_mut() {
        Ok(mut owned) => {
            rewrite(&mut owned);
            if let Some(ts) = options.log_append_time_ms {
                batch::set_log_append_time(&mut owned, ts);
            }
            (owned.freeze(), None)
        }
        Err(shared) if options.log_append_time_ms.is_some() => {
            // LogAppendTime rewrites the CRC too: take a copy.
            let mut owned = BytesMut::from(&shared[..]);
            rewrite(&mut owned);
            batch::set_log_append_time(&mut owned, options.log_append_time_ms.expect("checked"));
            (owned.freeze(), None)
        }
        Err(shared) => {
            let mut head = [0u8; HEAD_LEN];
            head.copy_from_slice(&shared[..HEAD_LEN]);
            rewrite(&mut head);
            (shared, Some(head))
        }
    }
}

/// How old the active segment is for `segment.ms`, as Kafka measures it:
/// from its first batch's timestamp to the new batch's, or by the wall clock
/// since it was opened when it has no timestamps.
fn segment_age_ms(segment: &Segment, new_timestamp: i64, now_ms: i64) -> i64 {
    match segment.first_timestamp {
        Some(first) if first >= 0 && new_timestamp >= 0 => new_timestamp.saturating_sub(first),
        _ => now_ms.saturating_sub(segment.opened_ms),
    }
}

fn fence_inner(inner: &Inner, reason: String) {
    let mut state = inner.state.borrow_mut();
    let first = state.failure.is_none();
    if first {
        error!(dir = %inner.dir.display(), %reason, "log fenced: refusing further appends and acknowledgements");
        state.failure = Some(reason.clone());
    }
    drop(state);
    inner.changed.notify_all();
    if first {
        crate::fence::fenced(&inner.dir, &reason);
    }
}

/// What the writer should do next: (submit a write, sync, wake-up delay
/// for an interval sync).
fn writer_work(state: &State, config: &LogConfig, now: Instant) -> (bool, bool, Option<Duration>) {
    // Under the journal, a few unwritten bytes wait for more (the journal
    // makes them durable) unless something needs them in the file.
    let defer = journal_keeps(state, config) && unwritten_is_small(state, config);
    let submittable = !defer
        && state.submitted_position < write_end(state, config)
        && state.in_flight.len() < config.writes_in_flight_max
        // A write that rewrites the partial page of an earlier write waits
        // until that write completes, so the page is never written twice
        // concurrently.
        && (state.tail.is_empty() || state.in_flight.is_empty());
    let unsynced =
        state.durable_offset < state.written_offset || journal_round(state, config).is_some();
    let requested = state.sync_requested > state.durable_offset;
    let mut wait = None;
    // A journal round the log asked for makes its bytes durable; while
    // closing the writer syncs whatever the journal does.
    let journaling = (state.journal_wanted || state.journal_capture.is_some()) && !state.closing;
    let sync = !state.sync_running
        && !journaling
        && unsynced
        && (requested
            || match config.flush {
                FlushPolicy::Always => true,
                FlushPolicy::Never => false,
                FlushPolicy::Interval { ms, bytes } => {
                    let by_bytes = bytes.is_some_and(|b| state.unsynced_bytes >= b);
                    let by_time = match (ms, state.unsynced_since) {
                        (Some(ms), Some(since)) => {
                            let due = since + Duration::from_millis(ms);
                            if now >= due {
                                true
                            } else {
                                wait = Some(due - now);
                                false
                            }
                        }
                        _ => false,
                    };
                    by_bytes || by_time
                }
            });
    (submittable, sync, wait)
}

/// The writer task of one log: submits coalesced O_DIRECT writes (up to
/// `strom.writes.inflight` at once) and syncs per the flush policy. It exits
/// when the log closes (after draining) or is fenced.
async fn writer_loop(inner: Rc<Inner>) {
    loop {
        let mut timeout = None;
        inner
            .changed
            .wait_until(|| {
                let state = inner.state.borrow();
                if state.failure.is_some() || state.closing {
                    return true;
                }
                let (submit, sync, wait) =
                    writer_work(&state, &inner.config.borrow(), Instant::now());
                timeout = wait;
                submit || sync || wait.is_some()
            })
            .await;
        let (submit, sync, wait, closing, failed, drained) = {
            let state = inner.state.borrow();
            let (submit, sync, wait) = writer_work(&state, &inner.config.borrow(), Instant::now());
            let drained = state.written_offset == state.next_offset
                && state.in_flight.is_empty()
                && !state.sync_running
                && state.sync_requested <= state.durable_offset;
            (
                submit,
                sync,
                wait,
                state.closing,
                state.failure.is_some(),
                drained,
            )
        };
        if failed {
            return;
        }
        if submit {
            match submit_write(&inner).await {
                Ok(()) => {}
                Err(e) if e.is_out_of_space() => {
                    if !wait_for_space(&inner, e.to_string()).await {
                        return;
                    }
                }
                Err(e) => {
                    fence_inner(&inner, e.to_string());
                    return;
                }
            }
            continue;
        }
        if sync {
            start_sync_round(&inner);
            continue;
        }
        if closing && drained {
            return;
        }
        if let (Some(wait), None) = (wait.or(timeout), closing.then_some(())) {
            // Only an interval deadline is pending: sleep until it, or until
            // anything else needs the writer.
            futures_lite::future::or(
                glommio::timer::sleep(wait),
                inner.changed.wait_until(|| {
                    let state = inner.state.borrow();
                    let (submit, sync, _) =
                        writer_work(&state, &inner.config.borrow(), Instant::now());
                    submit || sync || state.closing || state.failure.is_some()
                }),
            )
            .await;
        } else if closing {
            // Closing with writes or a sync still in flight: wait for them.
            inner
                .changed
                .wait_until(|| {
                    let state = inner.state.borrow();
                    (state.in_flight.is_empty() && !state.sync_running) || state.failure.is_some()
                })
                .await;
        }
    }
}

/// After a write failed for want of space (nothing of it was submitted):
/// refuses appends and unblocks their waiters, then waits until an append
/// saw room or [`SPACE_RETRY_MS`] passed. Returns false when the writer
/// should stop instead of retrying (the log is closing or fenced): what it
/// could not write was either never acknowledged or is in the journal.
async fn wait_for_space(inner: &Rc<Inner>, reason: String) -> bool {
    {
        let mut state = inner.state.borrow_mut();
        if state.no_space.is_none() {
            warn!(dir = %inner.dir.display(), %reason, "log out of space: refusing appends until space returns");
        }
        state.no_space = Some(reason);
    }
    inner.changed.notify_all();
    if inner.state.borrow().closing {
        return false;
    }
    futures_lite::future::or(
        glommio::timer::sleep(Duration::from_millis(SPACE_RETRY_MS)),
        inner.changed.wait_until(|| {
            let state = inner.state.borrow();
            state.no_space.is_none() || state.closing || state.failure.is_some()
        }),
    )
    .await;
    let mut state = inner.state.borrow_mut();
    if state.closing || state.failure.is_some() {
        return false;
    }
    // Retried now: the write's next attempt sets it again if space is
    // still short.
    if state.no_space.take().is_some() {
        info!(dir = %inner.dir.display(), "log retrying a write that failed for space");
    }
    true
}

/// One write in flight, in submission (= file position) order.
pub(crate) struct InFlightWrite {
    id: u64,
    /// Data bytes of the segment that are on disk once this write and all
    /// earlier ones complete.
    end_position: u64,
    done: bool,
}

/// Copies the next run of unwritten bytes (after the partial tail page, if
/// any) into an aligned buffer and submits it as one O_DIRECT write. While
/// more data follows, writes end on a page boundary so that concurrent
/// writes never share a page; only the last write of a burst carries a
/// partial page, which the next write rewrites after it completes (none
/// does while the journal keeps the log's last bytes: see [`write_end`]).
async fn submit_write(inner: &Rc<Inner>) -> Result<()> {
    /// What a write that cannot get its space puts back.
    struct Undo {
        tail: Vec<u8>,
        submitted_position: u64,
        allocated: u64,
        write_end: u64,
    }
    let (file, path, aligned_start, buffer, end, id, grow_to, undo) = {
        let config = inner.config.borrow();
        let (write_bytes_max, preallocate) =
            (config.write_bytes_max as u64, config.preallocate_bytes);
        let mut state = inner.state.borrow_mut();
        let start = state.submitted_position;
        let data_end = write_end(&state, &config);
        drop(config);
        let aligned_start = start - state.tail.len() as u64;
        assert_eq!(aligned_start % PAGE, 0, "writes start on a page");
        // A write that rewrites the partial tail page covers that page
        // alone: the page is written (not preallocated), so the write is a
        // pure overwrite, and the bytes after it fall in preallocated
        // extents only. A write mixing both kinds of extent needs the
        // inode lock exclusively, which io_uring cannot take without
        // blocking, so the kernel hands it to a worker thread (a context
        // switch per write); two writes of one kind each are issued inline.
        let write_max = if state.tail.is_empty() {
            write_bytes_max
        } else {
            PAGE
        };
        let mut end = data_end.min(aligned_start + write_max);
        if end < data_end {
            // More follows: stop on a page boundary and leave the rest for
            // the next write.
            end = file::align_down(end).max(start.min(end));
        }
        assert!(end > start, "submit_write called with nothing to write");
        let padded = file::align_up(end - aligned_start) as usize;
        let active = state.active();
        let mut buffer = active.file.alloc_dma_buffer(padded);
        let out = buffer.as_bytes_mut();
        let tail_len = state.tail.len();
        out[..tail_len].copy_from_slice(&state.tail);
        let position = copy_cached(
            &state.cache,
            state.written_offset,
            start,
            end,
            &mut out[tail_len..],
        );
        let at = tail_len + (position - start) as usize;
        assert_eq!(position, end, "the cache holds every unwritten byte");
        out[at..].fill(0);
        let new_tail = if end.is_multiple_of(PAGE) {
            Vec::new()
        } else {
            let tail_start = (file::align_down(end) - aligned_start) as usize;
            out[tail_start..at].to_vec()
        };
        let write_end = aligned_start + padded as u64;
        // The step grows with the segment (a quarter of what it holds, up
        // to PREALLOCATE_STEP_MAX), so a busy partition calls fallocate
        // rarely while a small one keeps at most one small step of slack.
        let step = file::align_up(
            (active.written_size / 4).clamp(preallocate, PREALLOCATE_STEP_MAX.max(preallocate)),
        );
        let grow_to = (write_end > active.allocated).then(|| write_end.div_ceil(step) * step);
        let (file, path) = (active.file.clone(), active.path.clone());
        let allocated = active.allocated;
        let undo = Undo {
            tail: std::mem::replace(&mut state.tail, new_tail),
            submitted_position: start,
            allocated,
            write_end,
        };
        state.submitted_position = end;
        let id = state.next_write_id;
        state.next_write_id += 1;
        state.in_flight.push_back(InFlightWrite {
            id,
            end_position: end,
            done: false,
        });
        (file, path, aligned_start, buffer, end, id, grow_to, undo)
    };
    // Sized to the space there is, down to what this write needs.
    let allocated = match grow_to {
        Some(want) => match file::preallocation_size(&path, undo.allocated, undo.write_end, want) {
            Some(size) => file::preallocate(&file, &path, undo.allocated, size)
                .await
                .map(|()| Some(size)),
            None => Err(StorageError::io(
                "fallocate",
                &path,
                undo.write_end,
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "the write would leave less than {} bytes free",
                        file::SPACE_RESERVE_BYTES
                    ),
                ),
            )),
        },
        None => Ok(None),
    };
    #[cfg(feature = "fault-injection")]
    let allocated = match inner.fail_next_space.replace(false) {
        true => Err(StorageError::io(
            "fallocate",
            &path,
            undo.write_end,
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        )),
        false => allocated,
    };
    match allocated {
        Err(e) => {
            // Nothing of this write went out: the state goes back to before
            // it, so the next attempt writes the same bytes at the same
            // place (and the written frontier never passes what is on disk).
            let mut state = inner.state.borrow_mut();
            state.in_flight.retain(|w| w.id != id);
            state.submitted_position = undo.submitted_position;
            state.tail = undo.tail;
            drop(state);
            inner.changed.notify_all();
            return Err(e);
        }
        Ok(Some(size)) => {
            let mut state = inner.state.borrow_mut();
            let active = state.active_mut();
            active.allocated = active.allocated.max(size);
        }
        Ok(None) => {}
    }
    let task_inner = inner.clone();
    glommio::spawn_local(async move {
        let padded = buffer.len();
        let result = file.write_at(buffer, aligned_start).await;
        let outcome = match result {
            Ok(written) if written == padded => Ok(()),
            Ok(written) => Err(StorageError::io(
                "write",
                &path,
                aligned_start + written as u64,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short O_DIRECT write"),
            )),
            Err(e) => Err(StorageError::io("write", &path, aligned_start, e)),
        };
        match outcome {
            Ok(()) => complete_write(&task_inner, id, padded as u64, end),
            Err(e) => fence_inner(&task_inner, e.to_string()),
        }
    })
    .detach();
    Ok(())
}

/// Copies the active segment's bytes `[from, to)` out of the cached
/// batches holding them (searched from `first_offset`) into the start of
/// `out`; returns the position the copy reached (`to` unless the cache
/// lacks some).
fn copy_cached(cache: &BatchCache, first_offset: u64, from: u64, to: u64, out: &mut [u8]) -> u64 {
    let mut at = 0usize;
    let mut position = from;
    for cached in cache.iter_from(first_offset) {
        let batch_end = cached.position + cached.bytes.len() as u64;
        if batch_end <= position {
            continue;
        }
        if cached.position >= to {
            break;
        }
        assert!(
            cached.position <= position,
            "the bytes copied are contiguous in the cache"
        );
        let a = (position - cached.position) as usize;
        let b = (to.min(batch_end) - cached.position) as usize;
        cached.copy_range(&mut out[at..at + b - a], a, b);
        at += b - a;
        position = cached.position + b as u64;
    }
    position
}

/// Marks a write done and advances the written frontier over every write
/// completed in order.
fn complete_write(inner: &Inner, id: u64, padded: u64, _end: u64) {
    let mut state = inner.state.borrow_mut();
    if let Some(slot) = state.in_flight.iter_mut().find(|w| w.id == id) {
        slot.done = true;
    }
    state.stats.writes += 1;
    state.stats.bytes_written += padded;
    let mut written_size = state.active().written_size;
    while state.in_flight.front().is_some_and(|w| w.done) {
        let write = state.in_flight.pop_front().expect("front");
        written_size = written_size.max(write.end_position);
    }
    state.active_mut().written_size = written_size;
    // Batches wholly on disk are written.
    let mut written_offset = state.written_offset;
    let mut released = 0usize;
    for cached in state.cache.iter_from(written_offset) {
        if cached.position + cached.bytes.len() as u64 > written_size {
            break;
        }
        written_offset = cached.last_offset + 1;
        released += cached.bytes.len();
    }
    if written_offset > state.written_offset {
        assert!(
            written_offset <= state.next_offset,
            "written offset {written_offset} past the log end {}",
            state.next_offset
        );
        state.written_offset = written_offset;
        state.pending_bytes -= released;
        state.unsynced_bytes += released as u64;
        state.unsynced_since.get_or_insert_with(Instant::now);
        let cache_max = cache_bytes_max(&inner.config.borrow());
        state.cache.evict(cache_max, written_offset);
    }
    drop(state);
    inner.changed.notify_all();
}

/// Whether the log makes small appends durable through its core's journal
/// now: it is configured to, and the journal's next write has room.
fn journal_on(config: &LogConfig) -> bool {
    config.flush == FlushPolicy::Always && config.journal_bytes > 0 && journal::has_room()
}

/// Whether the active segment's bytes not yet submitted for writing stay
/// below the journal threshold: the writer defers them, the journal takes
/// them.
fn unwritten_is_small(state: &State, config: &LogConfig) -> bool {
    state.active().size - state.submitted_position < journal_keep_bytes(config)
}

/// Whether every byte of the active segment not yet durable fits in one
/// journal record, so a journal round can make them all durable.
fn journal_can_take(state: &State, config: &LogConfig) -> bool {
    state.active().size.saturating_sub(state.durable_position)
        <= (2 * config.journal_bytes).min(journal::record_bytes_max())
}

/// Whether the writer may leave unwritten bytes in memory for the journal
/// to make durable: nothing needs them in the file (closing, a write-out
/// request) and the next journal round can take all the log's bytes that
/// are not durable yet. Without the last condition a deferred tail could
/// wait forever: no journal round would take it and no sync round would
/// cover it.
fn journal_keeps(state: &State, config: &LogConfig) -> bool {
    journal_on(config)
        && !state.closing
        && state.write_out_to <= state.written_offset
        && journal_can_take(state, config)
}

/// The position up to which the writer may write the active segment now.
/// While the journal keeps the log's last bytes, writes end on a page
/// boundary: the partial last page stays in memory (the journal makes it
/// durable) instead of going out as a write of its own now and being
/// rewritten, as a second write, when the page fills. With 1,000
/// partitions that second write was half of all segment writes.
fn write_end(state: &State, config: &LogConfig) -> u64 {
    let size = state.active().size;
    if config.journal_bytes >= PAGE && journal_keeps(state, config) {
        file::align_down(size)
    } else {
        size
    }
}

/// The byte range of the active segment a sync round would hand to the
/// journal, if it can go that way: appends wait to be made durable, no
/// write is in flight (its bytes would be neither on disk nor in the
/// record), the bytes are few, and the cache still holds them all.
fn journal_round(state: &State, config: &LogConfig) -> Option<(u64, u64)> {
    if !journal_on(config)
        || state.durable_offset >= state.next_offset
        || !state.in_flight.is_empty()
        || state.failure.is_some()
        || state.truncating
    {
        return None;
    }
    let (from, to) = (state.durable_position, state.active().size);
    let few = unwritten_is_small(state, config) && journal_can_take(state, config);
    if !few || from >= to {
        return None;
    }
    let first = state
        .cache
        .iter_from(state.durable_offset)
        .find(|c| c.position + c.bytes.len() as u64 > from)?;
    (first.position <= from).then_some((from, to))
}

/// Asks the writer to write out everything up to `offset`, journal or not.
fn request_write_out(inner: &Inner, offset: u64) {
    let mut state = inner.state.borrow_mut();
    if offset > state.write_out_to {
        state.write_out_to = offset;
        drop(state);
        inner.changed.notify_all();
    }
}

impl journal::Participant for Inner {
    fn capture(self: Rc<Self>, journal: &Journal) -> bool {
        let range = {
            let mut state = self.state.borrow_mut();
            state.journal_wanted = false;
            let range = journal_round(&state, &self.config.borrow());
            range.filter(|_| !state.closing && state.journal_capture.is_none())
        };
        let captured = match range {
            Some((from, to)) => match enqueue_journal_record(&self, journal, from, to) {
                Ok((_, capture)) => {
                    self.state.borrow_mut().journal_capture = Some(capture);
                    true
                }
                Err(_) => false,
            },
            None => false,
        };
        if !captured {
            // A full round: the log writes its segment file, as a log does
            // whose record would find the next write full (see
            // `journal::has_room`). Otherwise the writer syncs it its own way.
            if !journal::has_room() {
                let next = self.state.borrow().next_offset;
                request_write_out(&self, next);
            }
            self.changed.notify_all();
        }
        captured
    }

    fn round_ended(&self, outcome: std::result::Result<(), &str>) {
        let capture = {
            let mut state = self.state.borrow_mut();
            state.journal_wanted = false;
            state.journal_capture.take()
        };
        match outcome {
            Ok(()) => {
                if let Some(capture) = capture {
                    apply_journaled(self, capture);
                }
                self.changed.notify_all();
            }
            Err(message) => fence_inner(self, format!("journal write failed: {message}")),
        }
    }

    fn write_out(self: Rc<Self>, offset: u64) -> futures_lite::future::BoxedLocal<()> {
        // Asked now, not on first poll: a retiring chunk asks all its logs
        // before it waits for any.
        request_write_out(&self, offset);
        Box::pin(async move {
            let truncations = self.truncations.get();
            self.changed
                .wait_until(|| {
                    let s = self.state.borrow();
                    s.written_offset >= offset.min(s.next_offset)
                        || s.failure.is_some()
                        || s.closed
                        || self.truncations.get() != truncations
                })
                .await;
        })
    }
}

/// The thread's journal for this log's data directory.
async fn journal_of(inner: &Inner) -> Result<Rc<Journal>> {
    if let Some(journal) = inner.journal.get() {
        return Ok(journal.clone());
    }
    let data_dir = inner.dir.parent().unwrap_or(&inner.dir);
    let journal = Journal::for_data_dir(data_dir).await?;
    Ok(inner.journal.get_or_init(|| journal).clone())
}

/// Voids this log's earlier journal records (before a truncation or a
/// delete) once the tombstone is durable.
async fn journal_tombstone(inner: &Inner) -> Result<()> {
    let journal = journal_of(inner).await?;
    let Some(dir) = journal.relative(&inner.dir) else {
        return Ok(());
    };
    let write =
        journal
            .enqueue(Record::tombstone(dir), None)
            .ctx("journal write", &inner.dir, 0)?;
    journal
        .durable(write)
        .await
        .ctx("journal write", &inner.dir, 0)
}

/// Asks the journal's next round to take this log's bytes not yet durable,
/// when a round can: right after an append, so that a round starting while
/// the produce request waits takes them.
fn want_journal(inner: &Rc<Inner>) {
    let journal = match inner.journal.get() {
        Some(journal) => journal,
        None => {
            // The thread's first sync round through a journal creates it.
            let data_dir = inner.dir.parent().unwrap_or(&inner.dir);
            let Some(journal) = Journal::existing(data_dir) else {
                return;
            };
            inner.journal.get_or_init(|| journal)
        }
    };
    {
        let mut state = inner.state.borrow_mut();
        if state.journal_wanted || journal_round(&state, &inner.config.borrow()).is_none() {
            return;
        }
        // Rounds a test holds or fails are the log's own sync rounds.
        #[cfg(feature = "fault-injection")]
        if inner.fail_next_sync.get() || inner.sync_hold.borrow().holding {
            return;
        }
        state.journal_wanted = true;
    }
    let participant: std::rc::Weak<dyn journal::Participant> = Rc::downgrade(inner) as _;
    if journal.want(participant).is_err() {
        // The journal failed; the log's own sync round reports it.
        inner.state.borrow_mut().journal_wanted = false;
    }
}

/// What a journal record of a log's bytes makes durable once its round
/// ends.
struct JournalCapture {
    /// Every offset below this was appended when the bytes were taken.
    target: u64,
    /// The active segment's bytes below this position were taken.
    to: u64,
    /// The active segment then, and the truncations made before.
    base: u64,
    truncations: u64,
    started: Instant,
}

/// Puts the active segment's bytes `from..to`, straight from the cache,
/// into the journal's next write as one record; returns the write's round.
fn enqueue_journal_record(
    inner: &Rc<Inner>,
    journal: &Journal,
    from: u64,
    to: u64,
) -> Result<(u64, JournalCapture)> {
    let started = Instant::now();
    let state = inner.state.borrow();
    let active = state.active();
    let Some(relative) = journal.relative(&active.path) else {
        return Err(StorageError::io(
            "journal",
            &active.path,
            from,
            std::io::Error::other("segment file outside the data directory"),
        ));
    };
    let participant: std::rc::Weak<dyn journal::Participant> = Rc::downgrade(inner) as _;
    let fill = |out: &mut [u8]| {
        let position = copy_cached(&state.cache, state.durable_offset, from, to, out);
        assert_eq!(
            position, to,
            "the cache holds every byte a journal round needs"
        );
    };
    let record = Record::Data {
        path: relative,
        position: from,
        len: (to - from) as usize,
        fill,
    };
    let write = journal
        .enqueue(record, Some((participant, state.next_offset)))
        .ctx("journal write", &active.path, from)?;
    let capture = JournalCapture {
        target: state.next_offset,
        to,
        base: active.base_offset,
        truncations: inner.truncations.get(),
        started,
    };
    Ok((write, capture))
}

/// A durable offset past the log end would acknowledge records that were
/// never appended: checked in release builds too.
fn assert_durable_within_log(state: &State) {
    assert!(
        state.durable_offset <= state.next_offset,
        "durable offset {} past the log end {}",
        state.durable_offset,
        state.next_offset
    );
}

/// Makes what a journal round took durable in the log's state, unless a
/// truncation or a roll has come between.
fn apply_journaled(inner: &Inner, capture: JournalCapture) {
    let mut state = inner.state.borrow_mut();
    if inner.truncations.get() == capture.truncations && state.active().base_offset == capture.base
    {
        state.durable_offset = state.durable_offset.max(capture.target);
        state.durable_position = state.durable_position.max(capture.to);
        assert_durable_within_log(&state);
    }
    record_sync(&mut state, capture.started.elapsed().as_micros() as u64);
    if state.durable_offset >= state.written_offset {
        state.unsynced_since = None;
    }
}

/// A sync round through the journal: the bytes of the active segment not
/// yet durable go into one record of the core's next journal write.
async fn journal_sync_round(
    inner: &Rc<Inner>,
    journal: &Rc<Journal>,
    from: u64,
    to: u64,
) -> Result<()> {
    let path = inner.state.borrow().active().path.clone();
    let (write, capture) = enqueue_journal_record(inner, journal, from, to)?;
    journal
        .durable(write)
        .await
        .ctx("journal write", &path, from)?;
    held_by_test(inner).await;
    apply_journaled(inner, capture);
    Ok(())
}

/// Marks a truncation under way for as long as it lives.
struct Truncating<'a>(&'a Inner);

impl<'a> Truncating<'a> {
    fn new(inner: &'a Inner) -> Self {
        inner.state.borrow_mut().truncating = true;
        Self(inner)
    }
}

impl Drop for Truncating<'_> {
    fn drop(&mut self) {
        self.0.state.borrow_mut().truncating = false;
        self.0.changed.notify_all();
    }
}

/// Holds a finished round before it takes effect while a test asks (see
/// [`Log::hold_syncs`]).
async fn held_by_test(_inner: &Inner) {
    #[cfg(feature = "fault-injection")]
    if _inner.sync_hold.borrow().holding {
        let inner = _inner;
        inner.sync_hold.borrow_mut().waiting += 1;
        inner
            .changed
            .wait_until(|| {
                let hold = inner.sync_hold.borrow();
                !hold.holding || hold.passes > 0
            })
            .await;
        let mut hold = inner.sync_hold.borrow_mut();
        hold.waiting -= 1;
        hold.passes = hold.passes.saturating_sub(1);
    }
}

fn record_sync(state: &mut State, sync_us: u64) {
    state.stats.syncs += 1;
    state.stats.sync_latency_us_total += sync_us;
    let bucket = SYNC_LATENCY_BOUNDS_US.partition_point(|bound| *bound < sync_us);
    state.stats.sync_latency_buckets[bucket] += 1;
}

/// Sync rounds held by a test (see [`Log::hold_syncs`]).
#[cfg(feature = "fault-injection")]
#[derive(Default)]
struct SyncHold {
    holding: bool,
    /// Held rounds allowed to finish.
    passes: u64,
    waiting: u32,
}

/// Starts a sync round as its own task, so the writer goes on submitting
/// the appends that arrive meanwhile: when the round ends, their writes
/// have landed and the next round can start at once.
fn start_sync_round(inner: &Rc<Inner>) {
    inner.state.borrow_mut().sync_running = true;
    let inner = inner.clone();
    glommio::spawn_local(async move {
        let outcome = sync_round(&inner).await;
        inner.state.borrow_mut().sync_running = false;
        // One wake-up for both what the round made durable and the writer,
        // which may start the next round.
        match outcome {
            Ok(()) => inner.changed.notify_all(),
            Err(e) => fence_inner(&inner, e.to_string()),
        }
    })
    .detach();
}

/// One fdatasync (or shared syncfs) covering everything written when it
/// starts (group commit), or a journal round when that can serve.
async fn sync_round(inner: &Rc<Inner>) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    if inner.fail_next_sync.replace(false) {
        let path = inner.state.borrow().active().path.clone();
        return Err(StorageError::io(
            "fdatasync",
            &path,
            0,
            std::io::Error::from_raw_os_error(libc::EIO),
        ));
    }
    if journal_round(&inner.state.borrow(), &inner.config.borrow()).is_some() {
        match journal_of(inner).await {
            Ok(journal) => {
                // Looked at again: the journal's creation may have let a
                // roll in.
                let journaled = journal_round(&inner.state.borrow(), &inner.config.borrow());
                if let Some((from, to)) = journaled {
                    return journal_sync_round(inner, &journal, from, to).await;
                }
            }
            // Too little space for a journal: the log syncs its segment
            // file, and its writer (no longer deferring to a journal, see
            // `journal::has_room`) writes what the journal would have held.
            Err(e) if e.is_out_of_space() => {
                inner.changed.notify_all();
            }
            Err(e) => return Err(e),
        }
    }
    let (file, path, target, bytes, position, base) = {
        let state = inner.state.borrow();
        let active = state.active();
        (
            active.file.clone(),
            active.path.clone(),
            state.written_offset,
            state.unsynced_bytes,
            active.written_size,
            active.base_offset,
        )
    };
    let sync_started = Instant::now();
    // A truncation during the round sets the durable offset itself (it
    // syncs the cut); offsets past the cut may be new, unsynced appends.
    let truncations = inner.truncations.get();
    let scope = inner.config.borrow().flush_scope;
    match scope {
        FlushScope::File => file.fdatasync().await.ctx("fdatasync", &path, 0)?,
        FlushScope::Filesystem => {
            let group = match inner.fs_sync.get() {
                Some(group) => group.clone(),
                None => {
                    let group = FsSync::for_dir(&inner.dir).ctx("open", &inner.dir, 0)?;
                    inner.fs_sync.get_or_init(|| group).clone()
                }
            };
            group.sync().await.ctx("syncfs", &inner.dir, 0)?;
        }
    }
    held_by_test(inner).await;
    let sync_us = sync_started.elapsed().as_micros() as u64;
    let mut state = inner.state.borrow_mut();
    if inner.truncations.get() == truncations {
        state.durable_offset = state.durable_offset.max(target);
        if state.active().base_offset == base {
            state.durable_position = state.durable_position.max(position);
        }
        assert_durable_within_log(&state);
    }
    record_sync(&mut state, sync_us);
    state.unsynced_bytes = state.unsynced_bytes.saturating_sub(bytes);
    if state.durable_offset >= state.written_offset {
        state.unsynced_since = None;
    }
    Ok(())
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
