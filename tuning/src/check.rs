//! `strom-tune check`: one finding per host property, each with its current
//! value, the value Strom wants and why. The rules are plain functions of
//! what [`Host`] reads, so they run the same on fixtures and on a host.

use serde::Serialize;

use crate::host::Host;
use crate::parse;

/// How a finding stands; ordered so the worst is the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Ok,
    Warn,
    Fail,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Warn => "warn",
            Severity::Fail => "fail",
        }
    }

    /// The process exit status for a worst finding of this severity.
    pub fn exit_code(self) -> u8 {
        match self {
            Severity::Ok => 0,
            Severity::Warn => 1,
            Severity::Fail => 2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub item: String,
    pub severity: Severity,
    pub current: String,
    pub recommended: String,
    pub why: String,
}

fn finding(
    item: impl Into<String>,
    severity: Severity,
    current: impl Into<String>,
    recommended: impl Into<String>,
    why: impl Into<String>,
) -> Finding {
    Finding {
        item: item.into(),
        severity,
        current: current.into(),
        recommended: recommended.into(),
        why: why.into(),
    }
}

/// Recommended values, shared with `apply`.
pub const AIO_MAX_NR_MIN: i64 = 1_048_576;
pub const SWAPPINESS_MAX: i64 = 10;
pub const SWAPPINESS_RECOMMENDED: i64 = 1;
pub const SOMAXCONN_MIN: i64 = 4096;
pub const SOCKET_BUFFER_BYTES_MIN: u64 = 16 << 20;
pub const OPEN_FILES_MIN: u64 = 65_536;
pub const NOMERGES_RECOMMENDED: &str = "2";
pub const GOVERNOR_RECOMMENDED: &str = "performance";
pub const THP_ENABLED_RECOMMENDED: &str = "madvise";
pub const THP_DEFRAG_RECOMMENDED: &str = "defer+madvise";
/// glommio 0.9 needs io_uring features of Linux 5.8.
pub const KERNEL_MIN: (u32, u32) = (5, 8);
/// glommio's io memory per executor when `strom.io.memory.bytes` is unset.
pub const IO_MEMORY_DEFAULT_BYTES: u64 = 10 << 20;

/// What the checks cannot read from files: results of probes that touch
/// the running kernel or the disk. Tests on fixtures set them.
#[derive(Debug, Clone, Default)]
pub struct Probes {
    /// `io_uring_setup` succeeded, or why not.
    pub io_uring: Option<Result<(), String>>,
    /// Opening and writing a file with O_DIRECT in the data dir worked, or why not.
    pub o_direct: Option<Result<(), String>>,
}

/// What the broker will ask of the host.
#[derive(Debug, Clone)]
pub struct Options {
    /// The data directory, absolute with symlinks resolved.
    pub data_dir: Option<String>,
    /// Executors the broker will start.
    pub cores: usize,
    /// io memory per executor (`strom.io.memory.bytes`).
    pub io_memory_bytes: u64,
}

/// Runs every check.
pub fn run(host: &Host, options: &Options, probes: &Probes) -> Vec<Finding> {
    let mut findings = vec![io_uring(host, probes), memlock(host, options)];
    findings.extend(cpus(host));
    findings.push(numa(host));
    findings.push(governor(host));
    findings.extend(transparent_hugepages(host));
    findings.push(swappiness(host));
    findings.push(aio_max_nr(host));
    findings.push(open_files(host));
    if let Some(dir) = &options.data_dir {
        findings.extend(data_dir(host, dir, probes));
    }
    findings.push(clocksource(host));
    findings.push(somaxconn(host));
    findings.extend(tcp_buffers(host));
    findings
}

/// The worst severity among findings (ok when there are none).
pub fn worst(findings: &[Finding]) -> Severity {
    findings
        .iter()
        .map(|f| f.severity)
        .max()
        .unwrap_or(Severity::Ok)
}

fn unreadable(item: &str, path: &str, recommended: &str) -> Finding {
    finding(
        item,
        Severity::Warn,
        format!("unreadable ({path})"),
        recommended,
        "cannot judge what cannot be read",
    )
}

fn io_uring(host: &Host, probes: &Probes) -> Finding {
    let item = "io_uring";
    let recommended = "available, kernel.io_uring_disabled=0, Linux >= 5.8";
    let release = host.read_trimmed("/proc/sys/kernel/osrelease");
    let version = release.as_deref().and_then(parse::kernel_version);
    let disabled = host
        .read("/proc/sys/kernel/io_uring_disabled")
        .and_then(|t| parse::integer(&t));
    let mut current = format!(
        "kernel {}, io_uring_disabled={}",
        release.as_deref().unwrap_or("?"),
        disabled.map_or("absent".to_string(), |d| d.to_string())
    );
    if let Some(Err(error)) = &probes.io_uring {
        current.push_str(&format!(", io_uring_setup failed: {error}"));
        return finding(
            item,
            Severity::Fail,
            current,
            recommended,
            "every executor runs on io_uring; the broker cannot start without it",
        );
    }
    if version.is_some_and(|v| v < KERNEL_MIN) {
        return finding(
            item,
            Severity::Fail,
            current,
            recommended,
            "glommio needs io_uring features of Linux 5.8",
        );
    }
    match disabled {
        Some(2) => finding(
            item,
            Severity::Fail,
            current,
            recommended,
            "io_uring is disabled for every process; the broker cannot start",
        ),
        Some(1) => finding(
            item,
            Severity::Warn,
            current,
            recommended,
            "io_uring is limited to root and kernel.io_uring_group; a broker running as another user cannot start",
        ),
        _ => finding(
            item,
            Severity::Ok,
            current,
            recommended,
            "every executor's disk and network I/O goes through io_uring",
        ),
    }
}

fn memlock(host: &Host, options: &Options) -> Finding {
    let item = "memlock";
    let wanted = options.io_memory_bytes * options.cores as u64;
    let recommended = format!(
        "CAP_IPC_LOCK, or RLIMIT_MEMLOCK >= {} ({} executors x {})",
        parse::human_bytes(wanted),
        options.cores,
        parse::human_bytes(options.io_memory_bytes)
    );
    let capabilities = host
        .read("/proc/self/status")
        .and_then(|s| parse::effective_capabilities(&s));
    let limit = host
        .read("/proc/self/limits")
        .and_then(|l| parse::proc_limit(&l, "Max locked memory"));
    let has_ipc_lock = capabilities.is_some_and(|c| c & (1 << parse::CAP_IPC_LOCK) != 0);
    let limit_text = match limit {
        Some((Some(soft), _)) => parse::human_bytes(soft),
        Some((None, _)) => "unlimited".to_string(),
        None => "unknown".to_string(),
    };
    let current = format!(
        "RLIMIT_MEMLOCK {limit_text}, CAP_IPC_LOCK {}",
        if has_ipc_lock { "yes" } else { "no" }
    );
    let enough = match limit {
        Some((None, _)) => true,
        Some((Some(soft), _)) => soft >= wanted,
        None => false,
    };
    if has_ipc_lock || enough {
        return finding(
            item,
            Severity::Ok,
            current,
            recommended,
            "io_uring registers each executor's io memory; CAP_IPC_LOCK or the limit covers it",
        );
    }
    finding(
        item,
        Severity::Warn,
        current,
        recommended,
        "without it glommio falls back to unregistered buffers (slower); raise LimitMEMLOCK in the unit, grant CAP_IPC_LOCK, or set strom.io.memory.bytes to at most the limit per executor (not below 1 MiB)",
    )
}

fn cpus(host: &Host) -> Vec<Finding> {
    let list = |name: &str| {
        host.read(&format!("/sys/devices/system/cpu/{name}"))
            .and_then(|t| parse::cpu_list(&t))
    };
    let (Some(present), Some(online)) = (list("present"), list("online")) else {
        return vec![unreadable(
            "cpus",
            "/sys/devices/system/cpu/online",
            "every present CPU online",
        )];
    };
    let isolated = list("isolated").unwrap_or_default();
    let current = format!(
        "{} present, {} online, {} isolated{}",
        present.len(),
        online.len(),
        isolated.len(),
        if isolated.is_empty() {
            String::new()
        } else {
            format!(
                " ({})",
                isolated
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            )
        }
    );
    let mut findings = Vec::new();
    if online.len() < present.len() {
        findings.push(finding(
            "cpus",
            Severity::Warn,
            current,
            "every present CPU online",
            "the broker starts one executor per online CPU; offline CPUs are capacity left unused",
        ));
    } else if !isolated.is_empty() {
        findings.push(finding(
            "cpus",
            Severity::Ok,
            current,
            "isolated CPUs for the broker only",
            "executors are pinned to CPUs 0..cores; isolate them from other work (isolcpus/nohz_full) or start with --cores",
        ));
    } else {
        findings.push(finding(
            "cpus",
            Severity::Ok,
            current,
            "every present CPU online",
            "one executor per online CPU; nothing else should compete for them",
        ));
    }
    findings
}

fn numa(host: &Host) -> Finding {
    let nodes = host
        .list("/sys/devices/system/node")
        .into_iter()
        .filter(|n| {
            n.strip_prefix("node")
                .is_some_and(|d| d.parse::<u32>().is_ok())
        })
        .count();
    let current = if nodes == 0 {
        "no NUMA information".to_string()
    } else {
        format!("{nodes} node(s)")
    };
    let severity = if nodes > 1 {
        Severity::Warn
    } else {
        Severity::Ok
    };
    finding(
        "numa",
        severity,
        current,
        "1 node, or one broker per node",
        "executors are pinned by CPU number, not by node: with several nodes, memory and the NIC may be remote; run one broker per node (numactl) with --cores",
    )
}

fn governor(host: &Host) -> Finding {
    let cpus: Vec<String> = host
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|n| {
            n.strip_prefix("cpu")
                .is_some_and(|d| d.parse::<u32>().is_ok())
        })
        .collect();
    let governors: Vec<String> = cpus
        .iter()
        .filter_map(|cpu| {
            host.read_trimmed(&format!(
                "/sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"
            ))
        })
        .collect();
    if governors.is_empty() {
        return finding(
            "cpufreq governor",
            Severity::Ok,
            "no cpufreq (fixed frequency or a VM)",
            GOVERNOR_RECOMMENDED,
            "nothing to set: the frequency is not scaled by this kernel",
        );
    }
    let mut distinct = governors.clone();
    distinct.sort();
    distinct.dedup();
    let all_performance = distinct == [GOVERNOR_RECOMMENDED];
    finding(
        "cpufreq governor",
        if all_performance {
            Severity::Ok
        } else {
            Severity::Warn
        },
        distinct.join(","),
        GOVERNOR_RECOMMENDED,
        "executors park and wake on every I/O completion; powersave and ondemand add wake-up latency and lower throughput",
    )
}

pub const THP_ENABLED: &str = "/sys/kernel/mm/transparent_hugepage/enabled";
pub const THP_DEFRAG: &str = "/sys/kernel/mm/transparent_hugepage/defrag";

fn transparent_hugepages(host: &Host) -> Vec<Finding> {
    let mut findings = Vec::new();
    match host.read(THP_ENABLED).and_then(|t| parse::selected(&t)) {
        Some(mode) => findings.push(finding(
            "transparent hugepages",
            if mode == "always" {
                Severity::Warn
            } else {
                Severity::Ok
            },
            mode,
            "madvise or never",
            "with always, khugepaged and compaction stall executors at random; madvise leaves it to programs that ask",
        )),
        None => findings.push(unreadable("transparent hugepages", THP_ENABLED, "madvise")),
    }
    if let Some(mode) = host.read(THP_DEFRAG).and_then(|t| parse::selected(&t)) {
        findings.push(finding(
            "transparent hugepages defrag",
            if mode == "always" {
                Severity::Warn
            } else {
                Severity::Ok
            },
            mode,
            "defer+madvise, madvise, defer or never",
            "always compacts memory synchronously inside page faults: millisecond stalls on the data path",
        ));
    }
    findings
}

pub const SWAPPINESS: &str = "/proc/sys/vm/swappiness";

fn swappiness(host: &Host) -> Finding {
    let Some(value) = host.read(SWAPPINESS).and_then(|t| parse::integer(&t)) else {
        return unreadable("vm.swappiness", SWAPPINESS, "1");
    };
    finding(
        "vm.swappiness",
        if value > SWAPPINESS_MAX {
            Severity::Warn
        } else {
            Severity::Ok
        },
        value.to_string(),
        SWAPPINESS_RECOMMENDED.to_string(),
        "the broker's memory (caches, buffers) should not be swapped out to make room for page cache; O_DIRECT I/O does not use the page cache",
    )
}

pub const AIO_MAX_NR: &str = "/proc/sys/fs/aio-max-nr";

fn aio_max_nr(host: &Host) -> Finding {
    let Some(value) = host.read(AIO_MAX_NR).and_then(|t| parse::integer(&t)) else {
        return unreadable("fs.aio-max-nr", AIO_MAX_NR, "1048576");
    };
    finding(
        "fs.aio-max-nr",
        if value < AIO_MAX_NR_MIN {
            Severity::Warn
        } else {
            Severity::Ok
        },
        value.to_string(),
        format!(">= {AIO_MAX_NR_MIN}"),
        "Strom's io_uring I/O does not count against it, but libaio users on the same host (fio, Seastar-based services) do; raising it costs nothing",
    )
}

fn open_files(host: &Host) -> Finding {
    let limit = host
        .read("/proc/self/limits")
        .and_then(|l| parse::proc_limit(&l, "Max open files"));
    let Some((soft, hard)) = limit else {
        return unreadable("open files", "/proc/self/limits", ">= 65536");
    };
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let current = format!("soft {}, hard {}", show(soft), show(hard));
    let severity = match soft {
        Some(soft) if soft < 4096 => Severity::Fail,
        Some(soft) if soft < OPEN_FILES_MIN => Severity::Warn,
        _ => Severity::Ok,
    };
    finding(
        "open files",
        severity,
        current,
        format!(">= {OPEN_FILES_MIN} (LimitNOFILE in the unit)"),
        "every partition keeps its segment files open and every client a socket; this is the limit of this shell, the broker gets its unit's",
    )
}

/// Checks of the filesystem and block device behind the data directory.
fn data_dir(host: &Host, dir: &str, probes: &Probes) -> Vec<Finding> {
    let mut findings = Vec::new();
    let mounts = host
        .read("/proc/self/mountinfo")
        .map(|t| parse::mountinfo(&t))
        .unwrap_or_default();
    let Some(mount) = parse::mount_for_path(&mounts, dir) else {
        findings.push(unreadable(
            "data dir filesystem",
            "/proc/self/mountinfo",
            "xfs or ext4",
        ));
        return findings;
    };
    let fs = mount.fs_type.as_str();
    let (severity, why) = match fs {
        "xfs" | "ext4" => (
            Severity::Ok,
            "O_DIRECT, fallocate and concurrent aligned writes work well",
        ),
        "tmpfs" | "ramfs" | "overlay" | "nfs" | "nfs4" | "fuse" | "9p" | "virtiofs" => (
            Severity::Fail,
            "no or unreliable O_DIRECT; not durable storage for a log",
        ),
        _ => (
            Severity::Warn,
            "untested with Strom; xfs and ext4 are what it is built and tested on",
        ),
    };
    findings.push(finding(
        "data dir filesystem",
        severity,
        format!(
            "{fs} on {} (mounted at {})",
            mount.source, mount.mount_point
        ),
        "xfs or ext4",
        why,
    ));

    let options: Vec<&str> = mount.options().collect();
    let mut problems = Vec::new();
    if options.iter().any(|o| *o == "sync" || *o == "dirsync") {
        problems.push("sync makes every write synchronous; Strom syncs when durability needs it");
    }
    if options.contains(&"data=journal") {
        problems.push("ext4 data=journal turns O_DIRECT off");
    }
    if options.contains(&"discard") {
        problems.push("online discard adds latency when segments are deleted; run fstrim periodically instead");
    }
    if options.contains(&"ro") {
        problems.push("read-only");
    }
    let atime = options.contains(&"strictatime");
    if atime {
        problems.push("strictatime writes inode times on every read");
    }
    findings.push(finding(
        "data dir mount options",
        if options.contains(&"ro") {
            Severity::Fail
        } else if problems.is_empty() {
            Severity::Ok
        } else {
            Severity::Warn
        },
        format!("{},{}", mount.mount_options, mount.super_options),
        "noatime (or relatime), no sync, no discard, not data=journal",
        if problems.is_empty() {
            "nothing in the way of O_DIRECT appends".to_string()
        } else {
            problems.join("; ")
        },
    ));

    match &probes.o_direct {
        Some(Ok(())) => findings.push(finding(
            "data dir O_DIRECT",
            Severity::Ok,
            "a 4 KiB O_DIRECT write and read work",
            "supported",
            "the log writes and reads segments with O_DIRECT through io_uring",
        )),
        Some(Err(error)) => findings.push(finding(
            "data dir O_DIRECT",
            Severity::Fail,
            format!("failed: {error}"),
            "supported",
            "the log writes and reads segments with O_DIRECT; the broker cannot open partitions here",
        )),
        None => {}
    }

    if mount.major == 0 {
        findings.push(finding(
            "data disk",
            Severity::Warn,
            format!("no block device ({fs})"),
            "a local SSD or NVMe disk",
            "the data dir is not on a block device",
        ));
        return findings;
    }
    let Some(queue_dir) = host.block_queue_dir(mount.major, mount.minor) else {
        findings.push(unreadable(
            "data disk",
            &format!("/sys/dev/block/{}:{}", mount.major, mount.minor),
            "scheduler none, nomerges 2",
        ));
        return findings;
    };
    findings.extend(disk_queue(host, &queue_dir));
    findings
}

/// The device's sysfs path (where `/sys/dev/block/M:m` points).
fn device_path(host: &Host, queue_dir: &str) -> String {
    host.read_link(queue_dir)
        .unwrap_or_else(|| queue_dir.to_string())
}

/// What the disk scheduler should be for a disk.
pub fn scheduler_recommended(host: &Host, queue_dir: &str) -> &'static str {
    let rotational = host
        .read_trimmed(&format!("{queue_dir}/queue/rotational"))
        .is_some_and(|r| r == "1");
    let device = device_path(host, queue_dir);
    let virtual_disk = device.contains("/virtio") || device.contains("/xen");
    if rotational && !virtual_disk {
        "mq-deadline"
    } else {
        "none"
    }
}

fn disk_queue(host: &Host, queue_dir: &str) -> Vec<Finding> {
    let device = device_path(host, queue_dir);
    let name = device.rsplit('/').next().unwrap_or(&device).to_string();
    let mut findings = Vec::new();
    let wanted = scheduler_recommended(host, queue_dir);
    match host
        .read(&format!("{queue_dir}/queue/scheduler"))
        .and_then(|t| parse::selected(&t))
    {
        Some(current) => findings.push(finding(
            format!("disk {name} scheduler"),
            if current == wanted {
                Severity::Ok
            } else {
                Severity::Warn
            },
            current,
            wanted,
            if wanted == "none" {
                "an SSD, NVMe or virtual disk orders requests itself; a kernel scheduler only adds latency to large sequential writes"
            } else {
                "a spinning disk benefits from deadline ordering"
            },
        )),
        None => findings.push(unreadable(
            &format!("disk {name} scheduler"),
            &format!("{queue_dir}/queue/scheduler"),
            wanted,
        )),
    }
    if let Some(current) = host.read_trimmed(&format!("{queue_dir}/queue/nomerges")) {
        findings.push(finding(
            format!("disk {name} nomerges"),
            if current == NOMERGES_RECOMMENDED {
                Severity::Ok
            } else {
                Severity::Warn
            },
            current,
            NOMERGES_RECOMMENDED,
            "Strom already submits large aligned writes; trying to merge them costs CPU per request",
        ));
    }
    findings
}

fn clocksource(host: &Host) -> Finding {
    const DIR: &str = "/sys/devices/system/clocksource/clocksource0";
    let Some(current) = host.read_trimmed(&format!("{DIR}/current_clocksource")) else {
        return unreadable("clocksource", DIR, "tsc");
    };
    let available = host
        .read(&format!("{DIR}/available_clocksource"))
        .map(|t| parse::choices(&t))
        .unwrap_or_default();
    let (severity, recommended) = match current.as_str() {
        "tsc" => (Severity::Ok, "tsc"),
        "kvm-clock" | "arch_sys_counter" if !available.iter().any(|c| c == "tsc") => {
            (Severity::Ok, current.as_str())
        }
        _ if available.iter().any(|c| c == "tsc") => (Severity::Warn, "tsc"),
        "kvm-clock" | "arch_sys_counter" => (Severity::Ok, current.as_str()),
        _ => (Severity::Warn, "tsc"),
    };
    finding(
        "clocksource",
        severity,
        format!("{current} (available: {})", available.join(" ")),
        recommended,
        "timestamps and latency timers read the clock on every request; tsc (and kvm-clock) are read without a system call, hpet and acpi_pm cost microseconds",
    )
}

pub const SOMAXCONN: &str = "/proc/sys/net/core/somaxconn";

fn somaxconn(host: &Host) -> Finding {
    let Some(value) = host.read(SOMAXCONN).and_then(|t| parse::integer(&t)) else {
        return unreadable("net.core.somaxconn", SOMAXCONN, "4096");
    };
    finding(
        "net.core.somaxconn",
        if value < SOMAXCONN_MIN {
            Severity::Warn
        } else {
            Severity::Ok
        },
        value.to_string(),
        format!(">= {SOMAXCONN_MIN}"),
        "caps every listener's accept backlog; bursts of client connections (a restarting consumer fleet) overflow a short one",
    )
}

pub const RMEM_MAX: &str = "/proc/sys/net/core/rmem_max";
pub const WMEM_MAX: &str = "/proc/sys/net/core/wmem_max";
pub const TCP_RMEM: &str = "/proc/sys/net/ipv4/tcp_rmem";
pub const TCP_WMEM: &str = "/proc/sys/net/ipv4/tcp_wmem";

fn tcp_buffers(host: &Host) -> Vec<Finding> {
    let mut findings = Vec::new();
    let recommended = format!(">= {}", parse::human_bytes(SOCKET_BUFFER_BYTES_MIN));
    for (item, path) in [
        ("net.core.rmem_max", RMEM_MAX),
        ("net.core.wmem_max", WMEM_MAX),
    ] {
        match host.read(path).and_then(|t| parse::integer(&t)) {
            Some(value) => findings.push(finding(
                item,
                if (value as u64) < SOCKET_BUFFER_BYTES_MIN {
                    Severity::Warn
                } else {
                    Severity::Ok
                },
                parse::human_bytes(value as u64),
                recommended.clone(),
                "caps socket buffers a client or the broker sets explicitly; large produce and fetch responses need room for a bandwidth-delay product",
            )),
            None => findings.push(unreadable(item, path, &recommended)),
        }
    }
    for (item, path) in [
        ("net.ipv4.tcp_rmem max", TCP_RMEM),
        ("net.ipv4.tcp_wmem max", TCP_WMEM),
    ] {
        match host.read(path).and_then(|t| parse::triple(&t)) {
            Some([_, _, max]) => findings.push(finding(
                item,
                if max < SOCKET_BUFFER_BYTES_MIN {
                    Severity::Warn
                } else {
                    Severity::Ok
                },
                parse::human_bytes(max),
                recommended.clone(),
                "the ceiling of TCP buffer autotuning; below it one connection cannot fill a fast link",
            )),
            None => findings.push(unreadable(item, path, &recommended)),
        }
    }
    findings
}

/// Formats findings as aligned text lines, one per finding.
pub fn render_text(findings: &[Finding]) -> String {
    let item_width = findings.iter().map(|f| f.item.len()).max().unwrap_or(0);
    let current_width = findings
        .iter()
        .map(|f| f.current.len())
        .max()
        .unwrap_or(0)
        .min(48);
    let mut out = String::new();
    for f in findings {
        out.push_str(&format!(
            "{:<4}  {:<item_width$}  {:<current_width$}  want: {}  ({})\n",
            f.severity.label(),
            f.item,
            f.current,
            f.recommended,
            f.why,
        ));
    }
    out
}

/// Formats findings as a JSON array of objects.
pub fn render_json(findings: &[Finding]) -> String {
    serde_json::to_string_pretty(findings).expect("findings serialize")
}
