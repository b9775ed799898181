"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a
running strom broker.

usage: share_check.py MODE BOOTSTRAP [ARGS...]

Members run as processes of their own (mode `member`), in explicit
acknowledgement mode, and log one line per record, flushed:
  got NAME PARTITION OFFSET DELIVERY_COUNT VALUE_HEX
  ack NAME PARTITION OFFSET TYPE           (after commit_sync confirmed it)
Each record's value is `<index>/...`; what a member does with it:
  index % 10 == 7: reject it (archived, never delivered again);
  index % 10 == 9: release it, every time (archived at the delivery limit);
  index % 10 == 3: release it at its first delivery, accept it after;
  else accept it.
A member named `hold*` acquires records and never acknowledges them (it
is killed; the records come back when their locks expire).

Prints "<mode>: ok ..." or exits non-zero on the first mismatch. Every
wait is bounded.
"""

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic, ResourceType)
from checks import check, fail

DEADLINE_S = 120
PARTITIONS = 3


def value_of(index):
    return f"{index}/".encode() + bytes((index * 7 + i) % 256 for i in range(index % 50))


def member(bootstrap, group, topic, name, log_path):
    log = open(log_path, "a", buffering=1)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    parent = os.getppid()
    holding = name.startswith("hold")
    while not stopping and os.getppid() == parent:
        messages = consumer.poll(0.5) or []
        acked = []
        for m in messages:
            if m.error():
                log.write(f"error {name} {m.error()}\n")
                continue
            index = int(m.value().split(b"/")[0])
            count = m.delivery_count()
            log.write(f"got {name} {m.partition()} {m.offset()} {count} {m.value().hex()}\n")
            if holding:
                continue
            if index % 10 == 7:
                kind = AcknowledgeType.REJECT
            elif index % 10 == 9 or (index % 10 == 3 and count == 1):
                kind = AcknowledgeType.RELEASE
            else:
                kind = AcknowledgeType.ACCEPT
            consumer.acknowledge(m, kind)
            acked.append((m.partition(), m.offset(), int(kind)))
        if holding:
            if messages:
                log.write(f"holding {name}\n")
                # Killed here by the test, its records never acknowledged.
                time.sleep(DEADLINE_S)
            continue
        if acked:
            consumer.commit_sync(30)
            for partition, offset, kind in acked:
                log.write(f"ack {name} {partition} {offset} {kind}\n")
    consumer.close()
    log.write(f"closed {name}\n")


def lines(path):
    try:
        with open(path) as f:
            return [l.split() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def queue(bootstrap, topic, log_path, limit):
    limit = int(limit)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                                replication_factor=1)]).values():
        future.result(timeout=30)
    group = "share-" + topic
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    count = 300
    where = {}
    delivered = []
    for index in range(count):
        producer.produce(topic, value=value_of(index), partition=index % PARTITIONS,
                         on_delivery=lambda err, msg, i=index: delivered.append((i, err, msg.partition(), msg.offset())))
    check(producer.flush(60) == 0, "records not delivered")
    for index, err, partition, offset in delivered:
        check(err is None, f"record {index}: {err}")
        where[(partition, offset)] = index

    def start(name):
        return subprocess.Popen([sys.executable, __file__, "member", bootstrap, group, topic, name, log_path],
                                stdout=subprocess.DEVNULL, stderr=open(log_path + ".stderr", "a"))

    # A member that acquires records and dies holding them.
    holder = start("hold1")
    deadline = time.time() + DEADLINE_S
    while not any(l[0] == "holding" for l in lines(log_path)):
        check(time.time() < deadline, "the holding member got no records")
        time.sleep(0.1)
    holder.kill()
    holder.wait(30)
    held = {(int(l[2]), int(l[3])) for l in lines(log_path) if l[0] == "got" and l[1] == "hold1"}
    members = [start(f"s{i}") for i in range(3)]
    # Done when every record is accepted, rejected or archived at the limit.
    def settled():
        """Every record accepted or rejected, and every `9` record delivered
        `limit` times, each delivery released (or held by the killed
        member)."""
        all_lines = lines(log_path)
        final = {}
        released = {}
        for l in all_lines:
            if l[0] == "ack":
                key = (int(l[2]), int(l[3]))
                if int(l[4]) in (1, 3):
                    final.setdefault(key, []).append(int(l[4]))
                else:
                    released[key] = released.get(key, 0) + 1
        held_now = {}
        for l in all_lines:
            if l[0] == "got" and l[1].startswith("hold"):
                key = (int(l[2]), int(l[3]))
                held_now[key] = held_now.get(key, 0) + 1
        for key, index in where.items():
            if index % 10 == 9:
                if released.get(key, 0) + held_now.get(key, 0) < limit:
                    return False, final
            elif key not in final:
                return False, final
        return True, final
    while True:
        ok, final = settled()
        if ok:
            break
        for m in members:
            check(m.poll() is None, f"a member exited {m.returncode}")
        check(time.time() < deadline, f"not settled: {len(final)} records done")
        time.sleep(0.5)
    # Nothing more comes: the archived records stay archived.
    time.sleep(2)
    for m in members:
        m.send_signal(signal.SIGTERM)
    for m in members:
        m.wait(60)
        check(m.returncode == 0, f"a member exited {m.returncode}")
    got = [l for l in lines(log_path) if l[0] == "got"]
    acks = [l for l in lines(log_path) if l[0] == "ack"]
    deliveries = {}
    for l in got:
        key = (int(l[2]), int(l[3]))
        check(key in where, f"{key} was never produced")
        index = where[key]
        check(bytes.fromhex(l[5]) == value_of(index), f"{key}: value differs")
        deliveries.setdefault(key, []).append(int(l[4]))
    accepted = {}
    for l in acks:
        if int(l[4]) == 1:
            key = (int(l[2]), int(l[3]))
            accepted[key] = accepted.get(key, 0) + 1
    for key, index in where.items():
        counts = deliveries.get(key, [])
        check(counts == sorted(counts) and len(set(counts)) == len(counts),
              f"record {index}: delivery counts {counts} do not rise")
        if index % 10 in (7, 9):
            check(key not in accepted, f"record {index} accepted")
        else:
            check(accepted.get(key) == 1, f"record {index} accepted {accepted.get(key, 0)} times")
        if index % 10 == 9:
            check(len(counts) == limit and max(counts) == limit,
                  f"record {index} delivered {counts}, the limit is {limit}")
        if index % 10 == 3:
            check(len(counts) >= 2, f"record {index} released once, delivered {counts}")
    for key in held:
        index = where[key]
        counts = deliveries[key]
        check(len(counts) >= 2 and counts[0] == 1,
              f"record {index} held by the killed member: deliveries {counts}")
    print(f"queue: ok {count} records, {len(held)} held by a killed member and redelivered, "
          f"{sum(len(c) for c in deliveries.values())} deliveries, "
          f"{sum(1 for i in where.values() if i % 10 == 9)} archived at the limit of {limit}")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "member":
        member(*args)
    elif mode == "queue":
        queue(*args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
