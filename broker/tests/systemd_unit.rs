//! `dist/strom.service`: systemd accepts it (`systemd-analyze verify`, on a
//! copy whose programs are the built binaries, since verify insists that
//! `ExecStart` exists), a refused tuning knob cannot keep the broker from
//! starting (the `-` prefix on `strom-tune apply`), its sandbox rates
//! below 5 in `systemd-analyze security` and the broker runs inside it
//! (every system call, socket family, memory mapping and written file of
//! a broker serving clients, traced with strace, is one the unit allows),
//! and docs/operations.md quotes the file's lines as they are.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{free_port, http_get, poll_until, run, strom_at, strom_bin, wait_deadline};

const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";
/// Where the unit expects the binaries (docs/operations.md installs them there).
const INSTALLED_DIR: &str = "/usr/local/bin";
const VERIFY_DEADLINE: Duration = Duration::from_secs(60);
/// The exposure `systemd-analyze security` may rate the unit at most
/// (0 = locked down, 10 = unprotected; below 5 it says "OK" or better).
const EXPOSURE_MAX: f64 = 5.0;
/// How long the traced broker may take to start and to stop.
const TRACED_DEADLINE: Duration = Duration::from_secs(60);

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn unit_text() -> String {
    let path = repository().join("dist/strom.service");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A command line of the unit: its prefixes (`-`, `+`, ...) and the rest.
struct Exec {
    prefixes: String,
    command: String,
}

fn exec_lines(unit: &str, key: &str) -> Vec<Exec> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .map(|value| {
            let command = value.trim_start_matches(['-', '+', '!', '@', ':', '|']);
            Exec {
                prefixes: value[..value.len() - command.len()].to_string(),
                command: command.to_string(),
            }
        })
        .collect()
}

/// Runs `systemd-analyze verify` on `unit` written as `strom.service` in a
/// fresh directory; returns whether it passed and what it printed.
fn verify(unit: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strom.service");
    std::fs::write(&path, unit).unwrap();
    let out = common::run(
        Command::new(SYSTEMD_ANALYZE).arg("verify").arg(&path),
        None,
        VERIFY_DEADLINE,
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
}

#[test]
fn the_unit_starts_the_broker_even_when_tuning_is_refused() {
    let unit = unit_text();
    let pre = exec_lines(&unit, "ExecStartPre");
    let tune = pre
        .iter()
        .find(|e| e.command.contains("strom-tune apply"))
        .expect("the unit tunes the host with `strom-tune apply` before each start");
    // strom-tune apply exits 1 when the kernel refuses a knob (a VM, a
    // container): without `-` systemd would fail the start, and with
    // Restart=on-failure retry it forever.
    assert!(
        tune.prefixes.contains('-'),
        "ExecStartPre={}{} must ignore strom-tune's exit status (`-`)",
        tune.prefixes,
        tune.command
    );
    assert!(
        tune.prefixes.contains('+'),
        "strom-tune apply writes /proc/sys and /sys: it runs as root (`+`)"
    );
    // Nothing else runs before the broker that could stop it.
    for e in &pre {
        assert!(
            e.prefixes.contains('-'),
            "ExecStartPre={}{} could keep the broker from starting",
            e.prefixes,
            e.command
        );
    }
    let start = exec_lines(&unit, "ExecStart");
    assert_eq!(start.len(), 1, "one ExecStart");
    assert!(
        start[0]
            .command
            .starts_with(&format!("{INSTALLED_DIR}/strom start ")),
        "{}",
        start[0].command
    );
}

#[test]
fn systemd_analyze_verifies_the_unit_with_the_built_binaries() {
    if !Path::new(SYSTEMD_ANALYZE).exists() {
        eprintln!(
            "\n!!!!! SKIPPED: {SYSTEMD_ANALYZE} is missing, dist/strom.service was NOT verified \
             (install systemd to run this check) !!!!!\n"
        );
        return;
    }
    let strom = Path::new(env!("CARGO_BIN_EXE_strom"));
    // strom-tune is built next to strom by a workspace build; verify does
    // not look for it (its `-` prefix tells systemd a failure is fine),
    // but the copy names where it would be.
    let strom_tune = strom.with_file_name("strom-tune");
    let unit = unit_text();
    let built = unit
        .replace(
            &format!("{INSTALLED_DIR}/strom-tune "),
            &format!("{} ", strom_tune.display()),
        )
        .replace(
            &format!("{INSTALLED_DIR}/strom "),
            &format!("{} ", strom.display()),
        );
    assert!(
        !built
            .lines()
            .any(|l| !l.starts_with('#') && l.contains(INSTALLED_DIR)),
        "a program of the unit is neither strom nor strom-tune:\n{built}"
    );
    let (passed, printed) = verify(&built);
    // verify exits 0 on some complaints (an unknown key is "ignoring"):
    // anything it prints is a finding.
    assert!(
        passed && printed.trim().is_empty(),
        "systemd-analyze verify:\n{printed}\nunit:\n{built}"
    );

    // The check can fail: a misspelt key, and a broker that is not there.
    let misspelt = built.replace("\nRestart=", "\nRestrat=");
    let (_, printed) = verify(&misspelt);
    assert!(printed.contains("Restrat"), "{printed}");
    let missing = built.replace(
        &format!("{} ", strom.display()),
        "/nonexistent/strom-broker-binary ",
    );
    let (passed, printed) = verify(&missing);
    assert!(
        !passed && printed.contains("/nonexistent/strom-broker-binary"),
        "{printed}"
    );
}

#[test]
fn operations_doc_refers_to_the_unit_file_and_quotes_it_as_it_is() {
    let doc = std::fs::read_to_string(repository().join("docs/operations.md")).unwrap();
    assert!(doc.contains("dist/strom.service"), "docs/operations.md");
    let unit = unit_text();
    let quoted: Vec<&str> = doc.lines().filter(|l| l.starts_with("ExecStart")).collect();
    assert!(!quoted.is_empty(), "the doc shows the ExecStartPre line");
    for line in quoted {
        assert!(
            unit.lines().any(|u| u == line),
            "docs/operations.md quotes `{line}`, which dist/strom.service does not have"
        );
    }
}

/// The values of `key=` lines of the unit, in order.
fn values<'a>(unit: &'a str, key: &str) -> Vec<&'a str> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .map(str::trim)
        .collect()
}

/// `systemd-analyze security`'s overall exposure of `unit`, rated as
/// `strom.service` without installing it.
fn exposure(unit: &str) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strom.service");
    std::fs::write(&path, unit).unwrap();
    let out = run(
        Command::new(SYSTEMD_ANALYZE)
            .args(["security", "--offline=true", "--no-pager"])
            .arg(&path),
        None,
        VERIFY_DEADLINE,
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let line = printed
        .lines()
        .find_map(|l| l.split("Overall exposure level for strom.service:").nth(1))
        .unwrap_or_else(|| {
            panic!(
                "systemd-analyze security printed no overall exposure:\n{printed}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    line.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("exposure {line:?}"))
}

#[test]
fn systemd_analyze_security_rates_the_unit_below_5() {
    assert!(
        Path::new(SYSTEMD_ANALYZE).exists(),
        "{SYSTEMD_ANALYZE} is missing: install systemd (scripts/test does)"
    );
    let unit = unit_text();
    // What a broker's unit must have, whatever the score.
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("LimitMEMLOCK", "infinity"),
        ("LimitNOFILE", "1048576"),
    ] {
        assert!(
            values(&unit, key).contains(&value),
            "dist/strom.service lacks {key}={value}"
        );
    }
    // The data dir is the one the unit tunes, and the only one writable.
    let tuned = exec_lines(&unit, "ExecStartPre")
        .iter()
        .find_map(|e| {
            let words: Vec<&str> = e.command.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "--data-dir")?;
            words.get(at + 1).map(|w| w.to_string())
        })
        .expect("strom-tune apply names the data dir");
    assert_eq!(values(&unit, "ReadWritePaths"), [tuned.as_str()]);

    let rated = exposure(&unit);
    assert!(
        rated < EXPOSURE_MAX,
        "systemd-analyze security rates dist/strom.service {rated}, not below {EXPOSURE_MAX}"
    );
    // The rating can fail: the unit without its sandbox is rated unsafe.
    let unsandboxed: String = unit
        .split("\n# Sandbox")
        .next()
        .map(|head| format!("{head}\n[Install]\nWantedBy=multi-user.target\n"))
        .unwrap();
    let unsafe_rating = exposure(&unsandboxed);
    assert!(
        unsafe_rating >= EXPOSURE_MAX,
        "without its sandbox the unit is rated {unsafe_rating}:\n{unsandboxed}"
    );
}

/// The system calls of the groups `systemd-analyze syscall-filter` lists
/// (`@system-service`, ...), each group expanded into its calls.
fn syscall_groups() -> std::collections::BTreeMap<String, Vec<String>> {
    let out = run(
        Command::new(SYSTEMD_ANALYZE).arg("syscall-filter"),
        None,
        VERIFY_DEADLINE,
    );
    let mut groups: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut current: Option<String> = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if line.starts_with('@') {
            let name = line.split_whitespace().next().unwrap().to_string();
            groups.insert(name.clone(), Vec::new());
            current = Some(name);
        } else if let Some(group) = &current {
            let item = line.trim();
            if !item.is_empty() && !item.starts_with('#') {
                groups.get_mut(group).unwrap().push(item.to_string());
            }
        }
    }
    assert!(
        groups.contains_key("@system-service"),
        "systemd-analyze syscall-filter lists no @system-service"
    );
    groups
}

fn expand(
    groups: &std::collections::BTreeMap<String, Vec<String>>,
    item: &str,
    out: &mut BTreeSet<String>,
) {
    match groups.get(item) {
        Some(members) => {
            for member in members {
                expand(groups, member, out);
            }
        }
        None => {
            out.insert(item.to_string());
        }
    }
}

/// The system calls the unit's `SystemCallFilter=` lines allow: the
/// allow-listed groups and calls, less the `~` ones.
fn allowed_syscalls(unit: &str) -> BTreeSet<String> {
    let groups = syscall_groups();
    let (mut allowed, mut denied) = (BTreeSet::new(), BTreeSet::new());
    for value in values(unit, "SystemCallFilter") {
        let (set, items) = match value.strip_prefix('~') {
            Some(items) => (&mut denied, items),
            None => (&mut allowed, value),
        };
        for item in items.split_whitespace() {
            expand(&groups, item, set);
        }
    }
    assert!(
        !allowed.is_empty(),
        "the unit has no system call allow list"
    );
    allowed.difference(&denied).cloned().collect()
}

/// Every open file of process `pid` that is open for writing, its
/// standard input and outputs aside (systemd connects them to the journal).
fn files_open_for_writing(pid: u32) -> Vec<PathBuf> {
    let mut written = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if ["0", "1", "2"].contains(&fd.file_name().to_string_lossy().as_ref()) {
            continue;
        }
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        if !target.is_absolute() {
            continue; // socket:[...], anon_inode:[...], pipe:[...]
        }
        let info = std::fs::read_to_string(format!(
            "/proc/{pid}/fdinfo/{}",
            fd.file_name().to_string_lossy()
        ))
        .unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        // O_WRONLY or O_RDWR.
        if flags & 0o3 != 0 {
            written.push(target);
        }
    }
    written
}

#[test]
fn the_broker_serves_within_the_unit_s_sandbox() {
    assert!(
        Path::new(SYSTEMD_ANALYZE).exists(),
        "{SYSTEMD_ANALYZE} is missing: install systemd (scripts/test does)"
    );
    let unit = unit_text();
    let allowed = allowed_syscalls(&unit);
    let families: Vec<&str> = values(&unit, "RestrictAddressFamilies")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    assert!(!families.is_empty(), "the unit restricts no address family");
    let write_execute_denied = values(&unit, "MemoryDenyWriteExecute").contains(&"yes");

    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let trace = dir.path().join("trace");
    let log_path = dir.path().join("strom.log");
    let (port, admin_port) = (free_port(), free_port());
    let bootstrap = format!("127.0.0.1:{port}");
    let admin = format!("127.0.0.1:{admin_port}");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(strom_bin())
        .args(["start", "--cores", "2", "--listen", &bootstrap])
        .args(["--admin-listen", &admin, "--data-dir"])
        .arg(&data_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("strace runs (apt-get install strace; scripts/test installs it)");
    let broker_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let started = poll_until(TRACED_DEADLINE, || {
        broker_log().contains(common::STARTED_LINE).then_some(())
    });
    assert!(
        started.is_some(),
        "the traced broker did not start:\n{}",
        broker_log()
    );
    let children = format!("/proc/{0}/task/{0}/children", strace.id());
    let pid: u32 = std::fs::read_to_string(&children)
        .unwrap()
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .expect("strace's child, the broker");

    // A client's everyday work: a topic, keyed records in and out, metrics.
    let tool = |args: &[&str], stdin: Option<&[u8]>| {
        let out = strom_at(Some(&bootstrap), args, stdin);
        assert!(
            out.status.success(),
            "strom {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            broker_log()
        );
        out.stdout
    };
    tool(&["topic", "create", "sandboxed", "--partitions", "2"], None);
    tool(
        &["produce", "sandboxed", "--key-separator", ":"],
        Some(b"a:1\nb:2\nc:3\n"),
    );
    let consumed = tool(
        &["consume", "sandboxed", "--from-beginning", "--exit-at-end"],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&consumed).lines().count(), 3);
    let (status, _) = http_get(&admin, "/metrics");
    assert_eq!(status, 200);

    // ProtectSystem=strict: the broker writes below its data dir only
    // (files it opened through io_uring are not in the trace, so its open
    // files are looked at too).
    let mut outside: Vec<String> = files_open_for_writing(pid)
        .into_iter()
        .filter(|path| !path.starts_with(&data_dir) && !path.starts_with("/dev/"))
        .map(|path| path.display().to_string())
        .collect();

    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let stopped = wait_deadline(&mut strace, TRACED_DEADLINE);
    if stopped.is_none() {
        let _ = strace.kill();
        panic!("the traced broker did not stop:\n{}", broker_log());
    }

    let trace = std::fs::read_to_string(&trace).unwrap();
    let mut calls: BTreeSet<String> = BTreeSet::new();
    let mut refused: BTreeSet<String> = BTreeSet::new();
    for line in trace.lines() {
        // `PID name(args) = result`; resumed calls and signals are skipped.
        let Some((_, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        let Some((name, args)) = call.split_once('(') else {
            continue;
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        calls.insert(name.to_string());
        if !allowed.contains(name) {
            refused.insert(format!("SystemCallFilter: {name}"));
        }
        if name == "socket" {
            let family = args.split(',').next().unwrap_or("").trim();
            if !families.contains(&family) {
                refused.insert(format!("RestrictAddressFamilies: {family}"));
            }
        }
        let exec = args.contains("PROT_EXEC");
        if write_execute_denied
            && ((name == "mprotect" && exec)
                || (name == "mmap" && exec && args.contains("PROT_WRITE")))
        {
            refused.insert(format!("MemoryDenyWriteExecute: {}", line.trim()));
        }
        let writes = ["O_WRONLY", "O_RDWR", "O_CREAT"]
            .iter()
            .any(|flag| args.contains(flag));
        if (name == "openat" || name == "open") && writes {
            if let Some(path) = args.split('"').nth(1) {
                if !Path::new(path).starts_with(&data_dir) && !path.starts_with("/dev/") {
                    outside.push(path.to_string());
                }
            }
        }
    }
    assert!(
        calls.contains("io_uring_setup") && calls.contains("socket") && calls.len() > 30,
        "the trace misses the broker's calls: {calls:?}"
    );
    // The check can fail: a filter without @aio refuses io_uring.
    let without_aio = allowed_syscalls(&format!("{unit}\nSystemCallFilter=~@aio\n"));
    assert!(!without_aio.contains("io_uring_setup"));
    assert!(
        refused.is_empty(),
        "dist/strom.service would refuse what the broker does:\n{}",
        refused.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(
        outside.is_empty(),
        "the broker writes outside its data dir (ProtectSystem=strict): {outside:?}"
    );
}
