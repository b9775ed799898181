"""What every client check script shares: failing with a message on
stderr and a non-zero exit, checking a condition, and reading a
partition from its start to its end with confluent-kafka."""

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
