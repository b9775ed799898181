//! Appends: limits, backpressure, offsets and stamping, segment rolls.

use bytes::{Bytes, BytesMut};
use protocol::batch::{self, RecordBatch};
use tracing::info;

use crate::cache::{CachedBatch, HEAD_LEN};
use crate::checkpoint::Checkpoint;
use crate::error::{Result, StorageError};
use crate::file;
use crate::segment::Segment;

use super::journal_link::{request_write_out, want_journal};
use super::*;

/// How an append places its batch.
#[derive(Debug, Clone, Copy)]
enum Placement {
    /// A leader's append: the log assigns the offsets and stamps the
    /// leader epoch (and LogAppendTime).
    Assign(AppendOptions),
    /// A follower's append: the batch keeps its leader's offsets and epoch.
    Keep,
}

/// The append lock: a fair semaphore of one permit. A permit released
/// while appends wait goes straight to the first of them, so no append
/// that arrives meanwhile can pass it (glommio's semaphore lets a newcomer
/// take a permit its woken waiter has not claimed yet).
pub(super) type AppendLock = tokio::sync::Semaphore;
pub(super) type AppendPermit<'a> = tokio::sync::SemaphorePermit<'a>;

impl Log {
    /// Takes the append lock, which serialises appends with rolls,
    /// truncation and close.
    /// Takes the append lock. Appends are placed in the order they asked
    /// for it: the lock is fair (a permit released while others wait goes
    /// to the first of them), so a connection's pipelined produce requests,
    /// which reach here in request order, are appended in request order
    /// even when one of them waits under the lock (a roll, backpressure,
    /// the leader-epoch checkpoint).
    pub(super) async fn lock_appends(&self) -> Result<AppendPermit<'_>> {
        self.inner
            .append_lock
            .acquire()
            .await
            .map_err(|_| StorageError::Closed {
                path: self.inner.dir.clone(),
            })
    }

    pub(super) fn check_writable(&self, state: &State) -> Result<()> {
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
    pub(super) fn check_space(&self, size: usize) -> Result<()> {
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

    pub(super) fn space_error(&self, reason: String) -> StorageError {
        StorageError::NoSpace {
            op: "append",
            path: self.inner.dir.clone(),
            position: self.inner.state.borrow().next_offset,
            source: std::io::Error::new(std::io::ErrorKind::StorageFull, reason),
        }
    }

    /// A waiter's answer once its condition or a failure came: fenced,
    /// out of space or closed by a deletion (when `reached` is false), or
    /// fine.
    pub(super) fn check_failure_or_space(&self, reached: bool) -> Result<()> {
        self.check_failure()?;
        if reached {
            return Ok(());
        }
        let (reason, deleting) = {
            let state = self.inner.state.borrow();
            (state.no_space.clone(), state.deleting)
        };
        match reason {
            Some(reason) => Err(self.space_error(reason)),
            // What was not yet durable goes with the log's files.
            None if deleting => Err(StorageError::Closed {
                path: self.inner.dir.clone(),
            }),
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
        self.append_placed(batch, Placement::Assign(options)).await
    }

    /// A follower's append: the batch keeps the offsets and the leader
    /// epoch its leader gave it, byte for byte. Its base offset must be the
    /// log end offset; a gap or an overlap is refused
    /// ([`StorageError::NotAtLogEnd`]) and changes nothing. Durable as an
    /// [`Log::append`] is (see [`Log::wait_durable`]).
    pub async fn append_at(&self, batch: Bytes) -> Result<AppendInfo> {
        self.append_batch_at(RecordBatch::new(batch)?).await
    }

    /// [`Log::append_at`] of a batch already validated.
    pub async fn append_batch_at(&self, batch: RecordBatch) -> Result<AppendInfo> {
        self.append_placed(batch, Placement::Keep).await
    }

    /// Appends under the append lock, after backpressure and a roll if due.
    async fn append_placed(&self, batch: RecordBatch, placement: Placement) -> Result<AppendInfo> {
        let header = *batch.header();
        let batch = batch.into_bytes();
        let size = batch.len();
        let max = self.inner.config.borrow().max_message_bytes;
        if size > max as usize {
            return Err(StorageError::BatchTooLarge { size, max });
        }
        let _permit = self.lock_appends().await?;
        self.check_writable(&self.inner.state.borrow())?;
        self.check_placement(&header, placement)?;
        self.check_space(size)?;
        self.wait_for_pending_room(size).await?;

        let now = self.inner.ctx.clock().wall_ms();
        let log_append_time_ms = match placement {
            Placement::Assign(options) => options.log_append_time_ms,
            Placement::Keep => header.is_log_append_time().then_some(header.max_timestamp),
        };
        // A LogAppendTime batch is as old as its append time, as Kafka
        // rolls it.
        let mut stamped = header;
        if let Some(ts) = log_append_time_ms {
            stamped.max_timestamp = ts;
        }
        // A batch kept at its own offsets may start past the log end: a
        // compacted leader's log has gaps, and its followers keep them.
        let first = match placement {
            Placement::Keep => header.base_offset as u64,
            Placement::Assign(_) => self.next_offset(),
        };
        if self.needs_roll(&stamped, first, size, now) {
            self.roll().await?;
        }

        let (base_offset, last_offset, epoch) = self.place(batch, &mut stamped, placement);
        want_journal(&self.inner);
        self.inner.changed.notify_all();
        self.note_epoch(epoch, base_offset).await;
        Ok(AppendInfo {
            base_offset,
            last_offset,
            max_timestamp: stamped.max_timestamp,
            log_append_time_ms,
        })
    }

    /// Puts the batch at the log end, stamped as `placement` says, into
    /// the active segment's indexes and the cache (visible to readers from
    /// here); returns its base and last offsets and its leader epoch.
    /// `header` becomes the stored batch's.
    fn place(
        &self,
        batch: Bytes,
        header: &mut batch::BatchHeader,
        placement: Placement,
    ) -> (u64, u64, i32) {
        let size = batch.len();
        let mut state = self.inner.state.borrow_mut();
        let base_offset = match placement {
            Placement::Keep => header.base_offset as u64,
            Placement::Assign(_) => state.next_offset,
        };
        // Offsets only grow: a batch's last offset delta was checked, a
        // negative one would wrap to a jump of the log end.
        assert!(
            (0..=i32::MAX).contains(&header.last_offset_delta),
            "append of a batch with last offset delta {}",
            header.last_offset_delta
        );
        let (bytes, head, epoch) = match placement {
            Placement::Assign(options) => {
                let (bytes, head) = stamp(batch, base_offset, &options);
                (bytes, head, options.leader_epoch)
            }
            Placement::Keep => (batch, None, header.partition_leader_epoch),
        };
        let last_offset = base_offset + header.last_offset_delta as u64;
        header.base_offset = base_offset as i64;
        header.partition_leader_epoch = epoch;
        let interval = u64::from(self.inner.config.borrow().index_interval_bytes);
        let active = state.active_mut();
        let position = active.size;
        active.track_batch(header, position, size as u64, interval);
        state.cache.push(CachedBatch {
            base_offset,
            last_offset,
            position,
            bytes,
            head,
        });
        state.next_offset = last_offset + 1;
        state.pending_bytes += size;
        (base_offset, last_offset, epoch)
    }

    /// Refuses a follower's batch that does not start at the log end.
    fn check_placement(&self, header: &batch::BatchHeader, placement: Placement) -> Result<()> {
        let log_end = self.inner.state.borrow().next_offset;
        match placement {
            // At the log end or past it (a gap compaction left), within
            // what one segment can hold after a roll.
            Placement::Keep
                if header.base_offset < log_end as i64
                    || header.base_offset as u64 - log_end > (i32::MAX / 2) as u64 =>
            {
                Err(StorageError::NotAtLogEnd {
                    path: self.inner.dir.clone(),
                    base_offset: header.base_offset,
                    log_end,
                })
            }
            _ => Ok(()),
        }
    }

    /// Backpressure: waits until the unwritten bytes leave room for `size`
    /// more (bounded memory of unwritten batches).
    async fn wait_for_pending_room(&self, size: usize) -> Result<()> {
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
        self.check_space(size)
    }

    pub(super) fn needs_roll(
        &self,
        header: &batch::BatchHeader,
        first: u64,
        size: usize,
        now: i64,
    ) -> bool {
        let config = self.inner.config.borrow();
        let state = self.inner.state.borrow();
        let active = state.active();
        if active.size == 0 {
            return false;
        }
        let last_relative = first + header.last_offset_delta as u64 - active.base_offset;
        active.size + size as u64 > config.segment_bytes
            || (active.index.len() as u64 + 1) * 8 > config.segment_index_bytes
            || (active.time_index.entries().len() as u64 + 1) * 12 > config.segment_index_bytes
            || last_relative > i32::MAX as u64
            || segment_age_ms(active, header.max_timestamp, now) > config.segment_ms as i64
    }

    /// Rolls the active segment when it holds records and its first record
    /// is older than `segment.ms` by the clock, without waiting for the
    /// next append: a quiet partition's last records become a sealed
    /// segment, which compaction may clean. `true` when it rolled.
    pub async fn roll_if_idle(&self) -> Result<bool> {
        let due = |log: &Self| {
            let now = log.inner.ctx.clock().wall_ms();
            let segment_ms = log.inner.config.borrow().segment_ms as i64;
            let state = log.inner.state.borrow();
            let active = state.active();
            active.size > 0 && segment_age_ms(active, now, now) > segment_ms
        };
        if !due(self) {
            return Ok(false);
        }
        let _permit = self.lock_appends().await?;
        if !due(self) {
            return Ok(false);
        }
        self.roll().await?;
        Ok(true)
    }

    /// Seals the active segment and starts a new one at the log end. The
    /// caller holds the append lock.
    pub(super) async fn roll(&self) -> Result<()> {
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
        let mut segment = match Segment::create(&dir, next_offset).await {
            Ok(segment) => segment,
            Err(e) => return Err(self.fence_unless_space(e)),
        };
        segment.opened_ms = self.inner.ctx.clock().wall_ms();
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
        self.write_checkpoint(checkpoint).await?;
        info!(dir = %dir.display(), base_offset = next_offset, "rolled to a new segment");
        Ok(())
    }
}

/// Stamps base offset and leader epoch (and LogAppendTime) on a batch.
/// A batch the caller no longer shares is rewritten in place; a shared one
/// is left as is, with its rewritten first 16 bytes returned separately and
/// applied when the batch is copied out, so an append copies nothing.
pub(super) fn stamp(
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
pub(super) fn segment_age_ms(segment: &Segment, new_timestamp: i64, now_ms: i64) -> i64 {
    match segment.first_timestamp {
        Some(first) if first >= 0 && new_timestamp >= 0 => new_timestamp.saturating_sub(first),
        _ => now_ms.saturating_sub(segment.opened_ms),
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::AppendLock;

    fn poll<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    /// The pattern that put pipelined produce requests out of order: the
    /// holder releases while a waiter is woken but not yet run, and an
    /// append that arrives meanwhile asks for the lock first.
    #[test]
    fn a_released_permit_goes_to_the_first_waiter_not_to_a_newcomer() {
        let lock = AppendLock::new(1);
        let holder = lock.try_acquire().expect("free");
        let mut first = pin!(lock.acquire());
        assert!(poll(first.as_mut()).is_pending(), "held: the first waits");
        drop(holder);
        let mut newcomer = pin!(lock.acquire());
        assert!(
            poll(newcomer.as_mut()).is_pending(),
            "a newcomer must not take the permit the first waiter was given"
        );
        let first_permit = match poll(first.as_mut()) {
            Poll::Ready(permit) => permit.expect("open"),
            Poll::Pending => panic!("the first waiter holds the released permit"),
        };
        assert!(poll(newcomer.as_mut()).is_pending());
        drop(first_permit);
        assert!(poll(newcomer.as_mut()).is_ready(), "then the newcomer");
    }
}
