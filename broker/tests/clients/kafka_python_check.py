"""kafka-python 3 (idempotence on by default) round trip against strom.

usage: kafka_python_check.py BOOTSTRAP
"""

import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from checks import fail

COUNT = 2000
DEADLINE_S = 120


def main():
    bootstrap = sys.argv[1]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("kafka-python", num_partitions=2, replication_factor=1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    futures = []
    for i in range(COUNT):
        futures.append(producer.send(
            "kafka-python",
            key=f"k{i}".encode(),
            value=f"v{i}-".encode() * (1 + i % 50),
            headers=[("i", str(i).encode())],
            partition=i % 2,
            timestamp_ms=1_700_000_000_000 + i,
        ))
    producer.flush(timeout=DEADLINE_S)
    for i, future in enumerate(futures):
        meta = future.get(timeout=DEADLINE_S)
        if meta.partition != i % 2 or meta.offset != i // 2:
            fail(f"message {i} stored at {meta.partition}/{meta.offset}")
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    partitions = [TopicPartition("kafka-python", p) for p in range(2)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got = {}
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < COUNT:
        if time.monotonic() > deadline:
            fail(f"consumed {len(got)} of {COUNT}")
        for tp, records in consumer.poll(timeout_ms=500).items():
            for r in records:
                i = int(r.key.decode()[1:])
                if i in got:
                    fail(f"message {i} twice")
                if r.value != f"v{i}-".encode() * (1 + i % 50):
                    fail(f"value of {i}")
                if list(r.headers) != [("i", str(i).encode())]:
                    fail(f"headers of {i}: {r.headers}")
                if r.timestamp != 1_700_000_000_000 + i or r.offset != i // 2 or tp.partition != i % 2:
                    fail(f"position of {i}: {tp.partition}/{r.offset} ts {r.timestamp}")
                got[i] = r
    consumer.close()
    print("kafka-python: ok")


if __name__ == "__main__":
    main()
