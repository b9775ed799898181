"""Consumer-group checks with confluent-kafka (librdkafka 2.x) and
kafka-python 3 against a running strom broker.

usage: groups_check.py BOOTSTRAP MODE [ARGS...]
Each mode prints "<mode>: ok" or exits non-zero with a message on the first
mismatch. Every wait is bounded by a deadline; conditions are polled.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from checks import check, fail

DEADLINE_S = 60
SESSION_MS = 6000
# Static members get a longer session: the restart (a new Python process
# and librdkafka instance) must fit in it even on a loaded machine.
STATIC_SESSION_MS = 10000


def create_topic(bootstrap, name, partitions):
    client = AdminClient({"bootstrap.servers": bootstrap})
    for future in client.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
        future.result(timeout=30)


def value_of(partition, index):
    return f"value-{partition}-{index}-".encode() * (1 + index % 7)


def produce(bootstrap, topic, partitions, per_partition):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors = []
    for index in range(per_partition):
        for partition in range(partitions):
            producer.produce(topic, key=f"{partition}-{index}".encode(), value=value_of(partition, index),
                             partition=partition,
                             on_delivery=lambda err, msg: errors.append(err) if err else None)
        producer.poll(0)
    check(producer.flush(DEADLINE_S) == 0, "messages not delivered")
    check(not errors, f"delivery errors: {errors[:3]}")


def consumer(bootstrap, group, extra=None):
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": 500,
    }
    config.update(extra or {})
    return Consumer(config)


class Tally:
    """Every message consumed, checked byte for byte, at most once."""

    def __init__(self):
        self.seen = set()
        self.lock = threading.Lock()
        # Commits refused because a rebalance was completing (Kafka answers
        # REBALANCE_IN_PROGRESS then too); only after one may a consumed but
        # uncommitted record come again.
        self.commits_refused = 0

    def count(self):
        with self.lock:
            return len(self.seen)

    def take(self, msg, consumer_):
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                return
            fail(f"consume error: {msg.error()}")
        key = (msg.partition(), msg.offset())
        with self.lock:
            check(key not in self.seen or self.commits_refused > 0,
                  f"partition {key[0]} offset {key[1]} consumed twice")
            self.seen.add(key)
        check(msg.key() == f"{msg.partition()}-{msg.offset()}".encode(), f"key at {key}: {msg.key()}")
        check(msg.value() == value_of(msg.partition(), msg.offset()), f"value at {key}")
        # Committed before the next poll, so a rebalance does not re-deliver it.
        try:
            consumer_.commit(message=msg, asynchronous=False)
        except KafkaException as error:
            code = error.args[0].code()
            check(code in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION,
                           KafkaError.UNKNOWN_MEMBER_ID), f"commit failed: {error}")
            with self.lock:
                self.commits_refused += 1


def partitions_of(c):
    return sorted(tp.partition for tp in c.assignment())


def poll_until(consumers, condition, what, tally=None, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while not condition():
        check(time.monotonic() < deadline, f"{what} not reached within {deadline_s}s: "
              f"{[partitions_of(c) for c in consumers]}")
        for c in consumers:
            msg = c.poll(0.05)
            if msg is not None and tally is not None:
                tally.take(msg, c)
            elif msg is not None and msg.error() and msg.error().code() != KafkaError._PARTITION_EOF:
                fail(f"poll error: {msg.error()}")


def split_evenly(consumers, partitions):
    counts = [len(partitions_of(c)) for c in consumers]
    union = sorted(p for c in consumers for p in partitions_of(c))
    share = partitions // len(consumers)
    return union == list(range(partitions)) and all(n == share for n in counts)


def check_committed(bootstrap, group, topic, partitions, expected):
    c = consumer(bootstrap, group)
    committed = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    got = {tp.partition: tp.offset for tp in committed}
    check(got == expected, f"committed offsets of {group}: {got}, want {expected}")
    c.close()


class Member(threading.Thread):
    """A group consumer in its own thread, as applications run them: a
    commit that waits behind this member's JoinGroup must not stall the
    others (librdkafka serialises coordinator requests per member)."""

    def __init__(self, bootstrap, group, topic, tally, extra=None):
        super().__init__(daemon=True)
        self.consumer = consumer(bootstrap, group, extra)
        self.consumer.subscribe([topic])
        self.tally = tally
        self.stop = threading.Event()
        self.error = None
        # Read by the main thread; only this member's thread calls into its consumer.
        self.current = []
        self.start()

    def run(self):
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.05)
                if msg is not None:
                    self.tally.take(msg, self.consumer)
                self.current = partitions_of(self.consumer)
        except BaseException as error:  # reported by the main thread
            self.error = error

    def partitions(self):
        return self.current

    def halt(self):
        """Stops polling; the consumer stays in the group."""
        self.stop.set()
        self.join(timeout=DEADLINE_S)
        check(not self.is_alive(), "member thread did not stop")

    def commit_positions(self):
        """Commits this member's positions, as an application does before it
        closes (only after `halt`: one thread uses the consumer at a time)."""
        try:
            self.consumer.commit(asynchronous=False)
        except KafkaException as error:
            check(error.args[0].code() == KafkaError._NO_OFFSET, f"final commit failed: {error}")

    def close(self):
        self.halt()
        self.consumer.close()


def wait_members(members, condition, what, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while not condition():
        for m in members:
            check(m.error is None and m.is_alive(), f"member failed: {m.error!r}")
        check(time.monotonic() < deadline, f"{what} not reached within {deadline_s}s: "
              f"{[m.partitions() for m in members]}")
        time.sleep(0.05)


def evenly(members, partitions):
    counts = [len(m.partitions()) for m in members]
    union = sorted(p for m in members for p in m.partitions())
    return union == list(range(partitions)) and all(n == partitions // len(members) for n in counts)


def mode_balance(bootstrap, extra=None, name="balance"):
    """Two members split six partitions; a third joining rebalances to
    two each; every message is consumed once with commits."""
    topic, group, per = f"{name}-topic", f"{name}-group", 50
    create_topic(bootstrap, topic, 6)
    produce(bootstrap, topic, 6, per)
    tally = Tally()
    members = [Member(bootstrap, group, topic, tally, extra) for _ in range(2)]
    history = [[] for _ in range(3)]
    wait_members(members, lambda: evenly(members, 6), "3+3 split")
    for i, m in enumerate(members):
        history[i].append(m.partitions())
    members.append(Member(bootstrap, group, topic, tally, extra))
    wait_members(members, lambda: evenly(members, 6), "2+2+2 split after a join")
    for i, m in enumerate(members):
        history[i].append(m.partitions())
    wait_members(members, lambda: tally.count() == 6 * per, "every message consumed")
    check(evenly(members, 6), "assignment changed while consuming")
    if extra and extra.get("partition.assignment.strategy") == "cooperative-sticky":
        # Sticky: members that stay keep a subset of what they had.
        for i in range(2):
            check(set(history[i][1]) <= set(history[i][0]), f"member {i} lost stickiness: {history[i]}")
    for m in members:
        m.halt()
    if tally.commits_refused:
        # A commit refused while a rebalance completed may have been the last
        # of its partition, which its member kept: the members commit their
        # positions once more, all before any leaves (a leave rebalances).
        for m in members:
            m.commit_positions()
    for m in members:
        m.close()
    check_committed(bootstrap, group, topic, 6, {p: per for p in range(6)})
    print(f"{name}: ok {[h[-1] for h in history]}, {tally.commits_refused} commits refused during a rebalance")


def mode_cooperative(bootstrap):
    mode_balance(bootstrap, {"partition.assignment.strategy": "cooperative-sticky"}, "cooperative")


def spawn_member(bootstrap, group, topic, instance=None):
    args = [sys.executable, os.path.abspath(__file__), bootstrap, "member", group, topic]
    if instance:
        args.append(instance)
    child = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    lines = queue.Queue()

    def reader():
        for line in child.stdout:
            lines.put(line.strip())

    threading.Thread(target=reader, daemon=True).start()
    return child, lines


def member_partitions(lines, current):
    """The child's latest reported assignment."""
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return current
        if line.startswith("assigned "):
            text = line.removeprefix("assigned ")
            current = [int(p) for p in text.split(",")] if text else []


def mode_member(bootstrap, group, topic, instance=None):
    """A child group member that reports its assignment until killed."""
    extra = {"group.instance.id": instance, "session.timeout.ms": STATIC_SESSION_MS} if instance else {}
    c = consumer(bootstrap, group, extra)
    c.subscribe([topic])
    last = None
    deadline = time.monotonic() + DEADLINE_S * 2
    while time.monotonic() < deadline:
        c.poll(0.05)
        now = partitions_of(c)
        if now != last:
            print("assigned " + ",".join(map(str, now)), flush=True)
            last = now
    fail("member ran past its deadline")


def mode_kill(bootstrap):
    """A member killed with SIGKILL (no LeaveGroup) loses its partitions to
    the survivors once its session times out."""
    topic, group = "kill-topic", "kill-group"
    create_topic(bootstrap, topic, 6)
    survivors = [consumer(bootstrap, group) for _ in range(2)]
    for c in survivors:
        c.subscribe([topic])
    child, lines = spawn_member(bootstrap, group, topic)
    child_parts = []

    def three_way():
        nonlocal child_parts
        child_parts = member_partitions(lines, child_parts)
        mine = sorted(p for c in survivors for p in partitions_of(c))
        return (len(child_parts) == 2 and all(len(partitions_of(c)) == 2 for c in survivors)
                and sorted(mine + child_parts) == list(range(6)))

    poll_until(survivors, three_way, "2+2+2 split with a child member")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    killed_at = time.monotonic()
    poll_until(survivors, lambda: split_evenly(survivors, 6), "survivors take over", deadline_s=SESSION_MS / 1000 + 30)
    waited = time.monotonic() - killed_at
    for c in survivors:
        c.close()
    print(f"kill: ok after {waited:.1f}s, took over {child_parts}")


def mode_static(bootstrap):
    """A static member restarted with the same group.instance.id within the
    session timeout gets its partitions back without a rebalance."""
    topic, group = "static-topic", "static-group"
    create_topic(bootstrap, topic, 6)
    events = []

    def tracked(instance):
        c = consumer(bootstrap, group, {"group.instance.id": instance, "session.timeout.ms": STATIC_SESSION_MS})
        c.subscribe([topic],
                     on_assign=lambda _c, parts: events.append((instance, "assign", len(parts))),
                     on_revoke=lambda _c, parts: events.append((instance, "revoke", len(parts))))
        return c

    parents = [tracked("static-1"), tracked("static-2")]
    child, lines = spawn_member(bootstrap, group, topic, "static-3")
    child_parts = []

    def three_way():
        nonlocal child_parts
        child_parts = member_partitions(lines, child_parts)
        mine = sorted(p for c in parents for p in partitions_of(c))
        return (len(child_parts) == 2 and all(len(partitions_of(c)) == 2 for c in parents)
                and sorted(mine + child_parts) == list(range(6)))

    poll_until(parents, three_way, "2+2+2 split with static members")
    before = list(events)
    parent_parts = [partitions_of(c) for c in parents]
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    restarted, lines = spawn_member(bootstrap, group, topic, "static-3")
    again = []

    def child_back():
        nonlocal again
        again = member_partitions(lines, again)
        return len(again) == 2

    poll_until(parents, child_back, "restarted static member assigned", deadline_s=STATIC_SESSION_MS / 1000 - 1)
    check(sorted(again) == sorted(child_parts), f"restarted member got {again}, had {child_parts}")
    # Past the old session timeout: nothing may have rebalanced.
    quiet_until = time.monotonic() + STATIC_SESSION_MS / 1000 + 2
    while time.monotonic() < quiet_until:
        for c in parents:
            c.poll(0.05)
    check(events == before, f"rebalance happened: {events[len(before):]}")
    check([partitions_of(c) for c in parents] == parent_parts, "parents' partitions changed")
    restarted.send_signal(signal.SIGKILL)
    restarted.wait(timeout=10)
    for c in parents:
        c.close()
    print(f"static: ok {parent_parts} {again}")


def mode_restart_write(bootstrap):
    """Commits by a group member (with metadata) and by an assign()
    consumer (generation -1), before a broker restart."""
    topic = "restart-topic"
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 3, 20)
    member = consumer(bootstrap, "restart-group")
    member.subscribe([topic])
    poll_until([member], lambda: len(partitions_of(member)) == 3, "assignment")
    member.commit(offsets=[TopicPartition(topic, p, 5 + p, metadata=f"meta-{p}") for p in range(3)],
                  asynchronous=False)
    member.close()
    manual = consumer(bootstrap, "restart-assign")
    manual.assign([TopicPartition(topic, p, 0) for p in range(3)])
    manual.commit(offsets=[TopicPartition(topic, p, 10 + p) for p in range(2)], asynchronous=False)
    manual.close()
    print("restart-write: ok")


def mode_restart_read(bootstrap):
    topic = "restart-topic"
    c = consumer(bootstrap, "restart-group")
    committed = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    got = {tp.partition: (tp.offset, tp.metadata) for tp in committed}
    check(got == {p: (5 + p, f"meta-{p}") for p in range(3)}, f"committed after restart: {got}")
    c.subscribe([topic])
    first = {}
    deadline = time.monotonic() + DEADLINE_S
    while len(first) < 3:
        check(time.monotonic() < deadline, f"resumed only {first}")
        msg = c.poll(0.1)
        if msg is None or msg.error():
            continue
        first.setdefault(msg.partition(), msg.offset())
    check(first == {p: 5 + p for p in range(3)}, f"resumed at {first}")
    c.close()
    check_committed(bootstrap, "restart-assign", topic, 3, {0: 10, 1: 11, 2: -1001})
    print("restart-read: ok")


def mode_kafka_python(bootstrap):
    """Two kafka-python group consumers, each in its own thread as
    applications run them, split four partitions and consume every message
    with commits. A commit racing a rebalance gets REBALANCE_IN_PROGRESS (as
    from Kafka); only then may records consumed but not committed come
    again."""
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    topic, group, per = "kp-topic", "kp-group", 40
    create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, 4, per)
    lock = threading.Lock()
    seen = set()
    state = {"commits_failed": 0}
    stop = threading.Event()

    class KpMember(threading.Thread):
        def __init__(self):
            super().__init__(daemon=True)
            self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                          auto_offset_reset="earliest", enable_auto_commit=False,
                                          session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500)
            self.current = []
            self.error = None
            self.start()

        def run(self):
            try:
                while not stop.is_set():
                    for tp, records in self.consumer.poll(timeout_ms=200).items():
                        for r in records:
                            key = (r.partition, r.offset)
                            with lock:
                                check(key not in seen or state["commits_failed"] > 0, f"{key} consumed twice")
                                seen.add(key)
                            check(r.value == value_of(r.partition, r.offset), f"value at {key}")
                    try:
                        self.consumer.commit()
                    except (CommitFailedError, RebalanceInProgressError):
                        with lock:
                            state["commits_failed"] += 1
                    self.current = sorted(tp.partition for tp in self.consumer.assignment())
            except BaseException as error:  # reported by the main thread
                self.error = error

    members = [KpMember() for _ in range(2)]

    def done():
        for m in members:
            check(m.error is None and m.is_alive(), f"kafka-python member failed: {m.error!r}")
        with lock:
            count = len(seen)
        return count == 4 * per and sorted(members[0].current + members[1].current) == [0, 1, 2, 3] \
            and all(len(m.current) == 2 for m in members)

    deadline = time.monotonic() + DEADLINE_S
    while not done():
        check(time.monotonic() < deadline, f"kafka-python: {len(seen)} consumed, {[m.current for m in members]}")
        time.sleep(0.05)
    parts = [m.current for m in members]
    stop.set()
    for m in members:
        m.join(timeout=DEADLINE_S)
        check(not m.is_alive(), "kafka-python member did not stop")
        m.consumer.close()
    check_committed(bootstrap, group, topic, 4, {p: per for p in range(4)})
    print(f"kafka-python: ok {parts}, {state['commits_failed']} commits refused during a rebalance")


def mode_produce(bootstrap, topic, partitions, per):
    create_topic(bootstrap, topic, int(partitions))
    produce(bootstrap, topic, int(partitions), int(per))
    print("produce: ok")


def mode_committed(bootstrap, group, topic, partitions, per):
    check_committed(bootstrap, group, topic, int(partitions), {p: int(per) for p in range(int(partitions))})
    print("committed: ok")


MODES = {
    "balance": mode_balance,
    "cooperative": mode_cooperative,
    "member": mode_member,
    "kill": mode_kill,
    "static": mode_static,
    "restart-write": mode_restart_write,
    "restart-read": mode_restart_read,
    "kafka-python": mode_kafka_python,
    "produce": mode_produce,
    "committed": mode_committed,
}

if __name__ == "__main__":
    MODES[sys.argv[2]](sys.argv[1], *sys.argv[3:])
