//! Admin API behaviours that real clients' test suites rely on: CreateTopics
//! and CreatePartitions answers and manual assignments, broker and group
//! configs, topic `compression.type`. Each test runs a Kafka client
//! (`tests/clients/admin_compat_check.py`) against a real strom process.

mod common;

use std::time::Duration;

use common::{run_python, Broker};

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
