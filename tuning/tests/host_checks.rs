//! The check rules on fixture trees of /proc and /sys (a tuned host and a
//! stock one), and on the host the tests run on.

use std::path::PathBuf;

use tuning::check::{self, Finding, Options, Probes, Severity};
use tuning::host::Host;
use tuning::probe;

fn fixture(name: &str) -> Host {
    Host::at(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
}

fn findings(host: &Host, data_dir: &str, probes: &Probes) -> Vec<Finding> {
    let options = Options {
        data_dir: Some(data_dir.to_string()),
        cores: 2,
        io_memory_bytes: check::IO_MEMORY_DEFAULT_BYTES,
    };
    check::run(host, &options, probes)
}

/// Each row: item, severity, text the current value must contain.
fn check(findings: &[Finding], expected: &[(&str, Severity, &str)]) {
    for (item, severity, current) in expected {
        let found = findings
            .iter()
            .find(|f| f.item == *item)
            .unwrap_or_else(|| panic!("no finding {item:?} in {findings:#?}"));
        assert_eq!(found.severity, *severity, "{found:#?}");
        assert!(
            found.current.contains(current),
            "{item}: {:?} should contain {current:?}",
            found.current
        );
        assert!(
            !found.recommended.is_empty() && !found.why.is_empty(),
            "{found:#?}"
        );
    }
}

#[test]
fn a_tuned_host_passes_every_check() {
    let probes = Probes {
        io_uring: Some(Ok(())),
        o_direct: Some(Ok(())),
    };
    let found = findings(&fixture("tuned"), "/var/lib/strom/data", &probes);
    let not_ok: Vec<_> = found
        .iter()
        .filter(|f| f.severity != Severity::Ok)
        .collect();
    assert!(not_ok.is_empty(), "{not_ok:#?}");
    assert_eq!(check::worst(&found), Severity::Ok);
    check(
        &found,
        &[
            ("io_uring", Severity::Ok, "io_uring_disabled=0"),
            ("memlock", Severity::Ok, "CAP_IPC_LOCK yes"),
            ("cpus", Severity::Ok, "4 present, 4 online, 0 isolated"),
            ("numa", Severity::Ok, "1 node"),
            ("cpufreq governor", Severity::Ok, "performance"),
            ("transparent hugepages", Severity::Ok, "madvise"),
            (
                "transparent hugepages defrag",
                Severity::Ok,
                "defer+madvise",
            ),
            ("vm.swappiness", Severity::Ok, "1"),
            ("fs.aio-max-nr", Severity::Ok, "1048576"),
            ("open files", Severity::Ok, "soft 1048576"),
            ("data dir filesystem", Severity::Ok, "xfs on /dev/nvme0n1"),
            ("data dir mount options", Severity::Ok, "noatime"),
            ("data dir O_DIRECT", Severity::Ok, "work"),
            ("disk nvme0n1 scheduler", Severity::Ok, "none"),
            ("disk nvme0n1 nomerges", Severity::Ok, "2"),
            ("clocksource", Severity::Ok, "tsc"),
            ("net.core.somaxconn", Severity::Ok, "4096"),
            ("net.core.rmem_max", Severity::Ok, "16 MiB"),
            ("net.ipv4.tcp_wmem max", Severity::Ok, "16 MiB"),
        ],
    );
}

#[test]
fn a_stock_host_gets_a_finding_for_every_deviation() {
    let probes = Probes {
        io_uring: None,
        o_direct: Some(Err("Invalid argument (os error 22)".to_string())),
    };
    let found = findings(&fixture("untuned"), "/data/strom", &probes);
    assert_eq!(check::worst(&found), Severity::Fail);
    check(
        &found,
        &[
            ("io_uring", Severity::Fail, "io_uring_disabled=2"),
            (
                "memlock",
                Severity::Warn,
                "RLIMIT_MEMLOCK 64 KiB, CAP_IPC_LOCK no",
            ),
            ("cpus", Severity::Warn, "8 present, 6 online"),
            ("numa", Severity::Warn, "2 node"),
            ("cpufreq governor", Severity::Warn, "powersave"),
            ("transparent hugepages", Severity::Warn, "always"),
            ("transparent hugepages defrag", Severity::Warn, "always"),
            ("vm.swappiness", Severity::Warn, "60"),
            ("fs.aio-max-nr", Severity::Warn, "65536"),
            ("open files", Severity::Fail, "soft 1024, hard 524288"),
            // A partition: the filesystem's device, the disk's queue.
            (
                "data dir filesystem",
                Severity::Ok,
                "xfs on /dev/nvme0n1p1 (mounted at /data)",
            ),
            ("data dir mount options", Severity::Warn, "discard"),
            ("data dir O_DIRECT", Severity::Fail, "os error 22"),
            ("disk nvme0n1 scheduler", Severity::Warn, "mq-deadline"),
            ("disk nvme0n1 nomerges", Severity::Warn, "0"),
            ("clocksource", Severity::Warn, "hpet"),
            ("net.core.somaxconn", Severity::Warn, "128"),
            ("net.core.wmem_max", Severity::Warn, "208 KiB"),
            ("net.ipv4.tcp_rmem max", Severity::Warn, "6 MiB"),
        ],
    );
    // A data dir on tmpfs (stacked over /data) fails and has no disk.
    let found = findings(&fixture("untuned"), "/data/tmp/strom", &Probes::default());
    check(
        &found,
        &[
            ("data dir filesystem", Severity::Fail, "tmpfs"),
            ("data disk", Severity::Warn, "no block device"),
        ],
    );
}

#[test]
fn memlock_is_enough_when_the_limit_covers_the_io_memory() {
    let options = |io_memory_bytes| Options {
        data_dir: None,
        cores: 2,
        io_memory_bytes,
    };
    let memlock = |io_memory_bytes| {
        check::run(
            &fixture("untuned"),
            &options(io_memory_bytes),
            &Probes::default(),
        )
        .into_iter()
        .find(|f| f.item == "memlock")
        .unwrap()
        .severity
    };
    // The fixture's limit is 64 KiB for 2 executors.
    assert_eq!(memlock(32 << 10), Severity::Ok);
    assert_eq!(memlock(1 << 20), Severity::Warn);
}

#[test]
fn the_real_host_is_read_and_probed() {
    let host = Host::real();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let probes = Probes {
        io_uring: Some(probe::io_uring()),
        o_direct: Some(probe::o_direct(&dir)),
    };
    let options = Options {
        data_dir: Some(probe::resolve_dir(&dir)),
        cores: 2,
        io_memory_bytes: check::IO_MEMORY_DEFAULT_BYTES,
    };
    let found = check::run(&host, &options, &probes);
    // The project's machines have io_uring, O_DIRECT on ext4, readable
    // /proc and /sys (see docs/operations.md); nothing is "unreadable".
    check(
        &found,
        &[
            ("io_uring", Severity::Ok, "io_uring_disabled=0"),
            ("data dir O_DIRECT", Severity::Ok, "work"),
        ],
    );
    let unreadable: Vec<_> = found
        .iter()
        .filter(|f| f.current.starts_with("unreadable"))
        .collect();
    assert!(unreadable.is_empty(), "{unreadable:#?}");
    for item in [
        "memlock",
        "cpus",
        "numa",
        "transparent hugepages",
        "vm.swappiness",
        "fs.aio-max-nr",
        "open files",
        "data dir filesystem",
        "data dir mount options",
        "clocksource",
        "net.core.somaxconn",
        "net.ipv4.tcp_rmem max",
    ] {
        assert!(
            found.iter().any(|f| f.item == item),
            "missing {item}: {found:#?}"
        );
    }
    assert!(
        found
            .iter()
            .any(|f| f.item.starts_with("disk ") && f.item.ends_with(" scheduler")),
        "the data dir's disk is found: {found:#?}"
    );
}
