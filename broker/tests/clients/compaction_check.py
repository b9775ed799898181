"""Compacted topics through confluent-kafka: what a consumer from the
beginning sees once the cleaner ran.

usage: compaction_check.py BOOTSTRAP CASE TOPIC STATE_FILE [ARG]
CASE:
  create         the topic, compacted (ARG: extra config key=value,...;
                 replication.factor=N sets its replication factor)
  produce        KEYS keys written ROUNDS times each in a random order
                 (ARG: the round to start at), the last round's first
                 TOMBSTONES keys deleted with tombstones; then, after
                 segment.ms, a sentinel record that rolls the last segment.
                 Every acknowledged record is added to STATE_FILE.
  keyless        a record without a key is refused with INVALID_RECORD
  check          a consumer from the beginning sees exactly the latest
                 record of every key, each offset holding what was produced
                 there; ARG "tombstones-gone": no tombstoned key at all,
                 else every tombstone present
  alter          sets the topic config ARG (key=value) with
                 incremental_alter_configs
  idempotent     an idempotent producer's batches all acknowledged (no
                 OUT_OF_ORDER_SEQUENCE or UNKNOWN_PRODUCER_ID), ARG rounds
Prints "<case>: ok ..." lines; exits non-zero at the first miss.
Every wait is bounded by a deadline.
"""

import json
import os
import random
import sys
import time

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from checks import fail, read_partition

DEADLINE_S = 120
KEYS = 1000
ROUNDS = 50
TOMBSTONES = 100
SEGMENT_MS = 2000


def load(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return {int(k): v for k, v in json.load(f).items()}


def save(path, state):
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def create(bootstrap, topic, extra):
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "262144",
        "segment.ms": str(SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "3600000",
    }
    replication_factor = 1
    for pair in filter(None, extra.split(",")):
        key, value = pair.split("=", 1)
        if key == "replication.factor":
            replication_factor = int(value)
        else:
            config[key] = value
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, replication_factor, config=config)])
    futures[topic].result(DEADLINE_S)
    print("create: ok")


def producer(bootstrap):
    return Producer({
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "compression.type": "lz4",
    })


def produce(bootstrap, topic, path, first_round):
    state = load(path)
    p = producer(bootstrap)
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
            return
        value = msg.value()
        state[msg.offset()] = [msg.key().decode(), None if value is None else value.decode()]

    rng = random.Random(first_round)
    for round_ in range(first_round, first_round + ROUNDS):
        keys = list(range(KEYS))
        rng.shuffle(keys)
        for key in keys:
            value = f"key {key} round {round_} " + "v" * (key % 40)
            p.produce(topic, key=f"key-{key}".encode(), value=value.encode(),
                      partition=0, on_delivery=delivered)
            p.poll(0)
    for key in range(TOMBSTONES):
        p.produce(topic, key=f"key-{key}".encode(), value=None, partition=0, on_delivery=delivered)
    if p.flush(DEADLINE_S) or errors:
        fail(f"produce: errors {errors[:3]}")
    # segment.ms later, one more record rolls the segment holding the rest.
    time.sleep(SEGMENT_MS / 1000 + 0.5)
    p.produce(topic, key=f"sentinel-{first_round}".encode(), value=b"roll", partition=0,
              on_delivery=delivered)
    if p.flush(DEADLINE_S) or errors:
        fail(f"produce sentinel: errors {errors[:3]}")
    save(path, state)
    print(f"produce: ok {len(state)} records acknowledged, sentinel at {max(state)}")


def keyless(bootstrap, topic):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    outcome = []
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(DEADLINE_S)
    if not outcome or outcome[0] is None:
        fail(f"keyless: a record without a key was accepted: {outcome}")
    if outcome[0].code() != KafkaError.INVALID_RECORD:
        fail(f"keyless: got {outcome[0]}, want INVALID_RECORD")
    print("keyless: ok INVALID_RECORD")


def read_all(bootstrap, topic):
    """(offset, key, value) of every record from the beginning to the end,
    and the end."""
    records = []
    for msg in read_partition(bootstrap, topic, deadline_s=DEADLINE_S):
        value = msg.value()
        records.append((msg.offset(), msg.key().decode(), None if value is None else value.decode()))
    end = records[-1][0] + 1 if records else 0
    return records, end


def check(bootstrap, topic, path, tombstones_gone):
    state = load(path)
    records, end = read_all(bootstrap, topic)
    latest = {}
    for offset in sorted(state):
        key, _ = state[offset]
        latest[key] = offset
    seen = {}
    for offset, key, value in records:
        if offset not in state:
            fail(f"check: offset {offset} holds {key!r}, which was never acknowledged there")
        if state[offset] != [key, value]:
            fail(f"check: offset {offset} holds {key!r}={value!r}, produced {state[offset]!r}")
        if key in seen:
            fail(f"check: key {key!r} at offsets {seen[key]} and {offset}")
        seen[key] = offset
    for key, offset in latest.items():
        tombstone = state[offset][1] is None
        if tombstone and tombstones_gone:
            if key in seen:
                fail(f"check: tombstoned {key!r} still there at {seen[key]}")
        elif seen.get(key) != offset:
            fail(f"check: latest record of {key!r} is at {offset}, the consumer saw {seen.get(key)}")
    live = sum(1 for o in latest.values() if state[o][1] is not None)
    print(f"check: ok {len(records)} records of {len(state)} produced, {live} live keys, end {end}")


def alter(bootstrap, topic, pair):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    key, value = pair.split("=", 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(DEADLINE_S)
    print(f"alter: ok {key}={value}")


def idempotent(bootstrap, topic, rounds):
    p = producer(bootstrap)
    errors = []
    for round_ in range(rounds):
        for key in range(200):
            p.produce(topic, key=f"idem-{key}".encode(), value=f"{round_}".encode(), partition=0,
                      on_delivery=lambda err, msg: err and errors.append(err))
        if p.flush(DEADLINE_S):
            fail("idempotent: not all delivered")
        time.sleep(0.3)
    if errors:
        fail(f"idempotent: {errors[:3]}")
    print(f"idempotent: ok {rounds * 200} records")


def main():
    bootstrap, case, topic, path = sys.argv[1:5]
    arg = sys.argv[5] if len(sys.argv) > 5 else ""
    if case == "create":
        create(bootstrap, topic, arg)
    elif case == "produce":
        produce(bootstrap, topic, path, int(arg or "0"))
    elif case == "keyless":
        keyless(bootstrap, topic)
    elif case == "check":
        check(bootstrap, topic, path, arg == "tombstones-gone")
    elif case == "alter":
        alter(bootstrap, topic, arg)
    elif case == "idempotent":
        idempotent(bootstrap, topic, int(arg or "10"))
    else:
        fail(f"unknown case {case}")


if __name__ == "__main__":
    main()
