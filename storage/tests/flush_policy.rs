//! Flush policies, group commit, backpressure and append notifications.

mod common;

use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use common::{run, Spec};
use storage::{AppendOptions, FlushPolicy, FlushScope, Log};

/// Polls `done` on the executor until it holds or `limit` passes.
async fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        glommio::yield_if_needed().await;
        glommio::timer::Timer::new(Duration::from_millis(2)).await;
    }
    done()
}

/// One 1 GiB segment synced by fdatasync of its own file.
fn file_scoped() -> storage::LogConfig {
    let mut config = common::config(1 << 30);
    config.flush_scope = FlushScope::File;
    config
}

#[test]
fn always_shares_one_fdatasync_among_waiting_appenders() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, file_scoped())
            .await
            .unwrap();
        let appenders: Vec<_> = (0..64u64)
            .map(|i| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    let info = log
                        .append(Spec::new(i, 2, 4000).bytes(), AppendOptions::default())
                        .await
                        .unwrap();
                    log.wait_durable(info.last_offset).await.unwrap();
                    assert!(log.durable_offset() > info.last_offset);
                })
            })
            .collect();
        for task in appenders {
            task.await;
        }
        let stats = log.stats();
        assert_eq!(log.durable_offset(), 128);
        assert!(
            stats.syncs < 64,
            "group commit: {} syncs for 64 appends",
            stats.syncs
        );
        assert!(stats.writes < 64, "coalesced writes: {}", stats.writes);
        log.close().await.unwrap();
    });
}

#[test]
fn filesystem_scope_shares_one_syncfs_among_the_logs_of_a_thread() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let appended = run(move || async move {
        let appended = Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut config = common::config(1 << 30);
        config.flush_scope = FlushScope::Filesystem;
        let mut logs = Vec::new();
        for p in 0..16 {
            logs.push(
                Log::open(&common::ctx(), &root.join(format!("t-{p}")), config.clone())
                    .await
                    .unwrap(),
            );
        }
        let before = common::ctx().filesystem_syncs();
        let mut appenders = Vec::new();
        for (p, log) in logs.iter().enumerate() {
            for i in 0..8u64 {
                let log = log.clone();
                let appended = appended.clone();
                appenders.push(glommio::spawn_local(async move {
                    for round in 0..4u64 {
                        let seed = p as u64 * 1000 + i * 10 + round;
                        let spec = Spec::new(seed, 3, 900);
                        let info = log
                            .append(spec.bytes(), AppendOptions::default())
                            .await
                            .unwrap();
                        appended.borrow_mut().push((p, info.base_offset, seed));
                        log.wait_durable(info.last_offset).await.unwrap();
                        assert!(log.durable_offset() > info.last_offset);
                    }
                }));
            }
        }
        for task in appenders {
            task.await;
        }
        let syncfs_calls = common::ctx().filesystem_syncs() - before;
        let log_rounds: u64 = logs.iter().map(|log| log.stats().syncs).sum();
        for log in &logs {
            // 8 appenders x 4 rounds x 3 records, all durable.
            assert_eq!(log.durable_offset(), 96);
        }
        assert!(syncfs_calls > 0, "the logs synced through syncfs");
        assert!(
            syncfs_calls * 2 <= log_rounds,
            "{syncfs_calls} syncfs calls served {log_rounds} sync rounds of 16 logs: \
             rounds of different logs should share them"
        );
        for log in logs {
            log.close().await.unwrap();
        }
        let appended = appended.borrow().clone();
        appended
    });
    // Reopened, every batch is there byte for byte.
    let root = dir.path().to_path_buf();
    run(move || async move {
        for p in 0..16 {
            let log = Log::open(
                &common::ctx(),
                &root.join(format!("t-{p}")),
                common::config(1 << 30),
            )
            .await
            .unwrap();
            assert_eq!(log.next_offset(), 96);
            let read = common::read_all(&log, 1 << 20).await;
            assert_eq!(read.len(), 32);
            for (base, bytes) in read {
                let seed = appended
                    .iter()
                    .find(|(q, b, _)| *q == p && *b == base)
                    .map(|(_, _, seed)| *seed)
                    .expect("every batch read was appended");
                assert_eq!(
                    bytes,
                    Spec::new(seed, 3, 900).stored(base),
                    "t-{p} @ {base}"
                );
            }
            log.close().await.unwrap();
        }
    });
}

#[test]
fn interval_syncs_by_time_and_by_bytes() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(1 << 30);
        config.flush = FlushPolicy::Interval {
            ms: Some(50),
            bytes: None,
        };
        let log = Log::open(&common::ctx(), &path, config.clone())
            .await
            .unwrap();
        let info = log
            .append(Spec::new(1, 1, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        // Under interval, durable for acks means written.
        log.wait_durable(info.last_offset).await.unwrap();
        assert!(log.written_offset() > info.last_offset);
        assert!(
            eventually(Duration::from_secs(10), || log.durable_offset()
                > info.last_offset)
            .await,
            "the interval timer synced"
        );

        config.flush = FlushPolicy::Interval {
            ms: None,
            bytes: Some(20_000),
        };
        log.set_config(config);
        let syncs = log.stats().syncs;
        let small = log
            .append(Spec::new(2, 1, 5_000).bytes(), AppendOptions::default())
            .await
            .unwrap();
        log.wait_durable(small.last_offset).await.unwrap();
        assert_eq!(
            log.stats().syncs,
            syncs,
            "below the byte threshold: no sync"
        );
        assert!(log.durable_offset() <= small.last_offset);
        let mut last = small.last_offset;
        for i in 3..8 {
            last = log
                .append(Spec::new(i, 1, 5_000).bytes(), AppendOptions::default())
                .await
                .unwrap()
                .last_offset;
        }
        assert!(
            eventually(Duration::from_secs(10), || log.durable_offset() > last - 2).await,
            "the byte threshold synced"
        );
        log.close().await.unwrap();
    });
}

#[test]
fn never_syncs_only_on_flush() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(1 << 30);
        config.flush = FlushPolicy::Never;
        let log = Log::open(&common::ctx(), &path, config).await.unwrap();
        let mut last = 0;
        for i in 0..20 {
            let info = log
                .append(Spec::new(i, 1, 3000).bytes(), AppendOptions::default())
                .await
                .unwrap();
            last = info.last_offset;
        }
        log.wait_durable(last).await.unwrap();
        assert_eq!(log.written_offset(), 20);
        assert_eq!(log.stats().syncs, 0);
        assert_eq!(log.durable_offset(), 0);
        log.flush().await.unwrap();
        assert_eq!(log.durable_offset(), 20);
        log.close().await.unwrap();
    });
}

#[test]
fn pending_bytes_stay_bounded_under_a_burst() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let mut config = common::config(1 << 30);
        config.pending_bytes_max = 64 << 10;
        config.write_bytes_max = 16 << 10;
        let batch_bytes = Spec::new(0, 1, 8000).bytes().len();
        let log = Log::open(&common::ctx(), &path, config).await.unwrap();
        let peak = Rc::new(Cell::new(0usize));
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                let (log, peak) = (log.clone(), peak.clone());
                glommio::spawn_local(async move {
                    log.append(Spec::new(i, 1, 8000).bytes(), AppendOptions::default())
                        .await
                        .unwrap();
                    peak.set(peak.get().max(log.stats().pending_bytes));
                })
            })
            .collect();
        for task in tasks {
            task.await;
        }
        assert!(
            peak.get() <= (64 << 10) + batch_bytes,
            "peak pending {}",
            peak.get()
        );
        log.flush().await.unwrap();
        assert_eq!(log.next_offset(), 200);
        log.close().await.unwrap();
    });
}

#[test]
fn wait_for_append_wakes_on_the_next_append() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        let woke = Rc::new(Cell::new(false));
        let waiter = {
            let (log, woke) = (log.clone(), woke.clone());
            glommio::spawn_local(async move {
                log.wait_for_append(0).await;
                woke.set(true);
            })
        };
        glommio::yield_if_needed().await;
        assert!(!woke.get());
        log.append(Spec::new(1, 1, 10).bytes(), AppendOptions::default())
            .await
            .unwrap();
        waiter.await;
        assert!(woke.get());
        log.close().await.unwrap();
    });
}

#[test]
fn many_logs_on_one_executor_share_a_bounded_cache() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let logs_open = 128;
        let mut logs = Vec::new();
        for i in 0..logs_open {
            logs.push(
                Log::open(
                    &common::ctx(),
                    root.join(format!("t-{i}")),
                    common::config(1 << 30),
                )
                .await
                .unwrap(),
            );
        }
        let share = storage::SHARD_CACHE_BYTES_MAX / logs_open;
        assert!(share < storage::LogConfig::default().cache_bytes_max);
        let log = &logs[0];
        for i in 0..200 {
            log.append(Spec::new(i, 1, 40_000).bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        log.flush().await.unwrap();
        let cached = log.stats().cached_bytes;
        assert!(cached <= share, "cached {cached} above the share {share}");
        assert!(cached > 0, "recent batches stay cached");
        for log in logs {
            log.close().await.unwrap();
        }
    });
}

/// Appends that arrive while a sync round runs are written during it, so
/// the next round can start the moment this one ends; and a truncation
/// during a round keeps that round from vouching for what is appended
/// after the cut.
#[test]
fn writes_go_on_while_a_sync_round_runs() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    // Rounds that sync segment writes: without the journal, which would
    // keep these small appends in memory.
    let mut config = file_scoped();
    config.journal_bytes = 0;
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, config).await.unwrap();
        log.hold_syncs();
        let limit = Duration::from_secs(10);

        // A (offset 0) is written and its round is held.
        log.append(Spec::new(0, 1, 3000).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert!(eventually(limit, || log.held_syncs() == 1).await);
        assert_eq!(log.written_offset(), 1);
        // B (offset 1) is written while that round is still held.
        log.append(Spec::new(1, 1, 3000).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert!(
            eventually(limit, || log.written_offset() == 2).await,
            "B was not written while the round ran"
        );
        assert_eq!(log.durable_offset(), 0);
        assert_eq!(log.held_syncs(), 1, "one round at a time");
        log.release_one_sync();
        assert!(eventually(limit, || log.durable_offset() == 1).await);
        // The next round (for B) starts at once, and is held.
        assert!(eventually(limit, || log.held_syncs() == 1).await);

        // Cut B off while its round is held, and append C at offset 1.
        assert_eq!(log.truncate_to(1).await.unwrap(), 1);
        log.append(Spec::new(2, 1, 3000).bytes(), AppendOptions::default())
            .await
            .unwrap();
        assert!(eventually(limit, || log.written_offset() == 2).await);
        // B's round ends: it synced before C was written, so C is not
        // durable by it.
        let rounds = log.stats().syncs;
        log.release_one_sync();
        assert!(eventually(limit, || log.stats().syncs == rounds + 1).await);
        assert_eq!(log.durable_offset(), 1, "a round vouched for C");
        assert!(eventually(limit, || log.held_syncs() == 1).await);
        log.release_syncs();
        assert!(eventually(limit, || log.durable_offset() == 2).await);
        log.close().await.unwrap();

        // C, not B, is what the log holds.
        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        let read = log.read(1, 1 << 20, log.next_offset()).await.unwrap();
        assert_eq!(&read.bytes[..], &Spec::new(2, 1, 3000).stored(1)[..]);
        assert_eq!(read.next_offset, 2);
        log.close().await.unwrap();
    });
}
