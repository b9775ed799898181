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
