//! Log compaction: keep the latest record of every key.
//!
//! A cleaning works on the log's *cleanable* segments: sealed ones (never
//! the active segment), wholly below the bound the caller gives (the high
//! watermark: a record that may still be truncated away must not make an
//! older value of its key go), and old enough for `min.compaction.lag.ms`.
//! Of those, the part from the *first dirty offset* on has not been
//! cleaned yet.
//!
//! 1. A key map of the dirty part: for each key (a 128-bit hash of it) the
//!    offset of its latest record, at most `key_map_entries_max` keys; a
//!    dirty part that does not fit is cleaned in several passes (this one
//!    stops at the last batch that fit).
//! 2. Every cleanable segment from the log start to the end of what was
//!    mapped is copied, in groups of consecutive segments that fit
//!    `segment.bytes`, into one new segment per group, keeping a record
//!    unless the map holds a later offset for its key. Tombstones (null
//!    values) are kept until `delete.retention.ms` after the cleaning that
//!    first saw them (the *horizons* below), then removed; a batch left
//!    without records is removed unless the caller asks to keep it (the
//!    last batch of an idempotent producer), in which case its header stays.
//!    Offsets never change: readers skip the gaps.
//! 3. The swap, crash-safe: the new segments are written as `*.cleaned`
//!    files and synced; then a marker file `strom.cleaning` naming the
//!    segments replaced and the new ones is written and synced (from here
//!    the cleaning counts as done); the old files are removed, the new ones
//!    renamed into place, the marker removed. Opening a log finishes a swap
//!    whose marker exists and deletes `*.cleaned` files without one, so a
//!    crash at any point leaves the old segments or the new ones, never a
//!    mix.
//!
//! What was cleaned and when is kept in `strom.cleaner`: the first dirty
//! offset and, per cleaning, the offset it reached and the time it ran, so
//! that a tombstone's age counts from the first cleaning that saw it.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::DmaFile;
use protocol::batch::{BatchHeader, HEADER_LEN};
use protocol::compact::{self, RawRecord};
use tracing::{info, warn};

use crate::error::{IoContext, Result, StorageError};
use crate::file;
use crate::segment::{self, Segment};

use super::journal_link::journal_tombstone;
use super::truncate::Truncating;
use super::*;

/// The cleaner's record of one log (see the module documentation).
pub const CLEANER_FILE: &str = "strom.cleaner";
/// The swap marker (see the module documentation).
pub const SWAP_MARKER_FILE: &str = "strom.cleaning";
const CLEANED_SUFFIX: &str = "cleaned";
const CLEANER_MAGIC: &[u8; 4] = b"STCL";
const SWAP_MAGIC: &[u8; 4] = b"STSW";
/// Horizons kept at most; older ones are merged (their tombstones are the
/// oldest, so merging only makes them wait a little longer).
const HORIZONS_MAX: usize = 64;
/// The cleaner reads segments this much at a time, and lets the core's
/// other work run after each window (a window's records take well under a
/// millisecond of CPU).
const READ_WINDOW_BYTES: usize = 256 << 10;
/// The cleaner writes a new segment this much at a time.
const WRITE_BYTES: usize = 1 << 20;
/// What one record section may decompress to while cleaning.
const DECOMPRESSED_BYTES_MAX: usize = 64 << 20;

/// What the caller decides for one cleaning.
#[derive(Debug, Clone)]
pub struct CleanOptions {
    /// Only offsets below this are cleaned (the high watermark).
    pub clean_below: u64,
    /// Wall-clock now, ms.
    pub now_ms: i64,
    /// `min.compaction.lag.ms`: segments with records younger stay dirty.
    pub min_compaction_lag_ms: i64,
    /// `delete.retention.ms`: how long tombstones outlive their first cleaning.
    pub delete_retention_ms: i64,
    /// Keys the map holds at most (the dedupe buffer divided by an entry).
    pub key_map_entries_max: usize,
    /// Base offsets of batches kept even when no record of them remains.
    pub keep_batches: HashSet<u64>,
    /// The log's aborted transactions (the partition's producer state
    /// knows them): their records are removed, and their markers once
    /// `delete.retention.ms` has passed.
    pub aborted: Vec<AbortedRange>,
    /// What the cleaning reads and writes at most per second
    /// (`f64::INFINITY` or `f64::MAX`: unbounded).
    pub io_bytes_per_second: f64,
}

/// Paces a cleaning's I/O to a rate: after each read or write, sleeps
/// until the bytes so far are within the rate since the start.
struct Pace {
    rate: f64,
    started: std::time::Instant,
    bytes: std::cell::Cell<u64>,
}

impl Pace {
    fn new(rate: f64) -> Self {
        Self {
            rate,
            started: std::time::Instant::now(),
            bytes: std::cell::Cell::new(0),
        }
    }

    async fn spent(&self, bytes: u64) {
        self.bytes.set(self.bytes.get() + bytes);
        if !(self.rate > 0.0 && self.rate < 1e15) {
            return;
        }
        let due = std::time::Duration::from_secs_f64(self.bytes.get() as f64 / self.rate);
        let elapsed = self.started.elapsed();
        if due > elapsed {
            glommio::timer::sleep(due - elapsed).await;
        }
    }
}

/// An aborted transaction of a producer: its first offset in the log and
/// the offset of its abort marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedRange {
    pub producer_id: i64,
    pub first_offset: u64,
    pub marker_offset: u64,
}

/// The aborted transactions of a cleaning, by producer, in offset order.
struct Aborted {
    by_producer: HashMap<i64, Vec<(u64, u64)>>,
}

impl Aborted {
    fn new(ranges: &[AbortedRange]) -> Self {
        let mut by_producer: HashMap<i64, Vec<(u64, u64)>> = HashMap::new();
        for range in ranges {
            by_producer
                .entry(range.producer_id)
                .or_default()
                .push((range.first_offset, range.marker_offset));
        }
        for ranges in by_producer.values_mut() {
            ranges.sort_unstable();
        }
        Aborted { by_producer }
    }

    /// Whether `header` is a data batch of an aborted transaction (one
    /// producer's transactions do not overlap: the last to start at or
    /// before the batch is the only candidate).
    fn holds(&self, header: &BatchHeader) -> bool {
        if !header.is_transactional() || header.is_control() {
            return false;
        }
        let base = header.base_offset as u64;
        self.by_producer
            .get(&header.producer_id)
            .is_some_and(|ranges| {
                let i = ranges.partition_point(|(first, _)| *first <= base);
                i > 0 && base < ranges[i - 1].1
            })
    }
}

/// What one cleaning did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    /// The first dirty offset before and after.
    pub dirty_from: u64,
    pub cleaned_to: u64,
    pub segments_before: usize,
    pub segments_after: usize,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    pub tombstones_removed: u64,
    /// Of the records removed, those of aborted transactions.
    pub aborted_records_removed: u64,
    /// The transaction markers removed: (producer id, offset).
    pub markers_removed: Vec<(i64, u64)>,
}

/// The cleanable part of a log, for scheduling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cleanable {
    /// Bytes of cleanable segments already cleaned, and not yet.
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    /// The first dirty offset, and the end of the cleanable part.
    pub dirty_from: u64,
    pub end: u64,
}

impl Cleanable {
    /// `dirty / (clean + dirty)`, 0 when nothing is cleanable.
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// The persisted record of cleanings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct CleanerRecord {
    pub first_dirty: u64,
    /// Tombstones below this whose time was up have been removed.
    pub swept_to: u64,
    /// `(end, cleaned_at_ms)`, ascending: records below `end` (and at or
    /// above the previous end) were first seen by a cleaning at that time.
    pub horizons: Vec<(u64, i64)>,
}

impl CleanerRecord {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + 16 * self.horizons.len());
        out.extend_from_slice(CLEANER_MAGIC);
        out.extend_from_slice(&self.first_dirty.to_be_bytes());
        out.extend_from_slice(&self.swept_to.to_be_bytes());
        out.extend_from_slice(&(self.horizons.len() as u32).to_be_bytes());
        for (end, at) in &self.horizons {
            out.extend_from_slice(&end.to_be_bytes());
            out.extend_from_slice(&at.to_be_bytes());
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 28 || &bytes[..4] != CLEANER_MAGIC {
            return None;
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return None;
        }
        let first_dirty = u64::from_be_bytes(body[4..12].try_into().ok()?);
        let swept_to = u64::from_be_bytes(body[12..20].try_into().ok()?);
        let count = u32::from_be_bytes(body[20..24].try_into().ok()?) as usize;
        if body.len() != 24 + 16 * count {
            return None;
        }
        let horizons = (0..count)
            .map(|i| {
                let at = 24 + 16 * i;
                (
                    u64::from_be_bytes(body[at..at + 8].try_into().expect("8 bytes")),
                    i64::from_be_bytes(body[at + 8..at + 16].try_into().expect("8 bytes")),
                )
            })
            .collect();
        Some(Self {
            first_dirty,
            swept_to,
            horizons,
        })
    }

    pub(super) async fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(CLEANER_FILE);
        Ok(match file::read_whole(&path).await? {
            None => Self::default(),
            Some(bytes) => Self::decode(&bytes).unwrap_or_else(|| {
                // Only tombstones wait longer: everything counts as dirty.
                warn!(path = %path.display(), "damaged cleaner record ignored: the log is cleaned from its start");
                Self::default()
            }),
        })
    }

    async fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(CLEANER_FILE);
        let tmp = dir.join(format!("{CLEANER_FILE}.tmp"));
        file::write_whole(&tmp, &self.encode()).await?;
        std::fs::rename(&tmp, &path).ctx("rename", &path, 0)?;
        file::sync_dir(dir).await
    }

    /// When the cleaning that first saw `offset` ran, if one did.
    fn first_cleaned_ms(&self, offset: u64) -> Option<i64> {
        let i = self.horizons.partition_point(|(end, _)| *end <= offset);
        self.horizons.get(i).map(|(_, at)| *at)
    }

    /// The end of the tombstones whose time is up at `now_ms`.
    fn expired_to(&self, now_ms: i64, delete_retention_ms: i64) -> u64 {
        self.horizons
            .iter()
            .filter(|(_, at)| at.saturating_add(delete_retention_ms.max(0)) <= now_ms)
            .map(|(end, _)| *end)
            .max()
            .unwrap_or(0)
    }

    fn cleaned(&mut self, to: u64, now_ms: i64) {
        if to > self.first_dirty {
            self.horizons.push((to, now_ms));
            self.first_dirty = to;
        }
        while self.horizons.len() > HORIZONS_MAX {
            // Merge the two oldest: the later time covers both.
            let (end, at) = self.horizons.remove(1);
            self.horizons[0] = (end, at.max(self.horizons[0].1));
        }
    }
}

/// The swap marker: the bases of the segments replaced and of those
/// replacing them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapMarker {
    pub old: Vec<u64>,
    pub new: Vec<u64>,
}

impl SwapMarker {
    /// The marker file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(SWAP_MAGIC);
        for list in [&self.old, &self.new] {
            out.extend_from_slice(&(list.len() as u32).to_be_bytes());
            for base in list {
                out.extend_from_slice(&base.to_be_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < 16 || &bytes[..4] != SWAP_MAGIC {
            return None;
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return None;
        }
        let mut at = 4;
        let mut list = || -> Option<Vec<u64>> {
            let count = u32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?) as usize;
            at += 4;
            let mut out = Vec::with_capacity(count.min(1 << 16));
            for _ in 0..count {
                out.push(u64::from_be_bytes(body.get(at..at + 8)?.try_into().ok()?));
                at += 8;
            }
            Some(out)
        };
        let old = list()?;
        let new = list()?;
        Some(Self { old, new })
    }
}

/// How long the files a cleaning replaced stay (renamed `*.deleted`)
/// before they are removed: readers that opened them before the swap
/// finish first (Kafka's `file.delete.delay.ms` plays this part).
const DELETE_DELAY: std::time::Duration = std::time::Duration::from_secs(5);
const DELETED_SUFFIX: &str = "deleted";

fn deleted_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .expect("a segment file has a name")
        .to_os_string();
    name.push(".");
    name.push(DELETED_SUFFIX);
    path.with_file_name(name)
}

fn cleaned_path(dir: &Path, base: u64, ext: &str) -> PathBuf {
    dir.join(format!(
        "{}.{CLEANED_SUFFIX}",
        segment::file_name(base, ext)
    ))
}

/// Finishes a swap whose marker exists, or removes the files of a cleaning
/// that never reached its marker; before the segments are listed at open.
pub(super) fn finish_or_undo_swap(dir: &Path) -> Result<()> {
    let marker_path = dir.join(SWAP_MARKER_FILE);
    let marker = match std::fs::read(&marker_path) {
        Ok(bytes) => SwapMarker::decode(&bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(StorageError::io("read", &marker_path, 0, e)),
    };
    let remove = |path: &Path| match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", path, 0, e)),
    };
    if let Some(marker) = &marker {
        // Idempotent: a base whose cleaned file is still there has its old
        // files (or none) in place; once renamed, the final name is new.
        for base in &marker.old {
            if marker.new.contains(base) {
                continue;
            }
            for path in Segment::paths(dir, *base) {
                remove(&path)?;
            }
        }
        for base in &marker.new {
            let finals = Segment::paths(dir, *base);
            for (ext, final_path) in ["log", "index", "timeindex"].iter().zip(finals.iter()) {
                let cleaned = cleaned_path(dir, *base, ext);
                if cleaned.exists() {
                    std::fs::rename(&cleaned, final_path).ctx("rename", &cleaned, 0)?;
                }
            }
        }
        sync_dir_now(dir)?;
        info!(dir = %dir.display(), replaced = marker.old.len(), segments = marker.new.len(), "finished the swap of a cleaning interrupted by a stop");
    } else if marker_path.exists() {
        warn!(path = %marker_path.display(), "damaged cleaning marker: the cleaning is undone");
    }
    // Anything cleaned and not swapped in is a cleaning undone; files a
    // finished cleaning set aside go now.
    let entries = std::fs::read_dir(dir).ctx("list directory", dir, 0)?;
    let mut undone = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().is_some_and(|n| n.ends_with(CLEANED_SUFFIX)) {
            remove(&entry.path())?;
            undone += 1;
        } else if name.to_str().is_some_and(|n| n.ends_with(DELETED_SUFFIX)) {
            remove(&entry.path())?;
        }
    }
    if undone > 0 && marker.is_none() {
        info!(dir = %dir.display(), files = undone, "removed the files of a cleaning interrupted before its swap");
    }
    remove(&marker_path)?;
    sync_dir_now(dir)
}

fn sync_dir_now(dir: &Path) -> Result<()> {
    let handle = std::fs::File::open(dir).ctx("open directory", dir, 0)?;
    handle.sync_all().ctx("fsync directory", dir, 0)
}

/// A 128-bit hash of a key: two independent 64-bit SipHashes.
fn key_hash(key: &[u8]) -> u128 {
    let mut a = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0x0053_5452_4f4d_u64.hash(&mut b);
    key.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// A sealed segment as the cleaner sees it.
#[derive(Clone)]
struct Source {
    base: u64,
    next_offset: u64,
    size: u64,
    file: Rc<DmaFile>,
    path: PathBuf,
}

/// Calls `each(position, batch)` for every batch of `source` in order.
async fn for_each_batch(
    source: &Source,
    pace: &Pace,
    mut each: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<u64> {
    let mut position = 0u64;
    let mut read = 0u64;
    while position < source.size {
        let want = (source.size - position).min(READ_WINDOW_BYTES as u64) as usize;
        let window =
            source
                .file
                .read_at(position, want)
                .await
                .ctx("read", &source.path, position)?;
        read += window.len() as u64;
        pace.spent(window.len() as u64).await;
        glommio::executor().yield_task_queue_now().await;
        let mut at = 0usize;
        while at < window.len() {
            let rest = &window[at..];
            let header = BatchHeader::parse(rest).map_err(|e| StorageError::Corrupt {
                path: source.path.clone(),
                position: position + at as u64,
                reason: e.to_string(),
            });
            let header = match header {
                Ok(header) => header,
                // A header cut by the window: read again from it.
                Err(_)
                    if rest.len() < HEADER_LEN
                        && position + (at + HEADER_LEN) as u64 <= source.size =>
                {
                    break
                }
                Err(e) => return Err(e),
            };
            if header.size() > rest.len() {
                if at == 0 {
                    // One batch larger than the window: read it whole.
                    let whole = source.file.read_at(position, header.size()).await.ctx(
                        "read",
                        &source.path,
                        position,
                    )?;
                    if whole.len() < header.size() {
                        return Err(StorageError::Corrupt {
                            path: source.path.clone(),
                            position,
                            reason: "batch runs past the end of the segment".into(),
                        });
                    }
                    read += whole.len() as u64;
                    each(position, &whole[..header.size()])?;
                    at = header.size();
                }
                break;
            }
            each(position + at as u64, &rest[..header.size()])?;
            at += header.size();
        }
        if at == 0 {
            return Err(StorageError::Corrupt {
                path: source.path.clone(),
                position,
                reason: "no whole batch where one should start".into(),
            });
        }
        position += at as u64;
    }
    Ok(read)
}

/// A segment being written by the cleaner: O_DIRECT writes of whole pages,
/// the last one cut to the exact size; indexes built as the log builds them.
struct CleanedSegment {
    segment: Segment,
    file: DmaFile,
    path: PathBuf,
    pending: Vec<u8>,
    flushed: u64,
    index_interval_bytes: u64,
}

impl CleanedSegment {
    async fn create(dir: &Path, base: u64, index_interval_bytes: u64) -> Result<Self> {
        let path = cleaned_path(dir, base, "log");
        let file = file::open_rw(&path).await?;
        file.truncate(0).await.ctx("truncate", &path, 0)?;
        let handle = Rc::new(file::open_rw(&path).await?);
        let mut segment = Segment::create_detached(handle, path.clone(), base);
        segment.opened_ms = 0;
        Ok(Self {
            segment,
            file,
            path,
            pending: Vec::with_capacity(WRITE_BYTES),
            flushed: 0,
            index_interval_bytes,
        })
    }

    async fn push(&mut self, batch: &[u8]) -> Result<()> {
        let header = BatchHeader::parse(batch)?;
        let position = self.segment.size;
        self.segment.track_batch(
            &header,
            position,
            batch.len() as u64,
            self.index_interval_bytes,
        );
        self.pending.extend_from_slice(batch);
        if self.pending.len() >= WRITE_BYTES {
            self.write_pages(false).await?;
            glommio::executor().yield_task_queue_now().await;
        }
        Ok(())
    }

    /// Writes the whole pages pending (and, at the end, the last partial
    /// one padded, then cut to size).
    async fn write_pages(&mut self, last: bool) -> Result<()> {
        let whole = if last {
            file::align_up(self.pending.len() as u64) as usize
        } else {
            file::align_down(self.pending.len() as u64) as usize
        };
        if whole == 0 {
            return Ok(());
        }
        let mut buf = self.file.alloc_dma_buffer(whole);
        let take = whole.min(self.pending.len());
        let dst = buf.as_bytes_mut();
        dst[..take].copy_from_slice(&self.pending[..take]);
        dst[take..].fill(0);
        let written =
            self.file
                .write_at(buf, self.flushed)
                .await
                .ctx("write", &self.path, self.flushed)?;
        if written != whole {
            return Err(StorageError::io(
                "write",
                &self.path,
                self.flushed,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short write"),
            ));
        }
        self.pending.drain(..take);
        self.flushed += take as u64;
        Ok(())
    }

    /// Writes what is pending, cuts the file to its size, syncs it and
    /// writes its indexes as `*.cleaned` files.
    async fn finish(mut self, dir: &Path) -> Result<Segment> {
        self.write_pages(true).await?;
        let size = self.segment.size;
        self.file
            .truncate(size)
            .await
            .ctx("truncate", &self.path, size)?;
        self.file
            .fdatasync()
            .await
            .ctx("fdatasync", &self.path, 0)?;
        self.file.close().await.ctx("close", &self.path, 0)?;
        self.segment.finish_time_index();
        self.segment.written_size = size;
        self.segment.allocated = size;
        let base = self.segment.base_offset;
        file::write_whole(
            &cleaned_path(dir, base, "index"),
            &self.segment.index.encode(),
        )
        .await?;
        file::write_whole(
            &cleaned_path(dir, base, "timeindex"),
            &self.segment.time_index.encode(),
        )
        .await?;
        Ok(self.segment)
    }
}

impl Log {
    /// The cleanable part of the log under `options`' bounds (see the
    /// module documentation), with the cleaner's record.
    async fn cleanable_sources(
        &self,
        clean_below: u64,
        now_ms: i64,
        min_lag_ms: i64,
    ) -> Result<(Vec<Source>, CleanerRecord, u64)> {
        let record = self.cleaner_record().await?;
        let s = self.inner.state.borrow();
        let young_after = now_ms.saturating_sub(min_lag_ms.max(0));
        let mut sources = Vec::new();
        for segment in &s.segments[..s.segments.len() - 1] {
            if segment.next_offset > clean_below || segment.max_timestamp > young_after {
                break;
            }
            sources.push(Source {
                base: segment.base_offset,
                next_offset: segment.next_offset,
                size: segment.size,
                file: segment.file.clone(),
                path: segment.path.clone(),
            });
        }
        let first_dirty = record.first_dirty.max(s.log_start_offset);
        Ok((sources, record, first_dirty))
    }

    /// Where the cleaner has got to: offsets below were cleaned at least
    /// once (0 for a log never cleaned).
    pub async fn cleaned_to(&self) -> Result<u64> {
        Ok(self.cleaner_record().await?.first_dirty)
    }

    /// The cleaner's record, read once and kept.
    async fn cleaner_record(&self) -> Result<CleanerRecord> {
        let cached = self.inner.cleaner_record.borrow().clone();
        match cached {
            Some(record) => Ok(record),
            None => {
                let record = CleanerRecord::read(&self.inner.dir).await?;
                *self.inner.cleaner_record.borrow_mut() = Some(record.clone());
                Ok(record)
            }
        }
    }

    /// How much of the log is cleanable and how much of that is dirty.
    pub async fn cleanable(
        &self,
        clean_below: u64,
        now_ms: i64,
        min_lag_ms: i64,
    ) -> Result<Cleanable> {
        let (sources, _, first_dirty) = self
            .cleanable_sources(clean_below, now_ms, min_lag_ms)
            .await?;
        let mut out = Cleanable {
            dirty_from: first_dirty,
            end: sources.last().map_or(first_dirty, |s| s.next_offset),
            ..Cleanable::default()
        };
        for source in &sources {
            if source.next_offset <= first_dirty {
                out.clean_bytes += source.size;
            } else {
                out.dirty_bytes += source.size;
            }
        }
        Ok(out)
    }

    /// Cleans the log once (see the module documentation); `None` when
    /// nothing is dirty. One cleaning of a log at a time.
    pub async fn clean(&self, options: &CleanOptions) -> Result<Option<CleanOutcome>> {
        let _one =
            self.inner
                .clean_lock
                .acquire_permit(1)
                .await
                .map_err(|_| StorageError::Closed {
                    path: self.inner.dir.clone(),
                })?;
        let (sources, mut record, first_dirty) = self
            .cleanable_sources(
                options.clean_below,
                options.now_ms,
                options.min_compaction_lag_ms,
            )
            .await?;
        let end = sources.last().map_or(first_dirty, |s| s.next_offset);
        // Tombstones whose time is up, not removed yet, also call for a pass.
        let expired_to = record
            .expired_to(options.now_ms, options.delete_retention_ms)
            .min(end);
        let sweep = expired_to > record.swept_to;
        if (first_dirty >= end && !sweep) || options.key_map_entries_max == 0 {
            return Ok(None);
        }
        let mut outcome = CleanOutcome {
            dirty_from: first_dirty,
            segments_before: sources.len(),
            ..CleanOutcome::default()
        };

        let pace = Pace::new(options.io_bytes_per_second);
        let aborted = Aborted::new(&options.aborted);
        // 1. The key map of the dirty part.
        let mut map: HashMap<u128, u64> = HashMap::new();
        let mut mapped_to = first_dirty;
        let mut full = false;
        for source in sources.iter().filter(|s| s.next_offset > first_dirty) {
            let read = for_each_batch(source, &pace, |_, batch| {
                let header = BatchHeader::parse(batch)?;
                let last = header.last_offset() as u64;
                if full || last < first_dirty {
                    return Ok(());
                }
                if map.len() + header.record_count as usize > options.key_map_entries_max {
                    full = true;
                    return Ok(());
                }
                // An aborted transaction's records are going: none of them
                // may make an older value of its key go.
                if !header.is_control() && !aborted.holds(&header) {
                    for record in compact::raw_records(batch, DECOMPRESSED_BYTES_MAX)? {
                        if let Some(key) = &record.key {
                            map.insert(key_hash(key), record.offset as u64);
                        }
                    }
                }
                mapped_to = last + 1;
                Ok(())
            })
            .await?;
            outcome.bytes_read += read;
            if full {
                break;
            }
        }
        if mapped_to == first_dirty && first_dirty < end {
            warn!(dir = %self.inner.dir.display(), first_dirty, keys_max = options.key_map_entries_max, "a batch has more records than the cleaner's key map holds: raise log.cleaner.dedupe.buffer.size");
            return Ok(None);
        }

        // 2. Copy what is kept, segment group by segment group.
        let config = self.config();
        let interval = u64::from(config.index_interval_bytes);
        let rewrite_to = mapped_to.max(expired_to);
        let rewritten: Vec<&Source> = sources.iter().filter(|s| s.base < rewrite_to).collect();
        let mut groups: Vec<Vec<&Source>> = Vec::new();
        for source in rewritten {
            let fits = groups.last().is_some_and(|group: &Vec<&Source>| {
                let size: u64 = group.iter().map(|s| s.size).sum::<u64>() + source.size;
                size <= config.segment_bytes
                    && source.next_offset - group[0].base < u64::from(u32::MAX)
            });
            if fits {
                groups.last_mut().expect("checked").push(source);
            } else {
                groups.push(vec![source]);
            }
        }
        let mut built: Vec<Segment> = Vec::new();
        let mut replaced: Vec<u64> = Vec::new();
        // Per producer: whether its transaction being read (since its last
        // marker) has a batch in the cleaned log. A marker goes only when
        // none does and its `delete.retention.ms` is up (a consumer that
        // read the transaction's records has had that long to read the
        // marker too), as Kafka's cleaner does.
        let mut txn_output: HashMap<i64, bool> = HashMap::new();
        let marker_expired = |offset: u64| {
            offset < first_dirty
                && record.first_cleaned_ms(offset).is_some_and(|at| {
                    options.now_ms >= at.saturating_add(options.delete_retention_ms.max(0))
                })
        };
        let result: Result<()> = async {
            for group in &groups {
                let base = group[0].base;
                let mut out = CleanedSegment::create(&self.inner.dir, base, interval).await?;
                for source in group {
                    replaced.push(source.base);
                    let mut kept_batches: Vec<Vec<u8>> = Vec::new();
                    let read = for_each_batch(source, &pace, |_, batch| {
                        let header = BatchHeader::parse(batch)?;
                        let base = header.base_offset as u64;
                        if header.is_control() {
                            let had_output =
                                txn_output.remove(&header.producer_id).unwrap_or(false);
                            if base < rewrite_to && !had_output && marker_expired(base) {
                                outcome.markers_removed.push((header.producer_id, base));
                            } else {
                                kept_batches.push(batch.to_vec());
                            }
                            return Ok(());
                        }
                        if header.is_transactional() {
                            txn_output.entry(header.producer_id).or_insert(false);
                        }
                        if base >= rewrite_to {
                            if header.is_transactional() {
                                txn_output.insert(header.producer_id, true);
                            }
                            kept_batches.push(batch.to_vec());
                            return Ok(());
                        }
                        let records = compact::raw_records(batch, DECOMPRESSED_BYTES_MAX)?;
                        let total = records.len();
                        let in_aborted = aborted.holds(&header);
                        if in_aborted {
                            outcome.records_removed += total as u64;
                            outcome.aborted_records_removed += total as u64;
                        }
                        let kept: Vec<RawRecord> = records
                            .into_iter()
                            .filter(|_| !in_aborted)
                            .filter(|r| {
                                let keep =
                                    self::keeps(r, &map, &record, options, first_dirty, mapped_to);
                                if !keep {
                                    outcome.records_removed += 1;
                                    if r.value_is_null {
                                        outcome.tombstones_removed += 1;
                                    }
                                }
                                keep
                            })
                            .collect();
                        let written = if kept.len() == total && !in_aborted {
                            kept_batches.push(batch.to_vec());
                            true
                        } else if !kept.is_empty() || options.keep_batches.contains(&base) {
                            kept_batches.push(compact::rebuild(batch, &kept)?);
                            true
                        } else {
                            false
                        };
                        if written && header.is_transactional() {
                            txn_output.insert(header.producer_id, true);
                        }
                        Ok(())
                    })
                    .await?;
                    outcome.bytes_read += read;
                    for batch in &kept_batches {
                        out.push(batch).await?;
                    }
                    pace.spent(kept_batches.iter().map(|b| b.len() as u64).sum())
                        .await;
                }
                if out.segment.size == 0 {
                    // Nothing left of the group: no segment for it.
                    let path = out.path.clone();
                    drop(out);
                    file::remove(&path).await?;
                    continue;
                }
                let segment = out.finish(&self.inner.dir).await?;
                outcome.bytes_written += segment.size;
                built.push(segment);
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            let _ = finish_or_undo_swap(&self.inner.dir);
            return Err(e);
        }

        // 3. The swap.
        if !self.swap_in(replaced, built, &mut outcome).await? {
            return Ok(None);
        }
        record.cleaned(mapped_to, options.now_ms);
        record.swept_to = record.swept_to.max(expired_to);
        record.write(&self.inner.dir).await?;
        *self.inner.cleaner_record.borrow_mut() = Some(record.clone());
        outcome.cleaned_to = mapped_to;
        info!(
            dir = %self.inner.dir.display(),
            from = outcome.dirty_from,
            to = outcome.cleaned_to,
            segments_before = outcome.segments_before,
            segments_after = outcome.segments_after,
            bytes_read = outcome.bytes_read,
            bytes_written = outcome.bytes_written,
            records_removed = outcome.records_removed,
            tombstones_removed = outcome.tombstones_removed,
            aborted_records_removed = outcome.aborted_records_removed,
            markers_removed = outcome.markers_removed.len(),
            "log cleaned"
        );
        Ok(Some(outcome))
    }

    /// Puts `built` in place of the segments based at `replaced`; `false`
    /// when those changed meanwhile (the cleaning is dropped).
    async fn swap_in(
        &self,
        replaced: Vec<u64>,
        built: Vec<Segment>,
        outcome: &mut CleanOutcome,
    ) -> Result<bool> {
        let dir = self.inner.dir.clone();
        // Retention and a moved log start wait for the swap lock, truncation
        // for the appends lock: the list of segments stays the log's.
        let _swapping = self
            .inner
            .swap_lock
            .acquire_permit(1)
            .await
            .map_err(|_| StorageError::Closed { path: dir.clone() })?;
        if !self.still_listed(&replaced) {
            info!(dir = %dir.display(), "cleaning dropped: its segments changed meanwhile (retention, truncation or DeleteRecords)");
            drop(built);
            finish_or_undo_swap(&dir)?;
            return Ok(false);
        }
        self.void_journal_for_swap().await?;
        let marker = SwapMarker {
            old: replaced.clone(),
            new: built.iter().map(|s| s.base_offset).collect(),
        };
        let marker_path = dir.join(SWAP_MARKER_FILE);
        let marker_tmp = dir.join(format!("{SWAP_MARKER_FILE}.tmp"));
        file::write_whole(&marker_tmp, &marker.encode()).await?;
        std::fs::rename(&marker_tmp, &marker_path).ctx("rename", &marker_tmp, 0)?;
        file::sync_dir(&dir).await?;
        // From here the cleaning is done, whatever happens: the state
        // changes first (under the appends lock, briefly), then the files
        // follow (as an open would do), while appends go on.
        {
            let _permit = self.lock_appends().await?;
            if !self.still_listed(&replaced) {
                // Truncated meanwhile: the marker goes first, so that no
                // open finishes this swap.
                file::remove(&marker_path).await?;
                file::sync_dir(&dir).await?;
                drop(built);
                finish_or_undo_swap(&dir)?;
                info!(dir = %dir.display(), "cleaning dropped: its segments were truncated meanwhile");
                return Ok(false);
            }
            let mut s = self.inner.state.borrow_mut();
            let first = s
                .segments
                .iter()
                .position(|seg| seg.base_offset == replaced[0])
                .expect("checked under the same lock");
            let count = replaced.len();
            let mut built = built;
            for segment in &mut built {
                let base = segment.base_offset;
                segment.path = dir.join(segment::file_name(base, "log"));
            }
            let removed: Vec<Segment> = s.segments.splice(first..first + count, built).collect();
            drop(removed);
            let keep_from = s
                .segments
                .last()
                .expect("a log always has a segment")
                .base_offset;
            let keep_from = keep_from.min(s.written_offset);
            s.cache.drop_below(keep_from);
            outcome.segments_after = outcome.segments_before - count + marker.new.len();
        }
        self.inner.truncations.set(self.inner.truncations.get() + 1);
        self.inner.read_ahead.borrow_mut().take();
        self.inner.changed.notify_all();
        // The old files step aside (renamed `*.deleted`, removed later and
        // gradually: unlinking gigabytes at once stalls the filesystem's
        // journal, and every append's sync with it) and the new ones take
        // their names.
        let mut doomed = Vec::new();
        for base in &marker.old {
            for path in Segment::paths(&dir, *base) {
                let aside = deleted_path(&path);
                match std::fs::rename(&path, &aside) {
                    Ok(()) => doomed.push(aside),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::io("rename", &path, 0, e)),
                }
            }
        }
        for base in &marker.new {
            let finals = Segment::paths(&dir, *base);
            for (ext, final_path) in ["log", "index", "timeindex"].iter().zip(finals.iter()) {
                let cleaned = cleaned_path(&dir, *base, ext);
                std::fs::rename(&cleaned, final_path).ctx("rename", &cleaned, 0)?;
            }
        }
        file::sync_dir(&dir).await?;
        file::remove(&marker_path).await?;
        file::sync_dir(&dir).await?;
        glommio::spawn_local(async move {
            // Readers that took an old segment before the swap are done
            // with it by then.
            glommio::timer::sleep(DELETE_DELAY).await;
            for path in doomed {
                if let Err(error) = file::remove_gradually(&path).await {
                    warn!(path = %path.display(), %error, "removing a cleaned-away segment file failed; the next start removes it");
                }
            }
        })
        .detach();
        Ok(true)
    }

    /// Journal records name a segment file by path and position: one
    /// replayed after a crash into a cleaned segment would write bytes the
    /// cleaning removed back over it. With every byte of the log in its
    /// segment files and synced, a tombstone voids the log's records, as
    /// before a truncation.
    async fn void_journal_for_swap(&self) -> Result<()> {
        if self.inner.journal.get().is_none() {
            return Ok(());
        }
        let _permit = self.lock_appends().await?;
        let _truncating = Truncating::new(&self.inner);
        self.wait_written(self.next_offset()).await?;
        let files: Vec<(Rc<DmaFile>, PathBuf)> = self
            .inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|s| (s.file.clone(), s.path.clone()))
            .collect();
        for (file, path) in files {
            if let Err(e) = file.fdatasync().await.ctx("fdatasync", &path, 0) {
                return Err(self.fence(e));
            }
        }
        journal_tombstone(&self.inner)
            .await
            .map_err(|e| self.fence(e))
    }

    /// Whether every segment based at `bases` is still a sealed one of the log.
    fn still_listed(&self, bases: &[u64]) -> bool {
        let s = self.inner.state.borrow();
        let active = s.segments.len() - 1;
        bases.iter().all(|base| {
            s.segments[..active]
                .iter()
                .any(|seg| seg.base_offset == *base)
        })
    }
}

/// Whether a cleaning keeps `r` (see the module documentation).
fn keeps(
    r: &RawRecord,
    map: &HashMap<u128, u64>,
    record: &CleanerRecord,
    options: &CleanOptions,
    first_dirty: u64,
    mapped_to: u64,
) -> bool {
    let offset = r.offset as u64;
    if offset >= mapped_to {
        return true;
    }
    let Some(key) = &r.key else {
        // Compacted topics refuse records without a key; any from before
        // the topic was compacted stay.
        return true;
    };
    if map
        .get(&key_hash(key))
        .is_some_and(|latest| *latest > offset)
    {
        return false;
    }
    if r.value_is_null && offset < first_dirty {
        // A tombstone an earlier cleaning saw: gone once its time is up.
        if let Some(at) = record.first_cleaned_ms(offset) {
            return options.now_ms < at.saturating_add(options.delete_retention_ms.max(0));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cleaner_record_round_trips_and_merges_its_oldest_horizons() {
        let mut record = CleanerRecord::default();
        for i in 1..=(HORIZONS_MAX as u64 + 3) {
            record.cleaned(i * 10, i as i64 * 1000);
        }
        assert_eq!(record.horizons.len(), HORIZONS_MAX);
        assert_eq!(record.first_dirty, (HORIZONS_MAX as u64 + 3) * 10);
        assert_eq!(
            record.first_cleaned_ms(5),
            Some(4000),
            "merged into a later time"
        );
        assert_eq!(record.first_cleaned_ms(655), Some(66_000));
        assert_eq!(record.first_cleaned_ms(10_000), None);
        record.swept_to = 77;
        let decoded = CleanerRecord::decode(&record.encode()).unwrap();
        assert_eq!(decoded, record);
        let mut damaged = record.encode();
        damaged[9] ^= 1;
        assert_eq!(CleanerRecord::decode(&damaged), None);
    }

    #[test]
    fn the_swap_marker_round_trips_and_refuses_damage() {
        let marker = SwapMarker {
            old: vec![0, 100, 200],
            new: vec![0],
        };
        let bytes = marker.encode();
        assert_eq!(SwapMarker::decode(&bytes), Some(marker));
        assert_eq!(SwapMarker::decode(&bytes[..bytes.len() - 1]), None);
    }

    #[test]
    fn key_hashes_differ_for_different_keys() {
        let hashes: HashSet<u128> = (0..10_000)
            .map(|i| key_hash(format!("k{i}").as_bytes()))
            .collect();
        assert_eq!(hashes.len(), 10_000);
        assert_eq!(key_hash(b"same"), key_hash(b"same"));
    }
}
