//! Leader epochs in the log: a leader's append stamps its epoch into the
//! stored batch (byte 12, outside the CRC); a follower's `append_at` keeps
//! its leader's offsets, epochs and gaps and refuses overlaps; the
//! leader-epoch cache is kept in Kafka's `leader-epoch-checkpoint` file,
//! survives a restart, is rebuilt from the batches when the file is
//! missing or damaged, and is cut with the log at either end.

mod common;

use std::path::Path;

use bytes::Bytes;
use common::{run, Spec};
use protocol::batch::split_batches;
use storage::epoch_cache::FILE_NAME;
use storage::{AppendOptions, Log, StorageError};

fn leader(epoch: i32) -> AppendOptions {
    AppendOptions {
        leader_epoch: epoch,
        ..AppendOptions::default()
    }
}

/// Appends a batch of 2 records per epoch in `epochs`, in order.
async fn append_epochs(log: &Log, epochs: &[i32]) {
    for (i, &epoch) in epochs.iter().enumerate() {
        let spec = Spec::new(i as u64, 2, 100);
        log.append(spec.bytes(), leader(epoch)).await.unwrap();
    }
    log.flush().await.unwrap();
}

/// Every stored batch, whole.
async fn stored_batches(log: &Log) -> Vec<Bytes> {
    let read = log
        .read(log.start_offset(), 1 << 20, u64::MAX)
        .await
        .unwrap();
    split_batches(read.bytes)
        .map(|b| b.unwrap().bytes().clone())
        .collect()
}

fn entries(log: &Log) -> Vec<(i32, u64)> {
    log.epoch_entries()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

fn checkpoint(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(FILE_NAME)).unwrap()
}

#[test]
fn leader_appends_stamp_their_epoch_and_the_cache_survives_a_restart() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        assert_eq!(log.latest_epoch(), None);
        assert_eq!(checkpoint(&path), "0\n0\n", "made with the log, empty");
        append_epochs(&log, &[0, 0, 3, 3]).await;
        let epochs: Vec<i32> = stored_batches(&log)
            .await
            .iter()
            .map(|b| i32::from_be_bytes(b[12..16].try_into().unwrap()))
            .collect();
        assert_eq!(
            epochs,
            [0, 0, 3, 3],
            "partitionLeaderEpoch of each stored batch"
        );
        assert_eq!(entries(&log), [(0, 0), (3, 4)]);
        assert_eq!(checkpoint(&path), "0\n2\n0 0\n3 4\n");
        assert_eq!(log.latest_epoch(), Some(3));
        assert_eq!(log.end_offset_for(0), (0, 4));
        assert_eq!(log.end_offset_for(1), (0, 4));
        assert_eq!(log.end_offset_for(3), (3, 8));
        assert_eq!(log.end_offset_for(4), (-1, -1));
        assert_eq!(log.end_offset_for(-1), (-1, -1));
        log.close().await.unwrap();

        let log = Log::open(&common::ctx(), &path, common::config(1 << 30))
            .await
            .unwrap();
        assert_eq!(entries(&log), [(0, 0), (3, 4)]);
        assert_eq!(log.end_offset_for(3), (3, 8));
        log.close().await.unwrap();
    });
}

#[test]
fn append_at_keeps_the_leader_s_offsets_and_gaps_and_refuses_overlaps() {
    let dir = common::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(move || async move {
        let config = common::config(1 << 30);
        let leader_log = Log::open(&common::ctx(), root.join("l-0"), config.clone())
            .await
            .unwrap();
        append_epochs(&leader_log, &[1, 1, 4]).await;
        let batches = stored_batches(&leader_log).await;
        let follower = Log::open(&common::ctx(), root.join("f-0"), config)
            .await
            .unwrap();
        for batch in &batches {
            let info = follower.append_at(batch.clone()).await.unwrap();
            follower.wait_durable(info.last_offset).await.unwrap();
        }
        assert_eq!(stored_batches(&follower).await, batches, "byte for byte");
        assert_eq!(entries(&follower), [(1, 0), (4, 4)]);
        assert_eq!(checkpoint(&root.join("f-0")), "0\n2\n1 0\n4 4\n");

        // An overlap, and a gap beyond what a segment can hold, are
        // refused and change nothing.
        let end = follower.next_offset();
        let mut far = Spec::new(9, 2, 100).stored(end + (1 << 31));
        far[12..16].copy_from_slice(&4i32.to_be_bytes());
        let overlap = batches[1].clone();
        for (what, batch) in [("far gap", Bytes::from(far)), ("overlap", overlap)] {
            match follower.append_at(batch).await {
                Err(StorageError::NotAtLogEnd {
                    base_offset,
                    log_end,
                    ..
                }) => {
                    assert_eq!(log_end, end, "{what}");
                    assert_ne!(base_offset, end as i64, "{what}");
                }
                other => panic!("{what}: {other:?}"),
            }
        }
        assert_eq!(follower.next_offset(), end);
        assert_eq!(stored_batches(&follower).await, batches);

        // A gap, as a compacted leader's log has, is kept as it is: the
        // batch at the leader's offsets, the log end after it.
        let mut gap = Spec::new(9, 2, 100).stored(end + 5);
        gap[12..16].copy_from_slice(&4i32.to_be_bytes());
        let crc = protocol::batch::compute_crc(&gap);
        gap[17..21].copy_from_slice(&crc.to_be_bytes());
        let info = follower.append_at(Bytes::from(gap.clone())).await.unwrap();
        assert_eq!((info.base_offset, info.last_offset), (end + 5, end + 6));
        assert_eq!(follower.next_offset(), end + 7);
        follower.wait_durable(info.last_offset).await.unwrap();
        let read = follower.read(end, 1 << 20, u64::MAX).await.unwrap();
        assert_eq!(&read.bytes[..], &gap[..], "read from inside the gap");
        assert_eq!(read.next_offset, end + 7);
        leader_log.close().await.unwrap();
        follower.close().await.unwrap();
    });
}

#[test]
fn a_missing_or_damaged_checkpoint_is_rebuilt_from_the_batches() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let ctx = common::ctx();
        let open = || Log::open(&ctx, &path, common::config(4 << 10));
        let log = open().await.unwrap();
        // Small segments: the epochs span several.
        for (i, epoch) in [0, 0, 0, 2, 2, 5].iter().enumerate() {
            let spec = Spec::new(i as u64, 2, 1_500);
            log.append(spec.bytes(), leader(*epoch)).await.unwrap();
        }
        log.close().await.unwrap();
        let expected = "0\n3\n0 0\n2 6\n5 10\n";
        assert_eq!(checkpoint(&path), expected);

        std::fs::remove_file(path.join(FILE_NAME)).unwrap();
        let log = open().await.unwrap();
        assert_eq!(entries(&log), [(0, 0), (2, 6), (5, 10)]);
        assert_eq!(checkpoint(&path), expected, "written again");
        log.close().await.unwrap();

        std::fs::write(path.join(FILE_NAME), "0\n3\n0 0\ngarbage\n").unwrap();
        let log = open().await.unwrap();
        assert_eq!(entries(&log), [(0, 0), (2, 6), (5, 10)]);
        assert_eq!(checkpoint(&path), expected, "replaced");
        log.close().await.unwrap();
    });
}

#[test]
fn truncation_cuts_the_cache_at_either_end() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    run(move || async move {
        let ctx = common::ctx();
        let open = || Log::open(&ctx, &path, common::config(1 << 30));
        let log = open().await.unwrap();
        append_epochs(&log, &[0, 0, 2, 2, 5]).await;
        assert_eq!(entries(&log), [(0, 0), (2, 4), (5, 8)]);

        // Suffix: the batch holding offset 8 and everything after go.
        assert_eq!(log.truncate_to(8).await.unwrap(), 8);
        assert_eq!(entries(&log), [(0, 0), (2, 4)]);
        assert_eq!(checkpoint(&path), "0\n2\n0 0\n2 4\n");
        assert_eq!(log.end_offset_for(2), (2, 8));
        assert_eq!(log.end_offset_for(5), (-1, -1));

        // Prefix: the epoch holding the new start starts there.
        assert_eq!(log.advance_start_offset(5).await.unwrap(), 5);
        assert_eq!(entries(&log), [(2, 5)]);
        assert_eq!(checkpoint(&path), "0\n1\n2 5\n");
        assert_eq!(
            log.end_offset_for(0),
            (0, 5),
            "below the earliest known epoch: the earliest entry's start (Kafka's answer)"
        );
        log.close().await.unwrap();

        let log = open().await.unwrap();
        assert_eq!(entries(&log), [(2, 5)]);
        // A new epoch after the truncation starts at the log end.
        append_epochs(&log, &[6]).await;
        assert_eq!(entries(&log), [(2, 5), (6, 8)]);
        log.close().await.unwrap();
    });
}
