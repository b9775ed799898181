"""What every client check script shares: failing with a message on
stderr and a non-zero exit, checking a condition, creating topics, and
reading partitions from their start to their end with confluent-kafka."""

import sys
import time


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def read_partition(bootstrap, topic, partition=0, deadline_s=60):
    """Every message of the partition from offset 0 (or its log start) to
    its end, with a consumer of a group of its own; fails past the
    deadline."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"read-partition-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, partition, 0)])
    messages = []
    deadline = time.time() + deadline_s
    try:
        while True:
            if time.time() > deadline:
                fail(f"read {topic}-{partition}: no end within {deadline_s} s, {len(messages)} read")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return messages
                raise KafkaException(msg.error())
            messages.append(msg)
    finally:
        consumer.close()


def create_topics(bootstrap, names, partitions, replication=1, deadline_s=120, exists_ok=True):
    """Creates the topics, each with `partitions` partitions of
    `replication` replicas (min.insync.replicas 2 when more than one).
    A topic that exists already counts as created when `exists_ok`; any
    other error fails, naming the topic."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if replication > 1 else {}
    futures = admin.create_topics([NewTopic(n, partitions, replication, config=config) for n in names])
    for name, future in futures.items():
        try:
            future.result(deadline_s)
        except KafkaException as e:
            if not (exists_ok and e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
                fail(f"create topic {name} (RF {replication}): {e}")


def read_to_end(bootstrap, topics, partitions, isolation, group_prefix, deadline_s,
                what=None, batch=1):
    """Every message of the topics' partitions (`partitions` of each) from
    offset 0 to the end visible under `isolation` (read_committed or
    read_uncommitted), in the order read, with a consumer of a group of
    its own (`group_prefix` and a timestamp) that commits nothing; at most
    `batch` messages a call. Fails, naming `what`, at an error or past the
    deadline."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    what = what or f"read {', '.join(topics)} ({isolation})"
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"{group_prefix}-{time.time_ns()}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
    })
    tps = [(topic, p) for topic in topics for p in range(partitions)]
    consumer.assign([TopicPartition(topic, p, 0) for topic, p in tps])
    messages, at_end = [], set()
    deadline = time.time() + deadline_s
    try:
        while len(at_end) < len(tps):
            check(time.time() < deadline,
                  f"{what}: {len(at_end)} of {len(tps)} partitions reached their end "
                  f"within {deadline_s} s, {len(messages)} records")
            for msg in consumer.consume(batch, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add((msg.topic(), msg.partition()))
                        continue
                    fail(f"{what}: {msg.error()}")
                at_end.discard((msg.topic(), msg.partition()))
                messages.append(msg)
    finally:
        consumer.close()
    return messages


def poll_messages(consumer, wanted, deadline_s):
    """Up to `wanted` messages of a subscribed confluent-kafka `consumer`
    (partition ends skipped) within `deadline_s`, and the first error that
    stopped it (None when none did)."""
    from confluent_kafka import KafkaError

    messages = []
    deadline = time.time() + deadline_s
    while len(messages) < wanted and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            return messages, msg.error()
        messages.append(msg)
    return messages, None


def kafka_python_round_trip(settings, topic, payload, records, group_prefix):
    """kafka-python with `settings` (its connection and security options):
    produces `records` values `payload(i)` to partition 0 of `topic` with
    acks=all, checks their offsets are 0.., reads them back byte for byte
    as a new consumer group and commits. Prints `kafka-python: ok N`."""
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(acks="all", **settings)
    futures = [producer.send(topic, value=payload(i), partition=0) for i in range(records)]
    producer.flush(60)
    offsets = [f.get(timeout=60).offset for f in futures]
    check(offsets == list(range(records)), f"kafka-python: offsets {offsets[:5]}...")
    producer.close()
    consumer = KafkaConsumer(topic, group_id=f"{group_prefix}-{time.time_ns()}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=20000, **settings)
    read = []
    for msg in consumer:
        read.append(msg)
        if len(read) == records:
            break
    check(len(read) == records, f"kafka-python: read {len(read)} of {records}")
    for i, msg in enumerate(read):
        check(msg.offset == i and msg.value == payload(i), f"kafka-python: record {i} differs")
    consumer.commit()
    consumer.close()
    print(f"kafka-python: ok {len(read)}", flush=True)
