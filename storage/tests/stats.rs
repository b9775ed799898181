//! `Log::stats`: fdatasync latency and where reads were served from, the
//! figures the broker's metrics report.

mod common;

use common::{run, Spec};
use storage::{AppendOptions, Log, SYNC_LATENCY_BOUNDS_US};

#[test]
fn stats_count_sync_latency_and_cached_versus_disk_reads() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        for i in 0..5u64 {
            let info = log
                .append(Spec::new(i * 2, 2, 1000).bytes(), AppendOptions::default())
                .await
                .unwrap();
            log.wait_durable(info.last_offset).await.unwrap();
        }
        let stats = log.stats();
        assert!(stats.syncs >= 5, "{stats:?}");
        assert_eq!(
            stats.sync_latency_buckets.iter().sum::<u64>(),
            stats.syncs,
            "every sync is in one bucket"
        );
        assert_eq!(
            stats.sync_latency_buckets.len(),
            SYNC_LATENCY_BOUNDS_US.len() + 1
        );
        assert!(stats.sync_latency_us_total > 0, "{stats:?}");
        // Recent batches come from the cache.
        log.read(0, 1 << 20, u64::MAX).await.unwrap();
        let after_cached = log.stats();
        assert_eq!(after_cached.reads_cached, stats.reads_cached + 1);
        assert_eq!(after_cached.reads_disk, stats.reads_disk);
        log.close().await.unwrap();
        // After a reopen the cache is empty: the read goes to disk.
        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        let read = log.read(0, 1 << 20, u64::MAX).await.unwrap();
        assert!(!read.bytes.is_empty());
        let stats = log.stats();
        assert_eq!((stats.reads_cached, stats.reads_disk), (0, 1), "{stats:?}");
        log.close().await.unwrap();
    });
}
