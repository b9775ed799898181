//! Probes of the running kernel and disk that no file tells: whether
//! io_uring can be set up, whether O_DIRECT works in a directory, and
//! which block device holds a directory.

use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::host::Host;
use crate::parse;

/// Sets up (and closes) a tiny io_uring, as glommio does at start.
pub fn io_uring() -> Result<(), String> {
    // The kernel's io_uring_params is 120 bytes; zeroed asks for defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes the params buffer we own; the
    // returned descriptor is closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().to_string());
    }
    // SAFETY: fd is a descriptor this function just opened.
    unsafe { libc::close(fd as i32) };
    Ok(())
}

/// One aligned 4 KiB write and read back with O_DIRECT in `dir`.
pub fn o_direct(dir: &Path) -> Result<(), String> {
    const PAGE: usize = 4096;
    let path = dir.join(".strom-tune-odirect.tmp");
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path)?;
        // O_DIRECT needs an aligned buffer: take a page-aligned slice of a
        // larger allocation.
        let mut storage = vec![0u8; PAGE * 2];
        let offset = storage.as_ptr().align_offset(PAGE);
        let buffer = &mut storage[offset..offset + PAGE];
        buffer.fill(0x5a);
        file.write_all(buffer)?;
        file.rewind()?;
        buffer.fill(0);
        file.read_exact(buffer)?;
        if buffer.iter().any(|b| *b != 0x5a) {
            return Err(std::io::Error::other("read back different bytes"));
        }
        Ok(())
    })();
    let _ = std::fs::remove_file(&path);
    result.map_err(|e| e.to_string())
}

/// A directory as an absolute path with symlinks resolved (as given when
/// it does not exist, e.g. a path inside a fixture tree).
pub fn resolve_dir(dir: &Path) -> String {
    dir.canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

/// The sysfs dir of the block device holding `dir`, if it has one.
pub fn queue_dir_for(host: &Host, dir: &str) -> Option<String> {
    let mounts = parse::mountinfo(&host.read("/proc/self/mountinfo")?);
    let mount = parse::mount_for_path(&mounts, dir)?;
    if mount.major == 0 {
        return None;
    }
    host.block_queue_dir(mount.major, mount.minor)
}
