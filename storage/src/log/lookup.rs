//! Lookups by timestamp (ListOffsets): the first record at or after a time,
//! and the record with the largest timestamp.

use protocol::batch::{self, RecordBatch};

use crate::error::{Result, StorageError};
use crate::limits::STORED_DECOMPRESSED_BYTES_MAX;

use super::*;

impl Log {
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
    pub(super) fn find_in_batch(
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

    pub(super) fn corrupt_read_back(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.inner.dir.clone(),
            position: 0,
            reason: format!("batch read back for a timestamp lookup: {reason}"),
        }
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
}
