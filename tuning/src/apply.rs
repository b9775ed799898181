//! `strom-tune apply`: sets the sysctls and sysfs knobs that `check` flags
//! and that a running system can change. A knob already at (or beyond) its
//! recommended value is left alone, so a second run changes nothing.

use crate::check::{self, *};
use crate::host::Host;
use crate::parse;

/// One knob to set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub item: String,
    /// The host path written.
    pub path: String,
    pub from: String,
    pub to: String,
}

/// What happened to one change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    WouldSet,
    Set,
    Refused(String),
}

/// The changes that would bring the host to the recommended values.
/// `data_queue_dir` is the sysfs dir of the data disk, if known.
pub fn plan(host: &Host, data_queue_dir: Option<&str>) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut change = |item: &str, path: &str, from: String, to: String| {
        changes.push(Change {
            item: item.to_string(),
            path: path.to_string(),
            from,
            to,
        })
    };
    let integer = |path: &str| host.read(path).and_then(|t| parse::integer(&t));

    if let Some(v) = integer(AIO_MAX_NR).filter(|v| *v < AIO_MAX_NR_MIN) {
        change(
            "fs.aio-max-nr",
            AIO_MAX_NR,
            v.to_string(),
            AIO_MAX_NR_MIN.to_string(),
        );
    }
    if let Some(v) = integer(SWAPPINESS).filter(|v| *v > SWAPPINESS_MAX) {
        change(
            "vm.swappiness",
            SWAPPINESS,
            v.to_string(),
            SWAPPINESS_RECOMMENDED.to_string(),
        );
    }
    if let Some(v) = integer(SOMAXCONN).filter(|v| *v < SOMAXCONN_MIN) {
        change(
            "net.core.somaxconn",
            SOMAXCONN,
            v.to_string(),
            SOMAXCONN_MIN.to_string(),
        );
    }
    let buffer_min = SOCKET_BUFFER_BYTES_MIN as i64;
    for (item, path) in [
        ("net.core.rmem_max", RMEM_MAX),
        ("net.core.wmem_max", WMEM_MAX),
    ] {
        if let Some(v) = integer(path).filter(|v| *v < buffer_min) {
            change(item, path, v.to_string(), buffer_min.to_string());
        }
    }
    for (item, path) in [
        ("net.ipv4.tcp_rmem", TCP_RMEM),
        ("net.ipv4.tcp_wmem", TCP_WMEM),
    ] {
        if let Some([min, default, max]) = host.read(path).and_then(|t| parse::triple(&t)) {
            if max < SOCKET_BUFFER_BYTES_MIN {
                change(
                    item,
                    path,
                    format!("{min} {default} {max}"),
                    format!("{min} {default} {SOCKET_BUFFER_BYTES_MIN}"),
                );
            }
        }
    }
    for (item, path, wanted) in [
        (
            "transparent hugepages",
            THP_ENABLED,
            THP_ENABLED_RECOMMENDED,
        ),
        (
            "transparent hugepages defrag",
            THP_DEFRAG,
            THP_DEFRAG_RECOMMENDED,
        ),
    ] {
        let Some(text) = host.read(path) else {
            continue;
        };
        if parse::selected(&text).as_deref() == Some("always")
            && parse::choices(&text).iter().any(|c| c == wanted)
        {
            change(item, path, "always".to_string(), wanted.to_string());
        }
    }
    for cpu in host.list("/sys/devices/system/cpu") {
        if cpu
            .strip_prefix("cpu")
            .and_then(|d| d.parse::<u32>().ok())
            .is_none()
        {
            continue;
        }
        let path = format!("/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor");
        let Some(current) = host.read_trimmed(&path) else {
            continue;
        };
        let available = host
            .read(&format!(
                "/sys/devices/system/cpu/{cpu}/cpufreq/scaling_available_governors"
            ))
            .map(|t| parse::choices(&t))
            .unwrap_or_default();
        if current != GOVERNOR_RECOMMENDED && available.iter().any(|g| g == GOVERNOR_RECOMMENDED) {
            change(
                &format!("{cpu} cpufreq governor"),
                &path,
                current,
                GOVERNOR_RECOMMENDED.to_string(),
            );
        }
    }
    if let Some(queue_dir) = data_queue_dir {
        let path = format!("{queue_dir}/queue/scheduler");
        let wanted = check::scheduler_recommended(host, queue_dir);
        if let Some(text) = host.read(&path) {
            let current = parse::selected(&text);
            if current.as_deref() != Some(wanted)
                && parse::choices(&text).iter().any(|c| c == wanted)
            {
                change(
                    "data disk scheduler",
                    &path,
                    current.unwrap_or_default(),
                    wanted.to_string(),
                );
            }
        }
        let path = format!("{queue_dir}/queue/nomerges");
        if let Some(current) = host.read_trimmed(&path) {
            if current != NOMERGES_RECOMMENDED {
                change(
                    "data disk nomerges",
                    &path,
                    current,
                    NOMERGES_RECOMMENDED.to_string(),
                );
            }
        }
    }
    changes
}

/// Settings `check` may flag that `apply` deliberately leaves to the
/// operator, with the reason; listed only when they are off.
pub fn left_to_operator(host: &Host) -> Vec<String> {
    let mut notes = Vec::new();
    if host
        .read("/proc/sys/kernel/io_uring_disabled")
        .and_then(|t| parse::integer(&t))
        .is_some_and(|v| v != 0)
    {
        notes.push(
            "kernel.io_uring_disabled is a security policy; set it to 0 yourself if the broker may use io_uring"
                .to_string(),
        );
    }
    notes
}

/// Writes each change (or only reports it with `dry_run`). Without root
/// on the real host every change is refused with the reason.
pub fn execute(host: &Host, changes: &[Change], dry_run: bool) -> Vec<(Change, Outcome)> {
    // SAFETY: geteuid has no preconditions.
    let root = !host.is_real() || unsafe { libc::geteuid() } == 0;
    changes
        .iter()
        .map(|change| {
            let outcome = if dry_run {
                Outcome::WouldSet
            } else if !root {
                Outcome::Refused("needs root (run with sudo)".to_string())
            } else {
                match host.write(&change.path, &change.to) {
                    Ok(()) => Outcome::Set,
                    Err(error) => Outcome::Refused(match error.raw_os_error() {
                        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
                            format!("{error}: not writable here (a container or read-only /sys?)")
                        }
                        _ => error.to_string(),
                    }),
                }
            };
            (change.clone(), outcome)
        })
        .collect()
}

/// One line per change.
pub fn render(results: &[(Change, Outcome)]) -> String {
    if results.is_empty() {
        return "nothing to change\n".to_string();
    }
    let mut out = String::new();
    for (change, outcome) in results {
        let what = format!(
            "{} ({}): {} -> {}",
            change.item, change.path, change.from, change.to
        );
        match outcome {
            Outcome::WouldSet => out.push_str(&format!("would set {what}\n")),
            Outcome::Set => out.push_str(&format!("set {what}\n")),
            Outcome::Refused(reason) => out.push_str(&format!("refused {what}: {reason}\n")),
        }
    }
    out
}
