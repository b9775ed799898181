//! `dist/strom.service`: systemd accepts it (`systemd-analyze verify`, on a
//! copy whose programs are the built binaries, since verify insists that
//! `ExecStart` exists), a refused tuning knob cannot keep the broker from
//! starting (the `-` prefix on `strom-tune apply`), and
//! docs/operations.md quotes the file's lines as they are.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const SYSTEMD_ANALYZE: &str = "/usr/bin/systemd-analyze";
/// Where the unit expects the binaries (docs/operations.md installs them there).
const INSTALLED_DIR: &str = "/usr/local/bin";
const VERIFY_DEADLINE: Duration = Duration::from_secs(60);

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
