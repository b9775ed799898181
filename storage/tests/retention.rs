//! Retention deletes exactly the expired (or excess) non-active segments,
//! oldest first, and never the active one.

mod common;

use common::{read_all, run, Spec};
use std::rc::Rc;

use storage::{AppendOptions, Context, Log, ManualClock, StorageError};

const DAY_MS: i64 = 24 * 3600 * 1000;

#[test]
fn time_retention_deletes_exactly_the_expired_segments() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(16 << 10);
        config.retention_ms = 7 * DAY_MS;
        let now = common::BASE_TIMESTAMP + 30 * DAY_MS;
        let clock = Rc::new(ManualClock::new(now));
        let ctx = Context::new(Default::default(), clock.clone());
        let log = Log::open(&ctx, &path, config).await.unwrap();
        // Old batches (20 days before now) then recent ones (1 day).
        for i in 0..60u64 {
            let mut spec = Spec::new(i, 2, 900);
            spec.timestamp = if i < 30 {
                now - 20 * DAY_MS
            } else {
                now - DAY_MS
            };
            log.append(spec.bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        log.flush().await.unwrap();
        let bases = log.segment_base_offsets();
        // Segments wholly made of old batches: those whose successor starts
        // at or before the first recent offset (60).
        let expired = bases.windows(2).filter(|w| w[1] <= 60).count();
        assert!(expired >= 2 && expired + 1 < bases.len(), "{bases:?}");
        let outcome = log.enforce_retention().await.unwrap();
        assert_eq!(outcome.segments_deleted, expired);
        assert_eq!(log.segment_base_offsets(), bases[expired..].to_vec());
        assert_eq!(log.start_offset(), bases[expired]);
        assert_eq!(
            common::segment_files(&path, "log").len(),
            bases.len() - expired
        );
        assert!(matches!(
            log.read(0, 100, u64::MAX).await,
            Err(StorageError::OffsetOutOfRange { .. })
        ));
        // Everything that remains is intact.
        let remaining = read_all(&log, 1 << 20).await;
        assert_eq!(remaining.first().unwrap().0, bases[expired]);
        // A second pass at the same time deletes nothing more.
        assert_eq!(log.enforce_retention().await.unwrap().segments_deleted, 0);

        // Even when everything is expired, the active segment stays.
        clock.advance_ms(365 * DAY_MS as u64);
        log.enforce_retention().await.unwrap();
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.segment_base_offsets(), vec![*bases.last().unwrap()]);
        let end = log.next_offset();
        let info = log
            .append(Spec::new(99, 1, 10).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert_eq!(info.base_offset, end);
        log.close().await.unwrap();
    });
}

#[test]
fn size_retention_deletes_oldest_segments_down_to_the_limit() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(16 << 10);
        config.retention_bytes = 40 << 10;
        let log = Log::open(&common::ctx(), &path, config).await.unwrap();
        for i in 0..100u64 {
            log.append(Spec::new(i, 2, 900).bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        log.flush().await.unwrap();
        let total = log.size_bytes();
        assert!(total > 80 << 10);
        log.enforce_retention().await.unwrap();
        // Kafka's rule: a segment goes while the log stays at or above the
        // limit without it. So now the log is at or above the limit, and
        // without its oldest segment it would be below.
        let after = log.size_bytes();
        let limit = 40u64 << 10;
        assert!(after >= limit, "size {after} fell below retention.bytes");
        let bases = log.segment_base_offsets();
        assert!(bases.len() >= 2);
        let oldest: u64 = read_all(&log, 1 << 20)
            .await
            .iter()
            .filter(|(base, _)| *base < bases[1])
            .map(|(_, bytes)| bytes.len() as u64)
            .sum();
        assert!(
            after - oldest < limit,
            "one more segment ({oldest} bytes) could have gone"
        );
        let reopened_start = log.start_offset();
        log.close().await.unwrap();
        let log = Log::open(&common::ctx(), &path, common::config(16 << 10))
            .await
            .unwrap();
        assert_eq!(log.start_offset(), reopened_start, "start offset persists");
        assert_eq!(log.segment_base_offsets(), bases);
        log.close().await.unwrap();
    });
}

/// Retention and a moving log start (DeleteRecords) while appends roll
/// segment after segment: a roll, retention and the start each write the
/// log's checkpoint, and may do so at once.
/// Neither may fail for the other's write (they once shared its temporary
/// file: one renamed it away under the other), and the checkpoint left
/// is the latest: the log opens again at the start retention set, with
/// every record from there.
#[test]
fn retention_beside_rolling_appends_never_fails_and_its_start_survives_a_reopen() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(16 << 10);
        config.retention_bytes = 64 << 10;
        let log = Log::open(&common::ctx(), &path, config.clone())
            .await
            .unwrap();
        // Every 8 appends a retention run and a moved log start (as
        // DeleteRecords moves it: each writes the checkpoint) start beside
        // the appends still rolling segments.
        let mut appends = Vec::new();
        let mut side = Vec::new();
        for i in 0..3_000u64 {
            let info = log
                .append(
                    Spec::new(i, 2, 300 + (i as usize * 37) % 700).bytes(),
                    AppendOptions::default(),
                )
                .await
                .unwrap_or_else(|error| panic!("append {i} failed: {error}"));
            let durable = log.clone();
            appends.push(glommio::spawn_local(async move {
                durable.wait_durable(info.last_offset).await
            }));
            if i % 8 == 0 {
                let log = log.clone();
                side.push(glommio::spawn_local(async move {
                    log.enforce_retention()
                        .await
                        .map_err(|error| format!("retention failed: {error}"))?;
                    let to = (log.start_offset() + 1).min(log.durable_offset());
                    log.advance_start_offset(to)
                        .await
                        .map(|_| ())
                        .map_err(|error| format!("moving the log start to {to} failed: {error}"))
                }));
                glommio::yield_if_needed().await;
            }
        }
        for (i, wait) in appends.into_iter().enumerate() {
            wait.await
                .unwrap_or_else(|error| panic!("append {i} not durable: {error}"));
        }
        for (i, run) in side.into_iter().enumerate() {
            run.await
                .unwrap_or_else(|error| panic!("side run {i}: {error}"));
        }
        log.enforce_retention().await.unwrap();
        let start = log.start_offset();
        assert!(start > 0, "retention removed nothing");
        let end = log.next_offset();
        log.close().await.unwrap();
        let log = Log::open(&common::ctx(), &path, config).await.unwrap();
        assert_eq!(
            log.start_offset(),
            start,
            "the start retention set persists"
        );
        assert_eq!(log.next_offset(), end);
        let stored = read_all(&log, 1 << 20).await;
        // The first batch read holds the start (each batch has 2 records;
        // the start may fall inside one).
        let first = stored.first().map(|(offset, _)| *offset);
        assert!(
            first.is_some_and(|base| base <= start && start < base + 2),
            "the first batch read starts at {first:?}, the log at {start}"
        );
        for pair in stored.windows(2) {
            assert!(pair[0].0 < pair[1].0, "offsets in order");
        }
        log.close().await.unwrap();
    });
}
