"""confluent-kafka's consumer validates a position seeked with a leader
epoch by asking OffsetForLeaderEpoch (KIP-320): within the log it reads on
from there; past the log end (the leader says epoch 0 ends before it) it
reports a log truncation at the end offset the broker answered.

usage: offset_for_leader_epoch_check.py BOOTSTRAP
Exits non-zero with a message on the first mismatch.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from checks import check, fail

TOPIC = "seek-epochs"
RECORDS = 5
DEADLINE_S = 60


def poll_until(consumer, accept, what):
    """Polls until `accept(message)` is true for a message or an error."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and accept(message):
            return message
    fail(f"timed out waiting for {what}")


def main():
    bootstrap = sys.argv[1]
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    check(producer.flush(60) == 0, "records not delivered")

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "seek-epochs",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
    })
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        first = poll_until(consumer, lambda m: m.error() is None, "the first record")
        check(first.offset() == 0, f"first offset {first.offset()}")
        check(first.leader_epoch() == 0, f"first record's leader epoch {first.leader_epoch()}")

        consumer.seek(TopicPartition(TOPIC, 0, 3, leader_epoch=0))
        after = poll_until(consumer, lambda m: m.error() is not None or m.offset() >= 3,
                           "a record after the seek")
        check(after.error() is None, f"error after a valid seek: {after.error()}")
        check(after.offset() == 3, f"offset after the seek {after.offset()}")
        print("seek within the log: ok")

        consumer.seek(TopicPartition(TOPIC, 0, RECORDS + 10, leader_epoch=0))
        truncated = poll_until(consumer, lambda m: m.error() is not None, "a truncation error")
        # With auto.offset.reset=error librdkafka wraps the truncation in
        # _AUTO_OFFSET_RESET; its text carries the end offset answered.
        error = truncated.error()
        check(error.code() in (KafkaError._LOG_TRUNCATION, KafkaError._AUTO_OFFSET_RESET)
              and "truncation" in error.str() and f"end offset is {RECORDS} " in error.str(),
              f"error {error}")
        print("seek past the log end: ok")
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
