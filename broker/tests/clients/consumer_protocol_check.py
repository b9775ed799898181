"""Consumer-protocol groups (KIP-848, group.protocol=consumer) with
confluent-kafka against running strom brokers.

usage: consumer_protocol_check.py MODE BOOTSTRAP [ARGS...]

Members run as processes of their own (mode `member`), so one can be
killed with SIGKILL; each logs, one line each, flushed:
  assign NAME TIME P,P,...   (incremental: what it gained)
  revoke NAME TIME P,P,...   (what it gave up)
  lost NAME TIME P,P,...     (what the coordinator took from it: fenced,
                              its session gone; KIP-848 hands such
                              partitions on without waiting for it)
  rec NAME TIME PARTITION OFFSET
and commits each record synchronously after logging it. TIME is
time.monotonic(), one clock for every process of the machine.

Each mode prints "<mode>: ok ..." or exits non-zero on the first mismatch.
Every wait is bounded by a deadline.
"""

import os
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from checks import check, fail

DEADLINE_S = 90
PARTITIONS = 6


def value_of(topic, partition, index):
    return f"{topic}/{partition}/{index}/".encode() * (1 + index % 5)


def create_topic(bootstrap, name, partitions, replication=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=replication)]).values():
        future.result(timeout=30)


class Produced:
    """What was produced: (topic, partition) -> values in offset order."""

    def __init__(self, bootstrap):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                  "enable.idempotence": True, "linger.ms": 5})
        self.values = {}

    def produce(self, topic, per_partition, partitions=PARTITIONS):
        errors = []
        for partition in range(partitions):
            values = self.values.setdefault((topic, partition), [])
            for _ in range(per_partition):
                value = value_of(topic, partition, len(values))
                values.append(value)
                self.producer.produce(topic, value=value, partition=partition,
                                      on_delivery=lambda err, msg: errors.append(err) if err else None)
            self.producer.poll(0)
        check(self.producer.flush(DEADLINE_S) == 0, "records not delivered")
        check(not errors, f"delivery errors: {errors[:3]}")

    def total(self):
        return sum(len(v) for v in self.values.values())


def member(bootstrap, group, subscription, name, log_path, instance="", protocol="consumer"):
    """One member: consumes, logs, commits each record; leaves cleanly on
    SIGTERM. `protocol` consumer (KIP-848) or classic (eager range)."""
    log = open(log_path, "a", buffering=1)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
        config["heartbeat.interval.ms"] = 500
    if instance:
        config["group.instance.id"] = instance
    consumer = Consumer(config)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    # A member outlives no orchestrator that died (a failed test).
    parent = os.getppid()

    def event(kind):
        def callback(_consumer, partitions):
            listed = ",".join(f"{p.topic}:{p.partition}" for p in partitions)
            log.write(f"{kind} {name} {time.monotonic():.6f} {listed}\n")
        return callback

    topics = subscription.split(",")
    consumer.subscribe(topics, on_assign=event("assign"), on_revoke=event("revoke"),
                       on_lost=event("lost"))
    log.write(f"started {name} {time.monotonic():.6f}\n")
    while not stopping and os.getppid() == parent:
        for message in consumer.consume(50, timeout=0.2):
            if message.error():
                log.write(f"error {name} {message.error()}\n")
                continue
            log.write(f"rec {name} {time.monotonic():.6f} {message.topic()} {message.partition()} "
                      f"{message.offset()} {message.value().hex()}\n")
            try:
                consumer.commit(message=message, asynchronous=False)
            except Exception as e:  # a commit refused during a rebalance
                log.write(f"commit-error {name} {message.topic()} {message.partition()} "
                          f"{message.offset()} {str(e).replace(' ', '_')}\n")
    consumer.close()
    log.write(f"closed {name} {time.monotonic():.6f}\n")


class Members:
    def __init__(self, bootstrap, group, subscription, log_path):
        self.bootstrap, self.group, self.subscription, self.log_path = bootstrap, group, subscription, log_path
        self.procs = {}
        self.killed = {}  # name -> monotonic time of the kill

    def start(self, name, instance="", protocol="consumer"):
        # librdkafka's own logs go beside the log, not to a pipe that
        # could fill up.
        self.procs[name] = subprocess.Popen(
            [sys.executable, __file__, "member", self.bootstrap, self.group, self.subscription, name,
             self.log_path, instance, protocol],
            stdout=subprocess.DEVNULL, stderr=open(self.log_path + ".stderr", "a"))

    def stop(self, name):
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=DEADLINE_S)
        check(proc.returncode == 0, f"member {name} exited {proc.returncode}")

    def kill(self, name):
        proc = self.procs.pop(name)
        self.killed[name] = time.monotonic()
        proc.kill()
        proc.wait(timeout=DEADLINE_S)

    def stop_all(self):
        for name in list(self.procs):
            self.stop(name)

    def lines(self):
        try:
            with open(self.log_path) as f:
                return [line.split() for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def records(self):
        return [l for l in self.lines() if l[0] == "rec"]

    def consumed_keys(self):
        return {(l[3], int(l[4]), int(l[5])) for l in self.records()}

    def wait_consumed(self, produced, what):
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline:
            if len(self.consumed_keys()) >= produced.total():
                return
            for name, proc in self.procs.items():
                check(proc.poll() is None, f"member {name} exited {proc.returncode}")
            time.sleep(0.2)
        fail(f"{what}: consumed {len(self.consumed_keys())} of {produced.total()}")

    def wait_owned(self, names, total, what):
        """Until the members `names` own `total` partitions between them."""
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline:
            owned = self.owned()
            if sum(len(owned.get(n, ())) for n in names) == total and all(owned.get(n) for n in names):
                return owned
            time.sleep(0.2)
        fail(f"{what}: owned {self.owned()}")

    def owned(self):
        owned = {}
        for line in self.lines():
            if line[0] in ("assign", "revoke", "lost") and len(line) > 3:
                parts = set(line[3].split(","))
                mine = owned.setdefault(line[1], set())
                if line[0] == "assign":
                    mine |= parts
                else:
                    mine -= parts
        return owned


def describe_settled(bootstrap, group, count):
    """confluent-kafka's admin client sees a consumer-protocol group with
    `count` members, stable, owning every partition between them."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.time() + DEADLINE_S
    while True:
        description = admin.describe_consumer_groups([group])[group].result(timeout=30)
        owned = sum(len(m.assignment.topic_partitions) for m in description.members)
        if description.state == ConsumerGroupState.STABLE and owned == PARTITIONS:
            break
        check(time.time() < deadline, f"{group} not stable: {description}")
        time.sleep(0.5)
    check(description.type == ConsumerGroupType.CONSUMER, f"{group} is {description.type}")
    check(len(description.members) == count, f"{group} has {len(description.members)} members")


def check_records(members, produced):
    """Every record consumed, byte for byte; a record twice only where a
    killed member consumed it last on its partition (its commit may not
    have been made)."""
    seen = {}
    for line in members.records():
        name, topic, partition, offset, value = line[1], line[3], int(line[4]), int(line[5]), line[6]
        values = produced.values.get((topic, partition))
        check(values is not None and offset < len(values), f"record {topic}/{partition}@{offset} never produced")
        check(bytes.fromhex(value) == values[offset], f"record {topic}/{partition}@{offset}: value differs")
        seen.setdefault((topic, partition, offset), []).append(name)
    missing = [k for k, v in produced.values.items() for o in range(len(v)) if (k[0], k[1], o) not in seen]
    check(not missing, f"{len(missing)} records never consumed, first {missing[:5]}")
    last_of_killed = {}
    for line in members.records():
        if line[1] in members.killed:
            last_of_killed[(line[1], line[3], int(line[4]))] = int(line[5])
    # A record whose commit was refused (its member was rebalancing) is
    # consumed again by the next owner: at-least-once, as Kafka's.
    refused = {(l[1], l[2], int(l[3]), int(l[4])) for l in members.lines()
               if l[0] == "commit-error" and len(l) >= 5}
    twice = {k: v for k, v in seen.items() if len(v) > 1}
    for (topic, partition, offset), names in twice.items():
        first = names[0]
        allowed = len(names) == 2 and (
            last_of_killed.get((first, topic, partition)) == offset
            or (first, topic, partition, offset) in refused)
        check(allowed, f"{topic}/{partition}@{offset} consumed by {names}")
    return len(twice)


def check_ownership(members):
    """No partition owned by two members at once, from their callbacks; a
    killed member's ownership ends when it was killed. A member told it
    lost its partitions (fenced) had them taken by the coordinator before
    it heard: its span may end after the next owner's starts (its commits
    are refused, which check_records allows); such overlaps are counted,
    not failed."""
    intervals = {}  # partition -> [(start, end, name, lost)]
    open_since = {}
    for line in members.lines():
        if line[0] not in ("assign", "revoke", "lost") or len(line) < 4:
            continue
        name, at = line[1], float(line[2])
        for partition in line[3].split(","):
            if line[0] == "assign":
                open_since[(name, partition)] = at
            else:
                start = open_since.pop((name, partition), None)
                if start is not None:
                    intervals.setdefault(partition, []).append((start, at, name, line[0] == "lost"))
    for (name, partition), start in open_since.items():
        end = members.killed.get(name, float("inf"))
        intervals.setdefault(partition, []).append((start, end, name, False))
    overlaps = []
    members.lost_overlaps = 0
    for partition, spans in intervals.items():
        spans.sort()
        for (s1, e1, n1, lost), (s2, e2, n2, _) in zip(spans, spans[1:]):
            if n1 != n2 and s2 < e1:
                if lost:
                    members.lost_overlaps += 1
                else:
                    overlaps.append((partition, n1, n2, round(e1 - s2, 3)))
    if overlaps:
        # What the members saw, for the post-mortem: every membership
        # event and error, and the tail of librdkafka's own log.
        events = [" ".join(l) for l in members.lines() if l[0] != "rec"]
        try:
            with open(members.log_path + ".stderr") as f:
                stderr = f.read()[-6000:]
        except FileNotFoundError:
            stderr = ""
        fail(f"partitions owned by two members at once: {overlaps}\n" + "\n".join(events)
             + f"\n--- members' stderr (tail) ---\n{stderr}")
    return sum(len(s) for s in intervals.values())


def membership(bootstrap, topic, log_path):
    """Three members join; one leaves, one is killed, one joins late;
    records produced between each change."""
    create_topic(bootstrap, topic, PARTITIONS)
    produced = Produced(bootstrap)
    produced.produce(topic, 40)
    members = Members(bootstrap, "kip848-members", topic, log_path)
    for name in ("a", "b", "c"):
        members.start(name)
    members.wait_owned(["a", "b", "c"], PARTITIONS, "three members")
    members.wait_consumed(produced, "three members")
    members.stop("b")
    produced.produce(topic, 40)
    members.wait_owned(["a", "c"], PARTITIONS, "b left")
    members.wait_consumed(produced, "b left")
    # c dies mid-stream: its partitions come back after its session.
    produced.produce(topic, 40)
    members.kill("c")
    members.wait_owned(["a"], PARTITIONS, "c killed")
    members.start("d")
    produced.produce(topic, 40)
    members.wait_owned(["a", "d"], PARTITIONS, "d joined")
    members.wait_consumed(produced, "d joined")
    describe_settled(bootstrap, "kip848-members", 2)
    members.stop_all()
    twice = check_records(members, produced)
    spans = check_ownership(members)
    print(f"membership: ok {produced.total()} records, {twice} redelivered after the kill, "
          f"{spans} ownership spans")


def static(bootstrap, topic, log_path):
    """A static member restarted within the session keeps its partitions;
    the other member sees no change."""
    create_topic(bootstrap, topic, PARTITIONS)
    produced = Produced(bootstrap)
    produced.produce(topic, 10)
    members = Members(bootstrap, "kip848-static", topic, log_path)
    members.start("s1", "instance-1")
    members.start("n1")
    before = members.wait_owned(["s1", "n1"], PARTITIONS, "two members")
    members.wait_consumed(produced, "two members")
    events_before = len([l for l in members.lines() if l[0] in ("assign", "revoke", "lost") and l[1] == "n1"])
    members.stop("s1")
    members.start("s1", "instance-1")
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        starts = [l for l in members.lines() if l[0] == "assign" and l[1] == "s1"]
        if len(starts) >= 2:
            break
        time.sleep(0.2)
    produced.produce(topic, 10)
    members.wait_consumed(produced, "s1 back")
    after = members.owned()
    check(after.get("s1") == before.get("s1"), f"s1 owned {before.get('s1')}, then {after.get('s1')}")
    events_after = len([l for l in members.lines() if l[0] in ("assign", "revoke", "lost") and l[1] == "n1"])
    check(events_after == events_before, f"n1 rebalanced while s1 restarted: {members.lines()}")
    members.stop_all()
    check_records(members, produced)
    print(f"static: ok s1 kept {sorted(after['s1'])}")


def regex(bootstrap, prefix, log_path):
    """A regex subscription picks up a topic created after it."""
    first, second = f"{prefix}-1", f"{prefix}-2"
    create_topic(bootstrap, first, 2)
    produced = Produced(bootstrap)
    produced.produce(first, 10, partitions=2)
    members = Members(bootstrap, "kip848-regex", f"^{prefix}-.*", log_path)
    members.start("r1")
    members.wait_consumed(produced, "first topic")
    create_topic(bootstrap, second, 3)
    produced.produce(second, 10, partitions=3)
    members.wait_consumed(produced, "second topic")
    members.stop_all()
    check_records(members, produced)
    print(f"regex: ok {produced.total()} records from {first} and {second}")


def group_type(bootstrap, group):
    from confluent_kafka import ConsumerGroupType
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group])[group].result(timeout=30)
    return {ConsumerGroupType.CONSUMER: "consumer", ConsumerGroupType.CLASSIC: "classic"}.get(
        description.type, str(description.type))


def wait_group_type(bootstrap, group, wanted):
    deadline = time.time() + DEADLINE_S
    while (found := group_type(bootstrap, group)) != wanted:
        check(time.time() < deadline, f"{group} stayed {found}, not {wanted}")
        time.sleep(0.5)


def migration(bootstrap, topic, log_path):
    """Two classic members consume; a consumer-protocol member joins and
    the group turns consumer online, the classic members staying in it;
    the consumer-protocol member leaves and the group turns classic again.
    Records produced at each step; every record consumed (again only after
    a refused commit), no partition owned by two members at once."""
    create_topic(bootstrap, topic, PARTITIONS)
    produced = Produced(bootstrap)
    produced.produce(topic, 20)
    group = "kip848-migration"
    members = Members(bootstrap, group, topic, log_path)
    members.start("k1", protocol="classic")
    members.start("k2", protocol="classic")
    members.wait_owned(["k1", "k2"], PARTITIONS, "two classic members")
    members.wait_consumed(produced, "two classic members")
    check(group_type(bootstrap, group) == "classic", "a classic group to start with")
    members.start("c1")
    wait_group_type(bootstrap, group, "consumer")
    produced.produce(topic, 20)
    members.wait_owned(["k1", "k2", "c1"], PARTITIONS, "both kinds")
    members.wait_consumed(produced, "both kinds")
    members.stop("c1")
    wait_group_type(bootstrap, group, "classic")
    produced.produce(topic, 20)
    members.wait_owned(["k1", "k2"], PARTITIONS, "classic again")
    members.wait_consumed(produced, "classic again")
    members.stop_all()
    twice = check_records(members, produced)
    spans = check_ownership(members)
    print(f"migration: ok {produced.total()} records, {twice} again after a refused commit, "
          f"{spans} ownership spans")


def wait_file(path, what):
    deadline = time.time() + DEADLINE_S
    while not os.path.exists(path):
        check(time.time() < deadline, f"{what}: {path} never appeared")
        time.sleep(0.1)


def failover(bootstrap, topic, log_path, signal_dir, group="kip848-failover"):
    """Three members consume a replicated topic; a fourth joins and, while
    the group reconciles, the test kills the group's coordinator (it
    waits for `rebalancing` here, then writes `killed`). The members carry
    on with the new coordinator: every record consumed, none twice, no
    partition owned by two members at once."""
    produced = Produced(bootstrap)
    produced.produce(topic, 30)
    members = Members(bootstrap, group, topic, log_path)
    for name in ("a", "b", "c"):
        members.start(name)
    members.wait_owned(["a", "b", "c"], PARTITIONS, "three members")
    members.wait_consumed(produced, "three members")
    members.start("d")
    open(os.path.join(signal_dir, "rebalancing"), "w").close()
    wait_file(os.path.join(signal_dir, "killed"), "the coordinator's kill")
    produced.produce(topic, 30)
    members.wait_owned(["a", "b", "c", "d"], PARTITIONS, "four members after the failover")
    members.wait_consumed(produced, "after the failover")
    members.stop_all()
    twice = check_records(members, produced)
    check(twice == 0, f"{twice} records consumed twice")
    spans = check_ownership(members)
    print(f"failover: ok {produced.total()} records, {spans} ownership spans, "
          f"{members.lost_overlaps} lost by a fenced member")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "member":
        member(*args)
    elif mode == "membership":
        membership(*args)
    elif mode == "static":
        static(*args)
    elif mode == "regex":
        regex(*args)
    elif mode == "failover":
        failover(*args)
    elif mode == "migration":
        migration(*args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
