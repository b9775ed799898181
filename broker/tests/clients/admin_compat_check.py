"""Admin API behaviours Kafka clients' own test suites rely on, checked
against a running strom broker with kafka-python and confluent-kafka.

usage: admin_compat_check.py BOOTSTRAP MODE
Each mode prints "MODE: ok" or exits non-zero with a message on the first
mismatch. Every wait is bounded by a deadline.
"""

import sys

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


MODES = {
    "create-null-message": mode_create_null_message,
}


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    MODES[mode](bootstrap)
    print(f"{mode}: ok")


if __name__ == "__main__":
    main()
