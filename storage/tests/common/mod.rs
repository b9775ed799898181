//! Helpers shared by the storage integration tests: an executor runner,
//! batch builders whose bytes can be recomputed, and a whole-log reader.
#![allow(dead_code)]

use std::future::Future;
use std::path::Path;

use bytes::Bytes;
use glommio::LocalExecutorBuilder;
use protocol::batch::{self, build};
use storage::{Context, ContextConfig, Log, LogConfig};

thread_local! {
    static CONTEXT: std::cell::RefCell<Option<Context>> = const { std::cell::RefCell::new(None) };
}

/// The storage context of this executor thread: as on a broker core, every
/// log a test opens on one executor shares it (one journal, one budget).
pub fn ctx() -> Context {
    CONTEXT.with(|c| c.borrow_mut().get_or_insert_with(Context::default).clone())
}

/// Gives this executor thread a context with `config`, for the logs it
/// opens from now on.
pub fn use_context(config: ContextConfig) {
    CONTEXT.with(|c| {
        *c.borrow_mut() = Some(Context::new(
            config,
            std::rc::Rc::new(storage::SystemClock::default()),
        ))
    });
}

/// Runs `make()` to completion on a fresh glommio executor thread.
pub fn run<F, T>(make: impl FnOnce() -> F + Send + 'static) -> T
where
    F: Future<Output = T> + 'static,
    T: Send + 'static,
{
    LocalExecutorBuilder::default()
        .spawn(make)
        .expect("start executor")
        .join()
        .expect("executor thread")
}

pub const BASE_TIMESTAMP: i64 = 1_700_000_000_000;

/// A batch identified by a seed: `count` records of `value_len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    pub seed: u64,
    pub count: usize,
    pub value_len: usize,
    pub timestamp: i64,
}

impl Spec {
    pub fn new(seed: u64, count: usize, value_len: usize) -> Self {
        Self {
            seed,
            count,
            value_len,
            timestamp: BASE_TIMESTAMP + seed as i64 * 10,
        }
    }

    /// The batch as a producer sends it (base offset 0).
    pub fn bytes(&self) -> Bytes {
        Bytes::from(build::patterned(
            self.timestamp,
            self.count,
            self.value_len,
            self.seed,
        ))
    }

    /// The batch as the log must store it at `base_offset`.
    pub fn stored(&self, base_offset: u64) -> Vec<u8> {
        let mut bytes = build::patterned(self.timestamp, self.count, self.value_len, self.seed);
        batch::set_base_offset(&mut bytes, base_offset as i64);
        bytes
    }
}

pub fn config(segment_bytes: u64) -> LogConfig {
    LogConfig::from_pairs([
        ("segment.bytes", segment_bytes.to_string().as_str()),
        ("strom.preallocate.bytes", "1048576"),
        ("retention.ms", "-1"),
    ])
    .expect("valid test config")
}

/// Reads every batch from the log start to its end in chunks of
/// `max_bytes`, checking each one's CRC and that offsets are contiguous.
pub async fn read_all(log: &Log, max_bytes: usize) -> Vec<(u64, Vec<u8>)> {
    let end = log.next_offset();
    let mut from = log.start_offset();
    let mut out: Vec<(u64, Vec<u8>)> = Vec::new();
    // Bounded: each read returns at least one batch or we stop.
    for _ in 0..1_000_000 {
        if from >= end {
            break;
        }
        let result = log.read(from, max_bytes, end).await.expect("read");
        assert!(
            !result.bytes.is_empty(),
            "empty read at {from} below end {end}"
        );
        for item in batch::split_batches(result.bytes.clone()) {
            let b = item.expect("a valid batch");
            let base = b.header().base_offset as u64;
            if let Some((prev_base, prev)) = out.last() {
                let prev_header = batch::BatchHeader::parse(prev.as_slice()).unwrap();
                assert_eq!(
                    base,
                    prev_header.last_offset() as u64 + 1,
                    "gap after {prev_base}"
                );
            }
            out.push((base, b.bytes().to_vec()));
        }
        assert!(result.next_offset > from);
        from = result.next_offset;
    }
    assert_eq!(from, end, "read_all did not reach the log end");
    out
}

pub fn segment_files(dir: &Path, extension: &str) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    files
}

/// A temporary directory on the build's filesystem: /tmp may be tmpfs,
/// which lacks the O_DIRECT support the log needs.
pub fn tempdir() -> std::io::Result<tempfile::TempDir> {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))
}
