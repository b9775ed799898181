"""Transactions for `strom transaction`'s tests, through confluent-kafka
(librdkafka's transactional producer and consumers).

usage: txn_cli_check.py BOOTSTRAP CASE [ARGS]
CASE:
  open TOPIC PARTITIONS TXN_ID RECORDS  creates TOPIC, writes 3 plain
        records to each partition, then a transactional producer
        (transaction.timeout.ms 600000) begins a transaction, writes
        RECORDS records to each partition and exits without ending it
        (os._exit), as a killed producer would: the transaction stays
        open
  plain TOPIC PARTITIONS RECORDS LABEL  writes RECORDS plain records to
        each partition of an existing TOPIC
  read TOPIC PARTITIONS ISOLATION  reads every partition from offset 0 to
        its end as ISOLATION (read_committed or read_uncommitted) sees it
  end TXN_ID TOPIC  one transaction committed, then one aborted, each
        of one record on partition 0 of TOPIC (created with one
        partition)
  time-out TXN_ID TOPIC PARTITIONS  a transaction with a 2 s timeout
        writes one record to each partition of TOPIC (created) and is
        left open: its coordinator aborts it and fences its producer
Prints one JSON document on stdout: what was written (key and value in
hex, per partition) or read (offset, key and value in hex, per
partition). Exits non-zero with a FAIL line at the first miss. Every wait
is bounded by a deadline.
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from checks import check, fail

DEADLINE_S = 120
# Long enough that only an operator ends the transaction within the test.
OPEN_TIMEOUT_MS = 600000
PLAIN_BEFORE = 3


def create(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)])
    for future in futures.values():
        try:
            future.result(DEADLINE_S)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def record(label, partition, i):
    key = f"{label}-{partition}-{i}".encode()
    return key, os.urandom(24) + key + bytes(range(256))[i % 256:]


def plain(bootstrap, topic, partitions, records, label):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": False, "linger.ms": 0})
    written = {}
    for part in range(partitions):
        written[part] = []
        for i in range(records):
            key, value = record(label, part, i)
            p.produce(topic, key=key, value=value, partition=part)
            written[part].append([key.hex(), value.hex()])
        # One partition at a time: the offsets follow the order written.
        check(p.flush(DEADLINE_S) == 0, f"{label}: plain records of partition {part} not delivered")
    return written


def transactional(bootstrap, txn_id, timeout_ms):
    p = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": timeout_ms,
    })
    p.init_transactions(DEADLINE_S)
    return p


def open_txn(bootstrap, topic, partitions, txn_id, records):
    create(bootstrap, topic, partitions)
    before = plain(bootstrap, topic, partitions, PLAIN_BEFORE, "before")
    p = transactional(bootstrap, txn_id, OPEN_TIMEOUT_MS)
    p.begin_transaction()
    written = {}
    for part in range(partitions):
        written[part] = []
        for i in range(records):
            key, value = record("open", part, i)
            p.produce(topic, key=key, value=value, partition=part)
            written[part].append([key.hex(), value.hex()])
    check(p.flush(DEADLINE_S) == 0, "open: transactional records not delivered")
    print(json.dumps({"before": before, "open": written}), flush=True)
    # Neither committed nor aborted: the producer is gone, its
    # transaction stays open until its coordinator's timeout.
    os._exit(0)


def read(bootstrap, topic, partitions, isolation):
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-cli-read-{time.time_ns()}",
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "enable.partition.eof": True,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = {p: [] for p in range(partitions)}
    at_end = set()
    deadline = time.time() + DEADLINE_S
    try:
        while len(at_end) < partitions:
            check(time.time() < deadline,
                  f"read {topic} ({isolation}): {len(at_end)} of {partitions} partitions reached their end")
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise KafkaException(msg.error())
            at_end.discard(msg.partition())
            records[msg.partition()].append([msg.offset(), msg.key().hex(), msg.value().hex()])
    finally:
        c.close()
    print(json.dumps(records), flush=True)


def end(bootstrap, txn_id, topic):
    create(bootstrap, topic, 1)
    p = transactional(bootstrap, txn_id, 60000)
    for commit in (True, False):
        p.begin_transaction()
        key, value = record("commit" if commit else "abort", 0, 0)
        p.produce(topic, key=key, value=value, partition=0)
        if commit:
            p.commit_transaction(DEADLINE_S)
        else:
            check(p.flush(DEADLINE_S) == 0, "end: record not delivered")
            p.abort_transaction(DEADLINE_S)
    print(json.dumps({"committed": 1, "aborted": 1}), flush=True)


def time_out(bootstrap, txn_id, topic, partitions):
    create(bootstrap, topic, partitions)
    p = transactional(bootstrap, txn_id, 2000)
    p.begin_transaction()
    for part in range(partitions):
        key, value = record("timed-out", part, 0)
        p.produce(topic, key=key, value=value, partition=part)
    check(p.flush(DEADLINE_S) == 0, "time-out: records not delivered")
    print(json.dumps({"left_open": txn_id}), flush=True)
    os._exit(0)


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    bootstrap, case, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if case == "open":
        open_txn(bootstrap, args[0], int(args[1]), args[2], int(args[3]))
    elif case == "plain":
        written = plain(bootstrap, args[0], int(args[1]), int(args[2]), args[3])
        print(json.dumps(written), flush=True)
    elif case == "read":
        read(bootstrap, args[0], int(args[1]), args[2])
    elif case == "end":
        end(bootstrap, args[0], args[1])
    elif case == "time-out":
        time_out(bootstrap, args[0], args[1], int(args[2]))
    else:
        fail(f"unknown case {case}")


if __name__ == "__main__":
    main()
