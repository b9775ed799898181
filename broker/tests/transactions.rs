//! Transactions against a real broker, through confluent-kafka's
//! transactional producer and read_committed consumers (the checks are in
//! `tests/clients/txn_check.py`): committed records are read exactly
//! once and aborted ones never; offsets committed inside a transaction
//! show only once it commits; a second producer with the same
//! transactional id fences the first; a transaction its producer left
//! open is aborted after its timeout, and read_committed consumers move
//! on.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{run_python, Broker};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);

fn start(dir: &Path) -> Broker {
    Broker::start_in(
        &dir.join("data"),
        &dir.join("broker.log"),
        &[
            // Timed-out transactions are looked for every second, so a
            // producer's 5 s timeout is acted on within seconds.
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        ],
    )
}

fn txn_check(broker: &Broker, args: &[&str]) -> String {
    let bootstrap = broker.bootstrap();
    let mut all = vec![bootstrap.as_str()];
    all.extend_from_slice(args);
    run_python("txn_check.py", &all, SCRIPT_DEADLINE)
}

#[test]
fn committed_records_are_read_once_and_aborted_ones_never() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    let out = txn_check(&broker, &["commit-abort", "3", "4"]);
    assert!(
        out.contains("commit-abort: ok 3 topics x 4 partitions, 600 committed, 300 aborted"),
        "{out}"
    );
}

#[test]
fn offsets_committed_in_a_transaction_show_once_it_commits() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    let out = txn_check(&broker, &["offsets"]);
    assert!(out.contains("offsets: ok"), "{out}");
}

#[test]
fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    let out = txn_check(&broker, &["fence"]);
    assert!(out.contains("fence: ok"), "{out}");
}

#[test]
fn a_transaction_left_open_is_aborted_after_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    let out = txn_check(&broker, &["hang", "txn-hang"]);
    assert!(out.contains("hang: ok"), "{out}");
    let out = txn_check(&broker, &["unblocked"]);
    assert!(out.contains("unblocked: ok"), "{out}");
    assert!(
        broker.log().contains("transaction timed out"),
        "{}",
        broker.log()
    );
}
