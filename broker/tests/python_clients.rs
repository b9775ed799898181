//! confluent-kafka and kafka-python against a real strom process, through
//! the scripts in `tests/clients/`, run by the `python3` first on PATH:
//! scripts/test puts the environment `scripts/python-venv` creates
//! (target/test-venv) there.

mod common;

use std::time::Duration;

use common::{run_python, Broker};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(240);

fn confluent(broker: &Broker, args: &[&str]) -> String {
    let mut all = vec![broker.bootstrap()];
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run_python("confluent_check.py", &refs, SCRIPT_DEADLINE)
}

#[test]
fn confluent_admin_creates_describes_alters_and_deletes_topics() {
    let broker = Broker::start(&[]);
    let out = confluent(&broker, &["admin"]);
    assert!(out.contains("admin: ok"), "{out}");
}

/// list_topics reports each partition's leader, replicas and ISR from the
/// metadata image: this node (a node id other than the default 0, so a
/// hard-coded answer would show).
#[test]
fn confluent_list_topics_shows_this_node_as_leader_replica_and_isr() {
    let broker = Broker::start(&["--set", "node.id=7"]);
    let out = confluent(&broker, &["replicas", "7"]);
    assert!(out.contains("replicas: ok"), "{out}");
}

#[test]
fn confluent_idempotent_acks_all_producer_with_every_compression() {
    let broker = Broker::start(&[]);
    let out = confluent(&broker, &["compression"]);
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        assert!(out.contains(&format!("{codec}: ok")), "{out}");
    }
}

#[test]
fn confluent_hundred_thousand_messages_over_eight_partitions() {
    let broker = Broker::start(&[]);
    let out = confluent(&broker, &["many", "100000"]);
    assert!(out.contains("many: 100000 ok"), "{out}");
}

#[test]
fn confluent_consumer_assign_seek_and_offsets_for_times() {
    let broker = Broker::start(&[]);
    let out = confluent(&broker, &["seek"]);
    assert!(out.contains("seek: ok"), "{out}");
}

#[test]
fn confluent_acks_zero_and_one_producers() {
    let broker = Broker::start(&[]);
    let out = confluent(&broker, &["acks"]);
    assert!(
        out.contains("acks=0: ok") && out.contains("acks=1: ok"),
        "{out}"
    );
}

#[test]
fn data_and_topic_configs_survive_a_restart() {
    // Each log's `log opened` line (clean=...) is a debug line.
    let mut broker = Broker::start_with_env(&[], &[("STROM_LOG", "info,storage::log=debug")]);
    confluent(&broker, &["restart-write"]);
    broker.restart();
    let out = confluent(&broker, &["restart-read"]);
    assert!(out.contains("read back"), "{out}");
    assert!(
        broker.log().contains("clean=true"),
        "a clean stop leaves nothing to scan:\n{}",
        broker.log()
    );
}

#[test]
fn kafka_python_round_trip() {
    let broker = Broker::start(&[]);
    let out = run_python(
        "kafka_python_check.py",
        &[&broker.bootstrap()],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains("kafka-python: ok"), "{out}");
}

#[test]
fn internal_topics_are_marked_and_cannot_be_deleted_repartitioned_or_written() {
    let broker = Broker::start(&[]);
    let output = run_python(
        "internal_topics_check.py",
        &[&broker.bootstrap()],
        SCRIPT_DEADLINE,
    );
    for refusal in ["delete refused", "create partitions refused"] {
        assert!(output.contains(refusal), "{output}");
    }
    assert!(output.trim_end().ends_with("OK"), "{output}");
    // librdkafka sends it; the broker refuses it with Kafka's error.
    let output = common::run(
        std::process::Command::new("kcat").args([
            "-b",
            &broker.bootstrap(),
            "-P",
            "-t",
            "__consumer_offsets",
            "-p",
            "0",
            "-X",
            "message.send.max.retries=0",
        ]),
        Some(b"not an offset commit\n"),
        SCRIPT_DEADLINE,
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "the produce was accepted: {stderr}"
    );
    assert!(stderr.contains("Invalid topic"), "{stderr}");
    assert!(!broker.log().contains("topic deleted"), "{}", broker.log());
}
