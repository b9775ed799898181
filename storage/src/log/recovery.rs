//! Opening a log: recovery of its segments after a clean or an unclean stop.

use std::cell::RefCell;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::sync::Semaphore;
use tracing::{info, warn};

use crate::cache::BatchCache;
use crate::checkpoint::Checkpoint;
use crate::config::LogConfig;
use crate::context::Context;
use crate::error::{IoContext, Result, StorageError};
use crate::file;
use crate::journal;
use crate::segment::{self, Cut, Segment};
use crate::signal::Signal;

use super::shares::OpenLogGuard;
use super::writer::writer_loop;
use super::*;

/// How many of the segments at `bases` hold any bytes: a segment created
/// by a roll just before a crash holds none (or only preallocated zeros).
pub(super) fn segments_holding_data(dir: &Path, bases: &[u64]) -> Result<usize> {
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
    pub async fn open(ctx: &Context, dir: impl Into<PathBuf>, config: LogConfig) -> Result<Log> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).ctx("create directory", &dir, 0)?;
        // glommio resolves relative paths against no directory at all.
        let dir = std::fs::canonicalize(&dir).ctx("resolve directory", &dir, 0)?;
        file::probe_device(&dir, &ctx.shared().probed_devices).await?;
        // Journaled bytes go back into the segment files before any log of
        // the data directory is recovered.
        if let Some(data_dir) = dir.parent() {
            journal::replay_unless_live(data_dir)?;
        }
        let config = config.effective();
        let checkpoint = Checkpoint::read(&dir).await?;
        // A cleaning stopped midway: its swap is finished or undone first.
        super::clean::finish_or_undo_swap(&dir)?;
        let mut bases = list_segments(&dir)?;
        bases.sort_unstable();
        let interval = u64::from(config.index_interval_bytes);
        let (mut segments, report) = Recovery::new(&dir, checkpoint, bases, interval)
            .run()
            .await?;
        if segments.is_empty() {
            let base = checkpoint.map_or(0, |c| c.log_start_offset);
            segments.push(Segment::create(&dir, base).await?);
        }
        // `segment.ms` of a segment without timestamps counts from now.
        let now_ms = ctx.clock().wall_ms();
        for segment in &mut segments {
            segment.opened_ms = now_ms;
        }
        let start_offset = checkpoint.map_or(0, |c| c.log_start_offset);
        let state = opened_state(segments, start_offset, report.clean).await?;
        write_open_checkpoint(&dir, &state).await?;
        // An open with nothing to scan (a clean stop, a new log) is
        // routine: the broker logs one line for all of them. A recovery
        // that scanned segments is worth a line of its own.
        let (clean, scanned) = (report.clean, report.segments_scanned);
        let (start_offset, next_offset) = (state.log_start_offset, state.next_offset);
        let segments = state.segments.len();
        if scanned == 0 {
            tracing::debug!(dir = %dir.display(), clean, start_offset, next_offset, segments, "log opened");
        } else {
            info!(dir = %dir.display(), clean, start_offset, next_offset, segments, scanned, "log opened");
        }
        let inner = Rc::new(Inner {
            dir,
            config: RefCell::new(config),
            state: RefCell::new(state),
            append_lock: super::append::AppendLock::new(1),
            changed: Signal::default(),
            writer: RefCell::new(None),
            recovery: report,
            ctx: ctx.clone(),
            _open: OpenLogGuard::new(ctx),
            fs_sync: std::cell::OnceCell::new(),
            journal: std::cell::OnceCell::new(),
            read_ahead: RefCell::new(None),
            epochs: RefCell::new(crate::epoch_cache::EpochCache::default()),
            epochs_lock: Semaphore::new(1),
            checkpoint_lock: Semaphore::new(1),
            checkpoint_tickets: std::cell::Cell::new(0),
            checkpoint_written: std::cell::Cell::new(0),
            truncations: std::cell::Cell::new(0),
            clean_lock: Semaphore::new(1),
            swap_lock: Semaphore::new(1),
            cleaner_record: RefCell::new(None),
            #[cfg(feature = "fault-injection")]
            fail_next_sync: std::cell::Cell::new(false),
            #[cfg(feature = "fault-injection")]
            fail_next_space: std::cell::Cell::new(false),
            #[cfg(feature = "fault-injection")]
            sync_hold: std::cell::RefCell::new(SyncHold::default()),
        });
        let writer = glommio::spawn_local(writer_loop(inner.clone()));
        *inner.writer.borrow_mut() = Some(writer);
        let log = Log { inner };
        log.load_epochs().await?;
        Ok(log)
    }
}

/// The state of a log just recovered into `segments` (at least one): all
/// of it written and durable (after an unclean stop the active segment is
/// synced first).
async fn opened_state(segments: Vec<Segment>, start_offset: u64, clean: bool) -> Result<State> {
    let active = segments.last().expect("at least one segment");
    let next_offset = active.next_offset;
    let log_start_offset = start_offset.max(segments[0].base_offset).min(next_offset);
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
    Ok(State {
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
        deleting: false,
        closed: false,
        stats: LogStats::default(),
    })
}

/// From the open until a clean close, the next open must not trust the
/// active segment's (absent or stale) index files.
async fn write_open_checkpoint(dir: &Path, state: &State) -> Result<()> {
    let checkpoint = Checkpoint {
        recovery_point: state.recovery_point,
        log_start_offset: state.log_start_offset,
        next_offset: state.next_offset,
        clean: false,
    };
    if let Err(e) = checkpoint.write(dir).await {
        // A full disk must not keep the log from opening for reads. With
        // no checkpoint at all the next open trusts nothing and scans.
        warn!(dir = %dir.display(), error = %e, "could not write the checkpoint; removing it");
        file::remove(&dir.join(crate::checkpoint::FILE_NAME)).await?;
    }
    Ok(())
}

/// The recovery of a log's segments at open: each is loaded as its files
/// say when the checkpoint vouches for it, or scanned batch by batch.
struct Recovery<'a> {
    dir: &'a Path,
    checkpoint: Option<Checkpoint>,
    /// Base offsets of the segment files, sorted.
    bases: Vec<u64>,
    interval: u64,
    segments: Vec<Segment>,
    /// Indexes (into `segments`) of scanned segments whose rebuilt indexes
    /// are written once recovery is done.
    rebuilt: Vec<usize>,
    report: RecoveryReport,
}

impl<'a> Recovery<'a> {
    fn new(dir: &'a Path, checkpoint: Option<Checkpoint>, bases: Vec<u64>, interval: u64) -> Self {
        let report = RecoveryReport {
            clean: checkpoint.is_some_and(|c| c.clean),
            ..RecoveryReport::default()
        };
        Self {
            dir,
            checkpoint,
            segments: Vec::with_capacity(bases.len()),
            bases,
            interval,
            rebuilt: Vec::new(),
            report,
        }
    }

    /// The recovered segments, oldest first (none for a new log).
    async fn run(mut self) -> Result<(Vec<Segment>, RecoveryReport)> {
        let mut i = 0;
        // Bounded: `bases` only shrinks.
        while i < self.bases.len() {
            let segment = match self.load_trusted(i).await? {
                Some(segment) => segment,
                None => self.scan(i).await?,
            };
            self.segments.push(segment);
            i += 1;
        }
        self.write_rebuilt_indexes().await;
        Ok((self.segments, self.report))
    }

    /// Segment `i` as its files say, when the checkpoint vouches for it
    /// (a clean stop, or wholly before the recovery point) and its files
    /// agree; `None` when it must be scanned.
    async fn load_trusted(&self, i: usize) -> Result<Option<Segment>> {
        let (base, checkpoint) = (self.bases[i], self.checkpoint);
        let next_base = self.bases.get(i + 1).copied();
        let is_last = next_base.is_none();
        let recovery_point = checkpoint.map_or(0, |c| c.recovery_point);
        let trusted = self.report.clean || next_base.is_some_and(|nb| nb <= recovery_point);
        if !trusted {
            return Ok(None);
        }
        let (mut segment, problem) = Segment::open_trusted(self.dir, base).await?;
        let clean_end_ok = !is_last
            || checkpoint.is_some_and(|c| c.next_offset >= segment.next_offset)
                && (segment.size > 0 || checkpoint.is_some_and(|c| c.next_offset == base));
        if problem.is_some() || !clean_end_ok {
            info!(
                segment = %segment.path.display(),
                reason = problem.as_deref().unwrap_or("log end not recorded"),
                "rebuilding segment index by scanning"
            );
            return Ok(None);
        }
        if let (true, Some(c)) = (is_last, checkpoint) {
            segment.next_offset = c.next_offset.max(segment.next_offset);
        }
        Ok(Some(segment))
    }

    /// Segment `i` scanned batch by batch; a torn or corrupt tail is cut
    /// off, and the segments after it are dropped (refused when they hold
    /// records: see [`StorageError::CorruptSealed`]).
    async fn scan(&mut self, i: usize) -> Result<Segment> {
        let (dir, base) = (self.dir, self.bases[i]);
        let is_last = i + 1 == self.bases.len();
        self.report.segments_scanned += 1;
        let (mut segment, cut) = Segment::scan_uncut(dir, base, self.interval).await?;
        if let Some(cut) = &cut {
            // A torn write can only be the log's last: corrupt bytes with
            // records after them were acknowledged once, and so were the
            // records after them.
            let holding = segments_holding_data(dir, &self.bases[i + 1..])?;
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
        if let Some(previous) = self.segments.last() {
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
            self.rebuilt.push(self.segments.len());
            segment.finish_time_index();
        }
        if let Some(cut) = cut {
            self.drop_after(i, cut).await?;
        }
        Ok(segment)
    }

    /// After a cut in segment `i`: the segments after it go.
    async fn drop_after(&mut self, i: usize, cut: Cut) -> Result<()> {
        let dropped = self.bases.len() - i - 1;
        if !cut.zero_filled && dropped > 0 {
            warn!(
                dir = %self.dir.display(),
                segments = dropped,
                "recovery: dropping the segments after the corrupt one"
            );
        }
        for &later in &self.bases[i + 1..] {
            Segment::remove_files(self.dir, later).await?;
        }
        self.report.segments_dropped = dropped;
        self.bases.truncate(i + 1);
        let this = self.segments.len();
        self.rebuilt.retain(|&r| r != this);
        self.report.cut = Some(cut);
        Ok(())
    }

    /// A segment that was not last when scanned stays sealed; its rebuilt
    /// indexes are written so the next open trusts it.
    async fn write_rebuilt_indexes(&mut self) {
        for &r in &self.rebuilt {
            if r + 1 < self.segments.len() {
                self.report.indexes_rebuilt += 1;
                // Best effort: on a full disk the rebuilt index stays in
                // memory and the next open rebuilds it again.
                if let Err(e) = self.segments[r].write_indexes(self.dir).await {
                    warn!(dir = %self.dir.display(), error = %e, "could not write a rebuilt index");
                }
            }
        }
    }
}

pub(super) fn list_segments(dir: &Path) -> Result<Vec<u64>> {
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
