//! Reads by offset: the batch cache, the segment files, read-ahead.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;
use protocol::batch::{self, HEADER_LEN};

use crate::error::{IoContext, Result, StorageError};
use crate::limits::{READ_SLACK_BYTES, READ_WINDOW_BYTES_MAX};

use super::shares::ReadAheadBudget;
use super::*;

/// How much one read from a segment file asks for.
pub(super) fn read_window_len(max_bytes: usize) -> usize {
    max_bytes
        .saturating_add(READ_SLACK_BYTES)
        .min(READ_WINDOW_BYTES_MAX)
}

/// A window being read ahead of a reader: the read after `offset` starts
/// at `position` of the segment based at `segment_base`. Dropping it
/// cancels the read and returns its bytes to the context's budget.
pub(super) struct ReadAhead {
    segment_base: u64,
    /// `Inner::truncations` when the window was read.
    truncations: u64,
    offset: u64,
    position: u64,
    window_len: usize,
    data: glommio::Task<Result<glommio::io::ReadResult>>,
    _budget: ReadAheadBudget,
}

impl Log {
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
        let read = self.read_files(from_offset, max_bytes, upper).await?;
        if !read.bytes.is_empty() {
            return Ok(read);
        }
        // Nothing in the files from here: compaction left a gap up to
        // batches the writer has not written yet, which the cache holds.
        let state = self.inner.state.borrow();
        let after_gap = state
            .cache
            .first_offset()
            .filter(|first| *first > from_offset && *first < upper)
            .and_then(|first| state.cache.read(first, max_bytes, upper));
        Ok(match after_gap {
            Some(hit) => ReadResult {
                bytes: hit.bytes,
                next_offset: hit.next_offset,
            },
            None => read,
        })
    }

    /// [`Log::read`] from the segment files, starting with the window read
    /// ahead after the previous read when this one continues it.
    async fn read_files(
        &self,
        from_offset: u64,
        max_bytes: usize,
        upper: u64,
    ) -> Result<ReadResult> {
        let empty = ReadResult {
            bytes: Bytes::new(),
            next_offset: from_offset,
        };
        let window_len = read_window_len(max_bytes);
        let truncations = self.inner.truncations.get();
        let mut from = from_offset;
        let mut index = self.inner.state.borrow().segment_for(from);
        let mut ahead = self.take_read_ahead(from, index, truncations, window_len);
        // Bounded: every pass returns or moves to the next segment.
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
                        // Found again by offset: a cleaning may have
                        // replaced the segments meanwhile.
                        index = self.inner.state.borrow().segment_for(from);
                    }
                    _ => return Ok(empty),
                },
            }
        }
    }

    /// The window read ahead after the previous read, if a read from
    /// `from` (in segment `index`) continues exactly where that one ended.
    fn take_read_ahead(
        &self,
        from: u64,
        index: usize,
        truncations: u64,
        window_len: usize,
    ) -> Option<ReadAhead> {
        let taken = self.inner.read_ahead.borrow_mut().take();
        let s = self.inner.state.borrow();
        taken.filter(|ahead| {
            ahead.offset == from
                && ahead.truncations == truncations
                && ahead.window_len == window_len
                && s.segments.get(index).map(|seg| seg.base_offset) == Some(ahead.segment_base)
        })
    }

    /// Starts reading the window after a read from disk, so that a reader
    /// going through the log finds its next window read (or being read)
    /// while it handles this one. At most `READ_AHEAD_BYTES_MAX` per context
    /// are read ahead; one window per log.
    pub(super) fn read_ahead(
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
        let Some(budget) = ReadAheadBudget::take(&self.inner.ctx, want) else {
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
}

pub(super) enum SegmentRead {
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
pub(super) async fn read_segment(
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
