//! The batch cache: recent batches of one log, in offset order and
//! contiguous up to the log end. Tailing readers are served from here
//! without touching the disk. Batches not yet written to the file are pinned
//! (they are also the writer's queue), so eviction never drops data that
//! only lives in memory.

use std::collections::VecDeque;

use bytes::Bytes;

/// The first bytes of a batch that the log rewrites: base offset, batch
/// length (unchanged) and partition leader epoch.
pub(crate) const HEAD_LEN: usize = 16;

#[derive(Debug, Clone)]
pub(crate) struct CachedBatch {
    pub base_offset: u64,
    pub last_offset: u64,
    /// Byte position of the batch in its segment's file.
    pub position: u64,
    /// The batch as received, or already rewritten when `head` is `None`.
    pub bytes: Bytes,
    /// The rewritten first bytes, when `bytes` is shared with the caller
    /// and was not copied just to stamp 16 bytes: applied whenever the
    /// batch is copied out (to the disk write, to a reader).
    pub head: Option<[u8; HEAD_LEN]>,
}

impl CachedBatch {
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Appends the stored form to `out` (no zero-filled buffer first).
    pub fn extend_into(&self, out: &mut Vec<u8>) {
        match &self.head {
            Some(head) if self.bytes.len() >= HEAD_LEN => {
                out.extend_from_slice(head);
                out.extend_from_slice(&self.bytes[HEAD_LEN..]);
            }
            _ => out.extend_from_slice(&self.bytes),
        }
    }

    /// Copies `bytes[from..to]` of the stored form into `out`.
    pub fn copy_range(&self, out: &mut [u8], from: usize, to: usize) {
        out[..to - from].copy_from_slice(&self.bytes[from..to]);
        if let Some(head) = &self.head {
            if from < HEAD_LEN {
                let end = to.min(HEAD_LEN);
                out[..end - from].copy_from_slice(&head[from..end]);
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct BatchCache {
    batches: VecDeque<CachedBatch>,
    bytes: usize,
}

/// Batches served from the cache, in their stored form.
pub(crate) struct CacheRead {
    pub bytes: Bytes,
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

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The base offset of the first cached batch.
    pub fn first_offset(&self) -> Option<u64> {
        self.batches.front().map(|b| b.base_offset)
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
        let mut total = 0usize;
        let mut count = 0usize;
        let mut next_offset = from;
        let start = self.index_of(from);
        for batch in self.batches.range(start..) {
            if batch.base_offset >= upper_bound {
                break;
            }
            if count > 0 && total + batch.len() > max_bytes {
                break;
            }
            total += batch.len();
            count += 1;
            next_offset = batch.last_offset + 1;
        }
        let selected = self.batches.range(start..start + count);
        let bytes = match (count, self.batches.get(start)) {
            (0, _) => Bytes::new(),
            (1, Some(only)) if only.head.is_none() => only.bytes.clone(),
            _ => {
                let mut out = Vec::with_capacity(total);
                for batch in selected {
                    batch.extend_into(&mut out);
                }
                Bytes::from(out)
            }
        };
        Some(CacheRead { bytes, next_offset })
    }

    /// Batches at or above `from` in order, for the writer.
    pub fn iter_from(&self, from: u64) -> impl Iterator<Item = &CachedBatch> {
        self.batches.range(self.index_of(from)..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_read_out_carries_its_rewritten_head() {
        let received: Vec<u8> = (0..100u8).collect();
        let head = [0xAB; HEAD_LEN];
        let batch = CachedBatch {
            base_offset: 7,
            last_offset: 9,
            position: 0,
            bytes: Bytes::from(received.clone()),
            head: Some(head),
        };
        let mut copied = vec![0u8; batch.len()];
        batch.copy_range(&mut copied, 0, batch.len());
        let mut extended = Vec::new();
        batch.extend_into(&mut extended);
        assert_eq!(extended, copied);
        assert_eq!(&extended[..HEAD_LEN], &head);
        assert_eq!(&extended[HEAD_LEN..], &received[HEAD_LEN..]);
    }
}
