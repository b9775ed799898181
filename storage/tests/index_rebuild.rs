//! Deleted or damaged index files are rebuilt on open, byte-identical to
//! the originals, and give identical lookups.

mod common;

use std::path::Path;

use common::{run, segment_files, Spec};
use storage::{AppendOptions, Log};

/// Every lookup the indexes serve: the batch base for each offset, and the
/// offset for a range of timestamps.
async fn lookups(log: &Log) -> (Vec<u64>, Vec<Option<u64>>) {
    let end = log.next_offset();
    let mut by_offset = Vec::new();
    for offset in 0..end {
        let read = log.read(offset, 1, end).await.unwrap();
        let header = protocol::batch::BatchHeader::parse(&read.bytes).unwrap();
        by_offset.push(header.base_offset as u64);
    }
    let mut by_time = Vec::new();
    for i in -5..400i64 {
        by_time.push(
            log.offset_for_timestamp(common::BASE_TIMESTAMP + i * 5)
                .await
                .unwrap()
                .map(|found| found.offset),
        );
    }
    (by_offset, by_time)
}

fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut files = segment_files(dir, "index");
    files.extend(segment_files(dir, "timeindex"));
    files
        .into_iter()
        .map(|p| (p.clone(), std::fs::read(&p).unwrap()))
        .collect()
}

#[test]
fn damaged_indexes_are_rebuilt_identically() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    let before = run(move || async move {
        let log = Log::open(&common::ctx(), &p, common::config(32 << 10))
            .await
            .unwrap();
        for i in 0..120 {
            log.append(Spec::new(i, 4, 600).bytes(), AppendOptions::default())
                .await
                .unwrap();
        }
        let result = lookups(&log).await;
        log.close().await.unwrap();
        result
    });
    let originals = snapshot(&path);
    let indexes = segment_files(&path, "index");
    let time_indexes = segment_files(&path, "timeindex");
    assert!(
        indexes.len() >= 5,
        "need several segments, got {}",
        indexes.len()
    );
    // Deleted, truncated mid-entry, entries pointing at the wrong batch,
    // time index garbage, and a deleted time index.
    std::fs::remove_file(&indexes[0]).unwrap();
    let bytes = std::fs::read(&indexes[1]).unwrap();
    std::fs::write(&indexes[1], &bytes[..bytes.len() - 3]).unwrap();
    let mut shifted = std::fs::read(&indexes[2]).unwrap();
    let n = shifted.len();
    shifted[n - 1] = shifted[n - 1].wrapping_add(1);
    std::fs::write(&indexes[2], &shifted).unwrap();
    std::fs::write(&time_indexes[3], b"garbage!garbage!").unwrap();
    std::fs::remove_file(time_indexes.last().unwrap()).unwrap();

    let p = path.clone();
    let after = run(move || async move {
        let log = Log::open(&common::ctx(), &p, common::config(32 << 10))
            .await
            .unwrap();
        let report = log.recovery_report().clone();
        let result = lookups(&log).await;
        log.close().await.unwrap();
        (report, result)
    });
    assert!(after.0.segments_scanned >= 5, "{:?}", after.0);
    assert_eq!(after.1, before, "lookups after rebuild");
    assert_eq!(
        snapshot(&path),
        originals,
        "rebuilt index files are identical"
    );
}
