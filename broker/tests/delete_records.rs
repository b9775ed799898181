//! DeleteRecords moves a partition's log start offset as Kafka's does:
//! through confluent-kafka's and kafka-python's `delete_records`, `strom
//! topic delete-records` (flags and kafka-delete-records.sh's offset JSON
//! file) and raw requests at every version. Consumers from the beginning
//! then read exactly the records from the new start; a fetch below it is
//! OFFSET_OUT_OF_RANGE, ListOffsets earliest answers it, and it survives
//! a crash and a restart. Bad input gets Kafka's error codes and the
//! tool's clear failures. In a three-broker cluster every replica's log
//! start moves before the answer, a leader killed with `kill -9` leaves
//! a new leader that refuses reads below the start, and a broker back
//! from the dead takes the start it missed.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{http_get, raw, run_python, strom, strom_fails, strom_ok, Broker};
use protocol::admin::delete_records_topics;
use protocol::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use protocol::kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsTopic,
};
use protocol::kafka_protocol::messages::{
    ApiKey, BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse,
    ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use protocol::kafka_protocol::protocol::StrBytes;
use test_support::cluster::Cluster;

const PYTHON_DEADLINE: Duration = Duration::from_secs(240);
const OFFSET_OUT_OF_RANGE: i16 = 1;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn name(topic: &str) -> TopicName {
    TopicName(StrBytes::from_string(topic.to_string()))
}

/// `strom topic delete-records <topic> --partition 0 --before <before>`
/// at `broker`, which must succeed: its output.
fn delete_before(broker: &Broker, topic: &str, before: i64) -> String {
    let before = before.to_string();
    strom_ok(
        broker,
        &[
            "topic",
            "delete-records",
            topic,
            "--partition",
            "0",
            "--before",
            &before,
        ],
    )
}

/// ListOffsets earliest (-2) of `topic`/`partition` at `broker`: (error,
/// offset).
fn earliest(broker: &Broker, topic: &str, partition: i32) -> (i16, i64) {
    let mut stream = raw::connect(broker);
    let response: ListOffsetsResponse = raw::call(
        &mut stream,
        ApiKey::ListOffsets,
        7,
        1,
        "delete-records-test",
        &ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-2)])]),
    );
    let answer = &response.topics[0].partitions[0];
    (answer.error_code, answer.offset)
}

/// What a consumer's fetch at `offset` gets from `broker`: (error, high
/// watermark, log start offset, record bytes).
fn fetch_at(broker: &Broker, topic: &str, partition: i32, offset: i64) -> (i16, i64, i64, usize) {
    let mut stream = raw::connect(broker);
    let response: FetchResponse = raw::call(
        &mut stream,
        ApiKey::Fetch,
        12,
        2,
        "delete-records-test",
        &FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_log_start_offset(-1)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    let answer = &response.responses[0].partitions[0];
    (
        answer.error_code,
        answer.high_watermark,
        answer.log_start_offset,
        answer.records.as_ref().map_or(0, |r| r.len()),
    )
}

/// A raw DeleteRecords at `version` of `parts` ((topic, partition,
/// offset), each topic once, in order): each answer as (topic, partition,
/// error, low watermark), in the order answered.
fn delete_raw(
    broker: &Broker,
    version: i16,
    parts: &[(&str, &[(i32, i64)])],
) -> Vec<(String, i32, i16, i64)> {
    let mut stream = raw::connect(broker);
    let topics = delete_records_topics(parts.iter().copied());
    let response: DeleteRecordsResponse = raw::call(
        &mut stream,
        ApiKey::DeleteRecords,
        version,
        3,
        "delete-records-test",
        &DeleteRecordsRequest::default()
            .with_timeout_ms(10_000)
            .with_topics(topics),
    );
    response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    t.name.0.to_string(),
                    p.partition_index,
                    p.error_code,
                    p.low_watermark,
                )
            })
        })
        .collect()
}

/// Writes `lines` (one record each) to `topic`/`partition` with acks=all.
fn produce_lines(bootstrap: &str, topic: &str, partition: i32, lines: &[String]) {
    let input = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
    let output = test_support::strom_at(
        Some(bootstrap),
        &["produce", topic, "--partition", &partition.to_string()],
        Some(input.as_bytes()),
    );
    assert!(output.status.success(), "{output:?}");
}

/// Every value of `topic`/`partition` from its first record to its end,
/// one per line, as `strom consume --from-beginning` prints them.
fn consume_all(bootstrap: &str, topic: &str, partition: i32) -> String {
    let output = test_support::strom_at(
        Some(bootstrap),
        &[
            "consume",
            topic,
            "--partition",
            &partition.to_string(),
            "--from-beginning",
            "-e",
        ],
        None,
    );
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).expect("UTF-8 values")
}

/// `prefix0`, `prefix1`, ... one per line, from `from` below `to`.
fn values(prefix: &str, from: usize, to: usize) -> Vec<String> {
    (from..to).map(|i| format!("{prefix}{i}")).collect()
}

fn joined(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[test]
fn confluent_and_kafka_python_move_the_log_start_and_it_survives_a_crash() {
    let mut broker = Broker::start(&[]);
    let bootstrap = broker.bootstrap();
    let out = run_python(
        "delete_records_check.py",
        &[&bootstrap, "confluent"],
        PYTHON_DEADLINE,
    );
    for line in [
        "confluent delete below 4: ok",
        "confluent delete below the high watermark (-1): ok",
        "confluent delete below an offset under the start keeps the start: ok",
        "confluent delete above the high watermark: ok",
        "confluent delete in an unknown partition: ok",
        "confluent earliest of partition 0: ok",
        "confluent consumer from the beginning of partition 0: ok",
        "confluent earliest of partition 1: ok",
        "confluent consumer from the beginning of partition 1: ok",
        "confluent fetch below the start is out of range: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    let out = run_python(
        "delete_records_check.py",
        &[&bootstrap, "kafka-python"],
        PYTHON_DEADLINE,
    );
    for line in [
        "kafka-python delete below 6: ok",
        "kafka-python earliest: ok",
        "kafka-python delete above the high watermark: ok",
        "kafka-python delete in an unknown partition: ok",
        "kafka-python consumer from the beginning: ok",
        "kafka-python fetch below the start: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // kill -9: the start is in the checkpoint written when it moved.
    broker.crash_and_restart();
    let out = run_python(
        "delete_records_check.py",
        &[&broker.bootstrap(), "after-restart"],
        PYTHON_DEADLINE,
    );
    for line in [
        "confluent earliest of partition 0: ok",
        "confluent consumer from the beginning of partition 0: ok",
        "confluent earliest of partition 1: ok",
        "confluent consumer from the beginning of partition 1: ok",
        "kafka-python topic earliest after the restart: ok",
        "kafka-python topic from the beginning after the restart: ok",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
}

#[test]
fn the_cli_deletes_by_flags_and_offset_json_file_and_refuses_bad_input() {
    const TOPIC: &str = "trimmed";
    let mut broker = Broker::start(&[]);
    let bootstrap = broker.bootstrap();
    strom_ok(&broker, &["topic", "create", TOPIC, "--partitions", "2"]);
    produce_lines(&bootstrap, TOPIC, 0, &values("v", 0, 10));
    produce_lines(&bootstrap, TOPIC, 1, &values("w", 0, 10));

    let deleted = delete_before(&broker, TOPIC, 3);
    assert_eq!(deleted, "partition: trimmed-0\tlow_watermark: 3\n");
    assert_eq!(
        consume_all(&bootstrap, TOPIC, 0),
        joined(&values("v", 3, 10))
    );

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("offsets.json");
    std::fs::write(
        &file,
        r#"{"partitions": [{"topic": "trimmed", "partition": 1, "offset": -1},
                           {"topic": "trimmed", "partition": 0, "offset": 5}],
            "version": 1}"#,
    )
    .unwrap();
    let file_arg = file.to_str().unwrap();
    let deleted = strom_ok(
        &broker,
        &["topic", "delete-records", "--offset-json-file", file_arg],
    );
    assert_eq!(
        deleted,
        "partition: trimmed-1\tlow_watermark: 10\npartition: trimmed-0\tlow_watermark: 5\n"
    );
    let check_trimmed = |broker: &Broker| {
        let bootstrap = broker.bootstrap();
        assert_eq!(
            consume_all(&bootstrap, TOPIC, 0),
            joined(&values("v", 5, 10))
        );
        assert_eq!(consume_all(&bootstrap, TOPIC, 1), "");
        assert_eq!(earliest(broker, TOPIC, 0), (0, 5));
        assert_eq!(earliest(broker, TOPIC, 1), (0, 10));
        // Below the start: out of range, the start in the answer.
        assert_eq!(
            fetch_at(broker, TOPIC, 0, 4),
            (OFFSET_OUT_OF_RANGE, 10, 5, 0)
        );
        assert_eq!(
            fetch_at(broker, TOPIC, 0, 0),
            (OFFSET_OUT_OF_RANGE, 10, 5, 0)
        );
        let (code, high_watermark, start, bytes) = fetch_at(broker, TOPIC, 0, 5);
        assert_eq!((code, high_watermark, start), (0, 10, 5));
        assert!(bytes > 0, "the records from the start are served");
        let described = strom_ok(broker, &["topic", "describe", TOPIC]);
        assert!(
            described.contains(
                "Partition: 0\tLeader: 0\tReplicas: 0\tIsr: 0\tStartOffset: 5\tEndOffset: 10\n"
            ) && described.contains(
                "Partition: 1\tLeader: 0\tReplicas: 0\tIsr: 0\tStartOffset: 10\tEndOffset: 10\n"
            ),
            "{described}"
        );
    };
    check_trimmed(&broker);

    // Bad input: a clear failure (exit 1), nothing moved.
    let delete = |args: &[&str]| {
        let mut all = vec!["topic", "delete-records"];
        all.extend_from_slice(args);
        let output = strom(&broker, &all, None);
        assert_eq!(output.status.code(), Some(1), "{all:?}: {output:?}");
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (stdout, stderr) = delete(&[TOPIC, "--partition", "0", "--before", "11"]);
    assert_eq!(stdout, "partition: trimmed-0\terror: OFFSET_OUT_OF_RANGE\n");
    assert!(
        stderr.contains("cannot delete records of trimmed-0 (before 11): OFFSET_OUT_OF_RANGE"),
        "{stderr}"
    );
    let (stdout, stderr) = delete(&["nope", "--partition", "0", "--before", "1"]);
    assert_eq!(
        stdout,
        "partition: nope-0\terror: UNKNOWN_TOPIC_OR_PARTITION\n"
    );
    assert!(
        stderr.contains("nope-0 (before 1): UNKNOWN_TOPIC_OR_PARTITION"),
        "{stderr}"
    );
    let (stdout, stderr) = delete(&[TOPIC, "--partition", "9", "--before", "1"]);
    assert_eq!(
        stdout,
        "partition: trimmed-9\terror: UNKNOWN_TOPIC_OR_PARTITION\n"
    );
    assert!(
        stderr.contains("trimmed-9 (before 1): UNKNOWN_TOPIC_OR_PARTITION"),
        "{stderr}"
    );
    for (content, message) in [
        ("not json", "not an offset JSON file"),
        (
            r#"{"partitions": [{"topic": "trimmed", "partition": 0}], "version": 1}"#,
            "not an offset JSON file",
        ),
        (
            r#"{"partitions": [{"topic": "trimmed", "partition": 0, "offset": 1}], "version": 2}"#,
            "version 2 is not supported (only 1)",
        ),
        (
            r#"{"partitions": [{"topic": "trimmed", "partition": 0, "offset": 1},
                               {"topic": "trimmed", "partition": 0, "offset": 2}]}"#,
            "lists trimmed-0 more than once",
        ),
        (r#"{"partitions": [], "version": 1}"#, "lists no partitions"),
    ] {
        std::fs::write(&file, content).unwrap();
        let (stdout, stderr) = delete(&["--offset-json-file", file_arg]);
        assert_eq!(stdout, "", "{content}");
        assert!(
            stderr.contains(file_arg) && stderr.contains(message),
            "{content}: {stderr}"
        );
    }
    let missing = dir.path().join("missing.json");
    let stderr = strom_fails(
        &broker,
        &[
            "topic",
            "delete-records",
            "--offset-json-file",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert!(stderr.contains("cannot read"), "{stderr}");
    let help = strom_ok(&broker, &["topic", "delete-records", "--help"]);
    for explained in [
        "--partition",
        "--before",
        "-1: every record below the high watermark",
        "--offset-json-file",
        r#"{"partitions": [{"topic": "t", "partition": 0, "offset": 3}, ...], "version": 1}"#,
        "low watermark",
        "OFFSET_OUT_OF_RANGE",
        "--timeout-ms",
    ] {
        assert!(
            help.contains(explained),
            "--help lacks {explained}:\n{help}"
        );
    }
    let usage = strom(
        &broker,
        &["topic", "delete-records", TOPIC, "--before", "1"],
        None,
    );
    assert_eq!(
        usage.status.code(),
        Some(2),
        "--partition is needed: {usage:?}"
    );
    check_trimmed(&broker);

    // Raw requests at every version: several partitions and topics at
    // once, each answered with its own code; -1 is the high watermark.
    produce_lines(&bootstrap, TOPIC, 1, &values("w", 10, 14));
    let expected = |low: i64| {
        vec![
            ("trimmed".to_string(), 0, 0, low),
            ("trimmed".to_string(), 7, UNKNOWN_TOPIC_OR_PARTITION, -1),
            ("trimmed".to_string(), 1, OFFSET_OUT_OF_RANGE, -1),
            ("absent".to_string(), 0, UNKNOWN_TOPIC_OR_PARTITION, -1),
        ]
    };
    for (version, offset) in [(0i16, 6i64), (1, 7), (2, 7)] {
        let answers = delete_raw(
            &broker,
            version,
            &[
                (TOPIC, &[(0, offset), (7, 1), (1, 15)]),
                ("absent", &[(0, 1)]),
            ],
        );
        assert_eq!(answers, expected(offset), "v{version}");
    }
    let answers = delete_raw(&broker, 2, &[(TOPIC, &[(1, -1), (0, -2)])]);
    assert_eq!(
        answers,
        vec![
            ("trimmed".to_string(), 1, 0, 14),
            ("trimmed".to_string(), 0, OFFSET_OUT_OF_RANGE, -1),
        ]
    );
    assert_eq!(
        consume_all(&bootstrap, TOPIC, 0),
        joined(&values("v", 7, 10))
    );
    assert_eq!(consume_all(&bootstrap, TOPIC, 1), "");

    // A clean restart keeps every start.
    broker.restart();
    assert_eq!(earliest(&broker, TOPIC, 0), (0, 7));
    assert_eq!(earliest(&broker, TOPIC, 1), (0, 14));
    assert_eq!(
        fetch_at(&broker, TOPIC, 0, 6),
        (OFFSET_OUT_OF_RANGE, 10, 7, 0)
    );
    assert_eq!(
        consume_all(&broker.bootstrap(), TOPIC, 0),
        joined(&values("v", 7, 10))
    );
}

/// Each node's `strom_topic_replica_log_start_offset` of `topic` (a
/// one-partition topic: the partition's), for the nodes that answer and
/// hold a replica.
fn replica_starts(cluster: &Cluster, topic: &str) -> BTreeMap<i32, i64> {
    let sample = format!("strom_topic_replica_log_start_offset{{topic=\"{topic}\"}} ");
    cluster
        .nodes
        .iter()
        .filter(|node| node.broker.is_running())
        .filter_map(|node| {
            let address = format!("{}:{}", node.host.ip, node.ports.admin);
            let (code, text) = http_get(&address, "/metrics");
            assert_eq!(code, 200, "node {}", node.id);
            let value = text
                .lines()
                .find_map(|l| l.strip_prefix(&sample)?.trim().parse::<i64>().ok())?;
            Some((node.id, value))
        })
        .collect()
}

#[test]
fn every_replica_moves_and_a_new_leader_keeps_the_start_after_kill_9() {
    const TOPIC: &str = "replicated-trim";
    let mut cluster = Cluster::start(3, &[]);
    let any = cluster.node(1).broker.bootstrap();
    strom_ok(
        &cluster.node(1).broker,
        &[
            "topic",
            "create",
            TOPIC,
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ],
    );
    let (leader, _) = cluster.wait_for("the topic's three replicas in sync", || {
        common::listing::partitions(&any, TOPIC)?
            .remove(&0)
            .filter(|(leader, isr)| *leader > 0 && isr.len() == 3)
    });
    let bootstrap = cluster.bootstrap();
    produce_lines(&bootstrap, TOPIC, 0, &values("r", 0, 20));

    let deleted = delete_before(&cluster.node(1).broker, TOPIC, 12);
    assert_eq!(
        deleted,
        format!("partition: {TOPIC}-0\tlow_watermark: 12\n")
    );
    // Answered only once every in-sync replica moved: no waiting here.
    assert_eq!(
        replica_starts(&cluster, TOPIC),
        BTreeMap::from([(1, 12), (2, 12), (3, 12)]),
        "{}",
        cluster.logs()
    );

    cluster.node_mut(leader).broker.kill();
    let survivor = cluster
        .nodes
        .iter()
        .find(|n| n.id != leader)
        .map(|n| n.broker.bootstrap())
        .unwrap();
    let (new_leader, _) =
        cluster.wait_for("a new leader, the killed broker out of the ISR", || {
            common::listing::partitions(&survivor, TOPIC)?
                .remove(&0)
                .filter(|(l, isr)| *l > 0 && *l != leader && !isr.contains(&leader))
        });
    let new = &cluster.node(new_leader).broker;
    assert_eq!(earliest(new, TOPIC, 0), (0, 12));
    assert_eq!(
        fetch_at(new, TOPIC, 0, 11),
        (OFFSET_OUT_OF_RANGE, 20, 12, 0)
    );
    assert_eq!(fetch_at(new, TOPIC, 0, 0), (OFFSET_OUT_OF_RANGE, 20, 12, 0));
    assert_eq!(
        consume_all(&survivor, TOPIC, 0),
        joined(&values("r", 12, 20))
    );

    // The new leader deletes further with the two left; the broker back
    // from the dead takes the start it missed from its leader.
    let deleted = delete_before(new, TOPIC, 15);
    assert_eq!(
        deleted,
        format!("partition: {TOPIC}-0\tlow_watermark: 15\n")
    );
    let live: BTreeMap<i32, i64> = cluster
        .nodes
        .iter()
        .filter(|n| n.id != leader)
        .map(|n| (n.id, 15))
        .collect();
    assert_eq!(replica_starts(&cluster, TOPIC), live, "{}", cluster.logs());
    cluster.node_mut(leader).broker.start_again();
    cluster.wait_for("the restarted broker's copy starting at 15", || {
        (replica_starts(&cluster, TOPIC) == BTreeMap::from([(1, 15), (2, 15), (3, 15)]))
            .then_some(())
    });
    assert_eq!(
        consume_all(&cluster.bootstrap(), TOPIC, 0),
        joined(&values("r", 15, 20))
    );
}
