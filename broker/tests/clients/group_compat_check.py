"""Consumer-group behaviours that real clients' test suites check against
Kafka, through confluent-kafka (librdkafka 2.x) and kafka-python 3 against a
running strom.

usage: group_compat_check.py BOOTSTRAP MODE
Each mode prints "<mode>: ok" (and any measurement) or exits non-zero with
a message on the first mismatch. Every wait is bounded by a deadline.
"""

import sys
import time

from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from checks import check, fail

DEADLINE_S = 60
TOPIC_PARTITIONS = 4


def setup_topic(bootstrap, topic, messages):
    client = AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([NewTopic(topic, num_partitions=TOPIC_PARTITIONS, replication_factor=1)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(messages):
        producer.produce(topic, value=f"m{i}".encode(), partition=i % TOPIC_PARTITIONS)
    check(producer.flush(DEADLINE_S) == 0, "messages not delivered")
    return client


def consume_all(consumers, count):
    got = 0
    deadline = time.monotonic() + DEADLINE_S
    while got < count:
        check(time.monotonic() < deadline, f"consumed {got} of {count}")
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and not msg.error():
                got += 1


def listed(client, group):
    result = client.list_consumer_groups(request_timeout=30).result(timeout=60)
    return [g for g in result.valid if g.group_id == group]


def mode_list_groups(bootstrap):
    """librdkafka reports a group whose protocol type is empty as a simple
    (assign-only) group; Kafka keeps `consumer` for a consumer group, also
    once its members are gone and only its offsets remain."""
    client = setup_topic(bootstrap, "listed", 40)
    group = "listed-group"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
    consumer.subscribe(["listed"])
    consume_all([consumer], 40)
    found = listed(client, group)
    check(len(found) == 1, f"listed while consuming: {found}")
    check(not found[0].is_simple_consumer_group, f"a consumer group with a member listed as simple: {found[0]}")
    consumer.close()  # commits and leaves
    found = listed(client, group)
    check(len(found) == 1, f"listed after close: {found}")
    check(found[0].state == ConsumerGroupState.EMPTY, f"state after close: {found[0].state}")
    check(not found[0].is_simple_consumer_group, f"an emptied consumer group listed as simple: {found[0]}")
    described = client.describe_consumer_groups([group])[group].result(timeout=30)
    check(not described.is_simple_consumer_group, f"described as simple: {described}")
    print("list-groups: ok")


SESSION_MS = 5000
# What the broker may add to the session timeout: its deadline check runs
# every 50 ms, the member's last heartbeat or commit may come up to its
# close, and the DeleteGroups polls run 100 ms apart; the rest is room for a
# loaded 2-core machine.
EXPIRY_SLACK_MS = 1000


def mode_static_expiry(bootstrap):
    """Static members do not leave when they close; the group empties when
    their sessions end, and DeleteGroups succeeds then."""
    client = setup_topic(bootstrap, "statics", 40)
    group = "static-group"
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "group.instance.id": f"instance-{i}",
                           "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 500,
                           "auto.offset.reset": "earliest"}) for i in range(2)]
    for c in consumers:
        c.subscribe(["statics"])
    consume_all(consumers, 40)
    deadline = time.monotonic() + DEADLINE_S
    while not all(c.assignment() for c in consumers):
        check(time.monotonic() < deadline, "both members assigned")
        for c in consumers:
            c.poll(0.05)
    for c in consumers:
        c.close()
    closed = time.monotonic()
    while True:
        elapsed_ms = (time.monotonic() - closed) * 1000
        check(elapsed_ms < SESSION_MS + EXPIRY_SLACK_MS,
              f"group not deletable {elapsed_ms:.0f} ms after its static members closed "
              f"(session {SESSION_MS} ms + {EXPIRY_SLACK_MS} ms)")
        try:
            client.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=10)
            break
        except KafkaException as error:
            code = error.args[0].code()
            check(code == KafkaError.NON_EMPTY_GROUP, f"delete: {error}")
            # Before the session ends the members are still there.
            check(elapsed_ms < SESSION_MS + EXPIRY_SLACK_MS, f"delete: {error}")
            time.sleep(0.1)
    check(elapsed_ms >= SESSION_MS - 1000, f"members gone after {elapsed_ms:.0f} ms, before their session ended")
    print(f"static-expiry: ok, deleted {elapsed_ms:.0f} ms after close (session {SESSION_MS} ms)")


# Kafka's AclEntry.supportedOperations(GROUP): all allowed without an authorizer.
GROUP_OPERATIONS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def mode_kafka_python_4(bootstrap):
    """kafka-python 3 takes the broker for Kafka 4.0 and uses its group API
    versions: JoinGroup 9, OffsetCommit 9, LeaveGroup 5, ListGroups 5 with
    a types filter, DescribeGroups 6 with authorized operations and the
    per-group error message."""
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient

    setup_topic(bootstrap, "k4", 8)
    group = "k4-group"
    consumer = KafkaConsumer("k4", bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    got = 0
    deadline = time.monotonic() + DEADLINE_S
    while got < 8:
        check(time.monotonic() < deadline, f"kafka-python consumed {got} of 8")
        for records in consumer.poll(timeout_ms=200).values():
            got += len(records)
    consumer.commit()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        version = admin._manager.broker_version_data.broker_version
        check(version >= (4, 0), f"kafka-python inferred {version}")
        classic = [g for g in admin.list_groups(types_filter=["classic"]) if g["group_id"] == group]
        check(len(classic) == 1 and classic[0]["group_type"] == "classic"
              and classic[0]["protocol_type"] == "consumer", f"classic groups: {classic}")
        consumer_type = [g for g in admin.list_groups(types_filter=["consumer"]) if g["group_id"] == group]
        check(consumer_type == [], f"KIP-848 groups: {consumer_type}")
        described = admin.describe_groups([group, "nope"])
        found = described[group]
        check(found["error"] is None and found["group_state"] == "Stable", f"{group}: {found}")
        check(set(found["authorized_operations"]) == GROUP_OPERATIONS,
              f"authorized operations: {found['authorized_operations']}")
        check(len(found["members"]) == 1, f"members: {found['members']}")
        missing = described["nope"]
        check(missing["group_state"] == "Dead" and "GroupIdNotFound" in (missing["error"] or "")
              and "Group nope not found." in missing["error"], f"nope: {missing}")
        consumer.close()
        left = admin.describe_groups([group])[group]
        check(left["group_state"] == "Empty" and not left["members"], f"after close: {left}")
        offsets = admin.list_group_offsets({group: None})[group]
        total = sum(meta.offset for meta in offsets.values())
        check(total == 8, f"committed offsets: {offsets}")
    finally:
        admin.close()
    print("kafka-python-4: ok")


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    modes = {
        "list-groups": mode_list_groups,
        "static-expiry": mode_static_expiry,
        "kafka-python-4": mode_kafka_python_4,
    }
    if mode not in modes:
        fail(f"unknown mode {mode}")
    modes[mode](bootstrap)


if __name__ == "__main__":
    main()
