//! Small file helpers over glommio's O_DIRECT files, every error carrying
//! the operation, path and position.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use glommio::io::{DmaFile, OpenOptions};

use crate::error::{IoContext, Result};
pub use crate::limits::{PAGE, SPACE_RESERVE_BYTES};

/// Bytes an unprivileged writer may still allocate on the filesystem
/// holding `path` (`statvfs`'s available blocks), `None` when unknown.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `name` is a NUL-terminated path and `stat` a buffer of the
    // type statvfs fills; it is read only when the call succeeded.
    let rc = unsafe { libc::statvfs(name.as_ptr(), stat.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `stat`.
    let stat = unsafe { stat.assume_init() };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// How far to preallocate a file that holds `allocated` bytes and needs
/// `need`: `want` when the filesystem has room for it beside
/// [`SPACE_RESERVE_BYTES`], less when it has not, never less than `need`;
/// `None` when even `need` would take the filesystem into the reserve.
pub fn preallocation_size(path: &Path, allocated: u64, need: u64, want: u64) -> Option<u64> {
    let want = want.max(need);
    let Some(free) = free_bytes(path) else {
        return Some(want);
    };
    let room = allocated.saturating_add(free.saturating_sub(SPACE_RESERVE_BYTES));
    if room < need {
        return None;
    }
    Some(align_down(room).clamp(need, want))
}

/// Preallocates `file` to `size` bytes. A failure for space (ENOSPC may
/// still have allocated part of the range) cuts the file back to `keep`
/// bytes, its size before, so that a full disk is not made fuller by the
/// failed attempt.
pub async fn preallocate(file: &DmaFile, path: &Path, keep: u64, size: u64) -> Result<()> {
    match file.pre_allocate(size, false).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e: std::io::Error = e.into();
            let error = crate::StorageError::io("fallocate", path, size, e);
            if error.is_out_of_space() && file.file_size().await.is_ok_and(|now| now >= keep) {
                let _ = file.truncate(keep).await;
            }
            Err(error)
        }
    }
}

thread_local! {
    /// Opens in flight on this thread (executor), by directory.
    static OPENING: RefCell<HashMap<PathBuf, usize>> = RefCell::new(HashMap::new());
}

/// How long [`await_opens`] waits at most, and how often it looks.
const OPENS_WAIT: Duration = Duration::from_secs(10);
const OPENS_POLL: Duration = Duration::from_millis(1);

/// Opens `path` with `options`, counted as in flight in its directory
/// until the open is done. glommio stats the path after the open itself
/// and panics if it is gone by then, so a directory is removed only once
/// no open is in flight in it ([`await_opens`]).
async fn dma_open(options: &OpenOptions, path: &Path) -> glommio::Result<DmaFile, ()> {
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    OPENING.with_borrow_mut(|o| *o.entry(dir.clone()).or_default() += 1);
    let opened = options.dma_open(path).await;
    OPENING.with_borrow_mut(|o| {
        if let Some(count) = o.get_mut(&dir) {
            *count -= 1;
            if *count == 0 {
                o.remove(&dir);
            }
        }
    });
    opened
}

/// Waits (at most [`OPENS_WAIT`]) until no open started on this thread is
/// in flight in `dir`. Remove the directory with no await after it: no
/// other open can then start in between.
pub async fn await_opens(dir: &Path) {
    let started = std::time::Instant::now();
    while OPENING.with_borrow(|o| o.contains_key(dir)) && started.elapsed() < OPENS_WAIT {
        glommio::timer::sleep(OPENS_POLL).await;
    }
}

pub fn align_down(v: u64) -> u64 {
    v & !(PAGE - 1)
}

pub fn align_up(v: u64) -> u64 {
    align_down(v + PAGE - 1)
}

/// Makes glommio learn, once per device, whether the device supports
/// io_uring polled I/O. glommio probes the first file it opens on a device
/// by reading its first block and caches the answer for the process; on an
/// empty file that read succeeds trivially, glommio wrongly concludes the
/// device supports polling, and every later read fails with EOPNOTSUPP. So
/// the first file Strom opens on each device is one with data in it.
/// glommio's cache is per thread (per executor); `probed` is the devices a
/// context probed (a second context on one thread probes once more, which
/// costs an open).
pub async fn probe_device(dir: &Path, probed: &RefCell<HashSet<u64>>) -> Result<()> {
    use std::os::unix::fs::MetadataExt;

    let device = std::fs::metadata(dir).ctx("stat", dir, 0)?.dev();
    if probed.borrow().contains(&device) {
        return Ok(());
    }
    // Any existing file of at least a block will do (and needs no space,
    // which matters when reopening on a full disk); else write one.
    let existing = std::fs::read_dir(dir)
        .ctx("list directory", dir, 0)?
        .flatten()
        .find(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() >= PAGE))
        .map(|e| e.path());
    let (path, temporary) = match existing {
        Some(path) => (path, false),
        None => {
            let path = dir.join(".strom-probe.tmp");
            std::fs::write(&path, [0u8; PAGE as usize]).ctx("write", &path, 0)?;
            (path, true)
        }
    };
    let opened = dma_open(OpenOptions::new().read(true), &path).await;
    if temporary {
        let _ = std::fs::remove_file(&path);
    }
    let file = opened.map_err(|e| {
        crate::StorageError::io(
            "open with O_DIRECT (the data directory's filesystem must support it)",
            &path,
            0,
            e,
        )
    })?;
    let _ = file.close().await;
    probed.borrow_mut().insert(device);
    Ok(())
}

/// Opens (creating if missing) a file for O_DIRECT reads and writes.
/// Read-write even for writers: a write-only DmaFile makes glommio log a
/// misleading iopoll probe error.
pub async fn open_rw(path: &Path) -> Result<DmaFile> {
    dma_open(OpenOptions::new().read(true).write(true).create(true), path)
        .await
        .ctx("open", path, 0)
}

/// Reads a whole small file, `None` if it does not exist.
pub async fn read_whole(path: &Path) -> Result<Option<Vec<u8>>> {
    let file = match dma_open(OpenOptions::new().read(true), path).await {
        Ok(file) => file,
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                return Ok(None);
            }
            return Err(crate::StorageError::io("open", path, 0, e));
        }
    };
    let size = file.file_size().await.ctx("stat", path, 0)?;
    let mut out = Vec::with_capacity(size as usize);
    let mut position = 0u64;
    while position < size {
        let chunk = (size - position).min(8 << 20) as usize;
        let read = file
            .read_at(position, chunk)
            .await
            .ctx("read", path, position)?;
        if read.is_empty() {
            break;
        }
        out.extend_from_slice(&read);
        position += read.len() as u64;
    }
    let _ = file.close().await;
    Ok(Some(out))
}

/// Writes `bytes` as the whole content of `path` (created or replaced in
/// place) and syncs it. The O_DIRECT write is padded to the page and the
/// file then cut to the exact length.
pub async fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    let file = open_rw(path).await?;
    let padded = align_up(bytes.len() as u64) as usize;
    if padded > 0 {
        let mut buf = file.alloc_dma_buffer(padded);
        let dst = buf.as_bytes_mut();
        dst[..bytes.len()].copy_from_slice(bytes);
        dst[bytes.len()..].fill(0);
        let written = file.write_at(buf, 0).await.ctx("write", path, 0)?;
        if written != padded {
            return Err(crate::StorageError::io(
                "write",
                path,
                written as u64,
                std::io::Error::new(std::io::ErrorKind::WriteZero, "short write"),
            ));
        }
    }
    file.truncate(bytes.len() as u64)
        .await
        .ctx("truncate", path, bytes.len() as u64)?;
    file.fdatasync().await.ctx("fdatasync", path, 0)?;
    file.close().await.ctx("close", path, 0)?;
    Ok(())
}

/// Cuts a file to `size` bytes and syncs the cut.
pub async fn truncate_and_sync(file: &DmaFile, path: &Path, size: u64) -> Result<()> {
    file.truncate(size).await.ctx("truncate", path, size)?;
    file.fdatasync().await.ctx("fdatasync", path, size)
}

/// Syncs a directory so that created, renamed and removed entries persist.
pub async fn sync_dir(dir: &Path) -> Result<()> {
    let handle = glommio::io::Directory::open(dir)
        .await
        .ctx("open directory", dir, 0)?;
    handle.sync().await.ctx("fsync directory", dir, 0)?;
    let _ = handle.close().await;
    Ok(())
}

/// Removes a file that may be large without one long stall of the
/// filesystem: it is cut down a step at a time (each step a small journal
/// transaction, with a pause after it), then unlinked. A missing file is
/// not an error.
pub async fn remove_gradually(path: &Path) -> Result<()> {
    // About 400 MB/s of freed extents.
    const STEP_BYTES: u64 = 4 << 20;
    const PAUSE: Duration = Duration::from_millis(10);
    // Counted as in flight, as every open: a log deleted meanwhile waits
    // for it before its directory goes (see `dma_open`).
    let opened = dma_open(OpenOptions::new().read(true).write(true), path).await;
    let file = match opened {
        Ok(file) => file,
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                return Ok(());
            }
            return Err(crate::StorageError::io("open", path, 0, e));
        }
    };
    let mut size = file.file_size().await.ctx("stat", path, 0)?;
    while size > STEP_BYTES {
        size -= STEP_BYTES;
        file.truncate(size).await.ctx("truncate", path, size)?;
        glommio::timer::sleep(PAUSE).await;
    }
    let _ = file.close().await;
    remove(path).await
}

pub async fn remove(path: &Path) -> Result<()> {
    match glommio::io::remove(path).await {
        Ok(()) => Ok(()),
        Err(e) => {
            let e: std::io::Error = e.into();
            if e.kind() == std::io::ErrorKind::NotFound {
                Ok(())
            } else {
                Err(crate::StorageError::io("remove", path, 0, e))
            }
        }
    }
}
