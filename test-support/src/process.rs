//! Deadline-bounded waits for tests: poll a condition, wait for a child,
//! run a program and collect its output.

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

/// Interval between checks of a condition polled with a deadline.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Asks `check` every `POLL_INTERVAL` until it gives a value or `limit`
/// has passed (`None`); it is asked at least once, and once more at the
/// deadline.
pub fn poll_until<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// Waits for a child with a deadline; `None` if it is still running.
pub fn wait_deadline(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    poll_until(limit, || child.try_wait().unwrap())
}

/// Runs a command with optional stdin, killing it at the deadline.
pub fn run(command: &mut Command, stdin: Option<&[u8]>, limit: Duration) -> Output {
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let writer = stdin.map(|input| {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        })
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.read_to_end(&mut buf);
        buf
    });
    let err_reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stderr.read_to_end(&mut buf);
        buf
    });
    let status = match wait_deadline(&mut child, limit) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            let err = String::from_utf8_lossy(&err_reader.join().unwrap()).to_string();
            panic!("{command:?} did not finish within {limit:?}; stderr:\n{err}");
        }
    };
    if let Some(writer) = writer {
        writer.join().unwrap();
    }
    Output {
        status,
        stdout: out_reader.join().unwrap(),
        stderr: err_reader.join().unwrap(),
    }
}
