//! Suffix truncation: cutting the log back to an offset (a diverged follower).

use std::path::PathBuf;
use std::rc::Rc;

use protocol::batch::{self, HEADER_LEN};
use tracing::info;

use crate::checkpoint::Checkpoint;
use crate::error::{IoContext, Result, StorageError};
use crate::file;
use crate::segment::{self, Segment};

use super::journal_link::journal_tombstone;
use super::*;

impl Log {
    /// Removes every record at or after `offset` (the whole batch holding
    /// it), e.g. for a follower diverged from its leader. Returns the new
    /// log end offset.
    pub async fn truncate_to(&self, offset: u64) -> Result<u64> {
        let _permit = self.lock_appends().await?;
        // Bytes read ahead may be cut and written again: reads in progress
        // see the bump and neither use nor start a window.
        self.invalidate_read_ahead();
        self.check_writable(&self.inner.state.borrow())?;
        let _truncating = Truncating::new(&self.inner);
        self.wait_written(self.next_offset()).await?;
        self.void_journal_records().await?;
        let (target, index) = {
            let s = self.inner.state.borrow();
            if offset >= s.next_offset {
                return Ok(s.next_offset);
            }
            let target = offset.max(s.log_start_offset);
            (target, s.segment_for(target))
        };
        let (removed, snapshot) = self.detach_after(index, target);
        let cut = self.cut_file(&snapshot, target).await?;
        let new_end = {
            let mut s = self.inner.state.borrow_mut();
            let segment = s.active_mut();
            if let Some(cut) = &cut {
                apply_cut(segment, cut);
            }
            segment.next_offset
        };
        let written_size = self.inner.state.borrow().active().written_size;
        let tail = segment::read_tail_page(&snapshot.file, &snapshot.path, written_size)
            .await
            .map_err(|e| self.fence(e))?;
        let checkpoint = self.end_at(new_end, tail);
        let dir = self.inner.dir.clone();
        self.write_checkpoint(checkpoint).await?;
        for base in removed {
            Segment::remove_files(&dir, base).await?;
        }
        file::sync_dir(&dir).await?;
        // Again for reads that started while the cut was being made.
        self.invalidate_read_ahead();
        self.inner.changed.notify_all();
        self.cut_epochs_from_end(new_end).await;
        info!(dir = %dir.display(), requested = offset, next_offset = new_end, "log truncated");
        Ok(new_end)
    }

    fn invalidate_read_ahead(&self) {
        self.inner.truncations.set(self.inner.truncations.get() + 1);
        self.inner.read_ahead.borrow_mut().take();
    }

    /// Journal records past the cut must not come back at the next start:
    /// with every byte in the segment file and synced, a tombstone voids
    /// this log's records before the cut is made.
    async fn void_journal_records(&self) -> Result<()> {
        if self.inner.journal.get().is_none() {
            return Ok(());
        }
        let (file, path) = {
            let s = self.inner.state.borrow();
            (s.active().file.clone(), s.active().path.clone())
        };
        if let Err(e) = file.fdatasync().await.ctx("fdatasync", &path, 0) {
            return Err(self.fence(e));
        }
        journal_tombstone(&self.inner)
            .await
            .map_err(|e| self.fence(e))
    }

    /// Takes the segments after the one at `index` out of the log (so no
    /// reader starts on them) and returns their base offsets, with where to
    /// look for the cut of `target` in the one that stays.
    fn detach_after(&self, index: usize, target: u64) -> (Vec<u64>, CutSearch) {
        let mut s = self.inner.state.borrow_mut();
        let removed: Vec<u64> = s
            .segments
            .drain(index + 1..)
            .map(|seg| seg.base_offset)
            .collect();
        // Nothing for the writer to do on this segment until the cut is
        // applied.
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
    }

    /// Finds the cut for `target` and cuts the file there (synced); a
    /// failure fences the log.
    async fn cut_file(&self, search: &CutSearch, target: u64) -> Result<Option<CutPoint>> {
        let cut = find_cut(search, target).await.map_err(|e| self.fence(e))?;
        let synced = match &cut {
            Some(cut) => file::truncate_and_sync(&search.file, &search.path, cut.position).await,
            None => search
                .file
                .fdatasync()
                .await
                .ctx("fdatasync", &search.path, 0),
        };
        synced.map_err(|e| self.fence(e))?;
        Ok(cut)
    }

    /// The log now ends at `new_end`, all of it written and durable;
    /// returns the checkpoint to write.
    fn end_at(&self, new_end: u64, tail: Vec<u8>) -> Checkpoint {
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
    }
}

pub(super) struct CutSearch {
    file: Rc<glommio::io::DmaFile>,
    path: PathBuf,
    base_offset: u64,
    start_position: u64,
    written_size: u64,
}

/// Where a truncation cuts a segment: before the batch holding the target.
pub(super) struct CutPoint {
    position: u64,
    new_end: u64,
    /// Max timestamp among the scanned batches kept before the cut.
    max_timestamp: i64,
    offset_of_max_timestamp: u64,
}

pub(super) async fn find_cut(search: &CutSearch, target: u64) -> Result<Option<CutPoint>> {
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

pub(super) fn apply_cut(segment: &mut Segment, cut: &CutPoint) {
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

/// Marks a truncation under way for as long as it lives.
pub(super) struct Truncating<'a>(&'a Inner);

impl<'a> Truncating<'a> {
    pub(super) fn new(inner: &'a Inner) -> Self {
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
