//! A voter that lost its disk, across real `strom` processes: three
//! voters (each `--cores 1` on loopback), a topic with three replicas and
//! `min.insync.replicas=2`, and an idempotent `acks=all` confluent-kafka
//! producer (tests/clients/replication_check.py) writing all along. Each
//! round kills a voter with `kill -9` and empties its data dir: started
//! again, it refuses to start as a voter (a non-zero exit naming the lost
//! log, never a panic) while the other two keep acknowledging. Then the
//! documented way back: `strom cluster remove-voter` on a survivor, the
//! node started again (outside the quorum, with its new directory),
//! `strom cluster add-voter`: the quorum has three voters again
//! (DescribeQuorum through `strom cluster status`). After the rounds
//! every acknowledged record is read back once, in order. The default
//! test run does one round; `scripts/soak` runs many.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::acks::{acks, replication_script, stop_and_check, Reaped};
use common::SoakBudget;
use test_support::cluster::Cluster;
use test_support::{poll_until, run, strom_bin, strom_ok, wait_deadline};

const TOPIC: &str = "voter-loss";
const PARTITIONS: i32 = 3;
/// Acknowledgements between two faults, so that each lands mid-stream.
const ACKS_PER_ROUND: usize = 1_000;
const ROUND_DEADLINE: Duration = Duration::from_secs(90);
/// How long a voter with an emptied data dir may take to refuse.
const REFUSAL_DEADLINE: Duration = Duration::from_secs(60);
/// How long the quorum may take to change its voters.
const VOTERS_DEADLINE: Duration = Duration::from_secs(120);

/// (leader, ISR) of each partition of `TOPIC`, as kcat lists them, once
/// all are listed.
fn partitions(bootstrap: &str) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    common::listing::partitions(bootstrap, TOPIC).filter(|p| p.len() == PARTITIONS as usize)
}

/// The quorum's voters as `strom cluster status --json` through
/// `bootstrap` reports them, if it answers.
fn quorum_voters(bootstrap: &str) -> Option<Vec<i32>> {
    let output = run(
        Command::new(strom_bin()).args(["cluster", "status", "--json", "--bootstrap", bootstrap]),
        None,
        Duration::from_secs(20),
    );
    if !output.status.success() {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).ok()?;
    let mut voters: Vec<i32> = json["quorum"]["voters"]
        .as_array()?
        .iter()
        .filter_map(|v| v["id"].as_i64())
        .map(|id| id as i32)
        .collect();
    voters.sort_unstable();
    Some(voters)
}

/// Starts `strom` with node `id`'s arguments on its data dir and waits
/// for it to exit by itself; its exit code and log.
fn start_expecting_exit(cluster: &Cluster, id: i32, data_dir: &Path) -> (Option<i32>, String) {
    let node = cluster.node(id);
    let log_path = data_dir.with_file_name("refused.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let child = Command::new(strom_bin())
        .arg("start")
        .arg("--listen")
        .arg(node.broker.bootstrap())
        .arg("--data-dir")
        .arg(data_dir)
        .args(cluster.args(id, node.ports))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("strom starts");
    let mut child = Reaped(child);
    let status = wait_deadline(&mut child.0, REFUSAL_DEADLINE).unwrap_or_else(|| {
        panic!(
            "a voter with an emptied data dir did not exit within {REFUSAL_DEADLINE:?}\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    });
    (
        status.code(),
        std::fs::read_to_string(&log_path).unwrap_or_default(),
    )
}

/// Runs `strom ARGS` through `bootstrap` until it succeeds (a refusal
/// that may pass, such as NOT_CONTROLLER during an election or a node not
/// yet heard, is asked again), within [`VOTERS_DEADLINE`]; the last
/// failure.
fn strom_until_ok(bootstrap: &str, args: &[&str]) -> Result<(), String> {
    let mut last = String::new();
    let done = poll_until(VOTERS_DEADLINE, || {
        let output = run(
            Command::new(strom_bin())
                .args(args)
                .args(["--bootstrap", bootstrap]),
            None,
            Duration::from_secs(60),
        );
        if output.status.success() {
            return Some(());
        }
        last = String::from_utf8_lossy(&output.stderr).to_string();
        None
    });
    done.ok_or(last)
}

/// Empties `dir` as a replaced disk would be.
fn empty(dir: &Path) {
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::create_dir_all(dir).unwrap();
}

#[test]
fn a_voter_that_lost_its_disk_refuses_to_rejoin_and_the_others_keep_serving() {
    let budget = SoakBudget::from_env(1);
    let mut cluster = Cluster::start(3, &["--set", "replica.lag.time.max.ms=5000"]);
    let all: Vec<i32> = (1..=3).collect();
    cluster.wait_for("three voters", || {
        quorum_voters(&cluster.node(1).broker.bootstrap()).filter(|v| *v == all)
    });
    strom_ok(
        &cluster.node(1).broker,
        &[
            "topic",
            "create",
            TOPIC,
            "--partitions",
            &PARTITIONS.to_string(),
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    let any = cluster.node(1).broker.bootstrap();
    cluster.wait_for("every partition led with three in sync", || {
        partitions(&any).filter(|p| p.values().all(|(l, isr)| *l > 0 && isr.len() == 3))
    });
    let files = tempfile::tempdir().unwrap();
    let acks_file = files.path().join("acks");
    let mut producer = Reaped(
        Command::new("python3")
            .arg(replication_script())
            .args(["produce", &cluster.bootstrap(), TOPIC])
            .arg(files.path().join("stop"))
            .arg(&acks_file)
            .stdout(std::fs::File::create(files.path().join("producer.log")).unwrap())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs"),
    );

    let mut rounds = 0u64;
    while budget.more(rounds) {
        let victim = (rounds % 3) as i32 + 1;
        let survivors: Vec<i32> = all.iter().copied().filter(|&id| id != victim).collect();
        let survivor = cluster.node(survivors[0]).broker.bootstrap();
        let before = acks(&acks_file).len();
        cluster.wait_for("acknowledgements before the fault", || {
            (acks(&acks_file).len() >= before + ACKS_PER_ROUND).then_some(())
        });
        cluster.node_mut(victim).broker.kill();
        let data_dir = cluster.node(victim).broker.data_dir.clone();
        empty(&data_dir);
        let (code, log) = start_expecting_exit(&cluster, victim, &data_dir);
        assert!(code.is_some_and(|code| code != 0), "exit {code:?}\n{log}");
        assert!(log.contains("its Raft log is gone"), "{log}");
        assert!(log.contains("strom cluster remove-voter"), "{log}");
        assert!(!log.contains("panicked"), "{log}");
        // Refusing changed nothing: started again, it refuses again.
        let (again, log) = start_expecting_exit(&cluster, victim, &data_dir);
        assert_eq!(again, code, "{log}");
        // The two others keep serving: acks=all goes on.
        let before = acks(&acks_file).len();
        let progressed = poll_until(ROUND_DEADLINE, || {
            (acks(&acks_file).len() >= before + ACKS_PER_ROUND).then_some(())
        });
        assert!(
            progressed.is_some(),
            "no acknowledgement without voter {victim}\n{}",
            cluster.logs()
        );
        assert_eq!(quorum_voters(&survivor), Some(all.clone()));

        // The way back: remove the old voter, start the node outside the
        // quorum with its new directory, add it.
        let node = victim.to_string();
        strom_until_ok(&survivor, &["cluster", "remove-voter", "--node-id", &node])
            .unwrap_or_else(|e| panic!("remove-voter: {e}\n{}", cluster.logs()));
        cluster.wait_for("two voters", || {
            quorum_voters(&survivor).filter(|v| *v == survivors)
        });
        let adding = {
            let survivor = survivor.clone();
            let node = node.clone();
            std::thread::spawn(move || {
                strom_until_ok(&survivor, &["cluster", "add-voter", "--node-id", &node])
            })
        };
        // Serving clients waits for the node to catch up, which it does
        // once added.
        cluster.node_mut(victim).broker.start_again();
        adding
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("add-voter: {e}\n{}", cluster.logs()));
        cluster.wait_for("three voters again", || {
            quorum_voters(&survivor).filter(|v| *v == all)
        });
        cluster.wait_for("the replaced node back in every ISR", || {
            partitions(&survivor).filter(|p| p.values().all(|(_, isr)| isr.len() == 3))
        });
        rounds += 1;
        println!("round {rounds}: voter {victim} refused with exit {code:?}, then replaced");
    }
    assert!(rounds >= 1, "no round ran");
    // The replaced voter votes: with another voter down, it and the third
    // still commit metadata changes.
    let replaced = ((rounds - 1) % 3) as i32 + 1;
    let other = all.iter().copied().find(|&id| id != replaced).unwrap();
    cluster.node_mut(other).broker.kill();
    let through = cluster.node(replaced).broker.bootstrap();
    let created = poll_until(VOTERS_DEADLINE, || {
        let output = run(
            Command::new(strom_bin()).args([
                "topic",
                "create",
                "after-replacement",
                "--partitions",
                "1",
                "--bootstrap",
                &through,
            ]),
            None,
            Duration::from_secs(60),
        );
        // An answer lost in the election may have created it already.
        (output.status.success()
            || String::from_utf8_lossy(&output.stderr).contains("TOPIC_ALREADY_EXISTS"))
        .then_some(())
    });
    assert!(
        created.is_some(),
        "no metadata change with voter {other} down\n{}",
        cluster.logs()
    );
    cluster.node_mut(other).broker.start_again();
    let checked = stop_and_check(
        &mut producer,
        &files.path().join("stop"),
        &files.path().join("producer.log"),
        Command::new("python3")
            .arg(replication_script())
            .args(["check", &cluster.bootstrap(), TOPIC])
            .arg(&acks_file),
        || cluster.logs(),
    );
    println!("soak voter-replacement: rounds={rounds} {checked}");
}
