//! The replication tests' producer side: the acknowledgements
//! `tests/clients/replication_check.py produce` logs, and the child
//! processes they run in.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The idempotent acks=all producer and checker of the failover tests.
pub fn replication_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/replication_check.py")
}

/// Milliseconds since the epoch, as the producer stamps its log.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An acknowledgement: key, partition, when it came, when the record was sent.
pub type Ack = (String, i32, u64, u64);

/// Every acknowledgement logged in `path` so far.
pub fn acks(path: &Path) -> Vec<Ack> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let key = parts.next()?.to_string();
            let partition = parts.next()?.parse().ok()?;
            let _offset = parts.next()?;
            let at = parts.next()?.parse().ok()?;
            let sent = parts.next()?.parse().ok()?;
            Some((key, partition, at, sent))
        })
        .collect()
}

/// A child process killed and reaped when the test ends, however it ends.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// How long the producer may take to finish and the checker to read back.
pub const PRODUCER_DEADLINE: Duration = Duration::from_secs(600);

/// Stops the producer (`stop_file` appears, it must end successfully
/// within [`PRODUCER_DEADLINE`] with none failed, as `producer_log`
/// says), then runs `check` (the checker's `check` mode, however the
/// caller reaches the cluster): every acknowledged record must be read
/// back once, byte-exact and in order. Returns the checker's counts;
/// `logs` is shown with any failure.
pub fn stop_and_check(
    producer: &mut Reaped,
    stop_file: &Path,
    producer_log: &Path,
    check: &mut Command,
    logs: impl Fn() -> String,
) -> String {
    std::fs::write(stop_file, b"").unwrap();
    let status = super::wait_deadline(&mut producer.0, PRODUCER_DEADLINE)
        .unwrap_or_else(|| panic!("the producer did not finish\n{}", logs()));
    let produced = std::fs::read_to_string(producer_log).unwrap();
    assert!(status.success(), "producer: {status}\n{produced}");
    let sent: usize = produced
        .split_whitespace()
        .skip_while(|w| *w != "sent:")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{produced}"));
    assert!(produced.contains("failed: 0"), "{produced}");
    let output = super::run(check, None, PRODUCER_DEADLINE);
    let checked = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{checked}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        checked.contains(&format!(
            "acknowledged: {sent} read: {sent} lost: 0 duplicated: 0 out_of_order: 0"
        )),
        "{checked}"
    );
    checked
}
