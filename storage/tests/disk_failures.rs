//! Disk failures: a failed fdatasync fences the log (no more appends or
//! acknowledgements, reads of durable data continue), and a full disk fails
//! appends cleanly with a space error, without losing what was
//! acknowledged, and takes appends again once space returns.

mod common;

use std::path::{Path, PathBuf};

use common::{read_all, run, Spec};
use storage::{AppendOptions, Log, StorageError};
use test_support::mount;

#[test]
fn failed_fdatasync_fences_the_log() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let log = Log::open(&common::ctx(), &p, common::config(1 << 20))
            .await
            .unwrap();
        let first = log
            .append(Spec::new(1, 2, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        log.wait_durable(first.last_offset).await.unwrap();

        log.inject_sync_failure();
        let second = log
            .append(Spec::new(2, 2, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        let err = log.wait_durable(second.last_offset).await.unwrap_err();
        assert!(matches!(err, StorageError::Fenced { .. }), "{err}");
        assert!(err.to_string().contains("fdatasync"), "{err}");
        assert!(
            log.durable_offset() <= second.base_offset,
            "never acknowledged"
        );
        let refused = log
            .append(Spec::new(3, 1, 10).bytes(), AppendOptions::default())
            .await;
        assert!(matches!(refused, Err(StorageError::Fenced { .. })));
        assert!(matches!(
            log.flush().await,
            Err(StorageError::Fenced { .. })
        ));
        // What was durable still reads back.
        let read = log.read(0, 1 << 20, first.last_offset + 1).await.unwrap();
        assert_eq!(&read.bytes[..], &Spec::new(1, 2, 100).stored(0)[..]);
        assert!(
            log.close().await.is_err(),
            "a fenced log does not close cleanly"
        );
    });
    run(move || async move {
        // A restart recovers by scanning; the acknowledged batch is there.
        let log = Log::open(&common::ctx(), &path, common::config(1 << 20))
            .await
            .unwrap();
        assert!(!log.recovery_report().clean);
        let all = read_all(&log, 1 << 20).await;
        assert_eq!(all[0].1, Spec::new(1, 2, 100).stored(0));
        log.close().await.unwrap();
    });
}

#[test]
fn a_write_without_space_is_refused_keeps_durable_data_and_a_later_write_succeeds() {
    let dir = common::tempdir().unwrap();
    let path = dir.path().join("t-0");
    let p = path.clone();
    run(move || async move {
        let mut config = common::config(1 << 20);
        // Every append goes to the segment file (no journal in between).
        config.journal_bytes = 0;
        let log = Log::open(&common::ctx(), &p, config.clone()).await.unwrap();
        let first = log
            .append(Spec::new(1, 2, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        log.wait_durable(first.last_offset).await.unwrap();

        log.inject_space_failure();
        let second = log
            .append(Spec::new(2, 2, 100).bytes(), AppendOptions::default())
            .await
            .unwrap();
        let err = log.wait_durable(second.last_offset).await.unwrap_err();
        assert!(matches!(err, StorageError::NoSpace { .. }), "{err}");
        assert!(err.is_out_of_space());
        assert!(err.to_string().contains("t-0"), "names the log: {err}");
        assert_eq!(log.durable_offset(), second.base_offset, "not acknowledged");
        assert_eq!(log.written_offset(), second.base_offset, "nothing written");
        // What was durable reads back.
        let read = log.read(0, 1 << 20, first.last_offset + 1).await.unwrap();
        assert_eq!(&read.bytes[..], &Spec::new(1, 2, 100).stored(0)[..]);

        // The disk has room again (the failure was injected): the next
        // append is taken and made durable, and the log was never fenced.
        let third = log
            .append(Spec::new(3, 1, 50).bytes(), AppendOptions::default())
            .await
            .unwrap();
        log.wait_durable(third.last_offset).await.unwrap();
        log.flush().await.unwrap();
        log.close().await.unwrap();
    });
    run(move || async move {
        // The refused batch was retried with the next write, at the same
        // place: the file holds all three, contiguous and intact.
        let log = Log::open(&common::ctx(), &path, common::config(1 << 20))
            .await
            .unwrap();
        assert!(log.recovery_report().clean);
        let all = read_all(&log, 1 << 20).await;
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].1, Spec::new(1, 2, 100).stored(0));
        assert_eq!(all[1].1, Spec::new(2, 2, 100).stored(2));
        assert_eq!(all[2].1, Spec::new(3, 1, 50).stored(4));
        log.close().await.unwrap();
    });
}

/// A small ext4 filesystem on a loop device, unmounted on drop.
struct SmallFilesystem {
    mount_point: PathBuf,
}

impl SmallFilesystem {
    fn new(root: &Path, megabytes: u64) -> Self {
        let image = root.join("fs.img");
        let mount_point = root.join("mnt");
        std::fs::create_dir_all(&mount_point).unwrap();
        mount::ext4_image(&image, megabytes << 20, &[]).unwrap();
        if let Err(error) = mount::mount_loop(&image, &mount_point) {
            panic!("the test needs root and loop devices: {error}");
        }
        Self { mount_point }
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        mount::unmount(&self.mount_point);
    }
}

#[test]
fn full_disk_fails_appends_and_keeps_acknowledged_data() {
    let dir = common::tempdir().unwrap();
    let fs = SmallFilesystem::new(dir.path(), 24);
    let path = fs.mount_point.join("t-0");
    let p = path.clone();
    // Deleted once the disk is full, to give space back.
    let filler = fs.mount_point.join("filler");
    std::fs::write(&filler, vec![0x5au8; 3 << 20]).unwrap();
    let acknowledged = run(move || async move {
        let mut config = common::config(1 << 30);
        config.max_message_bytes = 2 << 20;
        config.preallocate_bytes = 1 << 20;
        let log = Log::open(&common::ctx(), &p, config).await.unwrap();
        let mut acknowledged = Vec::new();
        let mut failure = None;
        // 24 MiB cannot hold 128 batches of ~300 KB.
        for i in 0..128u64 {
            let spec = Spec::new(i, 1, 300_000);
            let appended = log.append(spec.bytes(), AppendOptions::default()).await;
            let result = match appended {
                Ok(info) => log.wait_durable(info.last_offset).await.map(|_| info),
                Err(e) => Err(e),
            };
            match result {
                Ok(info) => acknowledged.push((info.base_offset, spec)),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let failure = failure.expect("the disk filled up");
        assert!(
            matches!(failure, StorageError::NoSpace { .. }),
            "a space error, not a fence: {failure}"
        );
        assert!(
            failure.to_string().contains("t-0"),
            "the error names the file: {failure}"
        );
        assert!(acknowledged.len() > 10, "some appends succeeded first");
        let refused = log
            .append(Spec::new(99, 1, 10).bytes(), AppendOptions::default())
            .await;
        assert!(
            matches!(refused, Err(StorageError::NoSpace { .. })),
            "refused while full: {refused:?}"
        );
        // Acknowledged data still reads back.
        for (base, spec) in &acknowledged {
            let read = log.read(*base, 1, base + 1).await.unwrap();
            assert_eq!(&read.bytes[..], &spec.stored(*base)[..]);
        }
        // Space returns: appends are taken and made durable again, without
        // reopening the log.
        std::fs::remove_file(&filler).unwrap();
        let spec = Spec::new(100, 1, 300_000);
        let info = log
            .append(spec.bytes(), AppendOptions::default())
            .await
            .expect("an append once space returned");
        log.wait_durable(info.last_offset)
            .await
            .expect("durable once space returned");
        acknowledged.push((info.base_offset, spec));
        for (base, spec) in &acknowledged {
            let read = log.read(*base, 1, base + 1).await.unwrap();
            assert_eq!(&read.bytes[..], &spec.stored(*base)[..]);
        }
        acknowledged
    });
    run(move || async move {
        let mut config = common::config(1 << 30);
        config.max_message_bytes = 2 << 20;
        let log = Log::open(&common::ctx(), &path, config)
            .await
            .expect("reopen on the full disk");
        let all: std::collections::BTreeMap<u64, Vec<u8>> =
            read_all(&log, 4 << 20).await.into_iter().collect();
        // The batch refused when the disk filled may be there too (it was
        // written once space returned); every acknowledged one is.
        for (base, spec) in &acknowledged {
            assert_eq!(all.get(base), Some(&spec.stored(*base)), "batch at {base}");
        }
    });
    drop(fs);
}
