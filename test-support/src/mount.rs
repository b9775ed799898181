//! Filesystems a test mounts for itself: a small ext4 image on a loop
//! device (a disk that fills up), on a size-bounded tmpfs (a disk whose
//! device fails once its backing store is full). Every step is a program
//! run with a deadline; a step that fails returns its program, arguments
//! and stderr, so a test that cannot mount (no root, no loop devices) can
//! say why it is skipped.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::run;

/// The longest one step (truncate, mkfs, mount, umount) may take.
pub const MOUNT_STEP_DEADLINE: Duration = Duration::from_secs(30);

/// Runs `program args`; `Err` names it and carries its stderr.
pub fn step(program: &str, args: &[&str]) -> Result<(), String> {
    let output = run(Command::new(program).args(args), None, MOUNT_STEP_DEADLINE);
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

fn text(path: &Path) -> Result<&str, String> {
    path.to_str()
        .ok_or_else(|| format!("{} is not UTF-8", path.display()))
}

/// Makes `image` a sparse file of `bytes` holding an empty ext4
/// filesystem (`mkfs.ext4 -q -F` plus `mkfs_options`).
pub fn ext4_image(image: &Path, bytes: u64, mkfs_options: &[&str]) -> Result<(), String> {
    step("truncate", &["-s", &bytes.to_string(), text(image)?])?;
    let mut args = vec!["-q", "-F"];
    args.extend_from_slice(mkfs_options);
    args.push(text(image)?);
    step("mkfs.ext4", &args)
}

/// Mounts the filesystem image `image` on `mount_point` through a loop
/// device.
pub fn mount_loop(image: &Path, mount_point: &Path) -> Result<(), String> {
    step("mount", &["-o", "loop", text(image)?, text(mount_point)?])
}

/// Mounts a tmpfs of at most `bytes` on `mount_point`.
pub fn mount_tmpfs(mount_point: &Path, bytes: u64) -> Result<(), String> {
    let size = format!("size={bytes}");
    step(
        "mount",
        &["-t", "tmpfs", "-o", &size, "tmpfs", text(mount_point)?],
    )
}

/// Unmounts `mount_point`; when it is still busy (a process that would not
/// die holds a file), detaches it lazily instead.
pub fn unmount(mount_point: &Path) {
    let Ok(path) = text(mount_point) else { return };
    if step("umount", &[path]).is_err() {
        let _ = step("umount", &["-l", path]);
    }
}
