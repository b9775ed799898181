//! `--cpuset` (`strom.cpuset`) pins a broker's executors to the CPUs it
//! names, so several brokers on one host run on CPUs of their own; a CPU
//! that is not online, a malformed list, or more executors than CPUs is
//! refused at start with the reason.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{run, strom_bin, Broker};

const RUN_DEADLINE: Duration = Duration::from_secs(30);

/// The CPUs the executor thread of core `name` (glommio names it
/// `strom-core-N-<its id>`) of `pid` may run on, as the kernel lists them
/// (`Cpus_allowed_list`).
fn cpus_of_thread(pid: u32, name: &str) -> Option<String> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        let comm = comm.trim();
        if comm != name
            && !comm
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('-'))
        {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        return status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string());
    }
    None
}

#[test]
fn executors_run_on_the_cpus_of_the_cpuset() {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online < 2 {
        eprintln!("SKIPPED: one online CPU: no second CPU to pin an executor to");
        return;
    }
    let last = online - 1;
    // One executor, on the last CPU: not the CPU 0 it would get by default.
    let broker = Broker::start(&["--cores", "1", "--cpuset", &last.to_string()]);
    assert_eq!(
        cpus_of_thread(broker.pid(), "strom-core-0").as_deref(),
        Some(last.to_string().as_str()),
        "{}",
        broker.log()
    );
    // A cpuset without --cores runs one executor per CPU, in its order.
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let broker = Broker::start_at(
        dir.path(),
        &dir.path().join("strom.log"),
        port,
        &["--cpuset", &format!("{last},0")],
    );
    assert_eq!(
        cpus_of_thread(broker.pid(), "strom-core-0").as_deref(),
        Some(last.to_string().as_str())
    );
    assert_eq!(
        cpus_of_thread(broker.pid(), "strom-core-1").as_deref(),
        Some("0")
    );
}

#[test]
fn a_bad_cpuset_is_refused_with_the_reason() {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cases = [
        (
            vec!["--cpuset".to_string(), online.to_string()],
            "is not online".to_string(),
        ),
        (
            vec!["--cpuset".to_string(), "0,x".to_string()],
            "not a CPU number".to_string(),
        ),
        (
            vec!["--cpuset".to_string(), "0,0".to_string()],
            "named twice".to_string(),
        ),
        (
            vec![
                "--cpuset".to_string(),
                "0".to_string(),
                "--cores".to_string(),
                "2".to_string(),
            ],
            "more executors than the 1 CPUs".to_string(),
        ),
    ];
    for (args, needle) in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut command = Command::new(strom_bin());
        command
            .arg("start")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", common::free_port()))
            .args(&args);
        let output = run(&mut command, None, RUN_DEADLINE);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&needle),
            "{args:?}: expected `{needle}` in {stderr}"
        );
        assert!(
            stderr.contains("strom.cpuset") || stderr.contains("cores"),
            "{stderr}"
        );
    }
}
