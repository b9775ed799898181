//! One segment of a partition log: its `.log` file, in-memory indexes, and
//! the scans that rebuild them (recovery) or check them (clean open).

use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::DmaFile;
use protocol::batch::{self, BatchError, BatchHeader, HEADER_LEN};
use tracing::{info, warn};

use crate::error::{IoContext, Result, StorageError};
use crate::file;
use crate::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use crate::limits::{SCAN_WINDOW_BYTES, TAIL_PROBE_BYTES};

pub(crate) fn file_name(base_offset: u64, extension: &str) -> String {
    format!("{base_offset:020}.{extension}")
}

/// Parses `00000000000000016933.log` into 16933.
pub(crate) fn parse_base_offset(name: &str, extension: &str) -> Option<u64> {
    let stem = name.strip_suffix(extension)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

pub(crate) struct Segment {
    pub base_offset: u64,
    pub file: Rc<DmaFile>,
    pub path: PathBuf,
    /// Logical bytes assigned to batches (written or still pending).
    pub size: u64,
    /// Bytes the writer has completed; disk reads stop here.
    pub written_size: u64,
    /// Offset after the last batch assigned to this segment.
    pub next_offset: u64,
    /// Bytes the file has been grown to by preallocation.
    pub allocated: u64,
    pub index: OffsetIndex,
    pub time_index: TimeIndex,
    pub bytes_since_index: u64,
    /// Largest batch max-timestamp in the segment, -1 when empty.
    pub max_timestamp: i64,
    pub offset_of_max_timestamp: u64,
    /// Max timestamp of the first batch; segment.ms counts from it.
    pub first_timestamp: Option<i64>,
    /// Wall-clock time (ms) the segment was created or opened.
    pub opened_ms: i64,
}

impl Segment {
    pub fn paths(dir: &Path, base_offset: u64) -> [PathBuf; 3] {
        ["log", "index", "timeindex"].map(|ext| dir.join(file_name(base_offset, ext)))
    }

    /// Creates an empty segment file. Space is preallocated by the writer
    /// on its first write, so idle partitions take no disk space.
    pub async fn create(dir: &Path, base_offset: u64) -> Result<Self> {
        let path = dir.join(file_name(base_offset, "log"));
        let file = file::open_rw(&path).await?;
        file.truncate(0).await.ctx("truncate", &path, 0)?;
        file::sync_dir(dir).await?;
        Ok(Self::empty(Rc::new(file), path, base_offset, 0))
    }

    /// An empty segment over an open file that is not (yet) in its log's
    /// directory under its final name: the cleaner's output.
    pub fn create_detached(file: Rc<DmaFile>, path: PathBuf, base_offset: u64) -> Self {
        Self::empty(file, path, base_offset, 0)
    }

    fn empty(file: Rc<DmaFile>, path: PathBuf, base_offset: u64, allocated: u64) -> Self {
        Self {
            base_offset,
            file,
            path,
            size: 0,
            written_size: 0,
            next_offset: base_offset,
            allocated,
            index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            bytes_since_index: 0,
            max_timestamp: -1,
            offset_of_max_timestamp: base_offset,
            first_timestamp: None,
            // The log sets it from its clock (see `Log::open`, `roll`).
            opened_ms: 0,
        }
    }

    pub fn relative(&self, offset: u64) -> u32 {
        u32::try_from(offset - self.base_offset).expect("relative offset fits u32 (rolls before)")
    }

    /// Records a batch of `size` bytes at `position` in the indexes. Used by
    /// appends and scans alike, so a rebuilt index equals the original.
    pub fn track_batch(
        &mut self,
        header: &BatchHeader,
        position: u64,
        size: u64,
        index_interval_bytes: u64,
    ) {
        let last_offset = header.last_offset() as u64;
        if header.max_timestamp > self.max_timestamp {
            self.max_timestamp = header.max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
        self.first_timestamp.get_or_insert(header.max_timestamp);
        if self.index.is_empty() || self.bytes_since_index >= index_interval_bytes {
            self.index.push(OffsetEntry {
                relative_offset: self.relative(last_offset),
                position: u32::try_from(position).expect("segment positions fit u32"),
            });
            self.time_index.maybe_push(TimeEntry {
                timestamp: self.max_timestamp,
                relative_offset: self.relative(self.offset_of_max_timestamp),
            });
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += size;
        self.next_offset = last_offset + 1;
        self.size = position + size;
    }

    /// Adds the final time index entry, as Kafka does when a segment becomes
    /// inactive, so the last entry carries the segment's max timestamp.
    pub fn finish_time_index(&mut self) {
        if self.max_timestamp >= 0 {
            let relative_offset = self.relative(self.offset_of_max_timestamp);
            self.time_index.maybe_push(TimeEntry {
                timestamp: self.max_timestamp,
                relative_offset,
            });
        }
    }

    /// Prepares sealing: the final time index entry and a snapshot of what
    /// the seal writes, so the segment stays in place (visible to readers)
    /// while the I/O runs.
    pub fn prepare_seal(&mut self, dir: &Path) -> SealJob {
        self.finish_time_index();
        let [_, index_path, time_path] = Self::paths(dir, self.base_offset);
        SealJob {
            file: self.file.clone(),
            path: self.path.clone(),
            size: self.size,
            index_path,
            time_path,
            index: self.index.encode(),
            time_index: self.time_index.encode(),
        }
    }

    pub async fn write_indexes(&self, dir: &Path) -> Result<()> {
        let [_, index_path, time_path] = Self::paths(dir, self.base_offset);
        file::write_whole(&index_path, &self.index.encode()).await?;
        file::write_whole(&time_path, &self.time_index.encode()).await
    }

    /// Opens an existing segment, trusting its index files if they are
    /// consistent with the log file. Returns `None` when they are missing or
    /// damaged; the caller then scans.
    pub async fn open_trusted(dir: &Path, base_offset: u64) -> Result<(Self, Option<String>)> {
        let [path, index_path, time_path] = Self::paths(dir, base_offset);
        let file = Rc::new(file::open_rw(&path).await?);
        let size = file.file_size().await.ctx("stat", &path, 0)?;
        let mut segment = Self::empty(file, path, base_offset, size);
        segment.size = size;
        segment.written_size = size;
        let problem = segment.load_indexes(&index_path, &time_path).await.err();
        Ok((segment, problem))
    }

    async fn load_indexes(&mut self, index_path: &Path, time_path: &Path) -> Result<(), String> {
        let index_bytes = file::read_whole(index_path)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("offset index missing")?;
        let time_bytes = file::read_whole(time_path)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("time index missing")?;
        let index = OffsetIndex::decode(&index_bytes, self.size).map_err(|e| e.to_string())?;
        let time_index = TimeIndex::decode(&time_bytes).map_err(|e| e.to_string())?;
        if self.size == 0 {
            if !index.is_empty() || time_index.last().is_some() {
                return Err("index entries for an empty segment".into());
            }
            return Ok(());
        }
        let last = index
            .last()
            .ok_or("offset index empty for a non-empty segment")?;
        // The last entry must point at a batch that ends where it says.
        let header_bytes = self
            .file
            .read_at(last.position.into(), HEADER_LEN)
            .await
            .map_err(|e| e.to_string())?;
        let header = BatchHeader::parse(&header_bytes).map_err(|e| e.to_string())?;
        let expected = self.base_offset + u64::from(last.relative_offset);
        if header.last_offset() < 0 || header.last_offset() as u64 != expected {
            return Err(format!(
                "last index entry names offset {expected}, the batch there ends at {}",
                header.last_offset()
            ));
        }
        if let Some(entry) = time_index.last() {
            self.max_timestamp = entry.timestamp;
            self.offset_of_max_timestamp = self.base_offset + u64::from(entry.relative_offset);
            self.first_timestamp = time_index.entries().first().map(|e| e.timestamp);
        }
        self.next_offset = expected + 1;
        self.index = index;
        self.time_index = time_index;
        // Unknown for a loaded segment; one more interval before the next
        // entry keeps the index sparse, never wrong.
        self.bytes_since_index = 0;
        Ok(())
    }

    /// Scans the log file batch by batch from the start, rebuilding indexes
    /// and stopping at the first invalid batch; the returned cut says what
    /// is invalid from there on, and nothing is cut yet (the caller decides
    /// whether it may be: see [`Segment::apply_cut`]).
    pub async fn scan_uncut(
        dir: &Path,
        base_offset: u64,
        index_interval_bytes: u64,
    ) -> Result<(Self, Option<Cut>)> {
        let path = dir.join(file_name(base_offset, "log"));
        let file = Rc::new(file::open_rw(&path).await?);
        let file_size = file.file_size().await.ctx("stat", &path, 0)?;
        let mut segment = Self::empty(file, path, base_offset, file_size);
        let mut position = 0u64;
        let cut_reason: Option<String> = loop {
            if position == file_size {
                break None;
            }
            let window_len = (file_size - position).min(SCAN_WINDOW_BYTES as u64) as usize;
            let window = segment.file.read_at(position, window_len).await.ctx(
                "read",
                &segment.path,
                position,
            )?;
            let mut consumed = 0usize;
            let mut stop = None;
            while consumed < window.len() {
                let rest = &window[consumed..];
                let at = position + consumed as u64;
                if rest.len() < HEADER_LEN {
                    if at + HEADER_LEN as u64 > file_size {
                        stop = Some(format!("{} bytes too short for a batch header", rest.len()));
                    }
                    break;
                }
                let header = match BatchHeader::parse(rest) {
                    Ok(header) => header,
                    Err(e) => {
                        stop = Some(e.to_string());
                        break;
                    }
                };
                let size = header.size();
                if at + size as u64 > file_size {
                    stop = Some(format!(
                        "batch of {size} bytes runs past the end of the file"
                    ));
                    break;
                }
                if rest.len() < size {
                    if consumed == 0 {
                        // A batch larger than the window: read it whole.
                        let whole =
                            segment
                                .file
                                .read_at(at, size)
                                .await
                                .ctx("read", &segment.path, at)?;
                        if let Err(reason) = segment.accept(&whole, at, index_interval_bytes) {
                            stop = Some(reason);
                            break;
                        }
                        consumed = size;
                    }
                    break;
                }
                if let Err(reason) = segment.accept(&rest[..size], at, index_interval_bytes) {
                    stop = Some(reason);
                    break;
                }
                consumed += size;
            }
            if let Some(reason) = stop {
                break Some(reason);
            }
            if consumed == 0 {
                break Some("no progress while scanning".into());
            }
            position += consumed as u64;
        };
        segment.written_size = segment.size;
        let cut = match cut_reason {
            None => None,
            Some(reason) => Some(segment.probe_tail(reason, file_size).await?),
        };
        segment.allocated = segment.size;
        Ok((segment, cut))
    }

    /// Validates one batch found by a scan and indexes it.
    fn accept(
        &mut self,
        bytes: &[u8],
        position: u64,
        index_interval_bytes: u64,
    ) -> Result<(), String> {
        let header = batch::validate(bytes).map_err(|e: BatchError| e.to_string())?;
        if header.base_offset < 0 || (header.base_offset as u64) < self.next_offset {
            return Err(format!(
                "batch base offset {} is below the expected {}",
                header.base_offset, self.next_offset
            ));
        }
        if header.last_offset() as u64 - self.base_offset > u64::from(u32::MAX) {
            return Err("batch offset too far from the segment base".into());
        }
        self.track_batch(&header, position, bytes.len() as u64, index_interval_bytes);
        Ok(())
    }

    /// Truncates the file after the last valid batch and reports what went.
    /// What cutting the file after the valid batches would remove.
    async fn probe_tail(&self, reason: String, file_size: u64) -> Result<Cut> {
        let cut_bytes = file_size - self.size;
        let probe = (cut_bytes as usize).min(TAIL_PROBE_BYTES);
        let tail = self
            .file
            .read_at(self.size, probe)
            .await
            .ctx("read", &self.path, self.size)?;
        let zero_filled = tail.iter().all(|&b| b == 0);
        Ok(Cut {
            offset: self.next_offset,
            position: self.size,
            bytes: cut_bytes,
            zero_filled,
            reason,
        })
    }

    /// Cuts the file at `cut` (found by [`Segment::scan_uncut`]), and logs it.
    pub async fn apply_cut(&self, cut: &Cut) -> Result<()> {
        file::truncate_and_sync(&self.file, &self.path, cut.position).await?;
        if cut.zero_filled {
            info!(
                segment = %self.path.display(),
                offset = cut.offset,
                position = cut.position,
                bytes = cut.bytes,
                "recovery: dropped zero-filled preallocated tail"
            );
        } else {
            warn!(
                segment = %self.path.display(),
                offset = cut.offset,
                position = cut.position,
                bytes = cut.bytes,
                reason = %cut.reason,
                "recovery: truncated torn or corrupt tail"
            );
        }
        Ok(())
    }

    /// Reads the partial last page of written data, which the next O_DIRECT
    /// write must rewrite.
    pub async fn read_tail_page(&self) -> Result<Vec<u8>> {
        read_tail_page(&self.file, &self.path, self.written_size).await
    }

    pub async fn remove_files(dir: &Path, base_offset: u64) -> Result<()> {
        for path in Self::paths(dir, base_offset) {
            file::remove(&path).await?;
        }
        Ok(())
    }
}

/// The I/O of sealing a segment: cut the preallocated space, sync, write
/// both index files (each synced).
pub(crate) struct SealJob {
    file: Rc<DmaFile>,
    path: PathBuf,
    size: u64,
    index_path: PathBuf,
    time_path: PathBuf,
    index: Vec<u8>,
    time_index: Vec<u8>,
}

impl SealJob {
    pub async fn run(self) -> Result<()> {
        file::truncate_and_sync(&self.file, &self.path, self.size).await?;
        file::write_whole(&self.index_path, &self.index).await?;
        file::write_whole(&self.time_path, &self.time_index).await
    }
}

/// Reads the partial last page of the first `written_size` bytes.
pub(crate) async fn read_tail_page(
    file: &DmaFile,
    path: &Path,
    written_size: u64,
) -> Result<Vec<u8>> {
    let start = file::align_down(written_size);
    let len = (written_size - start) as usize;
    if len == 0 {
        return Ok(Vec::new());
    }
    let read = file.read_at(start, len).await.ctx("read", path, start)?;
    if read.len() != len {
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            position: start,
            reason: format!("tail page read {} of {len} bytes", read.len()),
        });
    }
    Ok(read.to_vec())
}

/// What recovery cut from a segment's tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// First offset that is no longer in the log.
    pub offset: u64,
    /// Byte position of the cut in the segment file.
    pub position: u64,
    pub bytes: u64,
    /// True when everything cut was zeros (preallocated, never written).
    pub zero_filled: bool,
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_names_are_twenty_digits() {
        assert_eq!(file_name(16933, "log"), "00000000000000016933.log");
        assert_eq!(
            parse_base_offset("00000000000000016933.log", "log"),
            Some(16933)
        );
        assert_eq!(parse_base_offset("00000000000000016933.index", "log"), None);
        assert_eq!(parse_base_offset("16933.log", "log"), None);
        assert_eq!(parse_base_offset("0000000000000001693x.log", "log"), None);
    }
}
