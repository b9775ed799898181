//! The batch cache: recent batches of one log, in offset order and
//! contiguous up to the log end. Tailing readers are served from here
//! without touching the disk. Batches not yet written to the file are pinned
//! (they are also the writer's queue), so eviction never drops data that
//! only lives in memory.

use std::collections::VecDeque;

use bytes::Bytes;

#[derive(Debug, Clone)]
pub(crate) struct CachedBatch {
    pub base_offset: u64,
    pub last_offset: u64,
    /// Byte position of the batch in its segment's file.
    pub position: u64,
    pub bytes: Bytes,
}

#[derive(Debug, Default)]
pub(crate) struct BatchCache {
    batches: VecDeque<CachedBatch>,
    bytes: usize,
}

/// Batches served from the cache.
pub(crate) struct CacheRead {
    pub chunks: Vec<Bytes>,
    pub next_offset: u64,
}

impl BatchCache {
    pub fn push(&mut self, batch: CachedBatch) {
        if let Some(last) = self.batches.back() {
            assert!(
                batch.base_offset > last.last_offset,
                "cache batches must increase"
            );
        }
        self.bytes += batch.bytes.len();
        self.batches.push_back(batch);
    }

    /// Evicts the oldest batches beyond `bytes_max`, never one at or above
    /// `pinned_from` (not yet written to disk).
    pub fn evict(&mut self, bytes_max: usize, pinned_from: u64) {
        while self.bytes > bytes_max {
            match self.batches.front() {
                Some(front) if front.last_offset < pinned_from => {
                    self.bytes -= front.bytes.len();
                    self.batches.pop_front();
                }
                _ => break,
            }
        }
    }

    /// Drops batches wholly below `offset` (log start moved).
    pub fn drop_below(&mut self, offset: u64) {
        while let Some(front) = self.batches.front() {
            if front.last_offset >= offset {
                break;
            }
            self.bytes -= front.bytes.len();
            self.batches.pop_front();
        }
    }

    /// Drops batches that end at or above `offset` (log truncated).
    pub fn drop_from(&mut self, offset: u64) {
        while let Some(back) = self.batches.back() {
            if back.last_offset < offset {
                break;
            }
            self.bytes -= back.bytes.len();
            self.batches.pop_back();
        }
    }

    pub fn clear(&mut self) {
        self.batches.clear();
        self.bytes = 0;
    }

    fn index_of(&self, offset: u64) -> usize {
        self.batches.partition_point(|b| b.last_offset < offset)
    }

    /// Whole batches from the one holding `from` up to `max_bytes` (the
    /// first always whole), stopping before any batch at or past
    /// `upper_bound`. `None` when `from` precedes the cached range.
    pub fn read(&self, from: u64, max_bytes: usize, upper_bound: u64) -> Option<CacheRead> {
        let first = self.batches.front()?;
        if from < first.base_offset {
            return None;
        }
        let mut chunks = Vec::new();
        let mut total = 0usize;
        let mut next_offset = from;
        for batch in self.batches.range(self.index_of(from)..) {
            if batch.base_offset >= upper_bound {
                break;
            }
            if !chunks.is_empty() && total + batch.bytes.len() > max_bytes {
                break;
            }
            total += batch.bytes.len();
            next_offset = batch.last_offset + 1;
            chunks.push(batch.bytes.clone());
        }
        Some(CacheRead {
            chunks,
            next_offset,
        })
    }

    /// Batches at or above `from` in order, for the writer.
    pub fn iter_from(&self, from: u64) -> impl Iterator<Item = &CachedBatch> {
        self.batches.range(self.index_of(from)..)
    }
}
