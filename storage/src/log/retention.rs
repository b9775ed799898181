//! Prefix removal: retention by time and size, and DeleteRecords.

use tracing::info;

use crate::checkpoint::Checkpoint;
use crate::error::{Result, StorageError};
use crate::file;
use crate::segment::Segment;

use super::*;

impl Log {
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
        self.write_checkpoint(checkpoint).await?;
        self.delete_front_segments(|_, next_base, start| next_base <= start)
            .await?;
        self.cut_epochs_from_start().await;
        Ok(offset)
    }

    /// Deletes whole non-active segments past `retention.ms` (by their
    /// newest record) or beyond `retention.bytes`, oldest first. Appends
    /// continue meanwhile: the segments leave the in-memory list at once
    /// and their files are removed afterwards.
    pub async fn enforce_retention(&self) -> Result<RetentionOutcome> {
        let now_ms = self.inner.ctx.clock().wall_ms();
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
    pub(super) async fn delete_front_segments(
        &self,
        mut doomed: impl FnMut(&Segment, u64, u64) -> bool,
    ) -> Result<RetentionOutcome> {
        let mut outcome = RetentionOutcome::default();
        // Not while a cleaning swaps segments in.
        let _swapping =
            self.inner
                .swap_lock
                .acquire_permit(1)
                .await
                .map_err(|_| StorageError::Closed {
                    path: self.inner.dir.clone(),
                })?;
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
        self.write_checkpoint(checkpoint).await?;
        for segment in removed {
            outcome.segments_deleted += 1;
            outcome.bytes_deleted += segment.size;
            let base = segment.base_offset;
            drop(segment);
            Segment::remove_files(&self.inner.dir, base).await?;
            info!(dir = %self.inner.dir.display(), base_offset = base, "deleted segment");
        }
        file::sync_dir(&self.inner.dir).await?;
        self.cut_epochs_from_start().await;
        Ok(outcome)
    }
}
