//! The replication tests' producer side: the acknowledgements
//! `tests/clients/replication_check.py produce` logs, and the child
//! processes they run in.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{SystemTime, UNIX_EPOCH};

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
