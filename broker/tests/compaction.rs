//! Compacted topics against a real broker, through confluent-kafka (the
//! checks are in `tests/clients/compaction_check.py`): after the cleaner
//! ran, a consumer from the beginning sees exactly the latest record of
//! every key, each at the offset it was produced at; tombstones go once
//! `delete.retention.ms` is up; a kill -9 at any moment of a cleaning
//! loses no latest value; records without a key are refused.

mod common;

use std::path::Path;
use std::time::Duration;

use std::collections::BTreeMap;

use common::{poll_until, run_python, Broker, SoakBudget};
use protocol::batch::BatchHeader;
use test_support::cluster::Cluster;

const SCRIPT_DEADLINE: Duration = Duration::from_secs(300);
/// How long the cleaner may take to reach the end of what was produced.
const CLEANED_DEADLINE: Duration = Duration::from_secs(90);
const TOPIC: &str = "changelog";

fn script(broker: &Broker, case: &str, state: &Path, arg: &str) -> String {
    script_at(&broker.bootstrap(), case, state, arg)
}

fn script_at(bootstrap: &str, case: &str, state: &Path, arg: &str) -> String {
    let state = state.display().to_string();
    run_python(
        "compaction_check.py",
        &[bootstrap, case, TOPIC, &state, arg],
        SCRIPT_DEADLINE,
    )
}

/// The sentinel's offset from the produce case's output.
fn sentinel(out: &str) -> u64 {
    out.rsplit("sentinel at ")
        .next()
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sentinel offset in {out}"))
}

/// The highest offset a "log cleaned" line of the broker's log reached.
fn cleaned_to(log: &str) -> u64 {
    log.lines()
        .filter(|line| line.contains("log cleaned"))
        .filter_map(|line| {
            let at = line.find(" to=")? + 4;
            line[at..].split_whitespace().next()?.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

fn wait_cleaned(broker: &Broker, offset: u64) {
    let reached = poll_until(CLEANED_DEADLINE, || {
        (cleaned_to(&broker.log()) >= offset).then_some(())
    });
    assert!(
        reached.is_some(),
        "the cleaner did not reach offset {offset}\n{}",
        broker.log()
    );
}

fn start(dir: &Path) -> Broker {
    let admin = format!("127.0.0.1:{}", common::free_port());
    Broker::start_in(
        &dir.join("data"),
        &dir.join("broker.log"),
        &[
            "--set",
            "log.cleaner.backoff.ms=200",
            "--admin-listen",
            &admin,
        ],
    )
}

/// The value of the `/metrics` sample `series` (name and labels as printed).
fn metric(broker: &Broker, series: &str) -> Option<f64> {
    let admin = broker
        .arg("--admin-listen")
        .expect("started with an admin listener");
    let (code, text) = common::http_get(admin, "/metrics");
    assert_eq!(code, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_compacted_topic_keeps_the_latest_record_of_every_key_and_tombstones_go_after_their_time() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let mut broker = start(dir.path());
    assert!(script(&broker, "create", &state, "").contains("create: ok"));
    let out = script(&broker, "keyless", &state, "");
    assert!(out.contains("keyless: ok INVALID_RECORD"), "{out}");
    let out = script(&broker, "produce", &state, "0");
    assert!(out.contains("produce: ok 50101 records"), "{out}");
    wait_cleaned(&broker, sentinel(&out));
    let out = script(&broker, "check", &state, "");
    // 1,000 keys (100 of them tombstones) and the sentinel.
    assert!(
        out.contains("check: ok 1001 records of 50101 produced, 901 live keys"),
        "{out}"
    );
    // What /metrics says of it.
    let runs = metric(&broker, "strom_cleaner_runs_total{shard=\"all\"}").unwrap_or(0.0);
    let removed = metric(
        &broker,
        "strom_cleaner_records_removed_total{shard=\"all\"}",
    )
    .unwrap_or(0.0);
    assert!(
        runs >= 1.0 && removed >= 49_000.0,
        "runs {runs}, removed {removed}"
    );
    let ratio = poll_until(CLEANED_DEADLINE, || {
        metric(&broker, "strom_cleaner_dirty_ratio{topic=\"changelog\"}").filter(|r| *r == 0.0)
    });
    assert!(
        ratio.is_some(),
        "the dirty ratio never read 0 after the cleaning"
    );
    assert!(metric(
        &broker,
        "strom_cleaner_since_cleaning_seconds{topic=\"changelog\"}"
    )
    .is_some());

    // Tombstones go once delete.retention.ms is up, changed live.
    let out = script(&broker, "alter", &state, "delete.retention.ms=1");
    assert!(out.contains("alter: ok"), "{out}");
    let swept = poll_until(CLEANED_DEADLINE, || {
        broker
            .log()
            .lines()
            .any(|l| l.contains("log cleaned") && l.contains("tombstones_removed=100"))
            .then_some(())
    });
    assert!(
        swept.is_some(),
        "no pass removed the tombstones\n{}",
        broker.log()
    );
    let out = script(&broker, "check", &state, "tombstones-gone");
    assert!(out.contains("check: ok 901 records"), "{out}");

    // And the same after a restart.
    broker.restart();
    let out = script(&broker, "check", &state, "tombstones-gone");
    assert!(out.contains("check: ok 901 records"), "{out}");
}

/// kill -9 at three moments of a cleaning in turn (before it, once it has
/// read part of the log, once it ended), a few rounds here (`scripts/soak`
/// runs many): after each restart the log opens without repair and the
/// check holds.
#[test]
fn a_kill_during_cleaning_leaves_every_latest_value() {
    let budget = SoakBudget::from_env(3);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let mut broker = start(dir.path());
    assert!(script(&broker, "create", &state, "").contains("create: ok"));
    let mut round = 0u64;
    let read_bytes = |broker: &Broker| {
        metric(broker, "strom_cleaner_read_bytes_total{shard=\"all\"}").unwrap_or(0.0)
    };
    while budget.more(round) {
        let read_before = read_bytes(&broker);
        let cleanings_before = broker.log().matches("log cleaned").count();
        let out = script(&broker, "produce", &state, &(round * 50).to_string());
        let sentinel_offset = sentinel(&out);
        // Each round kills at another moment of the cleaning, found by
        // polling: before it, once it has read something, once it ended.
        let moment =
            ["before the cleaning", "while it reads", "after a cleaning"][round as usize % 3];
        let reached = poll_until(CLEANED_DEADLINE, || match round % 3 {
            0 => Some(()),
            1 => (read_bytes(&broker) > read_before).then_some(()),
            _ => (broker.log().matches("log cleaned").count() > cleanings_before).then_some(()),
        });
        assert!(
            reached.is_some(),
            "round {round}: the cleaner never got {moment}\n{}",
            broker.log()
        );
        broker.crash_and_restart();
        assert!(
            !broker.log().contains("repair"),
            "the log needed a repair after the kill\n{}",
            broker.log()
        );
        wait_cleaned(&broker, sentinel_offset);
        let out = script(&broker, "check", &state, "");
        assert!(out.contains("check: ok"), "round {round}: {out}");
        println!("round {round}: killed {moment}; {}", out.trim());
        round += 1;
    }
    assert!(round > 0);
    println!("kill during cleaning rounds: {round}, every latest value kept");
}

/// Every record in a partition directory's segment files, by offset, as
/// stored (its encoded bytes), read straight from the files.
fn stored_records(partition_dir: &Path) -> BTreeMap<u64, Vec<u8>> {
    let Ok(entries) = std::fs::read_dir(partition_dir) else {
        // Not there (yet): a replica that lost its disk.
        return BTreeMap::new();
    };
    let mut logs: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let mut out = BTreeMap::new();
    for log in logs {
        let bytes = std::fs::read(&log).unwrap();
        let mut at = 0;
        // Up to the end, or the preallocated (zero) tail of the active one.
        while let Ok(header) = BatchHeader::parse(&bytes[at..]) {
            let batch = &bytes[at..at + header.size()];
            for record in protocol::compact::raw_records(batch, 64 << 20).unwrap() {
                out.insert(record.offset as u64, record.bytes.to_vec());
            }
            at += header.size();
        }
    }
    out
}

/// RF=3: every replica compacts its own copy, and they hold the same
/// records at the same offsets; a replica that lost its copy copies the
/// compacted log (gaps and all) from its leader.
#[test]
fn every_replica_of_a_compacted_partition_holds_the_same_records() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let mut cluster = Cluster::start(3, &["--set", "log.cleaner.backoff.ms=200"]);
    let bootstrap = cluster.bootstrap();
    let out = script_at(
        &bootstrap,
        "create",
        &state,
        "replication.factor=3,min.insync.replicas=2",
    );
    assert!(out.contains("create: ok"), "{out}");
    let out = script_at(&bootstrap, "produce", &state, "0");
    let sentinel_offset = sentinel(&out);
    for id in 1..=3 {
        wait_cleaned(&cluster.node(id).broker, sentinel_offset);
    }
    let dirs: Vec<_> = (1..=3)
        .map(|id| cluster.dir(id).join("data").join(format!("{TOPIC}-0")))
        .collect();
    let partition = |id: i32| dirs[id as usize - 1].clone();
    // What was cleaned: below the sentinel (which may still be only in
    // the journal, not yet in its segment file).
    let cleaned = |id: i32| {
        let mut records = stored_records(&partition(id));
        records.retain(|offset, _| *offset < sentinel_offset);
        records
    };
    let first = cleaned(1);
    // 1,000 keys, nothing superseded.
    assert_eq!(first.len(), 1000, "node 1 holds {} records", first.len());
    for id in 2..=3 {
        let other = cleaned(id);
        assert!(
            other == first,
            "node {id} differs from node 1: {} vs {} records",
            other.len(),
            first.len()
        );
    }
    let out = script_at(&bootstrap, "check", &state, "");
    assert!(out.contains("check: ok 1001 records"), "{out}");

    // Node 3 loses the partition's directory: it copies the compacted log
    // back from its leader (a voter's whole data dir may not go: its Raft
    // log is the quorum's).
    cluster
        .node_mut(3)
        .broker
        .crash_and_restart_with(|data_dir| {
            std::fs::remove_dir_all(data_dir.join(format!("{TOPIC}-0"))).unwrap();
        });
    let copied = cluster.wait_for("node 3 to copy the compacted log", || {
        let records = cleaned(3);
        (records == first).then_some(records.len())
    });
    assert_eq!(copied, 1000);
}

/// An idempotent producer goes on producing the same keys while the
/// cleaner removes its older batches and while the broker restarts: every
/// batch is acknowledged, none refused with OUT_OF_ORDER_SEQUENCE_NUMBER
/// or UNKNOWN_PRODUCER_ID (each producer's last batch is kept).
#[test]
fn an_idempotent_producer_keeps_producing_across_cleanings_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let mut broker = start(dir.path());
    let out = script(&broker, "create", &state, "segment.bytes=16384");
    assert!(out.contains("create: ok"), "{out}");
    let bootstrap = broker.bootstrap();
    let producing = {
        let state = state.clone();
        std::thread::spawn(move || script_at(&bootstrap, "idempotent", &state, "40"))
    };
    let cleaned = poll_until(CLEANED_DEADLINE, || {
        broker.log().contains("log cleaned").then_some(())
    });
    assert!(
        cleaned.is_some(),
        "no cleaning while producing\n{}",
        broker.log()
    );
    broker.restart();
    let out = producing.join().expect("the producing thread");
    assert!(out.contains("idempotent: ok 8000 records"), "{out}");
    let cleanings = broker.log().matches("log cleaned").count();
    assert!(cleanings >= 2, "{cleanings} cleanings\n{}", broker.log());
}

fn faust_check(bootstrap: &str, args: &[&str]) -> String {
    let mut all = vec![bootstrap];
    all.extend_from_slice(args);
    run_python("faust_check.py", &all, SCRIPT_DEADLINE)
}

/// How long a faust worker may take to join its group and restore.
const FAUST_READY_DEADLINE: Duration = Duration::from_secs(120);

/// The input offsets run `run` of the faust worker processed, in order,
/// from its trace (`TIME OFFSET KEY COUNT` lines).
fn faust_processed(dir: &Path, run: u32) -> Vec<u64> {
    let trace = std::fs::read_to_string(dir.join(format!("faust-{run}.trace"))).unwrap_or_default();
    trace
        .lines()
        .map(|line| {
            line.split_whitespace()
                .nth(1)
                .and_then(|offset| offset.parse().ok())
                .unwrap_or_else(|| panic!("bad faust trace line {line:?}"))
        })
        .collect()
}

/// The faust-streaming worker of `tests/clients/faust_app.py`; killed
/// when dropped, so a failing test leaves no worker behind.
struct FaustWorker(std::process::Child);

impl FaustWorker {
    /// Starts run `run` of the worker and waits until it reports ready:
    /// its table restored and its input partition positioned at the
    /// committed offset. Input produced earlier can be processed twice
    /// or skipped: faust-streaming 0.15 resumes fetching before it seeks
    /// to the committed offsets, so the first records
    /// fetched race the seek (seen here: the broker answered each fetch
    /// with the right records, faust repeated or dropped one of them).
    fn start(bootstrap: &str, dir: &Path, run: u32) -> FaustWorker {
        let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/faust_app.py");
        let log_path = dir.join(format!("faust-{run}.log"));
        let log = std::fs::File::create(&log_path).unwrap();
        let child = std::process::Command::new("python3")
            .arg(app)
            .args(["worker", "-l", "info"])
            .env("BOOTSTRAP", bootstrap)
            .env("FAUST_DATADIR", dir.join("faust"))
            .env("FAUST_TRACE", dir.join(format!("faust-{run}.trace")))
            .current_dir(dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("python3 runs faust_app.py (scripts/python-venv installs faust-streaming)");
        let worker = FaustWorker(child);
        let ready = poll_until(FAUST_READY_DEADLINE, || {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            log.contains("Worker ready").then_some(())
        });
        assert!(
            ready.is_some(),
            "the faust worker was not ready within {FAUST_READY_DEADLINE:?}\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        );
        worker
    }

    /// Stops the worker as an operator would (SIGTERM: it leaves its group).
    fn stop(mut self) {
        let pid = self.0.id().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(sent.success());
        let exited = common::wait_deadline(&mut self.0, Duration::from_secs(60));
        assert!(
            exited.is_some(),
            "the faust worker did not stop within 60 s"
        );
    }
}

impl FaustWorker {
    /// Kills the worker (SIGKILL): it neither commits nor leaves its group.
    fn kill(mut self) {
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }
}

impl Drop for FaustWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stateful stream processor from PyPI, faust-streaming, keeps a table
/// of counts per key in a compacted changelog topic: killed (kill -9) and
/// started again once the cleaner compacted that changelog, it restores
/// the table from what compaction left and goes on to the right counts.
///
/// Each run of the worker processes every input record exactly once
/// (checked from its trace), so the counts are exact.
#[test]
fn a_faust_table_restores_from_its_compacted_changelog() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    let bootstrap = broker.bootstrap();
    assert!(faust_check(&bootstrap, &["create"]).contains("create: ok"));
    let worker = FaustWorker::start(&bootstrap, dir.path(), 1);
    faust_check(&bootstrap, &["produce", "0", "1000"]);
    let out = faust_check(&bootstrap, &["wait", "1000"]);
    assert!(out.contains("wait: ok 1000 counted"), "{out}");
    // segment.ms (a second) after its first record the cleaner seals the
    // changelog's quiet segment and compacts the 1,000 increments to the
    // latest of each key.
    let cleaned = poll_until(CLEANED_DEADLINE, || {
        broker
            .log()
            .lines()
            .any(|l| l.contains("log cleaned") && l.contains("wordcount-counts-changelog-0"))
            .then_some(())
    });
    assert!(
        cleaned.is_some(),
        "the changelog was not cleaned\n{}",
        broker.log()
    );
    // The app processes at least once: killed only once its input offsets
    // are committed, a restart counts nothing twice.
    let out = faust_check(&bootstrap, &["committed", "1000"]);
    assert!(out.contains("committed: ok 1000"), "{out}");
    worker.kill();
    assert_eq!(
        faust_processed(dir.path(), 1),
        (0..1000).collect::<Vec<u64>>()
    );
    let out = faust_check(&bootstrap, &["wait", "1000"]);
    let records: u64 = out
        .split(" counted, ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        records < 100,
        "the changelog holds {records} records: not compacted\n{out}"
    );

    let worker = FaustWorker::start(&bootstrap, dir.path(), 2);
    faust_check(&bootstrap, &["produce", "1000", "1000"]);
    let out = faust_check(&bootstrap, &["wait", "2000"]);
    assert!(out.contains("wait: ok 2000 counted"), "{out}");
    let out = faust_check(&bootstrap, &["exact", "2000"]);
    assert!(out.contains("exact: ok 20 keys at 100"), "{out}");
    worker.stop();
    assert_eq!(
        faust_processed(dir.path(), 2),
        (1000..2000).collect::<Vec<u64>>()
    );
    let restored = std::fs::read_to_string(dir.path().join("faust-2.log")).unwrap();
    assert!(restored.contains("Restore complete"), "{restored}");
}
