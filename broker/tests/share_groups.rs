//! Share groups (KIP-932) against a real `strom` process: confluent-kafka
//! ShareConsumers, each a process of its own, in explicit acknowledgement
//! mode (tests/clients/share_check.py).

mod common;

use std::time::Duration;

use common::{run_python, Broker};

/// Three members share one topic after a member that acquired records
/// was killed holding them: every record delivered, each accepted once
/// (by one member), rejected ones never again, released and lock-expired
/// ones delivered again with a higher delivery count, and records
/// released at every delivery archived at `group.share.delivery.count.limit`.
#[test]
fn share_consumers_divide_records_accept_each_once_and_redeliver_what_was_not_accepted() {
    let broker = Broker::start(&[
        "--set",
        "group.share.record.lock.duration.ms=3000",
        "--set",
        "group.share.delivery.count.limit=3",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let out = run_python(
        "share_check.py",
        &[
            "queue",
            &broker.bootstrap(),
            "share-topic",
            log.to_str().unwrap(),
            "3",
        ],
        Duration::from_secs(300),
    );
    assert!(out.contains("queue: ok 300 records"), "{out}");
    println!("{out}");
}
