"""ListOffsets by timestamp and MAX_TIMESTAMP through confluent-kafka's
AdminClient.list_offsets, which shows both the offset and the timestamp the
broker answers.

usage: list_offsets_check.py BOOTSTRAP
Exits non-zero with a message on the first mismatch.
"""

import sys

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from checks import check, fail

BASE_TS = 1_700_000_000_000
# One batch with timestamps out of order, then a second batch.
FIRST_BATCH = [10, 50, 30, 20, 40]
SECOND_BATCH = [45, 46]


def produce_batch(bootstrap, topic, deltas, compression):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 1000,
        "compression.type": compression,
    })
    for i, delta in enumerate(deltas):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=BASE_TS + delta, partition=0)
    remaining = producer.flush(60)
    check(remaining == 0, f"{remaining} messages not delivered")


def list_offset(client, topic, spec):
    tp = TopicPartition(topic, 0)
    result = client.list_offsets({tp: spec}, request_timeout=30)[tp].result(timeout=60)
    return result.offset, result.timestamp


def main():
    bootstrap = sys.argv[1]
    client = AdminClient({"bootstrap.servers": bootstrap})
    for compression in ["none", "lz4", "zstd"]:
        topic = f"times-{compression}"
        for future in client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
            future.result(timeout=30)
        produce_batch(bootstrap, topic, FIRST_BATCH, compression)
        produce_batch(bootstrap, topic, SECOND_BATCH, compression)
        # The first record at or after the timestamp, with its own timestamp.
        for query, want in [(5, (0, 10)), (25, (1, 50)), (45, (1, 50)), (46, (1, 50)), (50, (1, 50))]:
            got = list_offset(client, topic, OffsetSpec.for_timestamp(BASE_TS + query))
            want = (want[0], BASE_TS + want[1])
            check(got == want, f"{compression}: for_timestamp(+{query}) = {got}, want {want}")
        got = list_offset(client, topic, OffsetSpec.for_timestamp(BASE_TS + 51))
        check(got[0] == -1, f"{compression}: past every timestamp = {got}")
        # The record holding the largest timestamp, not its batch's last.
        got = list_offset(client, topic, OffsetSpec.max_timestamp())
        check(got == (1, BASE_TS + 50), f"{compression}: max_timestamp = {got}, want (1, {BASE_TS + 50})")
        print(f"{compression}: ok")


if __name__ == "__main__":
    main()
