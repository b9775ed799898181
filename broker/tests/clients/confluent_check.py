"""confluent-kafka (librdkafka 2.x) checks against a running strom broker.

usage: confluent_check.py BOOTSTRAP MODE [ARGS...]
Each mode exits non-zero with a message on the first mismatch. Every wait
is bounded by a deadline.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from checks import check, fail

DEADLINE_S = 120
BASE_TS = 1_700_000_000_000


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_all(futures):
    return {key: future.result(timeout=30) for key, future in futures.items()}


def create_topic(bootstrap, name, partitions, config=None):
    client = admin(bootstrap)
    futures = client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})])
    wait_all(futures)


def describe_topic_configs(client, name):
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    result = wait_all(client.describe_configs([resource]))
    return {key: entry.value for key, entry in list(result.values())[0].items()}


def value_for(i, size):
    seed = (i * 2654435761) & 0xFFFFFFFF
    return bytes(((seed >> (k % 24)) + k) & 0xFF for k in range(size))


def produce(bootstrap, topic, count, partitions, extra=None, ts_base=BASE_TS):
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    config.update(extra or {})
    producer = Producer(config)
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)

    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"key-{i}".encode(),
                    value=value_for(i, 1 + i % 300),
                    headers=[("index", str(i).encode()), ("empty", b""), ("none", None)],
                    timestamp=ts_base + i,
                    partition=i % partitions,
                    on_delivery=delivered,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(DEADLINE_S)
    check(remaining == 0, f"{remaining} messages not delivered")
    check(not errors, f"delivery errors: {errors[:5]}")


def consume(bootstrap, topic, count, partitions, start_offsets=None):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "strom-test",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    assignment = [TopicPartition(topic, p, (start_offsets or {}).get(p, 0)) for p in range(partitions)]
    consumer.assign(assignment)
    messages = []
    deadline = time.monotonic() + DEADLINE_S
    while len(messages) < count:
        check(time.monotonic() < deadline, f"consumed {len(messages)} of {count} before the deadline")
        batch = consumer.consume(num_messages=1000, timeout=0.5)
        for msg in batch:
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                fail(f"consume error: {msg.error()}")
            messages.append(msg)
    consumer.close()
    return messages


def verify(messages, count, partitions):
    check(len(messages) == count, f"got {len(messages)} messages, want {count}")
    last = {}
    seen = set()
    for msg in messages:
        i = int(msg.key().decode().removeprefix("key-"))
        check(i not in seen, f"message {i} twice")
        seen.add(i)
        check(msg.partition() == i % partitions, f"message {i} in partition {msg.partition()}")
        check(msg.value() == value_for(i, 1 + i % 300), f"value of message {i}")
        headers = msg.headers()
        check(headers == [("index", str(i).encode()), ("empty", b""), ("none", None)], f"headers of message {i}: {headers}")
        kind, ts = msg.timestamp()
        check(ts == BASE_TS + i, f"timestamp of message {i}: {kind} {ts}")
        previous = last.get(msg.partition())
        if previous is not None:
            check(msg.offset() == previous[0] + 1, f"partition {msg.partition()}: offset {msg.offset()} after {previous[0]}")
            check(i > previous[1], f"partition {msg.partition()}: message {i} after {previous[1]}")
        last[msg.partition()] = (msg.offset(), i)
    check(len(seen) == count, "every message once")


def mode_compression(bootstrap):
    for codec in ["gzip", "snappy", "lz4", "zstd"]:
        topic = f"compressed-{codec}"
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, 3000, 2, {"compression.type": codec})
        verify(consume(bootstrap, topic, 3000, 2), 3000, 2)
        print(f"{codec}: ok")


def mode_many(bootstrap, count):
    topic = "many"
    create_topic(bootstrap, topic, 8)
    produce(bootstrap, topic, count, 8, {"batch.num.messages": 2000})
    verify(consume(bootstrap, topic, count, 8), count, 8)
    print(f"many: {count} ok")


def mode_seek(bootstrap):
    topic = "seekable"
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 1000, 1)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strom-seek", "enable.auto.commit": False})
    # offsets_for_times: the first offset with a timestamp at or after the one given.
    found = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 700)], timeout=30)
    check(found[0].error is None and found[0].offset == 700, f"offsets_for_times: {found}")
    after_end = consumer.offsets_for_times([TopicPartition(topic, 0, BASE_TS + 5000)], timeout=30)
    check(after_end[0].offset == -1, f"offsets_for_times past the end: {after_end}")
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    check((low, high) == (0, 1000), f"watermarks {low} {high}")
    consumer.assign([TopicPartition(topic, 0, 0)])
    deadline = time.monotonic() + DEADLINE_S
    got = None
    while got is None:
        check(time.monotonic() < deadline, "no message before seek")
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got = msg
    check(got.offset() == 0, f"first offset {got.offset()}")
    consumer.seek(TopicPartition(topic, 0, 900))
    got = None
    while got is None:
        check(time.monotonic() < deadline, "no message after seek")
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got = msg
    check(got.offset() == 900 and got.key() == b"key-900", f"after seek: {got.offset()} {got.key()}")
    consumer.close()
    print("seek: ok")


def mode_acks(bootstrap):
    for acks in ["0", "1"]:
        topic = f"acks-{acks}"
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, 2000, 2, {"acks": acks, "enable.idempotence": False})
        verify(consume(bootstrap, topic, 2000, 2), 2000, 2)
        print(f"acks={acks}: ok")


def mode_admin(bootstrap):
    client = admin(bootstrap)
    wait_all(client.create_topics([NewTopic("admin-a", num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"})]))
    # validate_only creates nothing.
    wait_all(client.create_topics([NewTopic("admin-b", num_partitions=2, replication_factor=1)], validate_only=True))
    topics = client.list_topics(timeout=30).topics
    check("admin-a" in topics and "admin-b" not in topics, f"topics after create: {sorted(topics)}")
    check(len(topics["admin-a"].partitions) == 3, "admin-a has 3 partitions")
    try:
        wait_all(client.create_topics([NewTopic("admin-a", num_partitions=1, replication_factor=1)]))
        fail("creating an existing topic succeeded")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, f"duplicate create: {e}")
    try:
        wait_all(client.create_topics([NewTopic("admin-c", num_partitions=1, replication_factor=1, config={"no.such.config": "1"})]))
        fail("an unknown config was accepted")
    except KafkaException as e:
        check(e.args[0].code() == KafkaError.INVALID_CONFIG, f"bad config: {e}")
    configs = describe_topic_configs(client, "admin-a")
    check(configs.get("retention.ms") == "3600000", f"described retention.ms {configs.get('retention.ms')}")
    check(configs.get("cleanup.policy") == "delete", f"described cleanup.policy {configs.get('cleanup.policy')}")
    resource = ConfigResource(ConfigResource.Type.TOPIC, "admin-a", incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
    ])
    wait_all(client.incremental_alter_configs([resource]))
    configs = describe_topic_configs(client, "admin-a")
    check(configs.get("retention.ms") == "7200000" and configs.get("segment.bytes") == "1048576", f"after incremental alter: {configs}")
    wait_all(client.alter_configs([ConfigResource(ConfigResource.Type.TOPIC, "admin-a", set_config={"retention.ms": "1800000"})]))
    configs = describe_topic_configs(client, "admin-a")
    check(configs.get("retention.ms") == "1800000", f"after alter: {configs.get('retention.ms')}")
    check(configs.get("segment.bytes") != "1048576", "alter_configs replaces the whole set")
    wait_all(client.create_partitions([NewPartitions("admin-a", 5)]))
    topics = client.list_topics(timeout=30).topics
    check(len(topics["admin-a"].partitions) == 5, "admin-a grew to 5 partitions")
    cluster = client.describe_cluster().result(timeout=30)
    check(len(cluster.nodes) == 1 and cluster.controller is not None, f"cluster: {cluster}")
    wait_all(client.delete_topics(["admin-a"]))
    topics = client.list_topics(timeout=30).topics
    check("admin-a" not in topics, f"topics after delete: {sorted(topics)}")
    print("admin: ok")


def mode_replicas(bootstrap, node_id):
    create_topic(bootstrap, "replicated", 3)
    topics = admin(bootstrap).list_topics(timeout=30).topics
    partitions = topics["replicated"].partitions
    check(sorted(partitions) == [0, 1, 2], f"partitions: {sorted(partitions)}")
    for index, partition in sorted(partitions.items()):
        seen = (partition.leader, partition.replicas, partition.isrs)
        check(seen == (node_id, [node_id], [node_id]), f"partition {index}: leader, replicas, isrs {seen}")
    print("replicas: ok")


def mode_restart_write(bootstrap):
    create_topic(bootstrap, "durable", 3, {"retention.ms": "86400000", "message.timestamp.type": "CreateTime"})
    produce(bootstrap, "durable", 5000, 3)
    print("written")


def mode_restart_read(bootstrap):
    verify(consume(bootstrap, "durable", 5000, 3), 5000, 3)
    configs = describe_topic_configs(admin(bootstrap), "durable")
    check(configs.get("retention.ms") == "86400000", f"retention.ms after restart: {configs.get('retention.ms')}")
    topics = admin(bootstrap).list_topics(timeout=30).topics
    check(len(topics["durable"].partitions) == 3, "3 partitions after restart")
    print("read back")


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    modes = {
        "compression": lambda: mode_compression(bootstrap),
        "many": lambda: mode_many(bootstrap, int(sys.argv[3])),
        "seek": lambda: mode_seek(bootstrap),
        "acks": lambda: mode_acks(bootstrap),
        "admin": lambda: mode_admin(bootstrap),
        "replicas": lambda: mode_replicas(bootstrap, int(sys.argv[3])),
        "restart-write": lambda: mode_restart_write(bootstrap),
        "restart-read": lambda: mode_restart_read(bootstrap),
    }
    modes[mode]()


if __name__ == "__main__":
    main()
