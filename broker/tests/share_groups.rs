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

/// A share partition's leader killed (SIGKILL) in a three-node cluster
/// while three ShareConsumers work through a replicated topic: the new
/// leader reads the share partition's state from its share coordinator
/// (`__share_group_state`, replicated), so no record acknowledged before
/// the kill is delivered again, every record acquired but not
/// acknowledged is delivered again with a higher count, and each record
/// is accepted once.
#[test]
fn a_share_partition_leader_killed_loses_no_acknowledgement_and_no_acquired_record() {
    let mut cluster = test_support::cluster::Cluster::start(
        3,
        &[
            "--set",
            "group.share.record.lock.duration.ms=3000",
            "--set",
            "group.share.delivery.count.limit=3",
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("members.log");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/share_check.py");
    let mut members = std::process::Command::new("python3")
        .arg(&script)
        .args([
            "failover",
            &cluster.bootstrap(),
            "shared-replicated",
            log.to_str().unwrap(),
            dir.path().to_str().unwrap(),
            "3",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let kill = dir.path().join("kill");
    let named = test_support::poll_until(Duration::from_secs(180), || {
        if let Ok(text) = std::fs::read_to_string(&kill) {
            if let Ok(id) = text.trim().parse::<i32>() {
                return Some(Some(id));
            }
        }
        members.try_wait().unwrap().map(|_| None)
    })
    .expect("the members never named the leader to kill");
    let Some(victim) = named else {
        let out = members.wait_with_output().unwrap();
        panic!(
            "the members exited before the kill\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    cluster.node_mut(victim).broker.kill();
    std::fs::write(dir.path().join("killed"), victim.to_string()).unwrap();
    let status = test_support::wait_deadline(&mut members, Duration::from_secs(300));
    if status.is_none() {
        let _ = members.kill();
    }
    let output = members.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        status.is_some_and(|s| s.success()) && stdout.contains("failover: ok 450 records"),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        cluster.logs()
    );
    println!("{stdout}");
}
