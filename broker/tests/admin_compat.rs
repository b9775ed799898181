//! Admin API behaviours that real clients' test suites rely on: CreateTopics
//! and CreatePartitions answers and manual assignments, broker and group
//! configs, every topic config Kafka 4 defines, topic `compression.type`.
//! Each test runs a Kafka client (`tests/clients/admin_compat_check.py`)
//! against a real strom process.

mod common;

use std::time::Duration;

use common::{run_python, strom, strom_ok, Broker};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(180);

fn check(broker: &Broker, mode: &str) {
    let out = run_python(
        "admin_compat_check.py",
        &[&broker.bootstrap(), mode],
        SCRIPT_DEADLINE,
    );
    assert!(out.contains(&format!("{mode}: ok")), "{out}");
}

#[test]
fn create_topics_answers_a_created_topic_with_a_null_error_message() {
    let broker = Broker::start(&[]);
    check(&broker, "create-null-message");
}

#[test]
fn manual_replica_assignments_are_accepted_and_checked_as_kafka_checks_them() {
    let broker = Broker::start(&[]);
    check(&broker, "manual-assignment");
}

#[test]
fn broker_configs_are_all_described_change_live_and_survive_a_restart() {
    let mut broker = Broker::start(&[]);
    check(&broker, "broker-configs");
    broker.restart();
    check(&broker, "broker-configs-restarted");
}

#[test]
fn strom_config_alter_changes_dynamic_broker_settings_and_refuses_read_only_ones() {
    let broker = Broker::start(&[]);
    let done = strom_ok(
        &broker,
        &[
            "config",
            "alter",
            "--broker",
            "--add-config",
            "log.retention.bytes=5555,log.segment.bytes=2000000",
        ],
    );
    assert!(done.contains("broker 0"), "{done}");
    strom_ok(
        &broker,
        &[
            "config",
            "alter",
            "--broker-defaults",
            "--add-config",
            "log.flush.interval.messages=9",
        ],
    );
    let described = strom_ok(&broker, &["config", "describe", "--broker"]);
    for wanted in [
        "  log.retention.bytes=5555\tsource=DYNAMIC_BROKER_CONFIG",
        "  log.segment.bytes=2000000\tsource=DYNAMIC_BROKER_CONFIG",
        "  log.flush.interval.messages=9\tsource=DYNAMIC_DEFAULT_BROKER_CONFIG",
    ] {
        assert!(
            described.lines().any(|l| l == wanted),
            "{wanted:?} in:\n{described}"
        );
    }
    strom_ok(
        &broker,
        &[
            "config",
            "alter",
            "--broker",
            "0",
            "--delete-config",
            "log.segment.bytes",
        ],
    );
    let described = strom_ok(&broker, &["config", "describe", "--broker"]);
    assert!(
        described
            .lines()
            .any(|l| l.starts_with("  log.segment.bytes=") && l.ends_with("source=DEFAULT_CONFIG")),
        "{described}"
    );
    for (args, wanted) in [
        (
            vec![
                "--broker",
                "--add-config",
                "advertised.listeners=127.0.0.1:1",
            ],
            "read-only",
        ),
        (
            vec!["--broker", "--add-config", "log.retention.bytes"],
            "KEY=VALUE",
        ),
        (vec!["--broker"], "--add-config"),
    ] {
        let mut all = vec!["config", "alter"];
        all.extend(args.iter().copied());
        let output = strom(&broker, &all, None);
        assert_eq!(
            output.status.code(),
            Some(if wanted == "--add-config" { 2 } else { 1 }),
            "{all:?}"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(wanted), "{all:?}: {stderr}");
    }
}

#[test]
fn every_kafka_4_topic_config_is_accepted_kept_and_described_and_unknown_ones_refused() {
    let mut broker = Broker::start(&[]);
    check(&broker, "kafka-topic-configs");
    broker.restart();
    check(&broker, "kafka-topic-configs-restarted");
}

#[test]
fn group_configs_and_list_appends_and_subtracts_work_and_group_configs_survive_a_restart() {
    let mut broker = Broker::start(&[]);
    check(&broker, "group-configs");
    broker.restart();
    check(&broker, "group-configs-restarted");
}

/// The codec bits of the first batch of `topic`'s partition 0, fetched
/// raw (the clients do not show a batch's codec).
fn stored_codec(broker: &Broker, topic: &str) -> i16 {
    use protocol::kafka_protocol::messages::{ApiKey, FetchResponse};
    let mut stream = common::raw::connect(broker);
    let response: FetchResponse = common::raw::call(
        &mut stream,
        ApiKey::Fetch,
        12,
        1,
        "admin-compat",
        &common::hostile::fetch_request(topic, 0, 1 << 20),
    );
    let records = response.responses[0].partitions[0]
        .records
        .clone()
        .expect("records");
    assert!(records.len() > 61, "{topic}: a whole batch");
    i16::from_be_bytes([records[21], records[22]]) & 0x07
}

#[test]
fn compression_type_recompresses_every_codec_and_a_confluent_consumer_reads_every_byte() {
    let broker = Broker::start(&[]);
    check(&broker, "recompress");
    for (topic, codec) in [
        ("recompressed-uncompressed", 0),
        ("recompressed-gzip", 1),
        ("recompressed-snappy", 2),
        ("recompressed-lz4", 3),
        ("recompressed-zstd", 4),
        ("recompressed-default", 4),
    ] {
        assert_eq!(stored_codec(&broker, topic), codec, "{topic}");
    }
}

#[test]
fn log_retention_check_interval_changed_at_runtime_takes_effect_at_once() {
    let broker = Broker::start(&[]);
    check(&broker, "retention-check-live");
}
