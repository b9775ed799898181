//! A log deleted while it is busy (a partition whose replica moves away
//! under load): appends queued, writes and sync rounds in flight, journal
//! rounds and chunk retirements naming it, retention removing its head.
//! The deletion must neither fence the log (a broker stops on a fenced
//! log) nor panic, and the logs beside it keep every durable append.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{read_all, run, Spec};
use storage::{AppendOptions, ContextConfig, Log, LogConfig};

/// Fences seen in this process, with the last reason.
static FENCES: AtomicUsize = AtomicUsize::new(0);
static LAST_FENCE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

fn count_fences() {
    storage::fence::on_fence(|dir, reason| {
        FENCES.fetch_add(1, Ordering::SeqCst);
        *LAST_FENCE.lock().unwrap() = format!("{}: {reason}", dir.display());
    });
}

fn config() -> LogConfig {
    LogConfig::from_pairs([
        ("segment.bytes", "16384"),
        ("retention.bytes", "65536"),
        ("strom.preallocate.bytes", "65536"),
        ("retention.ms", "-1"),
    ])
    .expect("valid test config")
}

/// Appends batches to `log` until it refuses, each made durable by its own
/// task (as a produce request waits for its acknowledgement while the next
/// one arrives); returns the (base offset, spec) of those acknowledged.
async fn produce(log: Log, seed: u64, max: u64) -> Vec<(u64, Spec)> {
    let mut waits = Vec::new();
    for i in 0..max {
        let spec = Spec::new(seed + i, 2, 300 + (i as usize * 37) % 700);
        let Ok(info) = log.append(spec.bytes(), AppendOptions::default()).await else {
            break;
        };
        let log = log.clone();
        waits.push(glommio::spawn_local(async move {
            log.wait_durable(info.last_offset)
                .await
                .ok()
                .map(|_| (info.base_offset, spec))
        }));
        if i % 8 == 0 {
            glommio::yield_if_needed().await;
        }
    }
    let mut acked = Vec::new();
    for wait in waits {
        acked.extend(wait.await);
    }
    acked
}

#[test]
fn a_log_deleted_mid_load_neither_fences_nor_panics_and_its_neighbours_keep_their_records() {
    count_fences();
    const ROUNDS: u64 = 40;
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        // Small journal chunks: they retire often, asking every log with
        // records in them (the doomed one too) to write out.
        common::use_context(ContextConfig {
            journal_chunk_bytes_max: 1 << 20,
            ..Default::default()
        });
        let ctx = common::ctx();
        let keeper = Log::open(&ctx, root.join("kept-0"), config())
            .await
            .unwrap();
        for round in 0..ROUNDS {
            let doomed = Log::open(&ctx, root.join(format!("moving-{round}")), config())
                .await
                .unwrap();
            let producers = [
                glommio::spawn_local(produce(doomed.clone(), round * 100_000, 2_000)),
                glommio::spawn_local(produce(keeper.clone(), round * 100_000 + 50_000, 60)),
            ];
            let deleted = std::rc::Rc::new(std::cell::Cell::new(false));
            let retention = {
                let (doomed, deleted) = (doomed.clone(), deleted.clone());
                glommio::spawn_local(async move {
                    for _ in 0..1_000 {
                        if deleted.get() || doomed.enforce_retention().await.is_err() {
                            break;
                        }
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                })
            };
            // A different moment of the load each round.
            glommio::timer::sleep(Duration::from_micros(300 * (round % 13) + 100)).await;
            doomed.delete().await.unwrap();
            deleted.set(true);
            assert!(
                !root.join(format!("moving-{round}")).exists(),
                "round {round}: the deleted log's directory is gone"
            );
            let [doomed_acks, keeper_acks] = producers;
            doomed_acks.await;
            let kept = keeper_acks.await;
            retention.await;
            assert_eq!(
                FENCES.load(Ordering::SeqCst),
                0,
                "round {round}: a fence: {}",
                LAST_FENCE.lock().unwrap()
            );
            // The neighbour kept every batch it acknowledged, byte for byte.
            let stored = read_all(&keeper, 1 << 20).await;
            for (base, spec) in kept {
                let found = stored
                    .iter()
                    .find(|(offset, _)| *offset == base)
                    .unwrap_or_else(|| panic!("round {round}: offset {base} kept"));
                assert_eq!(found.1, spec.stored(base), "round {round}: offset {base}");
            }
        }
        keeper.close().await.unwrap();
    });
    assert_eq!(FENCES.load(Ordering::SeqCst), 0);
}
