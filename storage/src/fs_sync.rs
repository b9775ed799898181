//! Filesystem-wide group commit: one `syncfs(2)` makes every completed write
//! of every log on a filesystem durable, so a core with many partitions
//! flushes the device once per round instead of once per partition.
//!
//! Each log on a thread (a shard) that uses `strom.flush.sync=syncfs` asks
//! the thread's [`FsSync`] for its filesystem. A caller needs a sync that
//! *starts* after it asks (its writes completed before that), so callers
//! arriving while one runs share the next one: at most one runs at a time
//! per filesystem and thread, and all waiting logs ride on it.
//!
//! `syncfs` cannot be submitted to io_uring, so it runs on glommio's
//! blocking thread pool. A failed `syncfs` cannot say which file lost data,
//! so the failure is sticky: every later sync on that filesystem fails too,
//! and each log fences itself as it would on a failed fdatasync.

use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;

use crate::signal::Signal;

pub(crate) struct FsSync {
    /// An open directory of the filesystem, the handle `syncfs` takes.
    dir: std::fs::File,
    state: RefCell<FsSyncState>,
    changed: Signal,
}

#[derive(Default)]
struct FsSyncState {
    /// Generation of the last sync started; generations run one at a time.
    started: u64,
    /// Generation of the last sync finished.
    finished: u64,
    running: bool,
    failed: Option<String>,
}

thread_local! {
    static BY_DEVICE: RefCell<HashMap<u64, Rc<FsSync>>> = RefCell::new(HashMap::new());
}

/// `syncfs` calls finished on this thread, over every filesystem.
pub fn filesystem_syncs() -> u64 {
    BY_DEVICE.with(|map| {
        map.borrow()
            .values()
            .map(|s| s.state.borrow().finished)
            .sum()
    })
}

impl FsSync {
    /// The thread's group commit for the filesystem holding `dir`.
    pub(crate) fn for_dir(dir: &Path) -> std::io::Result<Rc<FsSync>> {
        let device = std::fs::metadata(dir)?.dev();
        if let Some(found) = BY_DEVICE.with(|map| map.borrow().get(&device).cloned()) {
            return Ok(found);
        }
        let sync = Rc::new(FsSync {
            dir: std::fs::File::open(dir)?,
            state: RefCell::new(FsSyncState::default()),
            changed: Signal::default(),
        });
        BY_DEVICE.with(|map| map.borrow_mut().insert(device, sync.clone()));
        Ok(sync)
    }

    /// Returns once a `syncfs` that started after this call has finished:
    /// every write completed before the call is then durable.
    pub(crate) async fn sync(&self) -> std::io::Result<()> {
        let need = self.state.borrow().started + 1;
        loop {
            {
                let state = self.state.borrow();
                if let Some(message) = &state.failed {
                    return Err(std::io::Error::other(message.clone()));
                }
                if state.finished >= need {
                    return Ok(());
                }
            }
            if self.state.borrow().running {
                self.changed
                    .wait_until(|| {
                        let state = self.state.borrow();
                        !state.running || state.finished >= need || state.failed.is_some()
                    })
                    .await;
                continue;
            }
            let generation = {
                let mut state = self.state.borrow_mut();
                state.running = true;
                state.started += 1;
                state.started
            };
            // Should this future be dropped while its syncfs runs, the
            // others must not wait for a finish nobody will record.
            let mut running = RunningGuard(Some(self));
            // `self` (and so the open directory) outlives this await; only
            // the raw descriptor crosses to the blocking thread.
            let fd = self.dir.as_raw_fd();
            let result = glommio::executor()
                .spawn_blocking(move || {
                    // SAFETY: plain FFI call on a descriptor that stays open
                    // until the call returns (see above).
                    let rc = unsafe { libc::syncfs(fd) };
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                })
                .await;
            running.0 = None;
            let mut state = self.state.borrow_mut();
            state.running = false;
            state.finished = generation;
            if let Err(e) = &result {
                state.failed = Some(format!("syncfs failed: {e}"));
            }
            drop(state);
            self.changed.notify_all();
        }
    }
}

/// Clears `running` if the sync that set it is abandoned before it ends.
struct RunningGuard<'a>(Option<&'a FsSync>);

impl Drop for RunningGuard<'_> {
    fn drop(&mut self) {
        if let Some(sync) = self.0 {
            sync.state.borrow_mut().running = false;
            sync.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_abandoned_sync_does_not_stall_the_next_ones() {
        let dir = std::env::current_dir().unwrap();
        glommio::LocalExecutor::default().run(async move {
            let sync = FsSync::for_dir(&dir).unwrap();
            let before = filesystem_syncs();
            // Poll once: this caller starts a syncfs, then gives up on it.
            let first = futures_lite::future::poll_once(Box::pin(sync.sync())).await;
            assert!(first.is_none(), "a syncfs cannot finish within one poll");
            let next = futures_lite::future::or(async { Some(sync.sync().await) }, async {
                glommio::timer::sleep(Duration::from_secs(20)).await;
                None
            })
            .await;
            assert!(
                matches!(next, Some(Ok(()))),
                "the next sync finished: {next:?}"
            );
            assert!(filesystem_syncs() > before);
        });
    }
}
