//! Appends random batches across many segments and checks every read and
//! lookup (by offset and by timestamp) against a simple in-memory model,
//! before and after a clean reopen.

mod common;

use common::{config, read_all, run, Spec};
use proptest::prelude::*;
use protocol::batch::{self, RecordBatch};
use storage::{AppendOptions, FoundRecord, Log, LogConfig, StorageError};

/// The model: each batch's spec and base offset, in order.
struct Model {
    batches: Vec<(u64, Spec)>,
}

impl Model {
    /// First offset whose record timestamp is >= `timestamp`.
    fn offset_for_timestamp(&self, timestamp: i64) -> Option<(u64, i64)> {
        for (base, spec) in &self.batches {
            for i in 0..spec.count {
                if spec.timestamp + i as i64 >= timestamp {
                    return Some((base + i as u64, spec.timestamp + i as i64));
                }
            }
        }
        None
    }

    /// The first record with the largest timestamp.
    fn max_timestamp_record(&self) -> Option<FoundRecord> {
        let mut best: Option<FoundRecord> = None;
        for (base, spec) in &self.batches {
            for i in 0..spec.count {
                let timestamp = spec.timestamp + i as i64;
                if best.is_none_or(|b| timestamp > b.timestamp) {
                    best = Some(FoundRecord {
                        offset: base + i as u64,
                        timestamp,
                    });
                }
            }
        }
        best
    }

    fn batch_holding(&self, offset: u64) -> &(u64, Spec) {
        let i = self
            .batches
            .partition_point(|(base, spec)| base + spec.count as u64 <= offset);
        &self.batches[i]
    }
}

async fn check_against_model(log: &Log, model: &Model, probe_timestamps: &[i64]) {
    let all = read_all(log, 7_000).await;
    assert_eq!(all.len(), model.batches.len());
    for ((base, bytes), (model_base, spec)) in all.iter().zip(&model.batches) {
        assert_eq!(base, model_base);
        assert_eq!(bytes, &spec.stored(*base), "bytes of batch at {base}");
    }
    let end = log.next_offset();
    // Every offset reads back the batch holding it, even with max_bytes 1.
    for offset in 0..end {
        let result = log.read(offset, 1, end).await.unwrap();
        let (base, spec) = model.batch_holding(offset);
        assert_eq!(
            &result.bytes[..],
            &spec.stored(*base)[..],
            "read at {offset}"
        );
        assert_eq!(result.next_offset, base + spec.count as u64);
    }
    // Upper bound stops before a batch at or past it.
    if let Some((base, _)) = model.batches.get(1) {
        let bounded = log.read(0, usize::MAX, *base).await.unwrap();
        assert_eq!(bounded.next_offset, *base);
    }
    for &ts in probe_timestamps {
        assert_eq!(
            log.offset_for_timestamp(ts).await.unwrap(),
            model
                .offset_for_timestamp(ts)
                .map(|(offset, timestamp)| FoundRecord { offset, timestamp }),
            "timestamp {ts}"
        );
    }
    assert_eq!(
        log.max_timestamp_record().await.unwrap(),
        model.max_timestamp_record(),
        "max timestamp"
    );
    assert!(matches!(
        log.read(end + 1, 100, u64::MAX).await,
        Err(StorageError::OffsetOutOfRange { .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn random_batches_round_trip_across_segments(
        shapes in proptest::collection::vec((1usize..12, 0usize..3000, 0i64..40), 1..60),
        segment_kib in 4u64..64,
        write_pages in 1usize..20,
        writes_in_flight in 1usize..6,
    ) {
        let dir = common::tempdir().unwrap();
        let path = dir.path().join("topic-0");
        let specs: Vec<Spec> = shapes.iter().enumerate().map(|(i, &(count, len, jitter))| {
            let mut spec = Spec::new(i as u64, count, len);
            // Timestamps wander, so max-so-far logic is exercised.
            spec.timestamp += jitter * 7 - 100;
            spec
        }).collect();
        let probes: Vec<i64> = (-2..(specs.len() as i64 + 2))
            .map(|i| common::BASE_TIMESTAMP + i * 10 + 3)
            .collect();
        run(move || async move {
            // Small writes and several in flight exercise page-aligned cuts.
            let mut cfg = config(segment_kib * 1024);
            cfg.write_bytes_max = write_pages * 4096;
            cfg.writes_in_flight_max = writes_in_flight;
            let log = Log::open(&common::ctx(), &path, cfg).await.unwrap();
            let mut model = Model { batches: Vec::new() };
            for (i, spec) in specs.iter().enumerate() {
                // Every other batch stays shared with the caller, whose bytes
                // the log must not change (it stamps a copy of the header).
                let bytes = spec.bytes();
                let kept = (i % 2 == 1).then(|| bytes.clone());
                let info = log.append(bytes, AppendOptions::default()).await.unwrap();
                if let Some(kept) = kept {
                    assert_eq!(&kept[..], &spec.bytes()[..], "the caller's batch is untouched");
                }
                assert_eq!(info.last_offset - info.base_offset + 1, spec.count as u64);
                model.batches.push((info.base_offset, *spec));
            }
            let last = log.next_offset() - 1;
            log.wait_durable(last).await.unwrap();
            check_against_model(&log, &model, &probes).await;
            log.close().await.unwrap();

            let log = Log::open(&common::ctx(), &path, config(segment_kib * 1024)).await.unwrap();
            assert!(log.recovery_report().clean);
            assert_eq!(log.recovery_report().segments_scanned, 0, "clean open scans nothing");
            check_against_model(&log, &model, &probes).await;
            // Appends continue after reopen with the next offsets.
            let extra = Spec::new(999, 3, 100);
            let info = log.append(extra.bytes(), AppendOptions::default()).await.unwrap();
            assert_eq!(info.base_offset, model.batches.last().map_or(0, |(b, s)| b + s.count as u64));
            model.batches.push((info.base_offset, extra));
            log.flush().await.unwrap();
            check_against_model(&log, &model, &[]).await;
            log.close().await.unwrap();
        });
    }
}

#[test]
fn invalid_batches_are_rejected_and_change_nothing() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut cfg = config(1 << 20);
        cfg.max_message_bytes = 2000;
        let log = Log::open(&common::ctx(), &path, cfg).await.unwrap();
        let good = Spec::new(1, 2, 50);
        log.append(good.bytes(), AppendOptions::default())
            .await
            .unwrap();
        let before = read_all(&log, 1 << 20).await;

        let mut bad_crc = good.bytes().to_vec();
        *bad_crc.last_mut().unwrap() ^= 0xff;
        let mut bad_magic = good.bytes().to_vec();
        bad_magic[16] = 1;
        let short = good.bytes().slice(..30);
        for (name, bytes) in [
            ("crc", bytes::Bytes::from(bad_crc)),
            ("magic", bytes::Bytes::from(bad_magic)),
            ("short", short),
        ] {
            let err = log
                .append(bytes, AppendOptions::default())
                .await
                .unwrap_err();
            assert!(
                matches!(err, StorageError::InvalidBatch(_)),
                "{name}: {err}"
            );
        }
        let big = Spec::new(2, 1, 5000);
        assert!(matches!(
            log.append(big.bytes(), AppendOptions::default()).await,
            Err(StorageError::BatchTooLarge { .. })
        ));
        assert_eq!(log.next_offset(), 2);
        assert_eq!(read_all(&log, 1 << 20).await, before);
        log.close().await.unwrap();
    });
}

#[test]
fn leader_epoch_and_log_append_time_are_stamped() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, config(1 << 20))
            .await
            .unwrap();
        let options = AppendOptions {
            leader_epoch: 7,
            log_append_time_ms: Some(1_800_000_000_000),
        };
        log.append(Spec::new(1, 3, 10).bytes(), options)
            .await
            .unwrap();
        let read = log.read(0, 1 << 20, u64::MAX).await.unwrap();
        let batch = RecordBatch::new(read.bytes).unwrap();
        assert_eq!(batch.header().partition_leader_epoch, 7);
        assert!(batch.header().is_log_append_time());
        assert_eq!(batch.header().max_timestamp, 1_800_000_000_000);
        assert_eq!(
            log.offset_for_timestamp(1_800_000_000_000).await.unwrap(),
            Some(FoundRecord {
                offset: 0,
                timestamp: 1_800_000_000_000
            })
        );
        // Every record of a LogAppendTime batch carries its timestamp: the
        // first one is the record with the max timestamp.
        assert_eq!(
            log.max_timestamp_record().await.unwrap(),
            Some(FoundRecord {
                offset: 0,
                timestamp: 1_800_000_000_000
            })
        );
        batch::validate(batch.bytes()).unwrap();
        log.close().await.unwrap();
    });
}

#[test]
fn truncate_and_start_offset_move_the_log_ends() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, config(8192))
            .await
            .unwrap();
        let mut bases = Vec::new();
        for i in 0..40 {
            let info = log
                .append(Spec::new(i, 4, 300).bytes(), AppendOptions::default())
                .await
                .unwrap();
            bases.push(info.base_offset);
        }
        assert!(log.segment_count() > 3);
        // Truncating inside a batch removes that whole batch.
        let new_end = log.truncate_to(bases[25] + 2).await.unwrap();
        assert_eq!(new_end, bases[25]);
        assert_eq!(log.next_offset(), bases[25]);
        let all = read_all(&log, 1 << 20).await;
        assert_eq!(all.len(), 25);
        for (i, (base, bytes)) in all.iter().enumerate() {
            assert_eq!(bytes, &Spec::new(i as u64, 4, 300).stored(*base));
        }
        // Appends continue from the new end.
        let info = log
            .append(Spec::new(100, 4, 300).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert_eq!(info.base_offset, bases[25]);
        log.flush().await.unwrap();

        log.advance_start_offset(bases[10] + 1).await.unwrap();
        assert_eq!(log.start_offset(), bases[10] + 1);
        assert!(matches!(
            log.read(bases[10], 100, u64::MAX).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        assert!(log.segment_base_offsets()[0] <= bases[10] + 1);
        log.close().await.unwrap();

        // Both survive a reopen.
        let log = Log::open(&common::ctx(), &path, config(8192))
            .await
            .unwrap();
        assert_eq!(log.start_offset(), bases[10] + 1);
        assert_eq!(log.next_offset(), bases[25] + 4);
        let read = log.read(bases[25], 1 << 20, u64::MAX).await.unwrap();
        assert_eq!(
            &read.bytes[..],
            &Spec::new(100, 4, 300).stored(bases[25])[..]
        );
        log.close().await.unwrap();
    });
}

#[test]
fn segments_roll_by_size_by_time_and_by_index_size() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = config(1 << 30);
        config.segment_ms = 1000;
        let log = Log::open(&common::ctx(), &path, config.clone())
            .await
            .unwrap();
        let at = |seed: u64, ts: i64| {
            let mut spec = Spec::new(seed, 1, 10);
            spec.timestamp = ts;
            spec.bytes()
        };
        let t = common::BASE_TIMESTAMP;
        log.append(at(0, t), AppendOptions::default())
            .await
            .unwrap();
        log.append(at(1, t + 900), AppendOptions::default())
            .await
            .unwrap();
        assert_eq!(
            log.segment_count(),
            1,
            "within segment.ms of the first batch"
        );
        log.append(at(2, t + 1500), AppendOptions::default())
            .await
            .unwrap();
        assert_eq!(log.segment_base_offsets(), vec![0, 2], "rolled by time");

        config.segment_ms = u64::MAX >> 2;
        config.segment_bytes = 2000;
        log.set_config(config.clone());
        let size = Spec::new(3, 1, 300).bytes().len() as u64;
        for i in 3..20 {
            log.append(Spec::new(i, 1, 300).bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        let per_segment = 2000 / size;
        // Batches 2..20 (18 of equal size) fill segments of `per_segment`
        // batches each, after the first segment [0, 2).
        assert_eq!(
            log.segment_count() as u64,
            1 + 18u64.div_ceil(per_segment),
            "rolled by size"
        );

        config.segment_bytes = 1 << 30;
        config.segment_index_bytes = 16; // two entries
        config.index_interval_bytes = 1;
        log.set_config(config);
        let before = log.segment_count();
        for i in 20..26 {
            log.append(Spec::new(i, 1, 300).bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        assert!(log.segment_count() >= before + 2, "rolled by a full index");
        log.flush().await.unwrap();
        assert_eq!(read_all(&log, 1 << 20).await.len(), 26);
        log.close().await.unwrap();
    });
}

#[test]
fn idle_logs_take_no_disk_space_and_active_ones_little() {
    use std::os::unix::fs::MetadataExt;
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = Log::open(&common::ctx(), &p, LogConfig::default())
            .await
            .unwrap();
        let file = common::segment_files(&p, "log").pop().unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!(
            (meta.len(), meta.blocks()),
            (0, 0),
            "an idle partition allocates nothing"
        );
        log.append(Spec::new(1, 1, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        log.flush().await.unwrap();
        let meta = std::fs::metadata(&file).unwrap();
        let preallocate = LogConfig::default().preallocate_bytes;
        assert!(
            meta.len() <= preallocate,
            "grown {} past one step",
            meta.len()
        );
        assert!(meta.blocks() * 512 <= preallocate + 4096);
        log.close().await.unwrap();
    });
}
