"""Idempotent acks=all producer for the kill -9 soak, then its checker.

Produces numbered records (confluent-kafka, enable.idempotence) round-robin
over the topic's partitions until the stop file appears, while the test
kills and restarts the broker; then flushes, reads every partition back to
its high watermark and prints one JSON line of counts: acknowledged, read
back, lost (acknowledged, never read), duplicated, out of order (a record
before a lower-numbered one of the same partition), corrupt (value bytes
not the ones sent), and the producer's errors.

usage: soak_producer.py BOOTSTRAP TOPIC PARTITIONS STOP_FILE
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

# Bounds of every loop here.
PRODUCE_SECONDS_MAX = 3600
FLUSH_SECONDS = 240
READ_SECONDS = 240
RATE_PER_SECOND = 4000


def value_of(number):
    text = b"soak-%d-" % number
    return (text * (1 + 100 // len(text)))[:100]


def main():
    bootstrap, topic, partitions, stop_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    acknowledged = {}
    errors = []
    fatal = []

    def delivered(err, msg):
        if err is not None:
            errors.append(str(err))
            return
        acknowledged[int(msg.key())] = msg.partition()

    def on_error(err):
        if err.fatal():
            fatal.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 300000,
            "reconnect.backoff.max.ms": 500,
            "error_cb": on_error,
        }
    )
    number = 0
    started = time.monotonic()
    while not os.path.exists(stop_file) and time.monotonic() - started < PRODUCE_SECONDS_MAX:
        if fatal:
            break
        # Paced: the soak is about crashes, not throughput.
        if number > (time.monotonic() - started) * RATE_PER_SECOND:
            producer.poll(0.005)
            continue
        try:
            producer.produce(
                topic, key=b"%d" % number, value=value_of(number), partition=number % partitions, on_delivery=delivered
            )
            number += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(FLUSH_SECONDS)

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-check", "enable.auto.commit": False})
    ends = {}
    for p in range(partitions):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = {}
    out_of_order = 0
    corrupt = 0
    last = {}
    done = {p for p in range(partitions) if ends[p] == 0}
    deadline = time.monotonic() + READ_SECONDS
    while len(done) < partitions and time.monotonic() < deadline:
        try:
            msg = consumer.poll(1.0)
        except KafkaException as e:
            errors.append("consume: %s" % e)
            break
        if msg is None:
            continue
        if msg.error():
            errors.append("consume: %s" % msg.error())
            continue
        key = int(msg.key())
        seen[key] = seen.get(key, 0) + 1
        if msg.value() != value_of(key):
            corrupt += 1
        p = msg.partition()
        if key < last.get(p, -1):
            out_of_order += 1
        last[p] = key
        if msg.offset() + 1 >= ends[p]:
            done.add(p)
    consumer.close()
    lost = sum(1 for k in acknowledged if k not in seen)
    duplicated = sum(n - 1 for n in seen.values() if n > 1)
    print(
        json.dumps(
            {
                "sent": number,
                "acknowledged": len(acknowledged),
                "read_back": sum(seen.values()),
                "lost": lost,
                "duplicated": duplicated,
                "out_of_order": out_of_order,
                "corrupt": corrupt,
                "unflushed": left,
                "read_complete": len(done) == partitions,
                "delivery_errors": len(errors),
                "fatal": fatal,
                "first_errors": errors[:5],
            }
        )
    )


if __name__ == "__main__":
    main()
