"""An idempotent acks=all producer and its checker, for failover tests.

Usage:
  replication_check.py produce BOOTSTRAP TOPIC STOP_FILE ACKS_FILE [SETTING=VALUE...]
      writes records "r-0", "r-1", ... (self-checking values) at a steady
      pace until STOP_FILE exists, keyed so
      that each key stays in one partition, and appends one line
      "KEY PARTITION OFFSET ACK_TIME_MS" to ACKS_FILE per acknowledgement
      (flushed at once; OFFSET is "None" where librdkafka took a
      DUPLICATE_SEQUENCE_NUMBER answer as the acknowledgement of a retry
      whose first send was written: stored, offset not told); ends when
      every record is acknowledged or failed for good (printed as
      "failed: COUNT"); SETTING=VALUE pairs override the producer's
      librdkafka settings (e.g. request.timeout.ms=1500, so that it
      resends a batch the broker has not answered)
  check BOOTSTRAP TOPIC ACKS_FILE
      reads the whole topic and checks: every acknowledged record is there
      byte-exact, none twice, and within each partition the records of the
      producer are in the order sent; prints the counts
  check-replicas TOPIC ACKS_FILE DATA_DIR...
      reads each replica's copy of the topic from its data dir (the
      segment files, with the brokers stopped cleanly) and checks there: every
      acknowledged record is at the offset it was acknowledged at (or,
      where the offset was not told, there once), byte-exact, and no
      record of the producer is stored twice; prints the counts per dir
"""

import os
import struct
import sys
import time
import uuid
import zlib

from checks import check, fail

from confluent_kafka import Consumer, Producer

DEADLINE_S = 600


def value_of(i):
    body = bytes((i * 13 + j) % 251 for j in range(100 + i % 300))
    return f"r-{i}:{zlib.crc32(body)}:".encode() + body


# Records sent per second: steady, so that faults land mid-stream.
RATE = 2000


def produce(bootstrap, topic, stop_file, acks_file, *settings):
    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 120000,
        "retry.backoff.ms": 50,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    for setting in settings:
        key, _, value = setting.partition("=")
        check(key and value, f"{setting!r} is not SETTING=VALUE")
        config[key] = value
    producer = Producer(config)
    out = open(acks_file, "a", buffering=1)
    failed = []

    def delivered_at(sent_ms):
        def delivered(error, message):
            if error is not None:
                failed.append((message.key().decode(), str(error)))
                return
            out.write(f"{message.key().decode()} {message.partition()} {message.offset()} "
                      f"{int(time.time() * 1000)} {sent_ms}\n")
        return delivered

    started = time.time()
    i = 0
    while not os.path.exists(stop_file):
        if time.time() - started > DEADLINE_S:
            fail("the producer ran past its deadline")
        # Ahead of the pace: wait (serving callbacks meanwhile).
        ahead = i / RATE - (time.time() - started)
        if ahead > 0:
            producer.poll(min(ahead, 0.05))
            continue
        while True:
            try:
                producer.produce(topic, key=f"r-{i}".encode(), value=value_of(i),
                                 on_delivery=delivered_at(int(time.time() * 1000)))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        i += 1
    check(producer.flush(DEADLINE_S) == 0, "the producer did not flush")
    out.close()
    print(f"sent: {i} failed: {len(failed)}")
    for key, error in failed[:10]:
        print(f"  {key}: {error}")


def check_topic(bootstrap, topic, acks_file):
    acknowledged = {}
    for line in open(acks_file):
        key, partition, offset, _, _ = line.split()
        acknowledged[key] = (int(partition), None if offset == "None" else int(offset))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"check-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    seen = {}
    duplicated = 0
    reread = 0
    out_of_order = 0
    last_in_partition = {}
    idle_since = time.time()
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        messages = consumer.consume(1000, timeout=1.0)
        if not messages:
            if all(k in seen for k in acknowledged) and time.time() - idle_since > 3:
                break
            continue
        idle_since = time.time()
        for message in messages:
            if message.error():
                fail(f"consume error: {message.error()}")
            key = message.key().decode()
            i = int(key.split("-")[1])
            check(message.value() == value_of(i), f"{key}: value differs")
            at = (message.partition(), message.offset())
            if key in seen:
                if seen[key] == at:
                    # The same record at the same offset again: the consumer
                    # read part of a partition twice (a rebalance of its
                    # group, a leader change), not a duplicate in the log.
                    reread += 1
                    continue
                duplicated += 1
            seen[key] = at
            last = last_in_partition.get(message.partition(), -1)
            if i < last:
                out_of_order += 1
            last_in_partition[message.partition()] = max(last, i)
    consumer.close()
    lost = [k for k in acknowledged if k not in seen]
    moved = [k for k, at in acknowledged.items()
             if k in seen and (seen[k][0] != at[0] or at[1] is not None and seen[k][1] != at[1])]
    offset_unknown = sum(1 for at in acknowledged.values() if at[1] is None)
    print(f"acknowledged: {len(acknowledged)} read: {len(seen)} lost: {len(lost)} "
          f"duplicated: {duplicated} out_of_order: {out_of_order} moved: {len(moved)} "
          f"offset_unknown: {offset_unknown}")
    if reread:
        print(f"read again at the same offset (not in the log twice): {reread}")
    check(not lost, f"acknowledged records lost: {lost[:10]}")
    check(duplicated == 0, f"{duplicated} records read twice")
    check(out_of_order == 0, f"{out_of_order} records out of order")
    check(not moved, f"acknowledged records at other offsets than acknowledged: {moved[:10]}")


def varint(buf, at):
    """A zigzag varint of a Kafka record at `at`: (value, next position)."""
    shift = 0
    raw = 0
    while True:
        check(at < len(buf), "a record's varint runs past its batch")
        byte = buf[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        if byte & 0x80 == 0:
            break
        shift += 7
        check(shift < 64, "a varint longer than 64 bits")
    return (raw >> 1) ^ -(raw & 1), at


# A v2 record batch's header, after baseOffset and batchLength.
BATCH_HEADER = struct.Struct(">ibIhiqqqhii")


def stored_records(partition_dir):
    """Every record of a partition's segment files: {offset: (key, value)}.
    A segment's batches follow one another offset by offset from the base
    offset its name gives; the first one that does not (the zeroed or
    unwritten space after the last batch) ends it."""
    records = {}
    segments = sorted(f for f in os.listdir(partition_dir) if f.endswith(".log"))
    for segment in segments:
        data = open(os.path.join(partition_dir, segment), "rb").read()
        expected = int(segment[:-len(".log")])
        at = 0
        while at + 12 + BATCH_HEADER.size <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, at)
            if base_offset != expected or length < BATCH_HEADER.size \
                    or at + 12 + length > len(data):
                break
            (_, magic, _, attributes, last_delta, _, _, _, _, _, count) = \
                BATCH_HEADER.unpack_from(data, at + 12)
            if magic != 2:
                break
            body_end = at + 12 + length
            expected = base_offset + last_delta + 1
            if attributes & 0x20:  # a control batch
                at = body_end
                continue
            check(attributes & 0x07 == 0, f"{segment}: a compressed batch (the producer sends none)")
            check(count == last_delta + 1, f"{segment}: batch at {base_offset} has gaps")
            pos = at + 12 + BATCH_HEADER.size
            for _ in range(count):
                size, pos = varint(data, pos)
                end = pos + size
                pos += 1  # attributes
                _, pos = varint(data, pos)  # timestamp delta
                delta, pos = varint(data, pos)
                key_len, pos = varint(data, pos)
                key = None if key_len < 0 else data[pos:pos + key_len]
                pos += max(key_len, 0)
                value_len, pos = varint(data, pos)
                value = None if value_len < 0 else data[pos:pos + value_len]
                records[base_offset + delta] = (key, value)
                pos = end
            at = body_end
    return records


def check_replicas(topic, acks_file, *data_dirs):
    acknowledged = {}
    for line in open(acks_file):
        key, partition, offset, _, _ = line.split()
        acknowledged[key] = (int(partition), None if offset == "None" else int(offset))
    partitions = sorted({p for p, _ in acknowledged.values()})
    check(data_dirs, "no data dir to check")
    for data_dir in data_dirs:
        lost = []
        misplaced = []
        twice = 0
        for partition in partitions:
            partition_dir = os.path.join(data_dir, f"{topic}-{partition}")
            check(os.path.isdir(partition_dir), f"{partition_dir}: no copy of the partition")
            records = stored_records(partition_dir)
            where = {}
            for offset, (key, value) in records.items():
                if key is None:
                    continue
                key = key.decode()
                if key in where:
                    twice += 1
                where[key] = offset
                i = int(key.split("-")[1])
                check(value == value_of(i), f"{partition_dir}: {key} at {offset}: value differs")
            for key, (p, offset) in acknowledged.items():
                if p != partition:
                    continue
                if key not in where:
                    lost.append(key)
                elif offset is not None and where[key] != offset:
                    misplaced.append((key, offset, where[key]))
        print(f"{data_dir}: acknowledged: {len(acknowledged)} lost: {len(lost)} "
              f"misplaced: {len(misplaced)} stored_twice: {twice}")
        check(not lost, f"{data_dir}: acknowledged records missing: {lost[:10]}")
        check(not misplaced, f"{data_dir}: acknowledged records at other offsets: {misplaced[:10]}")
        check(twice == 0, f"{data_dir}: {twice} records stored twice")


def main():
    if len(sys.argv) < 2:
        fail(__doc__)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "produce":
        produce(*args)
    elif mode == "check":
        check_topic(*args)
    elif mode == "check-replicas":
        check_replicas(*args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
