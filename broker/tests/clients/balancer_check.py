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
  group BOOTSTRAP TOPIC PARTITIONS COUNT PROGRESS_FILE
      an idempotent acks=all producer writes COUNT keyed records with
      headers at a steady pace while three consumers of one group (each
      its own connections, committing after each batch) read them; the
      count read so far goes to PROGRESS_FILE (the test times a kill by
      it). Checks: every acknowledged record read, byte-exact, at the
      offset its delivery report gave; no record at two offsets; each
      member's reads of a key in order; all three members got
      partitions; at the end the group's committed offsets are the high
      watermarks. A record read again after a rebalance is counted
      ("reread"), as Kafka's at-least-once delivery allows. Prints
      "produced N consumed N reread R members 3".
  kafka_python BOOTSTRAP TOPIC COUNT
      kafka-python through the balancer: an idempotent acks=all
      KafkaProducer writes COUNT keyed records with headers, a
      KafkaConsumer of a group reads them all back byte-exact at the
      offsets the producer was told and commits; the committed offsets
      are the log ends. Prints "kafka-python produced N consumed N".
  join BOOTSTRAP TOPIC GROUP
      one consumer joins GROUP on TOPIC through the balancer, waits for
      its assignment (every partition, as the only member), commits the
      high watermarks it reads there and leaves. Prints "joined GROUP
      with N partitions".
  admin BOOTSTRAP TOPIC
      AdminClient through the balancer: creates TOPIC (3 partitions, 3
      replicas), describes it, deletes it, each seen in the metadata.
"""

import sys
import threading
import time
import uuid
import zlib

from checks import check, fail

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

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


def produce(bootstrap, topic, count, rate=None):
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
    started = time.time()
    for i in range(count):
        # At `rate` records/s, if given: faults land mid-stream.
        while rate is not None and i / rate > time.time() - started:
            producer.poll(0.01)
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


GROUP_MEMBERS = 3
# Commit refusals that a rebalance or a coordinator failover brings: the
# member's records are read again by whoever gets its partitions.
REBALANCING = {
    KafkaError._ASSIGNMENT_LOST, KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError._NO_OFFSET,
}


def group(bootstrap, topic, partitions, count, progress_file):
    group_id = f"balanced-{uuid.uuid4()}"
    delivered = {}
    produced = threading.Event()
    producer_error = []

    def producing():
        try:
            delivered.update(produce(bootstrap, topic, count, rate=2000))
        except SystemExit as error:
            producer_error.append(str(error))
        except Exception as error:  # reported below, not lost in the thread
            producer_error.append(repr(error))
        produced.set()

    lock = threading.Lock()
    reads = []  # (member, partition, offset, key, value, headers)
    member_partitions = [set() for _ in range(GROUP_MEMBERS)]
    errors = []
    stop = threading.Event()

    def member(n):
        consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "client.id": f"member-{n}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 200,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
        })
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                messages = consumer.consume(500, timeout=0.5)
                batch = []
                for message in messages:
                    if message.error():
                        if not message.error().retriable():
                            errors.append(f"member {n}: {message.error()}")
                        continue
                    batch.append((n, message.partition(), message.offset(), message.key(),
                                  message.value(), message.headers()))
                    member_partitions[n].add(message.partition())
                if batch:
                    with lock:
                        reads.extend(batch)
                        done = len(reads)
                    with open(progress_file, "w") as out:
                        out.write(str(done))
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException as error:
                        # A commit refused during a rebalance or a failover:
                        # those records are read again, as Kafka allows.
                        if error.args[0].code() not in REBALANCING:
                            errors.append(f"member {n} commit: {error}")
        finally:
            consumer.close()

    threads = [threading.Thread(target=producing)]
    threads += [threading.Thread(target=member, args=(n,)) for n in range(GROUP_MEMBERS)]
    for thread in threads:
        thread.start()
    deadline = time.time() + DEADLINE_S
    try:
        while True:
            check(time.time() < deadline, f"read {len(reads)} records, {len(delivered)} delivered")
            check(not errors, f"consumer errors: {errors[:5]}")
            if produced.is_set():
                check(not producer_error, f"producer: {producer_error}")
                with lock:
                    read_at = {(r[1], r[2]) for r in reads}
                if all(at in read_at for at in delivered.values()):
                    break
            time.sleep(0.2)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
    check(not errors, f"consumer errors: {errors[:5]}")

    index_at = {at: i for i, at in delivered.items()}
    first_read = {}
    reread = 0
    last_of_key = {}
    for n, partition, offset, key, value, headers in reads:
        at = (partition, offset)
        check(at in index_at, f"a record at {at} that no delivery report named")
        i = index_at[at]
        check(key == key_of(i), f"record {i}: key differs")
        check(value == value_of(i), f"record {i}: value differs")
        check(headers == headers_of(i), f"record {i}: headers differ: {headers}")
        if at in first_read:
            reread += 1
            continue
        first_read[at] = n
        last = last_of_key.get((n, key), -1)
        check(last < i, f"record {i}: member {n} read key {key} out of order")
        last_of_key[(n, key)] = i
    check(len(first_read) == len(delivered), f"{len(first_read)} of {len(delivered)} read")
    members = sum(1 for p in member_partitions if p)
    check(members == GROUP_MEMBERS, f"only {members} members got partitions")

    # The committed offsets are where the records end.
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group_id,
                        "enable.auto.commit": False})
    ends = {}
    for partition, offset in delivered.values():
        ends[partition] = max(ends.get(partition, -1), offset + 1)
    committed = checker.committed([TopicPartition(topic, p) for p in range(partitions)],
                                  timeout=30)
    for tp in committed:
        check(tp.offset == ends.get(tp.partition, 0),
              f"partition {tp.partition}: committed {tp.offset}, end {ends.get(tp.partition)}")
    checker.close()
    print(f"produced {len(delivered)} consumed {len(first_read)} reread {reread} "
          f"members {members}")


def kafka_python(bootstrap, topic, count):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KafkaTopicPartition
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             retries=20, request_timeout_ms=30000)
    futures = [(i, producer.send(topic, key=key_of(i), value=value_of(i), headers=headers_of(i)))
               for i in range(count)]
    producer.flush(timeout=DEADLINE_S)
    delivered = {}
    for i, future in futures:
        metadata = future.get(timeout=DEADLINE_S)
        delivered[(metadata.partition, metadata.offset)] = i
    producer.close()
    group_id = f"kafka-python-{uuid.uuid4()}"
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group_id,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=1000)
    seen = set()
    deadline = time.time() + DEADLINE_S
    while len(seen) < len(delivered):
        check(time.time() < deadline, f"kafka-python read {len(seen)} of {len(delivered)}")
        for message in consumer:
            at = (message.partition, message.offset)
            check(at in delivered, f"a record at {at} that the producer was not told of")
            i = delivered[at]
            check(message.key == key_of(i) and message.value == value_of(i),
                  f"record {i}: differs")
            check(list(message.headers) == headers_of(i), f"record {i}: headers differ")
            seen.add(at)
        consumer.commit()
    ends = {}
    for partition, offset in delivered:
        ends[partition] = max(ends.get(partition, -1), offset + 1)
    for partition, end in ends.items():
        committed = consumer.committed(KafkaTopicPartition(topic, partition))
        check(committed == end, f"partition {partition}: committed {committed}, end {end}")
    consumer.close()
    print(f"kafka-python produced {len(delivered)} consumed {len(seen)}")


def admin(bootstrap, topic):
    client = AdminClient({"bootstrap.servers": bootstrap})
    futures = client.create_topics([NewTopic(topic, num_partitions=3, replication_factor=3)])
    futures[topic].result(timeout=60)
    deadline = time.time() + 60
    while True:
        listed = client.list_topics(topic, timeout=10).topics.get(topic)
        if listed is not None and listed.error is None and len(listed.partitions) == 3 \
                and all(len(p.replicas) == 3 for p in listed.partitions.values()):
            break
        check(time.time() < deadline, f"{topic} not described with 3 partitions of 3 replicas")
        time.sleep(0.2)
    client.delete_topics([topic])[topic].result(timeout=60)
    while topic in client.list_topics(timeout=10).topics:
        check(time.time() < deadline, f"{topic} still listed after its deletion")
        time.sleep(0.2)
    print(f"created, described and deleted {topic}")


def join(bootstrap, topic, group_id):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
    })
    consumer.subscribe([topic])
    deadline = time.time() + 60
    assigned = []
    while not assigned:
        check(time.time() < deadline, f"no assignment in {group_id} within 60 s")
        message = consumer.poll(0.2)
        if message is not None and message.error() is not None \
                and message.error().code() != KafkaError._PARTITION_EOF:
            fail(f"{group_id}: {message.error()}")
        assigned = consumer.assignment()
    ends = []
    for tp in assigned:
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        ends.append(TopicPartition(tp.topic, tp.partition, high))
    consumer.commit(offsets=ends, asynchronous=False)
    committed = consumer.committed(assigned, timeout=10)
    check(sorted((c.partition, c.offset) for c in committed)
          == sorted((e.partition, e.offset) for e in ends),
          f"{group_id}: committed {committed}, meant {ends}")
    consumer.close()
    print(f"joined {group_id} with {len(assigned)} partitions")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "roundtrip" and len(sys.argv) == 6:
        _, _, bootstrap, topic, partitions, count = sys.argv
        partitions, count = int(partitions), int(count)
        delivered = produce(bootstrap, topic, count)
        used = {partition for partition, _ in delivered.values()}
        check(len(used) == partitions, f"records went to partitions {sorted(used)} only")
        consumed = consume(bootstrap, topic, partitions, delivered)
        print(f"produced {len(delivered)} consumed {consumed}")
    elif mode == "group" and len(sys.argv) == 7:
        _, _, bootstrap, topic, partitions, count, progress_file = sys.argv
        group(bootstrap, topic, int(partitions), int(count), progress_file)
    elif mode == "kafka_python" and len(sys.argv) == 5:
        kafka_python(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "join" and len(sys.argv) == 5:
        join(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "admin" and len(sys.argv) == 4:
        admin(sys.argv[2], sys.argv[3])
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
