//! Start-up checks of the machine, each failure explained in one plain
//! sentence with what to do, before any executor starts (glommio's own
//! failures are panics or misleading messages such as "kernel too old"):
//!
//! - io_uring: the kernel has it and this process may use it;
//! - the data dir: it can be created and written, and its filesystem
//!   accepts O_DIRECT writes (ramfs, some FUSE and network filesystems do
//!   not); a warning when it is on tmpfs (memory: lost at a reboot);
//! - memlock: io_uring registers each executor's io memory, which counts
//!   against `RLIMIT_MEMLOCK` unless the process has CAP_IPC_LOCK (root
//!   does). Too little for an io memory that was asked for is an error;
//!   when none was asked for, a size that fits is chosen.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{bail, Context};

use crate::config::BrokerConfig;

pub use crate::config::IO_MEMORY_BYTES_DEFAULT;
/// The io memory chosen per executor when the memlock limit is too low
/// for the default (machine.md: 1 MiB works, below ~512 KiB glommio fails).
pub const IO_MEMORY_BYTES_FALLBACK: usize = 1 << 20;
pub const IO_MEMORY_BYTES_MIN: usize = 512 << 10;
const _: () = assert!(IO_MEMORY_BYTES_MIN <= IO_MEMORY_BYTES_FALLBACK);
const _: () = assert!(IO_MEMORY_BYTES_FALLBACK <= IO_MEMORY_BYTES_DEFAULT);

/// Block size of the O_DIRECT probe write (the physical block size).
const DIRECT_IO_PROBE_BYTES: usize = 4096;
const PROBE_FILE: &str = ".strom-direct-io-probe";
/// Linux capability number of CAP_IPC_LOCK.
const CAP_IPC_LOCK: u32 = 14;

/// Runs every check; returns the config with the io memory to use.
pub fn check(mut config: BrokerConfig) -> anyhow::Result<BrokerConfig> {
    // Memlock first: without CAP_IPC_LOCK, io_uring's rings count against
    // the same limit, so a limit that is too low also fails the probe.
    config.io_memory_bytes = io_memory(&config, memlock_limit(), has_ipc_lock())?;
    check_io_uring()?;
    check_data_dir(&config.data_dir)?;
    Ok(config)
}

fn check_io_uring() -> anyhow::Result<()> {
    // io_uring_params is 120 bytes; the kernel fills it in.
    let mut params = [0u32; 30];
    // SAFETY: io_uring_setup writes at most sizeof(io_uring_params) bytes
    // into `params`; the returned fd is ours and closed at once.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 2u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: fd is a descriptor this function owns.
        unsafe { libc::close(fd as i32) };
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    bail!("{}", io_uring_problem(error.raw_os_error().unwrap_or(0)))
}

/// What a failed io_uring_setup means, for a person.
pub fn io_uring_problem(errno: i32) -> String {
    let what = match errno {
        libc::ENOSYS => {
            "this kernel has no io_uring (Linux 5.8 or newer with CONFIG_IO_URING is needed)"
                .to_string()
        }
        libc::EPERM | libc::EACCES => {
            "io_uring is disabled for this process: set sysctl \
             kernel.io_uring_disabled=0, or allow io_uring_setup in the container's seccomp profile"
                .to_string()
        }
        libc::ENOMEM => "io_uring cannot allocate its rings: raise the memlock limit \
             (`ulimit -l`) or run with CAP_IPC_LOCK"
            .to_string(),
        _ => format!(
            "io_uring_setup failed: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    };
    format!("io_uring is unavailable: {what}; strom does all its I/O through io_uring")
}

fn check_data_dir(dir: &Path) -> anyhow::Result<()> {
    let unwritable = |error: std::io::Error| {
        let hint = if error.kind() == std::io::ErrorKind::PermissionDenied {
            // SAFETY: geteuid has no preconditions.
            format!(
                " (user id {} may not write there; choose another --data-dir or fix its permissions)",
                unsafe { libc::geteuid() }
            )
        } else {
            String::new()
        };
        anyhow::anyhow!("data dir {} is not writable: {error}{hint}", dir.display())
    };
    std::fs::create_dir_all(dir).map_err(|error| {
        let hint = if error.kind() == std::io::ErrorKind::PermissionDenied {
            " (choose another --data-dir or fix the permissions of its parent)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot create data dir {}: {error}{hint}", dir.display())
    })?;
    let probe = dir.join(PROBE_FILE);
    let full = |error: &std::io::Error| {
        matches!(
            error.raw_os_error(),
            Some(libc::ENOSPC) | Some(libc::EDQUOT)
        )
    };
    // A full disk is no reason to stay down: the logs open, serve reads
    // and refuse writes until space returns (docs/broker.md, "Full disk").
    if let Err(error) = std::fs::write(&probe, b"probe") {
        let _ = std::fs::remove_file(&probe);
        if full(&error) {
            tracing::warn!(dir = %dir.display(), %error, "data dir is full: starting; writes are refused until space returns");
            return Ok(());
        }
        return Err(unwritable(error));
    }
    let direct = direct_write(&probe);
    let _ = std::fs::remove_file(&probe);
    if let Err(error) = direct {
        if full(&error) {
            tracing::warn!(dir = %dir.display(), %error, "data dir is full: starting; writes are refused until space returns");
            return Ok(());
        }
        let filesystem = filesystem_name(dir);
        if error.raw_os_error() == Some(libc::EINVAL) {
            bail!(
                "data dir {} is on a filesystem without O_DIRECT ({filesystem}): strom writes its \
                 logs with O_DIRECT; put the data dir on ext4 or xfs",
                dir.display()
            );
        }
        return Err(error)
            .with_context(|| format!("O_DIRECT write probe in data dir {} failed", dir.display()));
    }
    if filesystem_name(dir) == "tmpfs" {
        tracing::warn!(
            dir = %dir.display(),
            "data dir is on tmpfs: every record lives in memory and is lost when the machine \
             restarts, acknowledged or not; put the data dir on ext4 or xfs"
        );
    }
    Ok(())
}

/// Opens `path` with O_DIRECT and writes one aligned block.
fn direct_write(path: &Path) -> std::io::Result<()> {
    let name = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string and flags; the fd is closed below.
    let fd = unsafe {
        libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECT | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let layout = std::alloc::Layout::from_size_align(DIRECT_IO_PROBE_BYTES, DIRECT_IO_PROBE_BYTES)
        .expect("a valid layout");
    // SAFETY: a non-zero-sized layout; freed below with the same layout.
    let buffer = unsafe { std::alloc::alloc_zeroed(layout) };
    let result = if buffer.is_null() {
        Err(std::io::Error::from_raw_os_error(libc::ENOMEM))
    } else {
        // SAFETY: buffer holds DIRECT_IO_PROBE_BYTES aligned bytes.
        let written = unsafe { libc::pwrite(fd, buffer.cast(), DIRECT_IO_PROBE_BYTES, 0) };
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(buffer, layout) };
        if written < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY: fd was opened above.
    unsafe { libc::close(fd) };
    result
}

fn filesystem_name(dir: &Path) -> String {
    let Ok(name) = CString::new(dir.as_os_str().as_bytes()) else {
        return "unknown filesystem".to_string();
    };
    // SAFETY: statfs fills the zeroed struct we pass.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(name.as_ptr(), &mut stat) } != 0 {
        return "unknown filesystem".to_string();
    }
    let magic = stat.f_type as u64;
    let known = match magic {
        0xef53 => "ext4",
        0x5846_5342 => "xfs",
        0x0102_1994 => "tmpfs",
        0x8584_58f6 => "ramfs",
        0x794c_7630 => "overlayfs",
        0x9123_683e => "btrfs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x2fc1_2fc1 => "zfs",
        0x0102_1997 => "9p",
        _ => return format!("filesystem type {magic:#x}"),
    };
    known.to_string()
}

fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0 {
        return None;
    }
    (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur)
}

/// Whether CAP_IPC_LOCK is in this process's effective set (root has it
/// unless it was dropped).
fn has_ipc_lock() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        // SAFETY: geteuid has no preconditions.
        return unsafe { libc::geteuid() } == 0;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|bits| u64::from_str_radix(bits.trim(), 16).ok())
        .is_some_and(|bits| bits & (1 << CAP_IPC_LOCK) != 0)
}

/// The io memory per executor to use, or why none fits.
fn io_memory(
    config: &BrokerConfig,
    memlock_limit_bytes: Option<u64>,
    ipc_lock: bool,
) -> anyhow::Result<Option<usize>> {
    let cores = config.cores.max(1) as u64;
    let Some(limit) = memlock_limit_bytes.filter(|_| !ipc_lock) else {
        return Ok(config.io_memory_bytes);
    };
    if let Some(asked) = config.io_memory_bytes {
        if asked as u64 * cores > limit {
            bail!(
                "the memlock limit ({limit} bytes, `ulimit -l`) is below the io memory asked for \
                 ({asked} bytes per executor x {cores} executors, strom.io.memory.bytes) and the \
                 process lacks CAP_IPC_LOCK: raise `ulimit -l`, run as root or with CAP_IPC_LOCK, \
                 or set strom.io.memory.bytes to {} or less",
                limit / cores
            );
        }
        return Ok(Some(asked));
    }
    if IO_MEMORY_BYTES_DEFAULT as u64 * cores <= limit {
        return Ok(None);
    }
    let fitting = (IO_MEMORY_BYTES_FALLBACK as u64).min(limit / cores) as usize & !4095;
    if fitting < IO_MEMORY_BYTES_MIN {
        bail!(
            "the memlock limit ({limit} bytes, `ulimit -l`) leaves {} bytes of io memory per \
             executor for {cores} executors, below the {IO_MEMORY_BYTES_MIN} glommio needs, and \
             the process lacks CAP_IPC_LOCK: raise `ulimit -l`, run as root or with \
             CAP_IPC_LOCK, or start fewer executors (--cores)",
            limit / cores
        );
    }
    tracing::info!(
        memlock_limit_bytes = limit,
        io_memory_bytes = fitting,
        "the memlock limit is below glommio's default io memory and the process lacks \
         CAP_IPC_LOCK: using a smaller io memory per executor (strom.io.memory.bytes)"
    );
    Ok(Some(fitting))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(cores: usize, io_memory_bytes: Option<usize>) -> BrokerConfig {
        let mut config = crate::config::load(&crate::config::Flags::default()).unwrap();
        config.cores = cores;
        config.io_memory_bytes = io_memory_bytes;
        config
    }

    #[test]
    fn io_memory_fits_the_memlock_limit_or_is_explained() {
        let mib = 1u64 << 20;
        // CAP_IPC_LOCK or no limit: whatever was asked.
        assert_eq!(
            io_memory(&config(2, Some(64 << 20)), Some(mib), true).unwrap(),
            Some(64 << 20)
        );
        assert_eq!(io_memory(&config(2, None), None, false).unwrap(), None);
        // Enough for the default: glommio's default.
        assert_eq!(
            io_memory(&config(2, None), Some(64 * mib), false).unwrap(),
            None
        );
        // 8 MiB for 2 executors: 1 MiB each is chosen.
        assert_eq!(
            io_memory(&config(2, None), Some(8 * mib), false).unwrap(),
            Some(1 << 20)
        );
        // Asked for more than fits: an error naming the setting and the fix.
        let error = io_memory(&config(2, Some(8 << 20)), Some(8 * mib), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("memlock limit (8388608 bytes"), "{error}");
        assert!(
            error.contains("strom.io.memory.bytes to 4194304 or less"),
            "{error}"
        );
        // Too little for even the smallest io memory.
        let error = io_memory(&config(4, None), Some(mib), false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("below the 524288"), "{error}");
    }

    #[test]
    fn io_uring_problems_name_the_fix() {
        assert!(io_uring_problem(libc::ENOSYS).contains("Linux 5.8"));
        assert!(io_uring_problem(libc::EPERM).contains("kernel.io_uring_disabled"));
        assert!(io_uring_problem(libc::ENOMEM).contains("ulimit -l"));
        assert!(io_uring_problem(libc::EINVAL).starts_with("io_uring is unavailable"));
    }

    #[test]
    fn this_machine_passes() {
        check_io_uring().unwrap();
        // Under target/, because /tmp may be a filesystem without O_DIRECT.
        let parent = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/tmp");
        std::fs::create_dir_all(parent).unwrap();
        let dir = tempfile::tempdir_in(parent).unwrap();
        check_data_dir(&dir.path().join("data")).unwrap();
    }
}
