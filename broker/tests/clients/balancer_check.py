"""confluent-kafka through a TCP load balancer in front of a cluster: the
client knows only the balancer's address, so every connection to "node X"
lands on whichever broker the balancer picks, and the brokers forward.

Usage:
  balancer_check.py roundtrip BOOTSTRAP TOPIC PARTITIONS COUNT
      an idempotent acks=all producer writes COUNT keyed records with
      headers (self-checking values), then a consumer assigned to every
      partition (no group) reads them all back and checks: every record
      byte-exact (key, value, headers) at the offset and partition its
      delivery report gave, none missing, none twice, each partition in
      the order produced; the watermarks (ListOffsets) agree with what was
      read; offsets_for_times finds the first record of each partition.
      Prints "produced N consumed N".
"""

import sys
import time
import zlib

from checks import check, fail

from confluent_kafka import Consumer, Producer, TopicPartition

DEADLINE_S = 300


def value_of(i):
    body = bytes((i * 7 + j) % 253 for j in range(50 + i % 400))
    return f"v-{i}:{zlib.crc32(body)}:".encode() + body


def headers_of(i):
    return [("index", str(i).encode()), ("crc", str(zlib.crc32(value_of(i))).encode()),
            ("empty", b"")]


def key_of(i):
    # Keys spread over the partitions; one key per 10 records, so a key's
    # records share a partition and their order there is checked.
    return f"k-{i // 10}".encode()


def produce(bootstrap, topic, count):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.num.messages": 500,
        "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 120000,
        "compression.type": "lz4",
    })
    delivered = {}
    errors = []

    # A delivery report carries no headers: each callback knows its record.
    def on_delivery_of(i):
        def on_delivery(error, message):
            if error is not None:
                errors.append(f"record {i}: {error}")
                return
            delivered[i] = (message.partition(), message.offset())
        return on_delivery

    deadline = time.time() + DEADLINE_S
    for i in range(count):
        while True:
            try:
                producer.produce(topic, key=key_of(i), value=value_of(i), headers=headers_of(i),
                                 on_delivery=on_delivery_of(i))
                break
            except BufferError:
                check(time.time() < deadline, "the producer's queue stayed full")
                producer.poll(0.05)
        producer.poll(0)
    check(producer.flush(DEADLINE_S) == 0, "the producer did not flush")
    check(not errors, f"{len(errors)} records failed, e.g. {errors[:5]}")
    check(len(delivered) == count, f"{len(delivered)} delivery reports for {count} records")
    return delivered


def consume(bootstrap, topic, partitions, delivered):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        # No group: partitions are assigned, nothing is committed.
        "group.id": "unused-by-assign",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.wait.max.ms": 200,
    })
    expected = {}
    for i, (partition, offset) in delivered.items():
        expected[(partition, offset)] = i
    last_offsets = {}
    for (partition, offset) in expected:
        last_offsets[partition] = max(last_offsets.get(partition, -1), offset)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = set()
    last_index_of_key = {}
    deadline = time.time() + DEADLINE_S
    while len(seen) < len(expected):
        check(time.time() < deadline, f"read {len(seen)} of {len(expected)} records")
        for message in consumer.consume(1000, timeout=1.0):
            if message.error():
                fail(f"consume error: {message.error()}")
            at = (message.partition(), message.offset())
            check(at in expected, f"a record at {at} that no delivery report named")
            check(at not in seen, f"the record at {at} came twice")
            seen.add(at)
            i = expected[at]
            check(message.key() == key_of(i), f"record {i}: key differs")
            check(message.value() == value_of(i), f"record {i}: value differs")
            check(message.headers() == headers_of(i),
                  f"record {i}: headers differ: {message.headers()}")
            key = message.key()
            check(last_index_of_key.get(key, -1) < i, f"record {i}: out of order for its key")
            last_index_of_key[key] = i
    # ListOffsets: the high watermark is one past the last record, the low 0.
    for partition in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        check(low == 0, f"partition {partition}: low watermark {low}")
        check(high == last_offsets.get(partition, -1) + 1,
              f"partition {partition}: high watermark {high}, last record at "
              f"{last_offsets.get(partition)}")
    # ListOffsets by timestamp: 0 finds each partition's first record.
    found = consumer.offsets_for_times(
        [TopicPartition(topic, p, 0) for p in range(partitions)], timeout=10)
    for tp in found:
        check(tp.error is None, f"offsets_for_times {tp.partition}: {tp.error}")
        if tp.partition in last_offsets:
            check(tp.offset == 0, f"offsets_for_times {tp.partition}: {tp.offset}")
    consumer.close()
    return len(seen)


def main():
    if len(sys.argv) != 6 or sys.argv[1] != "roundtrip":
        fail(__doc__)
    _, _, bootstrap, topic, partitions, count = sys.argv
    partitions, count = int(partitions), int(count)
    delivered = produce(bootstrap, topic, count)
    used = {partition for partition, _ in delivered.values()}
    check(len(used) == partitions, f"records went to partitions {sorted(used)} only")
    consumed = consume(bootstrap, topic, partitions, delivered)
    print(f"produced {len(delivered)} consumed {consumed}")


if __name__ == "__main__":
    main()
