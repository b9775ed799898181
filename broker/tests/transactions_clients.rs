//! Transactions through kafka-python's and aiokafka's own transactional
//! producers on a three-broker cluster, topics with three replicas (the
//! checks are in `tests/clients/txn_clients_check.py`): ten transactions
//! over 2 topics x 4 partitions, the even ones committed and the odd ones
//! aborted, a group's offsets sent to a commit, an abort and a commit and
//! another group's to an abort (OffsetFetch shows the committed ones
//! only); read back by confluent-kafka's and the client's own consumer,
//! read_committed (each committed record once, byte-exact, no aborted
//! one) and read_uncommitted (both, and one control marker per
//! transaction in each partition, never read as a record).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::run;
use test_support::cluster::Cluster;

/// The script bounds each client call and itself (600 s); this is the
/// backstop.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(660);

/// Runs the script for one client against a fresh cluster; returns its
/// stdout, or panics with its output and every broker's log.
fn txn_clients_check(mode: &str) -> String {
    // `__transaction_state` as the data topics: three replicas, two in
    // sync (the defaults, named because the test is about them).
    let cluster = Cluster::start(
        3,
        &[
            "--set",
            "transaction.state.log.replication.factor=3",
            "--set",
            "transaction.state.log.min.isr=2",
        ],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/txn_clients_check.py");
    let output = run(
        Command::new("python3")
            .arg(&script)
            .args([cluster.bootstrap().as_str(), mode, "3"]),
        None,
        SCRIPT_DEADLINE,
    );
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "txn_clients_check.py {mode} failed ({}); needs the clients of scripts/requirements-test.txt (scripts/python-venv)\nstdout:\n{stdout}\nstderr:\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        cluster.logs()
    );
    stdout
}

#[test]
fn kafka_python_transactions_commit_and_abort_across_a_cluster() {
    let out = txn_clients_check("kafka-python");
    assert!(
        out.lines()
            .any(|line| line == "kafka-python: ok 200 committed, 200 aborted"),
        "{out}"
    );
}

#[test]
fn aiokafka_transactions_commit_and_abort_across_a_cluster() {
    let out = txn_clients_check("aiokafka");
    assert!(
        out.lines()
            .any(|line| line == "aiokafka: ok 200 committed, 200 aborted"),
        "{out}"
    );
}
