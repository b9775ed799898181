"""Rebalance time of a consumer group as 10 members join one by one and
then leave one by one: KIP-848's consumer protocol against the classic
protocol (eager `range`, librdkafka's default, and `cooperative-sticky`),
in the same run, on a release-built `strom` broker started here.

Each round measures, for every protocol in a rotating order, on a fresh
broker and a fresh topic of PARTITIONS partitions:

  join   a member subscribes; the clock runs until the group is settled
         again: every partition owned by exactly one live member and every
         live member owning at least one
  leave  a member closes (leaving the group); the same clock

Members are confluent-kafka consumers, each on a thread of its own,
polling every 50 ms; what they own is what their assign and revoke
callbacks said. The bounds are set alike: the classic members heartbeat
every 500 ms (`heartbeat.interval.ms`) and the broker starts a classic
rebalance without delay (`group.initial.rebalance.delay.ms=0`); the
consumer protocol's members are told to heartbeat every 500 ms
(`group.consumer.heartbeat.interval.ms`). The machine's own limit for
these figures is the heartbeat interval (a change is seen at the next
heartbeat) and the broker's request round trip, measured here with
ApiVersions.

Also counts, per protocol, partition-seconds without an owner ("gap"):
summed over the partitions, how long each had no live owner while the
group settled (eager rebalances revoke everything; the consumer protocol
moves only what it must).

Prints one line per round and protocol, a table of medians, and one
machine-readable line `rebalance-bench-summary: {json}`.

usage: python3 benches/rebalance.py [--rounds 3] [--members 10]
       [--partitions 20] [--dir target/rebalance-bench]
       [--strom target/release/strom]
"""

import argparse
import json
import os
import shutil
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transactions import Node, free_ports, median, START_DEADLINE_S  # noqa: E402

from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

SETTLE_DEADLINE_S = 120
HEARTBEAT_MS = 500
PROTOCOLS = ["consumer", "classic-eager", "classic-cooperative"]


class Member(threading.Thread):
    def __init__(self, group, bootstrap, protocol, topic, name, board):
        super().__init__(daemon=True)
        self.board, self.name = board, name
        config = {"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False}
        if protocol == "consumer":
            config["group.protocol"] = "consumer"
        else:
            config["heartbeat.interval.ms"] = HEARTBEAT_MS
            config["session.timeout.ms"] = 10_000
            config["partition.assignment.strategy"] = (
                "cooperative-sticky" if protocol == "classic-cooperative" else "range")
        self.consumer = Consumer(config)
        self.topic = topic
        self.stopping = threading.Event()
        self.closed = threading.Event()

    def run(self):
        def on_assign(consumer, partitions):
            self.board.change(self.name, {p.partition for p in partitions}, add=True)

        def on_revoke(consumer, partitions):
            self.board.change(self.name, {p.partition for p in partitions}, add=False)

        self.consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                                on_lost=on_revoke)
        while not self.stopping.is_set():
            self.consumer.consume(100, timeout=0.05)
        self.consumer.close()
        self.board.gone(self.name)
        self.closed.set()


class Board:
    """Who owns what, from the members' callbacks; and the unowned
    partition-seconds while unsettled."""

    def __init__(self, partitions):
        self.lock = threading.Lock()
        self.partitions = partitions
        self.owned = {}
        self.live = set()
        self.gap = 0.0
        self.last = time.monotonic()

    def _account(self):
        now = time.monotonic()
        owned = set().union(*self.owned.values()) if self.owned else set()
        self.gap += (self.partitions - len(owned & set(range(self.partitions)))) * (now - self.last)
        self.last = now

    def change(self, name, partitions, add):
        with self.lock:
            self._account()
            mine = self.owned.setdefault(name, set())
            if add:
                mine |= partitions
            else:
                mine -= partitions

    def gone(self, name):
        with self.lock:
            self._account()
            self.owned.pop(name, None)

    def settled(self):
        with self.lock:
            self._account()
            owners = [self.owned.get(n, set()) for n in self.live]
            if any(not o for o in owners):
                return False
            union = set()
            for o in owners:
                if union & o:
                    return False
                union |= o
            return union == set(range(self.partitions))


def wait_settled(board, what):
    start = time.monotonic()
    while not board.settled():
        if time.monotonic() - start > SETTLE_DEADLINE_S:
            raise SystemExit(f"rebalance: {what} did not settle within {SETTLE_DEADLINE_S} s: {board.owned}")
        time.sleep(0.01)
    return time.monotonic() - start


def round_trip_ms(port):
    """Median ApiVersions v0 round trip to the broker, in ms."""
    times = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        for i in range(50):
            body = struct.pack(">hhih", 18, 0, i, 0)
            start = time.monotonic()
            s.sendall(struct.pack(">i", len(body)) + body)
            size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
            s.recv(size, socket.MSG_WAITALL)
            times.append((time.monotonic() - start) * 1000)
    return median(times)


def run_case(strom, dir, protocol, members, partitions):
    client_port, admin_port = free_ports(2)
    node = Node(strom, dir, ["--set", "group.initial.rebalance.delay.ms=0",
                             "--set", f"group.consumer.heartbeat.interval.ms={HEARTBEAT_MS}",
                             "--set", f"group.consumer.min.heartbeat.interval.ms={HEARTBEAT_MS}"],
                client_port, admin_port)
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while not node.ready():
            if time.monotonic() > deadline:
                raise SystemExit(f"rebalance: the broker did not start:\n{node.log_tail()}")
            time.sleep(0.1)
        bootstrap = f"127.0.0.1:{client_port}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("rebalance", num_partitions=partitions,
                                      replication_factor=1)])["rebalance"].result(30)
        rtt = round_trip_ms(client_port)
        board = Board(partitions)
        threads = []
        joins, leaves = [], []
        for i in range(members):
            member = Member("bench", bootstrap, protocol, "rebalance", f"m{i}", board)
            with board.lock:
                board.live.add(member.name)
            member.start()
            threads.append(member)
            joins.append(wait_settled(board, f"{protocol} join {i}"))
        while len(threads) > 1:
            member = threads.pop()
            with board.lock:
                board.live.discard(member.name)
            member.stopping.set()
            leaves.append(wait_settled(board, f"{protocol} leave"))
        for member in threads:
            member.stopping.set()
        for member in threads:
            member.closed.wait(30)
        return {"join_s": median(joins), "leave_s": median(leaves), "gap_partition_s": board.gap,
                "rtt_ms": rtt}
    finally:
        node.stop()
        shutil.rmtree(dir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=20)
    parser.add_argument("--dir", default="target/rebalance-bench")
    parser.add_argument("--strom", default="target/release/strom")
    args = parser.parse_args()
    if args.members < 2 or args.partitions < args.members:
        raise SystemExit("rebalance: needs at least 2 members and a partition per member")
    results = {p: [] for p in PROTOCOLS}
    for round_index in range(args.rounds):
        order = PROTOCOLS[round_index % 3:] + PROTOCOLS[:round_index % 3]
        for protocol in order:
            case = run_case(args.strom, os.path.join(args.dir, protocol), protocol,
                            args.members, args.partitions)
            results[protocol].append(case)
            print(f"round {round_index + 1} {protocol}: join {case['join_s']:.2f} s, "
                  f"leave {case['leave_s']:.2f} s, gap {case['gap_partition_s']:.1f} partition-s, "
                  f"round trip {case['rtt_ms']:.2f} ms", flush=True)
    summary = {}
    print("\n| protocol | join to settled (s) | leave to settled (s) | unowned partition-s | round trip (ms) |")
    print("|---|---|---|---|---|")
    for protocol in PROTOCOLS:
        cases = results[protocol]
        row = {key: median([c[key] for c in cases]) for key in cases[0]}
        summary[protocol] = row
        print(f"| {protocol} | {row['join_s']:.2f} | {row['leave_s']:.2f} | "
              f"{row['gap_partition_s']:.1f} | {row['rtt_ms']:.2f} |")
    print("rebalance-bench-summary: " + json.dumps(summary))


if __name__ == "__main__":
    main()
