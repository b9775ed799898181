//! Filesystem-wide group commit: one `syncfs(2)` makes every completed write
//! of every log on a filesystem durable, so a core with many partitions
//! flushes the device once per round instead of once per partition.
//!
//! Each log of a core that uses `strom.flush.sync=syncfs` asks its
//! context's [`FsSyncs`] for the [`FsSync`] of its filesystem. A caller
//! needs a sync that *starts* after it asks (its writes completed before
//! that), so callers arriving while one runs share the next one: at most
//! one runs at a time per filesystem and context, and all waiting logs ride
//! on it.
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

use crate::group_commit::GroupCommit;

pub(crate) struct FsSync {
    /// An open directory of the filesystem, the handle `syncfs` takes.
    dir: std::fs::File,
    group: GroupCommit,
}

/// One context's filesystem syncs, by device.
#[derive(Default)]
pub(crate) struct FsSyncs {
    by_device: RefCell<HashMap<u64, Rc<FsSync>>>,
}

impl FsSyncs {
    /// `syncfs` calls finished, over every filesystem.
    pub(crate) fn finished(&self) -> u64 {
        self.by_device
            .borrow()
            .values()
            .map(|s| s.group.finished())
            .sum()
    }

    /// The group commit for the filesystem holding `dir`.
    pub(crate) fn for_dir(&self, dir: &Path) -> std::io::Result<Rc<FsSync>> {
        let device = std::fs::metadata(dir)?.dev();
        if let Some(found) = self.by_device.borrow().get(&device).cloned() {
            return Ok(found);
        }
        let sync = Rc::new(FsSync {
            dir: std::fs::File::open(dir)?,
            // An abandoned syncfs only did not finish: the next one repeats it.
            group: GroupCommit::new("syncfs", false),
        });
        self.by_device.borrow_mut().insert(device, sync.clone());
        Ok(sync)
    }
}

impl FsSync {
    /// Returns once a `syncfs` that started after this call has finished:
    /// every write completed before the call is then durable.
    pub(crate) async fn sync(&self) -> std::io::Result<()> {
        let need = self.group.next_round()?;
        self.group
            .wait_for(need, || {
                // `self` (and so the open directory) outlives the round;
                // only the raw descriptor crosses to the blocking thread.
                let fd = self.dir.as_raw_fd();
                glommio::executor().spawn_blocking(move || {
                    // SAFETY: plain FFI call on a descriptor that stays open
                    // until the call returns (see above).
                    let rc = unsafe { libc::syncfs(fd) };
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                })
            })
            .await
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
            let syncs = FsSyncs::default();
            let sync = syncs.for_dir(&dir).unwrap();
            let before = syncs.finished();
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
            assert!(syncs.finished() > before);
        });
    }
}
