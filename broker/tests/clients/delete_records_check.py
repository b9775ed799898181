"""DeleteRecords through confluent-kafka's AdminClient.delete_records and
kafka-python's KafkaAdminClient.delete_records, then what consumers see.

usage: delete_records_check.py BOOTSTRAP CASE
CASE: confluent | kafka-python | after-restart (the first two ran before)
Prints one "<what>: ok" line per check; exits non-zero at the first miss.
Every wait is bounded by a deadline.
"""

import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer, TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic
from kafka.admin import OffsetSpec as KpOffsetSpec
import kafka.errors as kp_errors
from checks import fail

DEADLINE_S = 60
RECORDS = 10
# confluent's topic: partition 0 deleted below 4, partition 1 below its
# high watermark (-1); kafka-python's: partition 0 below 6.
CONFLUENT_TOPIC = "deleted-confluent"
CONFLUENT_START = {0: 4, 1: RECORDS}
KP_TOPIC = "deleted-kafka-python"
KP_START = 6


def expect(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")
    print(f"{what}: ok")


def value(topic, partition, i):
    return f"{topic}/{partition}/record-{i}".encode()


def produce(bootstrap, topic, partitions):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors = []

    def delivered(err, _msg):
        if err is not None:
            errors.append(err)

    for partition in range(partitions):
        for i in range(RECORDS):
            producer.produce(topic, value=value(topic, partition, i), partition=partition,
                             on_delivery=delivered)
    remaining = producer.flush(DEADLINE_S)
    if remaining or errors:
        fail(f"produce to {topic}: {remaining} not delivered, errors {errors[:3]}")


def read_from_beginning(bootstrap, topic, partition):
    """Every (offset, value) of the partition from its first record to its
    end, with auto.offset.reset=earliest."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{topic}-{partition}-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    })
    consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
    seen = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return seen
                fail(f"reading {topic}-{partition}: {msg.error()}")
            seen.append((msg.offset(), msg.value()))
        fail(f"reading {topic}-{partition}: no end within {DEADLINE_S}s, got {seen}")
    finally:
        consumer.close()


def expected(topic, partition, start):
    return [(i, value(topic, partition, i)) for i in range(start, RECORDS)]


def confluent_reset_error(bootstrap, topic, partition, offset):
    """What a consumer with auto.offset.reset=error gets at `offset`."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"strict-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
    })
    consumer.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + DEADLINE_S
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                return msg.error().code(), msg.error().str()
            fail(f"a record below the log start was served: offset {msg.offset()} {msg.value()!r}")
        fail("no error within the deadline")
    finally:
        consumer.close()


def confluent_delete(client, topic, partition, offset):
    """The low watermark, or the Kafka error code of the failure."""
    tp = TopicPartition(topic, partition, offset)
    futures = client.delete_records([tp], request_timeout=30, operation_timeout=30)
    [future] = futures.values()
    try:
        return future.result(timeout=DEADLINE_S).low_watermark
    except KafkaException as error:
        return ("error", error.args[0].code())


def confluent_earliest(client, topic, partition):
    tp = TopicPartition(topic, partition)
    result = client.list_offsets({tp: OffsetSpec.earliest()})
    return result[tp].result(timeout=DEADLINE_S).offset


def confluent(bootstrap):
    client = AdminClient({"bootstrap.servers": bootstrap})
    client.create_topics([NewTopic(CONFLUENT_TOPIC, num_partitions=2, replication_factor=1)])[
        CONFLUENT_TOPIC].result(timeout=DEADLINE_S)
    produce(bootstrap, CONFLUENT_TOPIC, 2)
    expect("confluent delete below 4", confluent_delete(client, CONFLUENT_TOPIC, 0, 4), 4)
    expect("confluent delete below the high watermark (-1)",
           confluent_delete(client, CONFLUENT_TOPIC, 1, -1), RECORDS)
    expect("confluent delete below an offset under the start keeps the start",
           confluent_delete(client, CONFLUENT_TOPIC, 0, 2), 4)
    expect("confluent delete above the high watermark",
           confluent_delete(client, CONFLUENT_TOPIC, 0, RECORDS + 1),
           ("error", KafkaError.OFFSET_OUT_OF_RANGE))
    # librdkafka refuses a partition its metadata lacks without asking
    # (_NOENT); the broker's own answer is kafka-python's case and the
    # raw one.
    expect("confluent delete in an unknown partition",
           confluent_delete(client, CONFLUENT_TOPIC, 7, 1),
           ("error", KafkaError._NOENT))
    after_confluent(bootstrap, client)
    code, message = confluent_reset_error(bootstrap, CONFLUENT_TOPIC, 0, 2)
    if code != KafkaError._AUTO_OFFSET_RESET or "out of range" not in message.lower():
        fail(f"confluent fetch below the start: {code} {message}")
    print("confluent fetch below the start is out of range: ok")


def after_confluent(bootstrap, client):
    for partition, start in CONFLUENT_START.items():
        expect(f"confluent earliest of partition {partition}",
               confluent_earliest(client, CONFLUENT_TOPIC, partition), start)
        expect(f"confluent consumer from the beginning of partition {partition}",
               read_from_beginning(bootstrap, CONFLUENT_TOPIC, partition),
               expected(CONFLUENT_TOPIC, partition, start))


def kp_delete(admin, partition, offset, leader=None):
    tp = KpTopicPartition(KP_TOPIC, partition)
    try:
        result = admin.delete_records({tp: offset}, timeout_ms=30_000, partition_leader_id=leader)
    except kp_errors.KafkaError as error:
        return ("error", type(error).__name__)
    answer = result[tp]
    return answer["low_watermark"] if answer["error_code"] == 0 else ("error", answer["error_code"])


def kafka_python(bootstrap):
    tp = KpTopicPartition(KP_TOPIC, 0)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic(KP_TOPIC, 1, 1)])
        produce(bootstrap, KP_TOPIC, 1)
        expect("kafka-python delete below 6", kp_delete(admin, 0, KP_START), KP_START)
        earliest = admin.list_partition_offsets({tp: KpOffsetSpec.EARLIEST})[tp].offset
        expect("kafka-python earliest", earliest, KP_START)
        # The broker's own answers, sent to the leader as given (no retry,
        # no client-side check of the partition).
        leader = admin.describe_topics([KP_TOPIC])[0]["partitions"][0]["leader_id"]
        expect("kafka-python delete above the high watermark",
               kp_delete(admin, 0, RECORDS + 1, leader), ("error", "OffsetOutOfRangeError"))
        expect("kafka-python delete in an unknown partition",
               kp_delete(admin, 5, 1, leader), ("error", "UnknownTopicOrPartitionError"))
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5_000)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    seen = []
    deadline = time.monotonic() + DEADLINE_S
    while len(seen) < RECORDS - KP_START and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1_000).values():
            seen.extend((r.offset, r.value) for r in records)
    consumer.close()
    expect("kafka-python consumer from the beginning", seen, expected(KP_TOPIC, 0, KP_START))
    strict = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="none",
                           enable_auto_commit=False)
    strict.assign([tp])
    strict.seek(tp, 2)
    outcome = None
    deadline = time.monotonic() + DEADLINE_S
    while outcome is None and time.monotonic() < deadline:
        try:
            polled = strict.poll(timeout_ms=1_000)
        except kp_errors.OffsetOutOfRangeError as error:
            outcome = ("out of range", error.args[0] if error.args else None)
            break
        if any(polled.values()):
            outcome = ("served", polled)
    strict.close()
    expect("kafka-python fetch below the start", outcome, ("out of range", {tp: 2}))


def after_restart(bootstrap):
    client = AdminClient({"bootstrap.servers": bootstrap})
    after_confluent(bootstrap, client)
    expect("kafka-python topic earliest after the restart", confluent_earliest(client, KP_TOPIC, 0), KP_START)
    expect("kafka-python topic from the beginning after the restart",
           read_from_beginning(bootstrap, KP_TOPIC, 0), expected(KP_TOPIC, 0, KP_START))


CASES = {
    "confluent": confluent,
    "kafka-python": kafka_python,
    "after-restart": after_restart,
}


def main():
    bootstrap, case = sys.argv[1], sys.argv[2]
    if case not in CASES:
        fail(f"unknown case {case!r}; one of {sorted(CASES)}")
    CASES[case](bootstrap)


if __name__ == "__main__":
    main()
