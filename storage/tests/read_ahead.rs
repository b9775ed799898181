//! Read-ahead: a reader going through the segment files finds its next
//! window already read, gets exactly the bytes it would have read, and a
//! truncation never lets it see a stale window.

mod common;

use common::{run, Spec};
use storage::{AppendOptions, Log};

/// Appends `count` batches of 4 records of 2,000 bytes, seeded from
/// `seed_base`, and returns each batch's (base offset, seed).
async fn append_batches(log: &Log, seed_base: u64, count: u64) -> Vec<(u64, u64)> {
    let mut appended = Vec::new();
    for i in 0..count {
        let seed = seed_base + i;
        let info = log
            .append(Spec::new(seed, 4, 2000).bytes(), AppendOptions::default())
            .await
            .unwrap();
        appended.push((info.base_offset, seed));
    }
    log.wait_durable(log.next_offset() - 1).await.unwrap();
    appended
}

/// Reads from `from` to the end in reads of `max_bytes`, checking every
/// batch against what was appended; returns the batches read.
async fn read_through(log: &Log, from: u64, max_bytes: usize, appended: &[(u64, u64)]) -> usize {
    let end = log.next_offset();
    let mut at = from;
    let mut batches = 0;
    for _ in 0..10_000 {
        if at >= end {
            break;
        }
        let read = log.read(at, max_bytes, end).await.unwrap();
        assert!(!read.bytes.is_empty(), "empty read at {at}");
        for item in protocol::batch::split_batches(read.bytes.clone()) {
            let batch = item.unwrap();
            let base = batch.header().base_offset as u64;
            let seed = appended
                .iter()
                .find(|(b, _)| *b == base)
                .map(|(_, seed)| *seed)
                .unwrap_or_else(|| panic!("batch at {base} was not appended"));
            assert_eq!(
                batch.bytes().to_vec(),
                Spec::new(seed, 4, 2000).stored(base)
            );
            batches += 1;
        }
        assert!(read.next_offset > at);
        at = read.next_offset;
    }
    assert_eq!(at, end, "read to the end");
    batches
}

fn reopened_config() -> storage::LogConfig {
    let mut config = common::config(1 << 30);
    // No cache: every read goes to the segment files.
    config.cache_bytes_max = 0;
    config
}

#[test]
fn sequential_disk_reads_use_the_window_read_ahead() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    let appended = run(move || async move {
        let log = Log::open(&common::ctx(), &p, common::config(1 << 30))
            .await
            .unwrap();
        let appended = append_batches(&log, 0, 400).await;
        log.close().await.unwrap();
        appended
    });
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, reopened_config())
            .await
            .unwrap();
        let before = log.stats();
        // ~3.2 MB in windows of 64 KiB: each read after the first should
        // find its window read ahead.
        let batches = read_through(&log, 0, 64 << 10, &appended).await;
        assert_eq!(batches, 400);
        let stats = log.stats();
        let disk_reads = stats.reads_disk - before.reads_disk;
        let used = stats.reads_ahead_used - before.reads_ahead_used;
        assert!(disk_reads > 20, "{disk_reads} disk reads");
        assert!(
            used + 1 >= disk_reads,
            "{used} of {disk_reads} disk reads found their window read ahead"
        );
        // A reader that jumps elsewhere reads normally and gets the same bytes.
        let from = appended[123].0;
        assert_eq!(
            read_through(&log, from, 64 << 10, &appended).await,
            400 - 123
        );
        log.close().await.unwrap();
    });
}

#[test]
fn a_truncation_discards_the_window_read_ahead() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    let appended = run(move || async move {
        let log = Log::open(&common::ctx(), &p, common::config(1 << 30))
            .await
            .unwrap();
        let appended = append_batches(&log, 0, 100).await;
        log.close().await.unwrap();
        appended
    });
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, reopened_config())
            .await
            .unwrap();
        let end = log.next_offset();
        // Read the first window: the next one (from `next`) is read ahead.
        let first = log.read(0, 64 << 10, end).await.unwrap();
        let next = first.next_offset;
        assert!(next < end);
        // Cut the log at `next` and append different batches there.
        assert_eq!(log.truncate_to(next).await.unwrap(), next);
        let mut kept: Vec<(u64, u64)> = appended
            .iter()
            .copied()
            .filter(|(b, _)| *b < next)
            .collect();
        let rewritten = append_batches(&log, 5000, 30).await;
        assert_eq!(rewritten[0].0, next);
        kept.extend(rewritten);
        // The read from `next` returns the new batches, not the window
        // read before the cut.
        assert_eq!(read_through(&log, next, 64 << 10, &kept).await, 30);
        log.close().await.unwrap();
    });
}
