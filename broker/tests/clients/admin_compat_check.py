"""Admin API behaviours Kafka clients' own test suites rely on, checked
against a running strom broker with kafka-python and confluent-kafka.

usage: admin_compat_check.py BOOTSTRAP MODE
Each mode prints "MODE: ok" or exits non-zero with a message on the first
mismatch. Every wait is bounded by a deadline.
"""

import sys

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient

DEADLINE_S = 60


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def kafka_python_admin(bootstrap):
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=DEADLINE_S * 1000)


def mode_create_null_message(bootstrap):
    client = kafka_python_admin(bootstrap)
    result = client.create_topics({"null-message": {"num_partitions": 2, "replication_factor": 1}})
    topics = result["topics"]
    check(len(topics) == 1, f"one topic result: {result}")
    topic = topics[0]
    check(topic["error_code"] == 0, f"created: {topic}")
    check(topic["error_message"] is None, f"error_message of a created topic is null, got {topic['error_message']!r}")
    client.close()


def confluent_admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_all(futures):
    return {key: future.result(timeout=DEADLINE_S) for key, future in futures.items()}


def confluent_error(futures):
    """The KafkaError code of the one future, or None when it succeeded."""
    (future,) = futures.values()
    try:
        future.result(timeout=DEADLINE_S)
        return None
    except KafkaException as e:
        return e.args[0].code()


def partition_count(client, topic):
    metadata = client.list_topics(topic, timeout=DEADLINE_S)
    return len(metadata.topics[topic].partitions)


INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42


def mode_manual_assignment(bootstrap):
    client = confluent_admin(bootstrap)
    # One broker (id 0): three partitions with it as the only replica.
    wait_all(client.create_topics([NewTopic("assigned", num_partitions=3, replica_assignment=[[0], [0], [0]])]))
    check(partition_count(client, "assigned") == 3, "three assigned partitions")
    wait_all(client.create_partitions([NewPartitions("assigned", 5, replica_assignment=[[0], [0]])]))
    check(partition_count(client, "assigned") == 5, "grown to five with an assignment")
    refusals = {
        "unknown broker": [[7]],
        "broker twice": [[0, 0]],
    }
    for what, assignment in refusals.items():
        code = confluent_error(client.create_topics([NewTopic(f"bad-{len(what)}", num_partitions=len(assignment), replica_assignment=assignment)]))
        check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"{what}: INVALID_REPLICA_ASSIGNMENT, got {code}")
    code = confluent_error(client.create_partitions([NewPartitions("assigned", 8, replica_assignment=[[0]])]))
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"too few assignments: INVALID_REPLICA_ASSIGNMENT, got {code}")
    code = confluent_error(client.create_partitions([NewPartitions("assigned", 6, replica_assignment=[[3]])]))
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"unknown broker: INVALID_REPLICA_ASSIGNMENT, got {code}")
    check(partition_count(client, "assigned") == 5, "refused growths left five partitions")

    # Shapes confluent-kafka cannot send: gaps, and counts next to assignments.
    kp = kafka_python_admin(bootstrap)
    cases = [
        ("gap", {"assignments": {0: [0], 2: [0]}}, INVALID_REPLICA_ASSIGNMENT),
        ("not-from-zero", {"assignments": {1: [0]}}, INVALID_REPLICA_ASSIGNMENT),
        ("with-count", {"num_partitions": 1, "assignments": {0: [0]}}, INVALID_REQUEST),
        ("with-factor", {"replication_factor": 1, "assignments": {0: [0]}}, INVALID_REQUEST),
        ("uneven", {"assignments": {0: [0], 1: []}}, INVALID_REPLICA_ASSIGNMENT),
    ]
    for name, spec, expected in cases:
        result = kp.create_topics({f"kp-{name}": spec}, raise_errors=False)
        (topic,) = result["topics"]
        check(topic["error_code"] == expected, f"{name}: error {expected}, got {topic}")
    result = kp.create_topics({"kp-assigned": {"assignments": {1: [0], 0: [0]}}}, raise_errors=False)
    (topic,) = result["topics"]
    check(topic["error_code"] == 0 and topic["num_partitions"] == 2 and topic["replication_factor"] == 1, f"assigned out of order: {topic}")
    kp.close()


MODES = {
    "manual-assignment": mode_manual_assignment,
    "create-null-message": mode_create_null_message,
}


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    MODES[mode](bootstrap)
    print(f"{mode}: ok")


if __name__ == "__main__":
    main()
