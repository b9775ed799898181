//! The core's journal: small durable appends of many logs go out in shared
//! journal writes, not in their segment files; a crash (the executor ends
//! without closing its logs) leaves them in the journal only, and the next
//! open puts them back. A deleted log's records never reach a new log of
//! the same name, and chunks are reused once their logs wrote them out.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{read_all, run, Spec};
use storage::{AppendOptions, Log, LogConfig};

/// Batches made durable: (log, base offset, spec).
type Durable = Vec<(usize, u64, Spec)>;

fn config() -> LogConfig {
    common::config(1 << 30)
}

/// Bytes of a log's segment files on disk.
fn segment_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

/// Appends `per_log` batches to each log from concurrent tasks, waiting
/// for each to be durable; returns (log, base offset, spec) of each.
async fn append_durably(logs: &[Log], per_log: u64, seed_base: u64) -> Durable {
    append_durably_sized(logs, per_log, seed_base, 300).await
}

/// [`append_durably`] with batches of two records of `value_len` bytes.
async fn append_durably_sized(
    logs: &[Log],
    per_log: u64,
    seed_base: u64,
    value_len: usize,
) -> Durable {
    let tasks: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(p, log)| {
            let log = log.clone();
            glommio::spawn_local(async move {
                let mut out = Vec::new();
                for i in 0..per_log {
                    let spec = Spec::new(seed_base + p as u64 * 10_000 + i, 2, value_len);
                    let info = log
                        .append(spec.bytes(), AppendOptions::default())
                        .await
                        .unwrap();
                    log.wait_durable(info.last_offset).await.unwrap();
                    out.push((p, info.base_offset, spec));
                }
                out
            })
        })
        .collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await);
    }
    all
}

/// Appends one batch of two `value_len`-byte records to every log, one
/// after the other with no wait between (as a produce request reaches its
/// partitions), then waits until all are durable; returns (log, base
/// offset, spec) of each.
async fn append_to_all_at_once(logs: &[Log], seed_base: u64, value_len: usize) -> Durable {
    let mut appended = Vec::new();
    let mut last = Vec::new();
    for (p, log) in logs.iter().enumerate() {
        let spec = Spec::new(seed_base + p as u64, 2, value_len);
        let info = log
            .append(spec.bytes(), AppendOptions::default())
            .await
            .unwrap();
        appended.push((p, info.base_offset, spec));
        last.push(info.last_offset);
    }
    for (log, last) in logs.iter().zip(last) {
        log.wait_durable(last).await.unwrap();
    }
    appended
}

async fn open_logs(root: &Path, names: &[String]) -> Vec<Log> {
    let mut logs = Vec::new();
    for name in names {
        logs.push(
            Log::open(&common::ctx(), root.join(name), config())
                .await
                .unwrap(),
        );
    }
    logs
}

async fn check_logs(root: &Path, names: &[String], expected: &[(usize, u64, Spec)]) {
    for (p, name) in names.iter().enumerate() {
        let log = Log::open(&common::ctx(), root.join(name), config())
            .await
            .unwrap();
        let stored = read_all(&log, 1 << 20).await;
        let mine: Vec<_> = expected.iter().filter(|(q, _, _)| *q == p).collect();
        assert_eq!(stored.len(), mine.len(), "batches of {name}");
        for (base, spec) in mine.iter().map(|(_, b, s)| (b, s)) {
            let (_, bytes) = stored
                .iter()
                .find(|(b, _)| b == base)
                .unwrap_or_else(|| panic!("{name}: batch at {base} lost"));
            assert_eq!(bytes, &spec.stored(*base), "{name}: bytes at {base}");
        }
        log.close().await.unwrap();
    }
}

/// The shape of most tests here: `body` runs on an executor of its own
/// with a fresh directory and the names of `count` logs (`t-0`, ...),
/// appends, and returns what it made durable; the executor then ends
/// without closing a log (a crash). Every log is opened again on a new
/// executor and must hold exactly those batches. Returns how long that
/// took (opening replays the journal).
fn crash_and_check<F, Fut>(count: usize, body: F) -> Duration
where
    F: FnOnce(std::path::PathBuf, Vec<String>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Durable> + 'static,
{
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let names: Vec<String> = (0..count).map(|p| format!("t-{p}")).collect();
    let expected = {
        let (root, names) = (root.clone(), names.clone());
        run(move || body(root, names))
    };
    let started = std::time::Instant::now();
    run(move || async move { check_logs(&root, &names, &expected).await });
    let checked_in = started.elapsed();
    drop(dir);
    checked_in
}

#[test]
fn small_durable_appends_live_in_the_journal_until_replayed() {
    crash_and_check(8, |root, names| async move {
        let logs = open_logs(&root, &names).await;
        let expected = append_durably(&logs, 40, 0).await;
        let storage::journal::Counts {
            records, writes, ..
        } = common::ctx().journal_counts();
        let rounds: u64 = logs.iter().map(|l| l.stats().syncs).sum();
        assert!(
            records >= rounds / 2,
            "{records} records for {rounds} rounds"
        );
        assert!(
            writes * 2 <= rounds,
            "{writes} journal writes served {rounds} rounds of 8 logs: they should share"
        );
        // Nothing of it is in the segment files; all of it is in the
        // journal, for the crash to leave there.
        for (log, name) in logs.iter().zip(&names) {
            assert_eq!(
                log.stats().writes,
                0,
                "no segment write for small appends: {:?}",
                log.stats()
            );
            assert_eq!(segment_file_bytes(&root.join(name)), 0, "{name}");
        }
        expected
    });
}

/// The appends of one produce request reach many logs at once: one
/// journal write makes them all durable, as the round starts only once
/// the appends made alongside the first are in. (When each log handed its
/// record over from a sync round of its own, the first of them started a
/// write alone and the others waited for the next.) A crash then loses
/// none of it.
#[test]
fn appends_to_many_logs_at_once_share_one_journal_write() {
    crash_and_check(16, |root, names| async move {
        let logs = open_logs(&root, &names).await;
        // The first durable append creates the context's journal.
        let mut expected = append_durably(&logs[..1], 1, 0).await;
        for round in 0..3u64 {
            let before = common::ctx().journal_counts();
            expected.extend(append_to_all_at_once(&logs, 100 + round * 100, 300).await);
            let after = common::ctx().journal_counts();
            assert_eq!(
                (after.writes - before.writes, after.records - before.records),
                (1, 16),
                "round {round}: journal writes and records for one append to each of 16 logs"
            );
        }
        expected
    });
}

/// A log whose unwritten bytes pass its journal threshold writes them out
/// in whole pages only: the partial last page stays in memory, made
/// durable by the journal, instead of being written now and written again
/// when it fills. No page goes to the segment file twice, so the bytes
/// written never exceed the bytes appended; after a crash the journal puts
/// the last pages back.
#[test]
fn a_log_past_its_journal_threshold_writes_whole_pages_only() {
    crash_and_check(1, |root, names| async move {
        let logs = open_logs(&root, &names).await;
        // 160 batches of ~8 KiB, one durable at a time: the 256 KiB a
        // lone log keeps unwritten (four times its 64 KiB threshold) are
        // passed about five times.
        let expected = append_durably_sized(&logs, 160, 0, 4_000).await;
        let appended: u64 = expected
            .iter()
            .map(|(_, _, s)| s.bytes().len() as u64)
            .sum();
        let stats = logs[0].stats();
        // One write per pass of the threshold; two (the last page alone,
        // then the rest) when each write-out ended in a partial page to be
        // rewritten.
        let passes = appended / (256 << 10);
        assert!(
            (passes.saturating_sub(1)..=passes + 1).contains(&stats.writes),
            "the log passed its threshold {passes} times and wrote {} times",
            stats.writes
        );
        assert!(
            stats.bytes_written <= appended,
            "{} bytes written for {appended} appended: a page went out twice",
            stats.bytes_written
        );
        // The crash leaves the log's last page only in the journal.
        expected
    });
}

/// Once enough records wait for the journal's next write, further
/// logs write their small appends to their segment files (journaling them
/// too would move every byte twice); whichever way each went, a crash
/// loses nothing.
#[test]
fn a_full_journal_write_sends_further_logs_to_their_segments() {
    // 64 logs x ~24 KiB per round: ~1.5 MiB a round against a 1 MiB
    // bound, each log far below its own 64 KiB threshold (two batches,
    // 48 KiB, in all).
    const QUEUED_MAX: usize = 1 << 20;
    crash_and_check(64, |root, names| async move {
        common::use_context(storage::ContextConfig {
            journal_queued_bytes_max: QUEUED_MAX,
            ..Default::default()
        });
        let logs = open_logs(&root, &names).await;
        // The first durable append creates the context's journal.
        let mut expected = append_durably_sized(&logs[..1], 1, 0, 12_000).await;
        // Then one batch to every log at once: the next round takes logs
        // until its records pass the bound, and the others write their
        // segments.
        expected.extend(append_to_all_at_once(&logs, 1_000_000, 12_000).await);
        let records = common::ctx().journal_counts().records;
        let writing = logs.iter().filter(|l| l.stats().writes > 0).count();
        assert!(records > 0, "the journal served some rounds");
        assert!(
            writing > 0,
            "no log wrote its segment although rounds queued more than {QUEUED_MAX} bytes"
        );
        expected
    });
}

#[test]
fn a_deleted_log_s_records_never_reach_a_new_log_of_its_name() {
    crash_and_check(1, |root, _| async move {
        let old = Log::open(&common::ctx(), root.join("t-0"), config())
            .await
            .unwrap();
        append_durably(std::slice::from_ref(&old), 30, 0).await;
        old.delete().await.unwrap();
        let new = Log::open(&common::ctx(), root.join("t-0"), config())
            .await
            .unwrap();
        // Fewer, different batches: replaying the old records would show
        // up as extra or different ones.
        append_durably(std::slice::from_ref(&new), 5, 500_000).await
    });
}

#[test]
fn chunks_are_reused_once_their_logs_wrote_them_out() {
    let replayed_in = crash_and_check(4, |root, names| async move {
        // 1 MiB chunks: ~2.6 MB of appends cross them several times.
        common::use_context(storage::ContextConfig {
            journal_chunk_bytes_max: 1 << 20,
            ..Default::default()
        });
        let logs = open_logs(&root, &names).await;
        let expected = append_durably(&logs, 1000, 0).await;
        let written: u64 = logs.iter().map(|l| l.stats().writes).sum();
        assert!(written > 0, "retiring chunks made the logs write out");
        let chunks = std::fs::read_dir(root.join(storage::journal::DIR_NAME))
            .unwrap()
            .count();
        assert_eq!(chunks, 2, "one journal of two chunks");
        expected
    });
    assert!(replayed_in < Duration::from_secs(60), "{replayed_in:?}");
}

/// Lengths of the journal's chunk files under `root`.
fn chunk_lengths(root: &Path) -> Vec<u64> {
    std::fs::read_dir(root.join(storage::journal::DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .collect()
}

/// A journal of two 128 MiB chunks per core once took 513 MB of disk for a
/// broker holding 4 KB of records. Now a journal starts with small chunks
/// and grows them only while chunks fill fast.
#[test]
fn the_journal_starts_small_and_grows_with_the_write_rate() {
    crash_and_check(4, |root, names| async move {
        let max = 16 << 20;
        common::use_context(storage::ContextConfig {
            journal_chunk_bytes_max: max,
            ..Default::default()
        });
        let logs = open_logs(&root, &names).await;
        let mut expected = append_durably(&logs, 10, 0).await;
        let start = storage::limits::JOURNAL_CHUNK_BYTES_START;
        assert_eq!(chunk_lengths(&root), vec![start, start], "a new journal");
        // 4 logs x 300 batches of 2 x 16 KiB: ~39 MB through 4 MiB chunks
        // fills one in a fraction of the 10 s that makes the next grow.
        expected.extend(append_durably_sized(&logs, 300, 100_000, 16 << 10).await);
        let lengths = chunk_lengths(&root);
        assert!(
            lengths.iter().any(|&l| l > start),
            "chunks never grew: {lengths:?}"
        );
        assert!(
            lengths.iter().all(|&l| l <= max),
            "chunks grew past the maximum: {lengths:?}"
        );
        expected
    });
}

/// The chunk files of the journal under `root` that hold a header.
fn used_chunks(root: &Path) -> Vec<std::path::PathBuf> {
    let mut used: Vec<_> = std::fs::read_dir(root.join(storage::journal::DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let bytes = std::fs::read(p).unwrap();
            bytes.len() >= 4096 && bytes[..4096].iter().any(|&b| b != 0)
        })
        .collect();
    used.sort();
    used
}

/// Eight flipped bytes in a journal chunk's header once made replay skip
/// the chunk without a word, losing every acknowledged record in it. Now
/// opening a log fails naming the chunk file; nothing is applied or
/// removed, so with the header put back every record is there.
#[test]
fn a_damaged_journal_header_fails_the_open_naming_the_file() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let names: Vec<String> = (0..4).map(|p| format!("t-{p}")).collect();
    let expected = {
        let (root, names) = (root.clone(), names.clone());
        run(move || async move {
            let logs = open_logs(&root, &names).await;
            append_durably(&logs, 25, 0).await
        })
    };
    let chunks = used_chunks(&root);
    assert_eq!(chunks.len(), 1, "one chunk written: {chunks:?}");
    let original = std::fs::read(&chunks[0]).unwrap();
    let mut damaged = original.clone();
    // The sequence number: the header's CRC no longer matches.
    for byte in &mut damaged[12..20] {
        *byte ^= 0xff;
    }
    std::fs::write(&chunks[0], &damaged).unwrap();
    let message = {
        let root = root.clone();
        let name = names[0].clone();
        run(move || async move {
            match Log::open(&common::ctx(), root.join(name), config()).await {
                Ok(_) => None,
                Err(e) => Some(e.to_string()),
            }
        })
    }
    .expect("the open fails");
    assert!(
        message.contains(&chunks[0].display().to_string()),
        "names the chunk: {message}"
    );
    assert_eq!(
        std::fs::read(&chunks[0]).unwrap(),
        damaged,
        "left as it was"
    );

    std::fs::write(&chunks[0], &original).unwrap();
    run(move || async move { check_logs(&root, &names, &expected).await });
    drop(dir);
}

/// A damaged record with a later write after it in the chunk was
/// acknowledged (the later write was made after it): an error naming the
/// chunk and the byte, never a silent cut.
#[test]
fn a_damaged_journal_record_before_later_writes_fails_the_open() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let names: Vec<String> = (0..2).map(|p| format!("t-{p}")).collect();
    {
        let (root, names) = (root.clone(), names.clone());
        run(move || async move {
            let logs = open_logs(&root, &names).await;
            append_durably(&logs, 20, 0).await
        });
    }
    let chunks = used_chunks(&root);
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    let mut bytes = std::fs::read(&chunks[0]).unwrap();
    // Inside the first record (a page after the header page).
    bytes[4096 + 40] ^= 0x01;
    std::fs::write(&chunks[0], &bytes).unwrap();
    let message = run(move || async move {
        match Log::open(&common::ctx(), root.join(&names[0]), config()).await {
            Ok(_) => None,
            Err(e) => Some(e.to_string()),
        }
    })
    .expect("the open fails");
    assert!(
        message.contains(&chunks[0].display().to_string()) && message.contains("at byte 4096"),
        "names the chunk and the byte: {message}"
    );
}
