"""The inputs and the state of faust_app.py, through confluent-kafka.

usage: faust_check.py BOOTSTRAP CASE [ARGS]
CASE:
  create               the input topic `words` and the app's changelog,
                       compacted, with segments that roll after a second
  produce START COUNT  records START.. of `words`, keyed k0..k19 in turn
  wait TOTAL           until the changelog's latest counts add up to TOTAL;
                       prints how many changelog records a reader from the
                       beginning finds
  exact TOTAL          every key's latest count is TOTAL / 20
  committed TOTAL      until the app's group has committed offset TOTAL on
                       `words` (so a restart processes nothing twice: the
                       app processes at least once)
Prints "<case>: ok ..." lines; exits non-zero at the first miss. Every
wait is bounded by a deadline.
"""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from checks import fail, read_partition

DEADLINE_S = 120
KEYS = 20
CHANGELOG = "wordcount-counts-changelog"


def create(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([
        NewTopic("words", 1, 1),
        NewTopic(CHANGELOG, 1, 1, config={
            "cleanup.policy": "compact",
            "segment.ms": "1000",
            "min.cleanable.dirty.ratio": "0.01",
        }),
    ])
    for future in futures.values():
        future.result(DEADLINE_S)
    print("create: ok")


def produce(bootstrap, start, count):
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start, start + count):
        p.produce("words", key=f"k{i % KEYS}".encode(), value=b'"x"')
    if p.flush(DEADLINE_S):
        fail("produce: not all delivered")
    print(f"produce: ok {count}")


def latest_counts(bootstrap):
    """The latest count of every key in the changelog, and how many
    records a reader from the beginning finds."""
    messages = read_partition(bootstrap, CHANGELOG, deadline_s=30)
    latest = {}
    for msg in messages:
        latest[json.loads(msg.key())] = None if msg.value() is None else json.loads(msg.value())
    return latest, len(messages)


def wait(bootstrap, total):
    deadline = time.time() + DEADLINE_S
    while True:
        latest, records = latest_counts(bootstrap)
        got = sum(v for v in latest.values() if v)
        if got == total:
            print(f"wait: ok {total} counted, {records} changelog records")
            return
        if got > total:
            fail(f"wait: counted {got}, more than the {total} produced")
        if time.time() > deadline:
            fail(f"wait: counted {got} of {total}")
        time.sleep(0.5)


def exact(bootstrap, total):
    latest, _ = latest_counts(bootstrap)
    want = {f"k{k}": total // KEYS for k in range(KEYS)}
    if latest != want:
        fail(f"exact: {latest}, want {want}")
    print(f"exact: ok {KEYS} keys at {total // KEYS}")


def committed(bootstrap, total):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wordcount", "enable.auto.commit": False})
    deadline = time.time() + DEADLINE_S
    try:
        while True:
            [tp] = c.committed([TopicPartition("words", 0)], timeout=10)
            if tp.offset == total:
                print(f"committed: ok {total}")
                return
            if time.time() > deadline:
                fail(f"committed: {tp.offset}, want {total}")
            time.sleep(0.5)
    finally:
        c.close()


def main():
    bootstrap, case = sys.argv[1], sys.argv[2]
    args = [int(a) for a in sys.argv[3:]]
    if case == "create":
        create(bootstrap)
    elif case == "produce":
        produce(bootstrap, *args)
    elif case == "wait":
        wait(bootstrap, *args)
    elif case == "exact":
        exact(bootstrap, *args)
    elif case == "committed":
        committed(bootstrap, *args)
    else:
        fail(f"unknown case {case}")


if __name__ == "__main__":
    main()
