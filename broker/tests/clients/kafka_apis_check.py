"""Kafka APIs as a Kafka broker without an authorizer answers them, through
confluent-kafka's AdminClient and kafka-python 3's KafkaAdminClient.

usage: kafka_apis_check.py BOOTSTRAP CASE
CASE: authorized-operations
Prints one "<what>: ok" line per check; exits non-zero at the first miss.
"""

import sys

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

DEADLINE_S = 60

# Kafka's AclEntry.supportedOperations: all allowed without an authorizer.
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                    "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def expect(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")
    print(f"{what}: ok")


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=DEADLINE_S)


def authorized_operations(bootstrap):
    create_topic(bootstrap, "ops", 2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=DEADLINE_S)
    expect("confluent describe_cluster operations",
           {op.name for op in (cluster.authorized_operations or [])}, CLUSTER_OPERATIONS)
    topics = admin.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)
    topic = topics["ops"].result(timeout=DEADLINE_S)
    expect("confluent describe_topics operations",
           {op.name for op in (topic.authorized_operations or [])}, TOPIC_OPERATIONS)
    plain = admin.describe_cluster().result(timeout=DEADLINE_S)
    expect("confluent describe_cluster without operations", plain.authorized_operations, None)

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = kp.describe_cluster()
        expect("kafka-python describe_cluster operations",
               set(described["authorized_operations"] or []), CLUSTER_OPERATIONS)
        [described_topic] = kp.describe_topics(["ops"])
        expect("kafka-python describe_topics operations",
               set(described_topic["authorized_operations"] or []), TOPIC_OPERATIONS)
    finally:
        kp.close()


CASES = {
    "authorized-operations": authorized_operations,
}


def main():
    bootstrap, case = sys.argv[1], sys.argv[2]
    if case not in CASES:
        fail(f"unknown case {case!r}; one of {sorted(CASES)}")
    CASES[case](bootstrap)


if __name__ == "__main__":
    main()
