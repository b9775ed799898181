//! The broker's tests' helpers: everything the workspace's tests share
//! (the real `strom` binary on a free loopback port, its tools, deadlines;
//! the `test-support` crate, re-exported here), plus what only these tests
//! use: raw Kafka wire calls, hostile clients, the admin listener, kcat and
//! the Python clients.

#![allow(dead_code)]

pub mod acks;
pub mod admin;
pub mod hostile;
pub mod listing;
pub mod raw;
pub mod rng;

pub use admin::http_get;
// Each test crate uses a part of these.
#[allow(unused_imports)]
pub use test_support::{
    free_port, mount, poll_until, run, strom, strom_at, strom_bin, strom_bytes, strom_fails,
    strom_ok, wait_deadline, Broker, STARTED_LINE, START_DEADLINE, STOP_DEADLINE, TOOL_DEADLINE,
};

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// How long one kcat invocation may take.
pub const KCAT_DEADLINE: Duration = Duration::from_secs(120);

/// Runs kcat against `broker`, failing the test (with the broker's log)
/// when kcat fails; returns its stdout.
pub fn kcat(broker: &Broker, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
    let output = run(
        Command::new("kcat")
            .arg("-b")
            .arg(broker.bootstrap())
            .args(args),
        stdin,
        KCAT_DEADLINE,
    );
    assert!(
        output.status.success(),
        "kcat {args:?} failed ({}): {}\nbroker log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        broker.log()
    );
    output.stdout
}

/// A tool's stdout; fails the test, with the tool's stderr and the
/// broker's log, unless it succeeded. `what` names the call.
pub fn succeeded(output: std::process::Output, what: &str, broker: &Broker) -> String {
    assert!(
        output.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&output.stderr),
        broker.log()
    );
    String::from_utf8(output.stdout).expect("a tool's output is UTF-8")
}

/// Runs a Python client script from `tests/clients/` against the broker;
/// panics with its output unless it exits 0.
pub fn run_python(script: &str, args: &[&str], limit: Duration) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(script);
    let output = run(Command::new("python3").arg(&path).args(args), None, limit);
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}); needs the clients of scripts/requirements-test.txt: run `scripts/python-venv` and put target/test-venv/bin first on PATH (scripts/test does both)\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout
}

/// A client script of tests/clients run beside the test, which signals
/// moments through files in a directory both see.
#[allow(dead_code)]
pub struct Script {
    child: std::process::Child,
    name: &'static str,
}

#[allow(dead_code)]
impl Script {
    /// Starts `python3 tests/clients/<name> args...`, its output piped.
    pub fn start(name: &'static str, args: &[&str]) -> Script {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients")
            .join(name);
        let child = Command::new("python3")
            .arg(&path)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        Script { child, name }
    }

    /// Waits (up to `limit`) until `check` says something or the script
    /// exits: `Some(value)`, or `None` when it exited first (its output
    /// then fails the test).
    pub fn wait_for<T>(&mut self, limit: Duration, mut check: impl FnMut() -> Option<T>) -> T {
        let seen = poll_until(limit, || {
            if let Some(value) = check() {
                return Some(Some(value));
            }
            self.child.try_wait().unwrap().map(|_| None)
        })
        .unwrap_or_else(|| panic!("{}: nothing within {limit:?}", self.name));
        match seen {
            Some(value) => value,
            None => {
                let mut out = (String::new(), String::new());
                if let Some(mut pipe) = self.child.stdout.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut out.0);
                }
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut out.1);
                }
                panic!("{} exited early\n{}\n{}", self.name, out.0, out.1);
            }
        }
    }

    /// Waits (up to `limit`, then kills it) for the script to end:
    /// whether it succeeded, its stdout and its stderr.
    pub fn finish(mut self, limit: Duration) -> (bool, String, String) {
        let status = wait_deadline(&mut self.child, limit);
        if status.is_none() {
            let _ = self.child.kill();
        }
        let output = self.child.wait_with_output().unwrap();
        (
            status.is_some_and(|s| s.success()),
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        )
    }
}

/// Starts a killed node of a three-node cluster again and waits until
/// another node lists it, unfenced.
#[allow(dead_code)]
pub fn restart_killed(cluster: &mut test_support::cluster::Cluster, victim: i32) {
    cluster.node_mut(victim).broker.start_again();
    let survivor = (1..=3).find(|&n| n != victim).unwrap();
    cluster.wait_for("the killed node back", || {
        let listed = strom(&cluster.node(survivor).broker, &["cluster", "status"], None);
        let text = String::from_utf8_lossy(&listed.stdout);
        (listed.status.success() && !text.contains("fenced")).then_some(())
    });
}

/// How many rounds a fault scenario runs and until when: `STROM_SOAK_ROUNDS`
/// (else the test's default) and `STROM_SOAK_MINUTES`, whichever ends
/// first (`scripts/soak` sets them).
pub struct SoakBudget {
    rounds: u64,
    until: Instant,
}

impl SoakBudget {
    pub fn from_env(default_rounds: u64) -> SoakBudget {
        let read = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
        SoakBudget {
            rounds: read("STROM_SOAK_ROUNDS").unwrap_or(default_rounds),
            until: Instant::now()
                + Duration::from_secs(read("STROM_SOAK_MINUTES").unwrap_or(24 * 60) * 60),
        }
    }

    /// The rounds asked for.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    pub fn more(&self, done: u64) -> bool {
        done < self.rounds && Instant::now() < self.until
    }
}
