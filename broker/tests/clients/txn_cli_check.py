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

from confluent_kafka import Producer
from checks import check, create_topics, fail, read_to_end

DEADLINE_S = 120
# Long enough that only an operator ends the transaction within the test.
OPEN_TIMEOUT_MS = 600000
PLAIN_BEFORE = 3


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
    create_topics(bootstrap, [topic], partitions, deadline_s=DEADLINE_S)
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
    records = {p: [] for p in range(partitions)}
    for msg in read_to_end(bootstrap, [topic], partitions, isolation, "txn-cli-read", DEADLINE_S):
        records[msg.partition()].append([msg.offset(), msg.key().hex(), msg.value().hex()])
    print(json.dumps(records), flush=True)


def end(bootstrap, txn_id, topic):
    create_topics(bootstrap, [topic], 1, deadline_s=DEADLINE_S)
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
    create_topics(bootstrap, [topic], partitions, deadline_s=DEADLINE_S)
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
