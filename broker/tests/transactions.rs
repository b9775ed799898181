//! Transactions against a real broker, through confluent-kafka's
//! transactional producer and read_committed consumers (the checks are in
//! `tests/clients/txn_check.py`): committed records are read exactly
//! once and aborted ones never; offsets committed inside a transaction
//! show only once it commits; a second producer with the same
//! transactional id fences the first; a transaction its producer left
//! open is aborted after its timeout, and read_committed consumers move
//! on; on a compacted topic the cleaner removes aborted transactions'
//! records and, once `delete.retention.ms` is up, the markers of
//! transactions with nothing left, and a read_committed consumer still
//! sees every committed record, also after a kill -9.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{poll_until, run_python, Broker, SoakBudget};
use test_support::cluster::Cluster;

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

/// The transactions of a three-broker cluster: 3 topics x 4 partitions with
/// three replicas, `__transaction_state` too; the 12 partitions' leaders are spread over
/// the brokers, so the coordinator writes most markers through
/// WriteTxnMarkers to the others.
#[test]
fn transactions_commit_and_abort_across_a_cluster() {
    let cluster = Cluster::start(3, &[]);
    let bootstrap = cluster.bootstrap();
    let out = run_python(
        "txn_check.py",
        &[&bootstrap, "commit-abort", "3", "4", "3"],
        SCRIPT_DEADLINE,
    );
    assert!(
        out.contains("commit-abort: ok 3 topics x 4 partitions, 600 committed, 300 aborted"),
        "{out}"
    );
}

/// Brokers killed (kill -9) and restarted one after the other while a
/// transactional producer commits transaction after transaction: every
/// transaction is visible to read_committed whole or not at all, every
/// acknowledged commit is, and a transaction shows twice only when an
/// earlier attempt's end was unknown to the producer. Rounds:
/// `STROM_SOAK_ROUNDS` (3 by default; `scripts/soak` runs more).
#[test]
fn transactions_stay_whole_while_brokers_are_killed() {
    let budget = SoakBudget::from_env(3);
    let mut cluster = Cluster::start(
        3,
        &[
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000",
        ],
    );
    let bootstrap = cluster.bootstrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("loop.json");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/txn_check.py");
    let txns = (budget.rounds() * 40).to_string();
    let mut producer = std::process::Command::new("python3")
        .arg(&script)
        .args([bootstrap.as_str(), "loop", &txns, "4"])
        .arg(&state)
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("loop.err")).unwrap())
        .spawn()
        .expect("python3 runs txn_check.py");
    let progress = dir.path().join("loop.json.progress");
    let committed = || -> u64 {
        std::fs::read_to_string(&progress)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut round = 0u64;
    while budget.more(round) {
        // Kill a broker once the producer committed more transactions
        // since the last kill (or stop when it is done).
        let target = committed() + 10;
        let moved_on = poll_until(Duration::from_secs(120), || {
            if producer.try_wait().unwrap().is_some() {
                return Some(false);
            }
            (committed() >= target).then_some(true)
        });
        if moved_on != Some(true) {
            break;
        }
        let id = (round % 3) as i32 + 1;
        cluster.node_mut(id).broker.crash_and_restart();
        round += 1;
    }
    assert!(
        round > 0,
        "no broker was killed: the producer made no progress"
    );
    let exited = common::wait_deadline(&mut producer, Duration::from_secs(600));
    let stderr = std::fs::read_to_string(dir.path().join("loop.err")).unwrap_or_default();
    let status =
        exited.unwrap_or_else(|| panic!("the transactional producer did not finish\n{stderr}"));
    let mut out = String::new();
    std::io::Read::read_to_string(producer.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert!(
        status.success() && out.contains("loop: ok"),
        "{out}\n{stderr}"
    );
    let state = state.display().to_string();
    let out = run_python(
        "txn_check.py",
        &[&bootstrap, "verify-loop", &state, "4"],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains("verify-loop: ok"), "{out}");
    println!("soak brokers_are_killed: {round} brokers killed; {out}");
}

/// The markers a broker's cleanings of `dir_name` removed, summed over its
/// "log cleaned" lines.
fn markers_removed(log: &str, dir_name: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains("log cleaned") && line.contains(dir_name))
        .filter_map(|line| {
            let at = line.find("markers_removed=")? + "markers_removed=".len();
            line[at..].split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Rounds of one transactional producer over the same keys of a compacted
/// topic, committed and aborted in turn: after the cleaner ran, not even
/// a read_uncommitted consumer sees an aborted record, and once
/// `delete.retention.ms` (1 s) is up the markers of the three aborted
/// rounds and of the two committed rounds whose records were all
/// superseded go (exactly those five); committed data stays whole through
/// a kill -9, and the producer's next transaction is visible in full.
#[test]
fn the_cleaner_removes_aborted_transactions_and_then_their_markers() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        &dir.path().join("broker.log"),
        &["--set", "log.cleaner.backoff.ms=200"],
    );
    let state = dir.path().join("compacted.json").display().to_string();
    let out = txn_check(&broker, &["compacted-produce", &state]);
    assert!(
        out.contains("compacted-produce: ok 20 keys committed, 60 records aborted"),
        "{out}"
    );
    let removed = poll_until(Duration::from_secs(90), || {
        let removed = markers_removed(&broker.log(), "txn-compacted-0");
        (removed >= 5).then_some(removed)
    });
    assert_eq!(
        removed,
        Some(5),
        "markers removed by the cleaner\n{}",
        broker.log()
    );
    let out = txn_check(&broker, &["compacted-check", &state]);
    assert!(out.contains("compacted-check: ok 21 keys"), "{out}");
    broker.crash_and_restart();
    let out = txn_check(&broker, &["compacted-check", &state]);
    assert!(out.contains("compacted-check: ok 21 keys"), "{out}");
    let out = txn_check(&broker, &["compacted-more", &state]);
    assert!(out.contains("compacted-more: ok 20 records"), "{out}");
}
