//! Consumer-group behaviours that real clients' test suites check against
//! Kafka, through confluent-kafka and kafka-python against a real strom
//! process (script in `tests/clients/group_compat_check.py`).

mod common;

use std::time::Duration;

use common::{run_python, Broker};

const SCRIPT_DEADLINE: Duration = Duration::from_secs(180);

/// No initial delay; sessions down to 1 s (static members use 5 s).
const BROKER_ARGS: &[&str] = &[
    "--set",
    "group.initial.rebalance.delay.ms=0",
    "--set",
    "group.min.session.timeout.ms=1000",
    "--set",
    "strom.preallocate.bytes=1048576",
];

fn check(broker: &Broker, mode: &str) -> String {
    let bootstrap = broker.bootstrap();
    run_python(
        "group_compat_check.py",
        &[&bootstrap, mode],
        SCRIPT_DEADLINE,
    )
}

#[test]
fn list_groups_reports_consumer_groups_as_consumer_also_once_empty() {
    let broker = Broker::start(BROKER_ARGS);
    let out = check(&broker, "list-groups");
    assert!(out.contains("list-groups: ok"), "{out}");
}

#[test]
fn closed_static_members_expire_within_their_session_timeout_and_a_second() {
    let broker = Broker::start(BROKER_ARGS);
    let out = check(&broker, "static-expiry");
    assert!(out.contains("static-expiry: ok"), "{out}");
}

#[test]
fn kafka_python_uses_kafka_4_group_api_versions() {
    let broker = Broker::start(BROKER_ARGS);
    let out = check(&broker, "kafka-python-4");
    assert!(out.contains("kafka-python-4: ok"), "{out}");
}
