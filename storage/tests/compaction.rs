//! Compaction keeps exactly the latest record of every key, at its offset,
//! in every codec; tombstones go once their time is up; a cleaning stopped
//! at any step leaves the old segments or the new ones.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use common::run;
use protocol::batch::build::{self, NewRecord};
use protocol::batch::{self, BatchHeader, Compression, HEADER_LEN};
use protocol::control::{self, Marker};
use protocol::records;
use storage::{AbortedRange, AppendOptions, CleanOptions, Context, Log, ManualClock, SwapMarker};

const DAY_MS: i64 = 24 * 3600 * 1000;
const KEYS: u64 = 200;
const ROUNDS: u64 = 8;

/// What was produced at each offset: key and value (None: a tombstone).
type Produced = BTreeMap<u64, (Vec<u8>, Option<Vec<u8>>)>;

fn options(now_ms: i64, below: u64) -> CleanOptions {
    CleanOptions {
        clean_below: below,
        now_ms,
        min_compaction_lag_ms: 0,
        delete_retention_ms: DAY_MS,
        key_map_entries_max: 1 << 20,
        keep_batches: HashSet::new(),
        aborted: Vec::new(),
        io_bytes_per_second: f64::MAX,
    }
}

/// A record with no headers at the batch's base timestamp.
fn plain(key: Option<Vec<u8>>, value: Option<Vec<u8>>) -> NewRecord {
    NewRecord {
        key,
        value,
        headers: vec![],
        timestamp_delta: 0,
    }
}

/// A deterministic shuffle of 0..n.
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for i in (1..v.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (state >> 33) as usize % (i + 1));
    }
    v
}

/// Writes every key ROUNDS times in a shuffled order, in batches of 5 of
/// each codec in turn; in the last round every tenth key gets a tombstone.
async fn fill(log: &Log, now_ms: i64) -> Produced {
    let codecs = Compression::ALL;
    let mut produced = Produced::new();
    let mut pending: Vec<NewRecord> = Vec::new();
    let mut batches = 0usize;
    for round in 0..ROUNDS {
        for key in shuffled(KEYS, round) {
            let tombstone = round == ROUNDS - 1 && key % 10 == 0;
            let value = (!tombstone)
                .then(|| format!("value {key} round {round} {}", "x".repeat(60)).into_bytes());
            pending.push(NewRecord {
                key: Some(format!("key-{key}").into_bytes()),
                value,
                headers: vec![(b"round".to_vec(), Some(vec![round as u8]))],
                timestamp_delta: pending.len() as i64,
            });
            if pending.len() == 5 {
                let codec = codecs[batches % codecs.len()];
                let bytes = Bytes::from(build::compressed(codec, now_ms - 2 * DAY_MS, &pending));
                // Leader epoch 1 for the first half of the rounds, 2 after.
                let options = AppendOptions {
                    leader_epoch: 1 + i32::from(round >= ROUNDS / 2),
                    ..AppendOptions::default()
                };
                let info = log.append(bytes, options).await.unwrap();
                for (i, r) in pending.drain(..).enumerate() {
                    produced.insert(info.base_offset + i as u64, (r.key.unwrap(), r.value));
                }
                batches += 1;
            }
        }
    }
    assert!(pending.is_empty());
    log.flush().await.unwrap();
    produced
}

/// Every record in the log, by offset, with the headers of their batches.
async fn stored(log: &Log) -> (Produced, Vec<BatchHeader>) {
    let end = log.next_offset();
    let mut from = log.start_offset();
    let mut out = Produced::new();
    let mut headers = Vec::new();
    for _ in 0..100_000 {
        if from >= end {
            break;
        }
        let read = log.read(from, 1 << 20, end).await.unwrap();
        assert!(read.next_offset > from, "no progress at {from}");
        for item in batch::split_batches(read.bytes.clone()) {
            let b = item.expect("every stored batch is valid");
            let header = *b.header();
            let section = records::decompress_records(
                &b.bytes()[HEADER_LEN..],
                header.compression(),
                1 << 24,
            )
            .unwrap();
            for r in batch::Records::new(
                Bytes::from(section),
                header.base_offset,
                header.base_timestamp,
                header.record_count,
            ) {
                let r = r.unwrap();
                assert!(r.offset as u64 <= header.last_offset() as u64);
                let previous = out.insert(
                    r.offset as u64,
                    (r.key.unwrap().to_vec(), r.value.map(|v| v.to_vec())),
                );
                assert!(previous.is_none(), "offset {} twice", r.offset);
            }
            headers.push(header);
        }
        from = read.next_offset;
    }
    assert_eq!(from, end);
    (out, headers)
}

/// The latest offset of every key below `below`.
fn latest(produced: &Produced, below: u64) -> BTreeMap<Vec<u8>, u64> {
    let mut out = BTreeMap::new();
    for (offset, (key, _)) in produced.range(..below) {
        out.insert(key.clone(), *offset);
    }
    out
}

fn check(produced: &Produced, kept: &Produced, cleaned_to: u64, tombstones_gone: bool) {
    // What is there is what was written there.
    for (offset, record) in kept {
        assert_eq!(
            produced.get(offset),
            Some(record),
            "offset {offset} changed"
        );
    }
    let newest = latest(produced, cleaned_to);
    for (key, offset) in &newest {
        let tombstone = produced[offset].1.is_none();
        if tombstone && tombstones_gone {
            assert!(
                !kept.contains_key(offset),
                "expired tombstone at {offset} kept"
            );
        } else {
            assert!(
                kept.contains_key(offset),
                "latest record of {:?} at {offset} lost",
                String::from_utf8_lossy(key)
            );
        }
    }
    for (offset, (key, _)) in kept.range(..cleaned_to) {
        assert_eq!(
            newest.get(key),
            Some(offset),
            "superseded record at {offset} kept"
        );
    }
    // Above what was cleaned, nothing is touched.
    for (offset, record) in produced.range(cleaned_to..) {
        assert_eq!(
            kept.get(offset),
            Some(record),
            "uncleaned offset {offset} lost"
        );
    }
}

/// A log at `path` filled by [`fill`], its clock 30 days after the
/// records' base timestamp.
async fn filled(path: &Path) -> (Log, Rc<ManualClock>, i64, Produced) {
    let now = common::BASE_TIMESTAMP + 30 * DAY_MS;
    let clock = Rc::new(ManualClock::new(now));
    let log = open(path, clock.clone()).await;
    let produced = fill(&log, now).await;
    (log, clock, now, produced)
}

async fn open(path: &Path, clock: Rc<ManualClock>) -> Log {
    let ctx = Context::new(Default::default(), clock);
    Log::open(&ctx, path, common::config(16 << 10))
        .await
        .unwrap()
}

/// A log at `path` whose segments also roll by age, after `segment_ms`.
async fn open_aging(
    path: &Path,
    clock: Rc<ManualClock>,
    segment_bytes: u64,
    segment_ms: u64,
) -> Log {
    let ctx = Context::new(Default::default(), clock);
    let mut config = common::config(segment_bytes);
    config.segment_ms = segment_ms;
    Log::open(&ctx, path, config).await.unwrap()
}

/// Two seconds on (past a `segment.ms` of one second), appends a record
/// of `key` and value "roll" so that the active segment rolls, and flushes;
/// returns the record's offset.
async fn roll(log: &Log, clock: &ManualClock, now: i64, key: &[u8]) -> u64 {
    clock.advance_ms(2000);
    let sentinel = [plain(Some(key.to_vec()), Some(b"roll".to_vec()))];
    let offset = log
        .append(
            Bytes::from(build::batch(now, &sentinel)),
            AppendOptions::default(),
        )
        .await
        .unwrap()
        .base_offset;
    log.flush().await.unwrap();
    offset
}

#[test]
fn a_cleaning_keeps_the_latest_record_of_every_key_and_tombstones_go_after_their_time() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let (log, clock, now, produced) = filled(&path).await;
        let segments = log.segment_count();
        assert!(segments > 4, "{segments} segments");
        let end = log.next_offset();
        let before = log.cleanable(end, now, 0).await.unwrap();
        assert!(before.dirty_ratio() > 0.99, "{before:?}");

        let epochs = log.epoch_entries();
        let outcome = log.clean(&options(now, end)).await.unwrap().expect("dirty");
        // Offsets do not move: the leader-epoch cache stays as it was.
        assert_eq!(epochs.len(), 2, "{epochs:?}");
        assert_eq!(log.epoch_entries(), epochs);
        let cleaned_to = outcome.cleaned_to;
        assert!(cleaned_to > 0 && cleaned_to <= end);
        assert!(
            outcome.records_removed > 0 && outcome.tombstones_removed == 0,
            "{outcome:?}"
        );
        assert!(
            outcome.segments_after < outcome.segments_before,
            "{outcome:?}"
        );
        assert!(
            outcome.bytes_written < outcome.bytes_read / 2,
            "{outcome:?}"
        );
        let (kept, headers) = stored(&log).await;
        check(&produced, &kept, cleaned_to, false);
        assert!(headers.iter().any(|h| h.compression() == Compression::Zstd));
        let after = log.cleanable(end, now, 0).await.unwrap();
        assert_eq!(after.dirty_from, cleaned_to);
        // Nothing dirty, no tombstone due: nothing to do.
        assert_eq!(log.clean(&options(now, end)).await.unwrap(), None);

        // The same after a restart.
        log.close().await.unwrap();
        let log = open(&path, clock.clone()).await;
        let (reopened, _) = stored(&log).await;
        assert_eq!(reopened, kept);

        // A day later the tombstones go, and only they.
        clock.advance_ms(DAY_MS as u64 + 1);
        let swept = log
            .clean(&options(now + DAY_MS + 1, end))
            .await
            .unwrap()
            .expect("tombstones due");
        assert!(
            swept.tombstones_removed > 0 && swept.tombstones_removed == swept.records_removed,
            "{swept:?}"
        );
        let (kept, _) = stored(&log).await;
        check(&produced, &kept, cleaned_to, true);
        let tombstoned: Vec<_> = latest(&produced, cleaned_to)
            .into_iter()
            .filter(|(_, o)| produced[o].1.is_none())
            .collect();
        // The last round's tombstones below the active segment.
        assert!(
            tombstoned.len() >= 5,
            "{} tombstoned keys cleaned",
            tombstoned.len()
        );
        log.close().await.unwrap();
    });
}

#[test]
fn a_cleaning_interrupted_before_or_during_its_swap_recovers_to_old_or_new() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let copy = dir.path().join("copy");
    run(move || async move {
        let (log, clock, now, produced) = filled(&path).await;
        let end = log.next_offset();
        log.close().await.unwrap();
        copy_dir(&path, &copy);
        let old_bases = log_bases(&copy);

        let log = open(&path, clock.clone()).await;
        let outcome = log.clean(&options(now, end)).await.unwrap().unwrap();
        let (cleaned, _) = stored(&log).await;
        log.close().await.unwrap();
        let new_bases = log_bases(&path);
        let replaced: Vec<u64> = old_bases
            .iter()
            .copied()
            .filter(|b| *b < outcome.cleaned_to)
            .collect();
        let replacing: Vec<u64> = new_bases
            .iter()
            .copied()
            .filter(|b| *b < outcome.cleaned_to)
            .collect();
        assert!(!replacing.is_empty());

        // Every step of a swap, as a stop would leave it: cleaned files
        // without a marker (undone), then with the marker and none, some or
        // all of them renamed into place (finished).
        for renamed in [None, Some(0), Some(1), Some(replacing.len())] {
            let trial = dir.path().join(format!("trial-{renamed:?}"));
            copy_dir(&copy, &trial);
            for base in &replacing {
                for ext in ["log", "index", "timeindex"] {
                    let name = format!("{base:020}.{ext}");
                    std::fs::copy(path.join(&name), trial.join(format!("{name}.cleaned"))).unwrap();
                }
            }
            if let Some(renamed) = renamed {
                std::fs::write(
                    trial.join("strom.cleaning"),
                    SwapMarker {
                        old: replaced.clone(),
                        new: replacing.clone(),
                    }
                    .encode(),
                )
                .unwrap();
                for base in replacing.iter().take(renamed) {
                    for ext in ["log", "index", "timeindex"] {
                        let _ = std::fs::remove_file(trial.join(format!("{base:020}.{ext}")));
                    }
                    for ext in ["log", "index", "timeindex"] {
                        let name = format!("{base:020}.{ext}");
                        std::fs::rename(trial.join(format!("{name}.cleaned")), trial.join(&name))
                            .unwrap();
                    }
                }
            }
            let log = open(&trial, clock.clone()).await;
            let (content, _) = stored(&log).await;
            if renamed.is_some() {
                assert_eq!(content, cleaned, "swap with {renamed:?} renamed");
            } else {
                let all: Produced = produced.clone();
                assert_eq!(content, all, "undone cleaning");
            }
            log.close().await.unwrap();
            let leftovers: Vec<_> = std::fs::read_dir(&trial)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".cleaned") || n == "strom.cleaning")
                .collect();
            assert!(leftovers.is_empty(), "{leftovers:?}");
        }
    });
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn log_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    bases
}

#[test]
fn a_log_whose_last_sealed_records_are_all_swept_reads_on_to_its_active_segment() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let now = common::BASE_TIMESTAMP + 30 * DAY_MS;
        let clock = Rc::new(ManualClock::new(now));
        let log = open_aging(&path, clock.clone(), 16 << 10, 1000).await;
        let mut produced = fill(&log, now).await;
        // Tombstones for keys 0..100 in batches of their own, then a roll.
        for chunk in 0..20u64 {
            let records: Vec<NewRecord> = (0..5)
                .map(|i| plain(Some(format!("key-{}", chunk * 5 + i).into_bytes()), None))
                .collect();
            let info = log
                .append(
                    Bytes::from(build::batch(now - 2 * DAY_MS, &records)),
                    AppendOptions::default(),
                )
                .await
                .unwrap();
            for (i, r) in records.into_iter().enumerate() {
                produced.insert(info.base_offset + i as u64, (r.key.unwrap(), None));
            }
        }
        let sentinel = roll(&log, &clock, now, b"sentinel").await;
        produced.insert(sentinel, (b"sentinel".to_vec(), Some(b"roll".to_vec())));
        assert_eq!(
            *log.segment_base_offsets().last().unwrap(),
            sentinel,
            "rolled"
        );
        let end = log.next_offset();
        let outcome = log.clean(&options(now, end)).await.unwrap().unwrap();
        assert_eq!(outcome.cleaned_to, sentinel);
        let (kept, _) = stored(&log).await;
        check(&produced, &kept, outcome.cleaned_to, false);
        clock.advance_ms(DAY_MS as u64 + 1);
        let swept = log
            .clean(&options(now + DAY_MS + 2001, end))
            .await
            .unwrap()
            .unwrap();
        assert!(swept.tombstones_removed >= 100, "{swept:?}");
        let (kept, _) = stored(&log).await;
        check(&produced, &kept, outcome.cleaned_to, true);
        // From every offset of the removed range a read moves on.
        for from in [sentinel - 100, sentinel - 1] {
            let read = log.read(from, 1 << 20, end).await.unwrap();
            assert!(
                read.next_offset > from && !read.bytes.is_empty(),
                "read from {from}: {read:?}"
            );
        }
        log.close().await.unwrap();
    });
}

#[test]
fn retention_running_beside_a_cleaning_leaves_a_consistent_log() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let (log, clock, now, produced) = filled(&path).await;
        let end = log.next_offset();
        let mut config = log.config();
        config.retention_bytes = (log.size_bytes() / 2) as i64;
        log.set_config(config);
        let asked = options(now, end);
        let cleaning = log.clean(&asked);
        let retention = log.enforce_retention();
        let (cleaned, retained) = futures_lite::future::zip(cleaning, retention).await;
        cleaned.unwrap();
        assert!(retained.unwrap().segments_deleted > 0);
        let (kept, _) = stored(&log).await;
        for (offset, record) in &kept {
            assert_eq!(
                produced.get(offset),
                Some(record),
                "offset {offset} changed"
            );
        }
        assert!(kept.keys().all(|o| *o >= log.start_offset()));
        // The same after a restart.
        log.close().await.unwrap();
        let log = open(&path, clock.clone()).await;
        assert_eq!(stored(&log).await.0, kept);
        log.close().await.unwrap();
    });
}

#[test]
fn a_quiet_active_segment_rolls_after_segment_ms_and_becomes_cleanable() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let now = common::BASE_TIMESTAMP + 30 * DAY_MS;
        let clock = Rc::new(ManualClock::new(now));
        let log = open_aging(&path, clock.clone(), 1 << 30, 60_000).await;
        // Empty: nothing to roll, however old.
        clock.advance_ms(120_000);
        assert!(!log.roll_if_idle().await.unwrap());
        let records: Vec<NewRecord> = (0..4)
            .map(|i| plain(Some(vec![b'k', (i % 2) as u8]), Some(vec![i as u8; 10])))
            .collect();
        let now = now + 120_000;
        log.append(
            Bytes::from(build::batch(now, &records)),
            AppendOptions::default(),
        )
        .await
        .unwrap();
        log.flush().await.unwrap();
        // Younger than segment.ms: it stays active.
        clock.advance_ms(30_000);
        assert!(!log.roll_if_idle().await.unwrap());
        assert_eq!(log.segment_count(), 1);
        assert_eq!(
            log.cleanable(4, now + 30_000, 0).await.unwrap().dirty_bytes,
            0
        );
        // Older: sealed without an append, and the cleaner may take it.
        clock.advance_ms(31_000);
        assert!(log.roll_if_idle().await.unwrap());
        assert_eq!(log.segment_base_offsets(), vec![0, 4]);
        assert!(log.cleanable(4, now + 61_000, 0).await.unwrap().dirty_bytes > 0);
        let outcome = log.clean(&options(now + 61_000, 4)).await.unwrap().unwrap();
        assert_eq!((outcome.cleaned_to, outcome.records_removed), (4, 2));
        log.close().await.unwrap();
    });
}

/// Appends one transactional batch of `producer_id` writing `value` to
/// each key; returns its base offset.
async fn append_txn(
    log: &Log,
    now: i64,
    producer_id: i64,
    keys: std::ops::Range<u64>,
    value: &str,
) -> u64 {
    let records: Vec<NewRecord> = keys
        .map(|k| {
            plain(
                Some(format!("k{k}").into_bytes()),
                Some(value.as_bytes().to_vec()),
            )
        })
        .collect();
    let mut bytes = build::batch(now - 2 * DAY_MS, &records);
    batch::set_producer_sequence(&mut bytes, producer_id, 0, 0, true);
    log.append(Bytes::from(bytes), AppendOptions::default())
        .await
        .unwrap()
        .base_offset
}

async fn append_marker(log: &Log, now: i64, producer_id: i64, marker: Marker) -> u64 {
    let bytes = control::marker_batch(producer_id, 0, 0, marker, now - 2 * DAY_MS);
    log.append(Bytes::from(bytes), AppendOptions::default())
        .await
        .unwrap()
        .base_offset
}

/// The control batches of the log: (producer id, offset).
async fn markers(log: &Log) -> Vec<(i64, u64)> {
    let (_, headers) = stored(log).await;
    headers
        .iter()
        .filter(|h| h.is_control())
        .map(|h| (h.producer_id, h.base_offset as u64))
        .collect()
}

#[test]
fn aborted_transactions_records_go_and_markers_once_their_transaction_is_gone_and_their_time_up() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let now = common::BASE_TIMESTAMP + 30 * DAY_MS;
        let clock = Rc::new(ManualClock::new(now));
        let log = open_aging(&path, clock.clone(), 16 << 10, 1000).await;
        // A: committed, later wholly superseded; B: aborted, over the same
        // keys (must never make A's or anyone's value go); C and D:
        // committed, superseding A.
        append_txn(&log, now, 1, 0..10, "a").await;
        let marker_a = append_marker(&log, now, 1, Marker::Commit).await;
        let first_b = append_txn(&log, now, 2, 0..10, "b").await;
        let marker_b = append_marker(&log, now, 2, Marker::Abort).await;
        let c = append_txn(&log, now, 1, 0..5, "c").await;
        let marker_c = append_marker(&log, now, 1, Marker::Commit).await;
        let d = append_txn(&log, now, 3, 5..10, "d").await;
        let marker_d = append_marker(&log, now, 3, Marker::Commit).await;
        let sentinel = roll(&log, &clock, now, b"s").await;
        let end = log.next_offset();
        let aborted = vec![AbortedRange {
            producer_id: 2,
            first_offset: first_b,
            marker_offset: marker_b,
        }];
        let with_aborted = |now_ms| CleanOptions {
            aborted: aborted.clone(),
            ..options(now_ms, end)
        };

        let first = log.clean(&with_aborted(now)).await.unwrap().expect("dirty");
        assert_eq!(first.cleaned_to, sentinel, "{first:?}");
        assert_eq!(first.aborted_records_removed, 10, "{first:?}");
        // B's ten and A's ten (superseded by C and D).
        assert_eq!(first.records_removed, 20, "{first:?}");
        assert!(first.markers_removed.is_empty(), "{first:?}");
        let (kept, _) = stored(&log).await;
        let values: BTreeMap<u64, String> = kept
            .iter()
            .filter(|(_, (key, _))| key.starts_with(b"k"))
            .map(|(offset, (_, value))| {
                (*offset, String::from_utf8(value.clone().unwrap()).unwrap())
            })
            .collect();
        let expected: BTreeMap<u64, String> = (0..5)
            .map(|i| (c + i, "c".to_string()))
            .chain((0..5).map(|i| (d + i, "d".to_string())))
            .collect();
        assert_eq!(values, expected, "C's and D's records, nothing of A or B");
        // Every marker stays until its time is up.
        assert_eq!(
            markers(&log).await,
            vec![(1, marker_a), (2, marker_b), (1, marker_c), (3, marker_d)]
        );
        assert_eq!(log.clean(&with_aborted(now)).await.unwrap(), None);

        // A day later A's and B's markers go (nothing of their
        // transactions is left), C's and D's stay with their records.
        clock.advance_ms(DAY_MS as u64 + 1);
        let later = now + 2000 + DAY_MS + 1;
        let swept = log
            .clean(&with_aborted(later))
            .await
            .unwrap()
            .expect("markers due");
        assert_eq!(
            swept.markers_removed,
            vec![(1, marker_a), (2, marker_b)],
            "{swept:?}"
        );
        assert_eq!(swept.records_removed, 0, "{swept:?}");
        assert_eq!(markers(&log).await, vec![(1, marker_c), (3, marker_d)]);
        let (after, _) = stored(&log).await;
        let control_offsets = [marker_a, marker_b];
        let expected_after: Produced = kept
            .into_iter()
            .filter(|(offset, _)| !control_offsets.contains(offset))
            .collect();
        assert_eq!(after, expected_after);

        // The same after a restart.
        log.close().await.unwrap();
        let log = open(&path, clock.clone()).await;
        assert_eq!(markers(&log).await, vec![(1, marker_c), (3, marker_d)]);
        log.close().await.unwrap();
    });
}

#[test]
fn a_log_deleted_while_a_cleaning_runs_is_gone_and_nothing_waits_forever() {
    const ROUNDS: usize = 12;
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        for round in 0..ROUNDS {
            let path = root.join(format!("t-{round}"));
            let (log, _clock, now, _) = filled(&path).await;
            let asked = options(now, log.next_offset());
            let cleaning = log.clean(&asked);
            // A different moment of the cleaning each round: before it
            // builds, once it writes its cleaned segment, or once its swap
            // began (its marker is being written, under the swap lock).
            let moment = match round % 3 {
                0 => None,
                1 => Some(".cleaned"),
                _ => Some(storage::SWAP_MARKER_FILE),
            };
            let dir = path.clone();
            let deleting = async {
                if let Some(name) = moment {
                    // The cleaning may end before the moment is seen: then
                    // the deletion runs after it.
                    poll_until(MOMENT_DEADLINE, || {
                        std::fs::read_dir(&dir)
                            .into_iter()
                            .flatten()
                            .flatten()
                            .any(|e| e.file_name().to_string_lossy().contains(name))
                    })
                    .await;
                }
                log.delete().await
            };
            let both = futures_lite::future::zip(cleaning, deleting);
            let bounded = futures_lite::future::or(async { Some(both.await) }, async {
                poll_until(BOTH_DEADLINE, || false).await;
                None
            });
            let (_, deleted) = bounded.await.unwrap_or_else(|| {
                panic!("round {round}: the deletion and the cleaning wait for each other")
            });
            deleted.unwrap_or_else(|e| panic!("round {round}: {e}"));
            assert!(!path.exists(), "round {round}: the directory is gone");
        }
    });
}

/// How long a round waits for its moment of the cleaning.
const MOMENT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);
/// How long the deletion and the cleaning may take together.
const BOTH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Polls `ready` on this executor until it holds or `deadline` passes;
/// whether it held.
async fn poll_until(deadline: std::time::Duration, ready: impl Fn() -> bool) -> bool {
    let started = std::time::Instant::now();
    while !ready() {
        if started.elapsed() >= deadline {
            return false;
        }
        glommio::timer::sleep(std::time::Duration::from_micros(20)).await;
    }
    true
}
