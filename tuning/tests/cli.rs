//! `strom-tune` as a program: exit codes, JSON, `apply` on a copy of a
//! fixture tree (twice: the second run changes nothing), `apply --dry-run`
//! and a short `iotune` on the real host.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn strom_tune(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strom-tune"))
        .args(args)
        .output()
        .expect("strom-tune runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn check_exits_with_the_worst_finding() {
    let tuned = fixture("tuned");
    let output = strom_tune(&[
        "check",
        "--root",
        tuned.to_str().unwrap(),
        "--data-dir",
        "/var/lib/strom",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let lines = String::from_utf8(output.stdout).unwrap();
    assert!(lines.lines().count() >= 19, "{lines}");
    assert!(lines.lines().all(|l| l.starts_with("ok ")), "{lines}");

    let untuned = fixture("untuned");
    let output = strom_tune(&[
        "check",
        "--root",
        untuned.to_str().unwrap(),
        "--data-dir",
        "/data",
    ]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let output = strom_tune(&[
        "check",
        "--root",
        untuned.to_str().unwrap(),
        "--data-dir",
        "/data",
        "--json",
    ]);
    let findings: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let findings = findings.as_array().unwrap();
    let swappiness = findings
        .iter()
        .find(|f| f["item"] == "vm.swappiness")
        .unwrap();
    assert_eq!(swappiness["severity"], "warn");
    assert_eq!(swappiness["current"], "60");
    assert_eq!(swappiness["recommended"], "1");
    assert!(findings.iter().any(|f| f["severity"] == "fail"));
}

#[test]
fn check_runs_on_the_real_host() {
    let dir = scratch("check-real");
    let output = strom_tune(&["check", "--data-dir", dir.to_str().unwrap()]);
    let code = output.status.code().unwrap();
    let lines = String::from_utf8(output.stdout).unwrap();
    let worst = if lines.lines().any(|l| l.starts_with("fail")) {
        2
    } else if lines.lines().any(|l| l.starts_with("warn")) {
        1
    } else {
        0
    };
    assert_eq!(code, worst, "{lines}");
    for line in lines.lines() {
        assert!(
            ["ok ", "warn ", "fail "]
                .iter()
                .any(|p| line.starts_with(p))
                && line.contains("want: "),
            "{line}"
        );
    }
}

fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn apply_sets_each_knob_once_and_a_second_run_changes_nothing() {
    let root = scratch("apply-root").join("host");
    copy_tree(&fixture("untuned"), &root);
    let root_arg = root.to_str().unwrap();
    let args = ["apply", "--root", root_arg, "--data-dir", "/data/strom"];

    let dry = strom_tune(&[&args[..], &["--dry-run"]].concat());
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry));
    let planned = String::from_utf8(dry.stdout).unwrap();
    for expected in [
        "would set fs.aio-max-nr (/proc/sys/fs/aio-max-nr): 65536 -> 1048576",
        "would set vm.swappiness (/proc/sys/vm/swappiness): 60 -> 1",
        "would set net.core.somaxconn (/proc/sys/net/core/somaxconn): 128 -> 4096",
        "would set net.ipv4.tcp_rmem (/proc/sys/net/ipv4/tcp_rmem): 4096 131072 6291456 -> 4096 131072 16777216",
        "would set transparent hugepages (/sys/kernel/mm/transparent_hugepage/enabled): always -> madvise",
        "would set cpu5 cpufreq governor",
        "would set data disk scheduler",
        "mq-deadline -> none",
        "would set data disk nomerges",
        "not changed: kernel.io_uring_disabled",
    ] {
        assert!(planned.contains(expected), "missing {expected:?} in\n{planned}");
    }
    // A dry run changes nothing.
    let again = strom_tune(&[&args[..], &["--dry-run"]].concat());
    assert_eq!(String::from_utf8(again.stdout).unwrap(), planned);

    let applied = strom_tune(&args);
    assert_eq!(applied.status.code(), Some(0), "{}", text(&applied));
    let applied = String::from_utf8(applied.stdout).unwrap();
    assert_eq!(
        applied.lines().filter(|l| l.starts_with("set ")).count(),
        planned
            .lines()
            .filter(|l| l.starts_with("would set "))
            .count(),
        "{applied}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("proc/sys/vm/swappiness")).unwrap(),
        "1\n"
    );

    let second = strom_tune(&[&args[..], &["--dry-run"]].concat());
    let second = String::from_utf8(second.stdout).unwrap();
    assert!(second.starts_with("nothing to change\n"), "{second}");
    assert!(!second.contains("would set"), "{second}");
    // And check agrees with what apply did.
    let check = strom_tune(&["check", "--root", root_arg, "--data-dir", "/data/strom"]);
    let check = String::from_utf8(check.stdout).unwrap();
    for item in [
        "vm.swappiness",
        "fs.aio-max-nr",
        "cpufreq governor",
        "nvme0n1 scheduler",
        "net.ipv4.tcp_wmem max",
    ] {
        let line = check.lines().find(|l| l.contains(item)).unwrap();
        assert!(line.starts_with("ok "), "{line}");
    }
}

#[test]
fn apply_dry_run_on_the_real_host_only_reports() {
    let dir = scratch("apply-real");
    let swappiness_before = std::fs::read_to_string("/proc/sys/vm/swappiness").unwrap();
    let output = strom_tune(&["apply", "--dry-run", "--data-dir", dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let lines = String::from_utf8(output.stdout).unwrap();
    for line in lines.lines() {
        assert!(
            line.starts_with("would set ")
                || line == "nothing to change"
                || line.starts_with("not changed: "),
            "{line}"
        );
    }
    assert_eq!(
        std::fs::read_to_string("/proc/sys/vm/swappiness").unwrap(),
        swappiness_before
    );
}

#[test]
fn iotune_measures_the_disk_and_writes_io_properties() {
    let dir = scratch("iotune");
    let output = strom_tune(&["iotune", "--dir", dir.to_str().unwrap(), "--duration", "1"]);
    assert!(output.status.success(), "{}", text(&output));
    let written = std::fs::read_to_string(dir.join("io-properties.toml")).unwrap();
    let properties: tuning::iotune::IoProperties = toml::from_str(&written).unwrap();
    let io = properties.io;
    assert!(
        io.write_bytes.is_multiple_of(4096)
            && tuning::iotune::BLOCK_SIZES.contains(&(io.write_bytes as usize))
    );
    assert!((1..=64).contains(&io.writes_inflight));
    let m = &properties.measured;
    let combos = tuning::iotune::BLOCK_SIZES.len() * tuning::iotune::QUEUE_DEPTHS.len();
    assert_eq!(m.write.len(), combos);
    assert_eq!(m.read.len(), combos);
    assert!(
        m.write.iter().all(|w| w.bandwidth_bytes_per_s > 0),
        "{m:#?}"
    );
    assert!(m.read.iter().all(|r| r.bandwidth_bytes_per_s > 0), "{m:#?}");
    assert!(m.fdatasync_count >= 10);
    assert!(
        m.fdatasync_latency_us_p50 > 0 && m.fdatasync_latency_us_p50 <= m.fdatasync_latency_us_p99
    );
    // The [io] table is what the broker reads, in its config names.
    let table: toml::Table = written.parse().unwrap();
    assert!(table["io"].get("strom.write.bytes").is_some(), "{written}");
    // The scratch file is gone.
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("io-properties.toml")]);
}

/// A 30 s `iotune` that printed nothing until the end looked hung: it
/// prints a line each second, as it goes, saying what it measures.
#[test]
fn iotune_prints_a_progress_line_each_second_while_it_measures() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    const DURATION_S: u64 = 4;
    let dir = scratch("iotune-progress");
    let started = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_strom-tune"))
        .args(["iotune", "--dir", dir.to_str().unwrap(), "--duration"])
        .arg(DURATION_S.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    // Each line with the time it arrived.
    let reader = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .take(1_000)
            .map_while(Result::ok)
            .map(|line| (started.elapsed(), line))
            .collect::<Vec<_>>()
    });
    let deadline = Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > deadline {
            let _ = child.kill();
            panic!("iotune did not finish within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ran_for = started.elapsed();
    let lines = reader.join().unwrap();
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(status.success(), "{lines:?}\n{stdout}");

    let progress: Vec<&(Duration, String)> = lines
        .iter()
        .filter(|(_, l)| l.contains("s of 4s: "))
        .collect();
    // One a second: at least one per whole second of the run (less the
    // last), the first within two seconds, not all at the end.
    assert!(
        progress.len() as u64 + 1 >= ran_for.as_secs().max(DURATION_S),
        "{} progress lines in {ran_for:?}: {lines:?}",
        progress.len()
    );
    assert!(
        progress[0].0 < Duration::from_secs(2),
        "first progress line after {:?}",
        progress[0].0
    );
    assert!(
        progress
            .iter()
            .any(|(at, _)| *at + Duration::from_secs(1) < ran_for),
        "every progress line came at the end: {lines:?}"
    );
    for (_, line) in &progress {
        assert!(
            line.contains("write ")
                || line.contains("read ")
                || line.contains("writing ")
                || line.contains("fdatasync"),
            "{line}"
        );
        assert!(
            line.ends_with(" MB/s") || line.ends_with(" syncs/s"),
            "{line}"
        );
    }
    // The result still goes to stdout, the progress to stderr only.
    assert!(stdout.contains("wrote "), "{stdout}");
    assert!(!stdout.contains("s of 4s: "), "{stdout}");
}
