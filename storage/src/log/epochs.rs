//! The log's leader-epoch cache ([`EpochCache`]) and its
//! `leader-epoch-checkpoint` file: loaded at open (rebuilt from the batches
//! when missing or unreadable), gaining an entry when an append brings a
//! larger epoch, cut with the log at either end, and written atomically
//! (temporary file, sync, rename, sync the directory).

use protocol::batch::BatchHeader;
use tracing::warn;

use crate::epoch_cache::{EpochCache, EpochEntry, FILE_NAME};
use crate::error::{IoContext, Result};
use crate::file;

use super::*;

/// Bytes read at a time while rebuilding the cache from the batches.
const REBUILD_READ_BYTES: usize = 1 << 20;

impl Log {
    /// The largest leader epoch of the log's batches, if any has one.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.inner.epochs.borrow().latest_epoch()
    }

    /// OffsetForLeaderEpoch: where `epoch` ends in this log, as (epoch,
    /// end offset); see [`EpochCache::end_offset_for`].
    pub fn end_offset_for(&self, epoch: i32) -> (i32, i64) {
        let end = self.next_offset();
        self.inner.epochs.borrow().end_offset_for(epoch, end)
    }

    /// The cache's entries, oldest first.
    pub fn epoch_entries(&self) -> Vec<EpochEntry> {
        self.inner.epochs.borrow().entries().to_vec()
    }

    /// Loads the cache at open: from its file, cut to the log (a crash may
    /// have cut the log behind it), or rebuilt from the batches.
    pub(super) async fn load_epochs(&self) -> Result<()> {
        let path = self.inner.dir.join(FILE_NAME);
        let loaded = match std::fs::read_to_string(&path) {
            Ok(text) => match EpochCache::parse(&text) {
                Ok(cache) => Some(cache),
                Err(reason) => {
                    warn!(path = %path.display(), %reason, "leader-epoch checkpoint unreadable; rebuilding it from the log");
                    None
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if self.next_offset() > self.start_offset() {
                    warn!(path = %path.display(), "leader-epoch checkpoint missing; rebuilding it from the log");
                }
                None
            }
            Err(e) => return Err(e).ctx("read", &path, 0),
        };
        let (mut cache, mut changed) = match loaded {
            Some(cache) => (cache, false),
            None => (self.rebuild_epochs().await?, true),
        };
        changed |= cache.truncate_from_end(self.next_offset());
        changed |= cache.truncate_from_start(self.start_offset());
        // Written when missing too, empty or not (as Kafka makes it with
        // the log): a log whose batches carry no epoch is not read again
        // at every open.
        *self.inner.epochs.borrow_mut() = cache;
        if changed {
            self.persist_epochs().await;
        }
        Ok(())
    }

    /// The cache as the log's batches give it: each larger epoch starts at
    /// the first batch that carries it.
    async fn rebuild_epochs(&self) -> Result<EpochCache> {
        let mut cache = EpochCache::default();
        let end = self.next_offset();
        let mut from = self.start_offset();
        // Bounded: every pass advances `from` or stops.
        while from < end {
            let chunk = self.read(from, REBUILD_READ_BYTES, end).await?;
            let mut bytes = &chunk.bytes[..];
            while let Ok(header) = BatchHeader::parse(bytes) {
                note(
                    &mut cache,
                    header.partition_leader_epoch,
                    header.base_offset as u64,
                );
                if header.size() > bytes.len() {
                    break;
                }
                bytes = &bytes[header.size()..];
            }
            if chunk.next_offset <= from {
                break;
            }
            from = chunk.next_offset;
        }
        Ok(cache)
    }

    /// After an append at `base_offset` of a batch of `epoch`: a larger
    /// epoch than any before starts there, and the file says so before the
    /// append returns.
    pub(super) async fn note_epoch(&self, epoch: i32, base_offset: u64) {
        let changed = note(&mut self.inner.epochs.borrow_mut(), epoch, base_offset);
        if changed {
            self.persist_epochs().await;
        }
    }

    /// After a truncation to `end_offset`.
    pub(super) async fn cut_epochs_from_end(&self, end_offset: u64) {
        let changed = self.inner.epochs.borrow_mut().truncate_from_end(end_offset);
        if changed {
            self.persist_epochs().await;
        }
    }

    /// After the log start moved forward (retention, DeleteRecords).
    pub(super) async fn cut_epochs_from_start(&self) {
        let start = self.start_offset();
        let changed = self.inner.epochs.borrow_mut().truncate_from_start(start);
        if changed {
            self.persist_epochs().await;
        }
    }

    /// Writes the file; on failure removes it (best effort), so that the
    /// next open rebuilds the cache rather than trust a stale one. The
    /// cache in memory stays right either way.
    async fn persist_epochs(&self) {
        let Ok(_permit) = self.inner.epochs_lock.acquire_permit(1).await else {
            return;
        };
        let path = self.inner.dir.join(FILE_NAME);
        if let Err(error) = self.write_epochs(&path).await {
            warn!(path = %path.display(), %error, "could not write the leader-epoch checkpoint; removing it (the next open rebuilds it)");
            let _ = file::remove(&path).await;
        }
    }

    async fn write_epochs(&self, path: &Path) -> Result<()> {
        let text = self.inner.epochs.borrow().encode();
        let tmp = self.inner.dir.join(format!("{FILE_NAME}.tmp"));
        file::write_whole(&tmp, text.as_bytes()).await?;
        glommio::io::rename(&tmp, path)
            .await
            .ctx("rename", path, 0)?;
        file::sync_dir(&self.inner.dir).await
    }
}

/// Notes `epoch` starting at `base_offset` when it is larger than every
/// epoch before (no epoch, -1, is never noted). Returns whether it was.
fn note(cache: &mut EpochCache, epoch: i32, base_offset: u64) -> bool {
    epoch >= 0
        && cache.latest_epoch().is_none_or(|latest| epoch > latest)
        && cache.assign(epoch, base_offset)
}
