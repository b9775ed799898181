//! Torn and corrupt tails: after a crash (no clean close), the last segment
//! is cut at random byte positions, has random bytes of its last batch
//! flipped, or has its tail zero-filled. Reopening must truncate to the last
//! valid batch, keep everything before it byte for byte, and never return a
//! corrupt batch. A batch damaged after a clean close (which recovery
//! trusts) is refused at read time.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{read_all, run, segment_files, Spec};
use rand::Rng;
use storage::{AppendOptions, Log, StorageError};

/// These tests damage segment files the way a crash or a bad disk would, so
/// every byte goes to the segment file: with the journal (off here), replay
/// would put acknowledged bytes back over the damage.
fn segment_only() -> storage::LogConfig {
    let mut config = common::config(64 << 10);
    config.journal_bytes = 0;
    config
}

/// Writes `count` batches, waits until durable, and abandons the log
/// without closing (as a crash would). Returns (base offset, byte position
/// in the last segment, size) of the batches in the last segment, and the
/// number of batches before it.
fn crashed_log(path: &Path, count: u64) -> (Vec<(u64, u64, u64)>, usize) {
    let path = path.to_path_buf();
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, segment_only())
            .await
            .unwrap();
        for i in 0..count {
            let info = log
                .append(Spec::new(i, 3, 700).bytes(), AppendOptions::default())
                .await
                .unwrap();
            log.wait_durable(info.last_offset).await.unwrap();
        }
        let all = read_all(&log, 1 << 20).await;
        let last_base = *log.segment_base_offsets().last().unwrap();
        let mut position = 0;
        let mut in_last = Vec::new();
        let mut before = 0;
        for (base, bytes) in &all {
            if *base >= last_base {
                in_last.push((*base, position, bytes.len() as u64));
                position += bytes.len() as u64;
            } else {
                before += 1;
            }
        }
        (in_last, before)
    })
}

/// Reopens and checks the log holds exactly the first `keep` batches.
fn check_recovered(path: &Path, keep: usize) {
    let path = path.to_path_buf();
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, segment_only())
            .await
            .unwrap();
        assert!(!log.recovery_report().clean);
        let all = read_all(&log, 1 << 20).await;
        assert_eq!(all.len(), keep, "batches kept");
        for (i, (base, bytes)) in all.iter().enumerate() {
            assert_eq!(
                bytes,
                &Spec::new(i as u64, 3, 700).stored(*base),
                "batch {i}"
            );
        }
        // The log accepts appends right after the cut.
        let info = log
            .append(Spec::new(500, 3, 700).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert_eq!(info.base_offset, keep as u64 * 3);
        log.close().await.unwrap();
    });
}

fn last_log_file(path: &Path) -> std::path::PathBuf {
    segment_files(path, "log").pop().unwrap()
}

#[test]
fn truncation_at_random_positions_cuts_to_the_last_whole_batch() {
    let mut rng = rand::thread_rng();
    for _ in 0..12 {
        let dir = common::tempdir().unwrap();
        let path = dir.path().join("t-0");
        let (in_last, before) = crashed_log(&path, 100);
        let end: u64 = in_last.iter().map(|(_, _, size)| size).sum();
        let cut = rng.gen_range(0..end);
        OpenOptions::new()
            .write(true)
            .open(last_log_file(&path))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let whole = in_last
            .iter()
            .filter(|(_, pos, size)| pos + size <= cut)
            .count();
        check_recovered(&path, before + whole);
    }
}

#[test]
fn flipped_bytes_in_the_last_batch_cut_it() {
    let mut rng = rand::thread_rng();
    for _ in 0..12 {
        let dir = common::tempdir().unwrap();
        let path = dir.path().join("t-0");
        let (in_last, before) = crashed_log(&path, 100);
        let &(_, position, size) = in_last.last().unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(last_log_file(&path))
            .unwrap();
        // Any byte except the base offset and leader epoch, which no check covers
        // (the log rewrites both on append).
        let at = loop {
            let at = rng.gen_range(0..size);
            if !(0..8).contains(&at) && !(12..16).contains(&at) {
                break position + at;
            }
        };
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, at).unwrap();
        byte[0] ^= rng.gen_range(1..=255u8);
        file.write_all_at(&byte, at).unwrap();
        check_recovered(&path, before + in_last.len() - 1);
    }
}

#[test]
fn zero_filled_tail_is_cut() {
    let mut rng = rand::thread_rng();
    for _ in 0..6 {
        let dir = common::tempdir().unwrap();
        let path = dir.path().join("t-0");
        let (in_last, before) = crashed_log(&path, 100);
        let end: u64 = in_last.iter().map(|(_, _, size)| size).sum();
        let zero_from = rng.gen_range(0..end);
        let file = OpenOptions::new()
            .write(true)
            .open(last_log_file(&path))
            .unwrap();
        file.write_all_at(&vec![0u8; (end - zero_from) as usize], zero_from)
            .unwrap();
        let whole = in_last
            .iter()
            .filter(|(_, pos, size)| pos + size <= zero_from)
            .count();
        check_recovered(&path, before + whole);
    }
}

#[test]
fn corruption_after_a_clean_close_is_never_served() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let (in_last, _) = crashed_log(&path, 40);
    let p = path.clone();
    run(move || async move {
        // A clean open/close cycle so the next open trusts the files.
        let log = Log::open(&common::ctx(), &p, segment_only()).await.unwrap();
        log.close().await.unwrap();
    });
    let &(base, position, _) = in_last.last().unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(last_log_file(&path))
        .unwrap();
    file.write_all_at(&[0xAB], position + 70).unwrap();
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, segment_only())
            .await
            .unwrap();
        assert!(log.recovery_report().clean);
        match log.read(base, 1 << 20, u64::MAX).await {
            Err(StorageError::Corrupt { .. }) => {}
            other => panic!("a corrupt batch must not be served: {other:?}"),
        }
        // Batches before it still read fine.
        let ok = log.read(0, 1000, base).await.unwrap();
        assert!(!ok.bytes.is_empty());
    });
}
