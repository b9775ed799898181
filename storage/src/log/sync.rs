//! Durability: sync rounds (fdatasync, shared syncfs, or the journal) and
//! waiting for them.

use std::rc::Rc;
use std::time::Instant;

use crate::config::{FlushPolicy, FlushScope};
use crate::error::{IoContext, Result, StorageError};

use super::journal_link::{journal_of, journal_round, journal_sync_round, request_write_out};
use super::*;

impl Log {
    pub(super) async fn wait_written(&self, offset: u64) -> Result<()> {
        request_write_out(&self.inner, offset);
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.written_offset >= offset
                    || s.failure.is_some()
                    || s.no_space.is_some()
                    || s.deleting
            })
            .await;
        let reached = {
            let s = self.inner.state.borrow();
            s.written_offset >= offset && !s.deleting
        };
        self.check_failure_or_space(reached)
    }

    pub(super) fn check_failure(&self) -> Result<()> {
        match &self.inner.state.borrow().failure {
            Some(reason) => Err(StorageError::Fenced {
                path: self.inner.dir.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Resolves once `last_offset` is durable under the flush policy:
    /// synced for `always`, written to the file for `interval` and `never`.
    pub async fn wait_durable(&self, last_offset: u64) -> Result<()> {
        let always = self.inner.config.borrow().flush == FlushPolicy::Always;
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                kept_offset(&s, always) > last_offset
                    || s.failure.is_some()
                    || s.no_space.is_some()
                    || s.deleting
            })
            .await;
        // A deleting log acknowledges nothing more: its bookkeeping no
        // longer follows the files.
        let reached = {
            let s = self.inner.state.borrow();
            kept_offset(&s, always) > last_offset && !s.deleting
        };
        self.check_failure_or_space(reached)
    }

    /// Writes and syncs everything appended so far, whatever the policy.
    pub async fn flush(&self) -> Result<()> {
        let target = {
            let mut state = self.inner.state.borrow_mut();
            state.sync_requested = state.sync_requested.max(state.next_offset);
            state.next_offset
        };
        self.inner.changed.notify_all();
        self.inner
            .changed
            .wait_until(|| {
                let s = self.inner.state.borrow();
                s.durable_offset >= target
                    || s.failure.is_some()
                    || s.no_space.is_some()
                    || s.deleting
            })
            .await;
        let reached = {
            let s = self.inner.state.borrow();
            s.durable_offset >= target && !s.deleting
        };
        self.check_failure_or_space(reached)
    }
}

/// A durable offset past the log end would acknowledge records that were
/// never appended: checked in release builds too.
pub(super) fn assert_durable_within_log(state: &State) {
    assert!(
        state.durable_offset <= state.next_offset,
        "durable offset {} past the log end {}",
        state.durable_offset,
        state.next_offset
    );
}

/// Holds a finished round before it takes effect while a test asks (see
/// [`Log::hold_syncs`]).
pub(super) async fn held_by_test(_inner: &Inner) {
    #[cfg(feature = "fault-injection")]
    if _inner.sync_hold.borrow().holding {
        let inner = _inner;
        inner.sync_hold.borrow_mut().waiting += 1;
        inner
            .changed
            .wait_until(|| {
                let hold = inner.sync_hold.borrow();
                !hold.holding || hold.passes > 0
            })
            .await;
        let mut hold = inner.sync_hold.borrow_mut();
        hold.waiting -= 1;
        hold.passes = hold.passes.saturating_sub(1);
    }
}

pub(super) fn record_sync(state: &mut State, sync_us: u64) {
    state.stats.syncs += 1;
    state.stats.sync_latency_us_total += sync_us;
    let bucket = SYNC_LATENCY_BOUNDS_US.partition_point(|bound| *bound < sync_us);
    state.stats.sync_latency_buckets[bucket] += 1;
}

/// Sync rounds held by a test (see [`Log::hold_syncs`]).
#[cfg(feature = "fault-injection")]
#[derive(Default)]
pub(super) struct SyncHold {
    pub(super) holding: bool,
    /// Held rounds allowed to finish.
    pub(super) passes: u64,
    pub(super) waiting: u32,
}

/// The round through the journal when it can take the log's bytes (see
/// `journal_round`); false when the log must sync its own files.
async fn synced_through_journal(inner: &Rc<Inner>) -> Result<bool> {
    if journal_round(&inner.ctx, &inner.state.borrow(), &inner.config.borrow()).is_none() {
        return Ok(false);
    }
    match journal_of(inner).await {
        Ok(journal) => {
            // Looked at again: the journal's creation may have let a
            // roll in.
            let journaled =
                journal_round(&inner.ctx, &inner.state.borrow(), &inner.config.borrow());
            if let Some((from, to)) = journaled {
                journal_sync_round(inner, &journal, from, to).await?;
                return Ok(true);
            }
        }
        // Too little space for a journal: the log syncs its segment
        // file, and its writer (no longer deferring to a journal, see
        // `Registry::has_room`) writes what the journal would have held.
        Err(e) if e.is_out_of_space() => {
            inner.changed.notify_all();
        }
        Err(e) => return Err(e),
    }
    Ok(false)
}

/// Syncs the active segment `file` as `strom.flush.scope` says: its own
/// fdatasync, or the context's shared `syncfs` of its filesystem.
async fn sync_files(inner: &Inner, file: &glommio::io::DmaFile, path: &Path) -> Result<()> {
    let scope = inner.config.borrow().flush_scope;
    match scope {
        FlushScope::File => file.fdatasync().await.ctx("fdatasync", path, 0)?,
        FlushScope::Filesystem => {
            let group = match inner.fs_sync.get() {
                Some(group) => group.clone(),
                None => {
                    let group = inner
                        .ctx
                        .shared()
                        .fs_syncs
                        .for_dir(&inner.dir)
                        .ctx("open", &inner.dir, 0)?;
                    inner.fs_sync.get_or_init(|| group).clone()
                }
            };
            group.sync().await.ctx("syncfs", &inner.dir, 0)?;
        }
    }
    Ok(())
}

/// Starts a sync round as its own task, so the writer goes on submitting
/// the appends that arrive meanwhile: when the round ends, their writes
/// have landed and the next round can start at once.
pub(super) fn start_sync_round(inner: &Rc<Inner>) {
    inner.state.borrow_mut().sync_running = true;
    let inner = inner.clone();
    glommio::spawn_local(async move {
        let outcome = sync_round(&inner).await;
        inner.state.borrow_mut().sync_running = false;
        // One wake-up for both what the round made durable and the writer,
        // which may start the next round.
        match outcome {
            Ok(()) => inner.changed.notify_all(),
            Err(e) => fence_inner(&inner, e.to_string()),
        }
    })
    .detach();
}

/// One fdatasync (or shared syncfs) covering everything written when it
/// starts (group commit), or a journal round when that can serve.
pub(super) async fn sync_round(inner: &Rc<Inner>) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    if inner.fail_next_sync.replace(false) {
        let path = inner.state.borrow().active().path.clone();
        return Err(StorageError::io(
            "fdatasync",
            &path,
            0,
            std::io::Error::from_raw_os_error(libc::EIO),
        ));
    }
    if synced_through_journal(inner).await? {
        return Ok(());
    }
    let (file, path, target, bytes, position, base) = {
        let state = inner.state.borrow();
        let active = state.active();
        (
            active.file.clone(),
            active.path.clone(),
            state.written_offset,
            state.unsynced_bytes,
            active.written_size,
            active.base_offset,
        )
    };
    let sync_started = Instant::now();
    // A truncation during the round sets the durable offset itself (it
    // syncs the cut); offsets past the cut may be new, unsynced appends.
    let truncations = inner.truncations.get();
    sync_files(inner, &file, &path).await?;
    held_by_test(inner).await;
    let sync_us = sync_started.elapsed().as_micros() as u64;
    let mut state = inner.state.borrow_mut();
    if inner.truncations.get() == truncations {
        state.durable_offset = state.durable_offset.max(target);
        if state.active().base_offset == base {
            state.durable_position = state.durable_position.max(position);
        }
        assert_durable_within_log(&state);
    }
    record_sync(&mut state, sync_us);
    state.unsynced_bytes = state.unsynced_bytes.saturating_sub(bytes);
    if state.durable_offset >= state.written_offset {
        state.unsynced_since = None;
    }
    Ok(())
}
