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
