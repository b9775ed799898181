"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a
running strom broker.

usage: share_check.py MODE BOOTSTRAP [ARGS...]

Members run as processes of their own (mode `member`), in explicit
acknowledgement mode, and log one line per record, flushed:
  got NAME PARTITION OFFSET DELIVERY_COUNT VALUE_HEX
  ack NAME PARTITION OFFSET TYPE           (after commit_sync confirmed it)
  ack-failed NAME PARTITION OFFSET TYPE    (commit_sync failed for it: it
                                            may or may not have been applied)
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
            try:
                results = consumer.commit_sync(30)
                failed = {tp.partition for tp, error in results.items() if error is not None}
            except Exception as e:  # the whole commit failed (a leader gone)
                log.write(f"error {name} {str(e).replace(' ', '_')}\n")
                failed = {partition for partition, _, _ in acked}
            for partition, offset, kind in acked:
                outcome = "ack-failed" if partition in failed else "ack"
                log.write(f"{outcome} {name} {partition} {offset} {kind}\n")
    consumer.close()
    log.write(f"closed {name}\n")


def lines(path):
    try:
        with open(path) as f:
            return [l.split() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def prepare(bootstrap, topic, replication):
    """The topic, and its share group reading from the earliest record."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if replication > 1 else {}
    for future in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS,
                                                replication_factor=replication,
                                                config=config)]).values():
        future.result(timeout=30)
    group = "share-" + topic
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    return admin, group


def produce(bootstrap, topic, indexes, where):
    """Records `indexes`, acks=all; `where` learns (partition, offset) -> index."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True})
    delivered = []
    for index in indexes:
        producer.produce(topic, value=value_of(index), partition=index % PARTITIONS,
                         on_delivery=lambda err, msg, i=index: delivered.append((i, err, msg.partition(), msg.offset())))
    check(producer.flush(60) == 0, "records not delivered")
    for index, err, partition, offset in delivered:
        check(err is None, f"record {index}: {err}")
        where[(partition, offset)] = index


def start_member(bootstrap, group, topic, name, log_path):
    return subprocess.Popen([sys.executable, __file__, "member", bootstrap, group, topic, name, log_path],
                            stdout=subprocess.DEVNULL, stderr=open(log_path + ".stderr", "a"))


def outcomes(all_lines):
    """Per record: its deliveries' counts, confirmed final acknowledgements
    (accept 1 / reject 3) and the log positions of each, and the final
    acknowledgements that failed (applied or not: unknown)."""
    got, final, failed = {}, {}, {}
    for position, l in enumerate(all_lines):
        if l[0] == "got":
            got.setdefault((int(l[2]), int(l[3])), []).append((position, int(l[4])))
        elif l[0] in ("ack", "ack-failed") and int(l[4]) in (1, 3):
            target = final if l[0] == "ack" else failed
            target.setdefault((int(l[2]), int(l[3])), []).append((position, int(l[4])))
    return got, final, failed


def settled(log_path, where, limit, strict=True):
    """Every record accepted or rejected (or its acknowledgement failed and
    it never came again), and every `9` record delivered for the
    `limit`th time."""
    got, final, failed = outcomes(lines(log_path))
    for key, index in where.items():
        if index % 10 == 9:
            # After a leader's death the last of its deliveries may have
            # been handed out and lost with it: then the member never sees
            # the limit, and only a quiet spell tells it is over.
            if strict and max((c for _, c in got.get(key, [])), default=0) < limit:
                return False, len(final)
        elif key not in final:
            last_failed = max((p for p, _ in failed.get(key, [])), default=None)
            last_got = max((p for p, _ in got.get(key, [])), default=-1)
            if last_failed is None or last_got > last_failed:
                return False, len(final)
    return True, len(final)


def wait_settled(log_path, where, limit, members, strict=True):
    deadline = time.time() + DEADLINE_S
    while True:
        ok, done = settled(log_path, where, limit, strict)
        if ok and not strict:
            # Quiet for three lock durations: nothing more is coming.
            got = len([l for l in lines(log_path) if l[0] == "got"])
            time.sleep(9)
            ok = got == len([l for l in lines(log_path) if l[0] == "got"])
        if ok:
            break
        for m in members:
            check(m.poll() is None, f"a member exited {m.returncode}")
        if time.time() >= deadline:
            got, final, failed = outcomes(lines(log_path))
            open_keys = [k for k, i in where.items() if i % 10 != 9 and k not in final]
            by_partition = {}
            for k in open_keys:
                by_partition.setdefault(k[0], []).append(k[1])
            summary = {p: (len(o), min(o), max(o)) for p, o in by_partition.items()}
            events = [" ".join(l) for l in lines(log_path) if l[0] not in ("got", "ack")]
            try:
                with open(log_path + ".stderr") as f:
                    stderr = f.read()[-4000:]
            except FileNotFoundError:
                stderr = ""
            fail(f"not settled: {done} records done; open by partition (count, first, last): "
                 f"{summary}; first open: "
                 f"{[(k, got.get(k), failed.get(k)) for k in open_keys[:5]]}\n"
                 + "\n".join(events[-60:]) + f"\n--- members' stderr (tail) ---\n{stderr}")
        time.sleep(0.5)
    # Nothing more comes: the archived records stay archived, what was
    # acknowledged is not delivered again.
    time.sleep(2)
    for m in members:
        m.send_signal(signal.SIGTERM)
    for m in members:
        m.wait(60)
        check(m.returncode == 0, f"a member exited {m.returncode}")


def check_outcomes(log_path, where, limit, held, strict=True):
    """Each record's deliveries and acknowledgements as share groups
    promise them; returns (deliveries, acknowledgements that failed)."""
    all_lines = lines(log_path)
    got, final, failed = outcomes(all_lines)
    for l in all_lines:
        if l[0] == "got":
            key = (int(l[2]), int(l[3]))
            check(key in where, f"{key} was never produced")
            check(bytes.fromhex(l[5]) == value_of(where[key]), f"{key}: value differs")
    unknown = 0
    for key, index in where.items():
        counts = [c for _, c in got.get(key, [])]
        check(counts == sorted(counts) and len(set(counts)) == len(counts),
              f"record {index}: delivery counts {counts} do not rise")
        accepted = [p for p, kind in final.get(key, []) if kind == 1]
        # Acknowledged means kept: never delivered after a confirmed accept or reject.
        confirmed = min((p for p, _ in final.get(key, [])), default=None)
        if confirmed is not None:
            later = [c for p, c in got.get(key, []) if p > confirmed]
            check(not later, f"record {index} delivered again {later} after it was acknowledged")
        if index % 10 in (7, 9):
            check(not accepted, f"record {index} accepted")
        elif len(accepted) != 1:
            # Its accept failed and it never came again: applied before
            # the failure was seen.
            check(not accepted and key in failed, f"record {index} accepted {len(accepted)} times")
            unknown += 1
        if index % 10 == 9:
            # A delivery handed out by a leader that died before its
            # answer left counts too: then fewer reach the member.
            if strict:
                check(len(counts) == limit and max(counts) == limit,
                      f"record {index} delivered {counts}, the limit is {limit}")
            else:
                check(counts and max(counts) <= limit,
                      f"record {index} delivered {counts}, the limit is {limit}")
        if index % 10 == 3:
            check(len(counts) >= 2 or (not strict and max(counts) >= 2),
                  f"record {index} released once, delivered {counts}")
    for key in held:
        counts = [c for _, c in got[key]]
        check(len(counts) >= 2 and counts[0] == 1,
              f"record {where[key]} held by the killed member: deliveries {counts}")
    return sum(len(c) for c in got.values()), unknown


def queue(bootstrap, topic, log_path, limit):
    limit = int(limit)
    _, group = prepare(bootstrap, topic, 1)
    where = {}
    count = 300
    produce(bootstrap, topic, range(count), where)
    # A member that acquires records and dies holding them.
    holder = start_member(bootstrap, group, topic, "hold1", log_path)
    deadline = time.time() + DEADLINE_S
    while not any(l[0] == "holding" for l in lines(log_path)):
        check(time.time() < deadline, "the holding member got no records")
        time.sleep(0.1)
    holder.kill()
    holder.wait(30)
    held = {(int(l[2]), int(l[3])) for l in lines(log_path) if l[0] == "got" and l[1] == "hold1"}
    members = [start_member(bootstrap, group, topic, f"s{i}", log_path) for i in range(3)]
    wait_settled(log_path, where, limit, members)
    deliveries, _ = check_outcomes(log_path, where, limit, held)
    print(f"queue: ok {count} records, {len(held)} held by a killed member and redelivered, "
          f"{deliveries} deliveries, "
          f"{sum(1 for i in where.values() if i % 10 == 9)} archived at the limit of {limit}")


def failover(bootstrap, topic, log_path, signal_dir, limit, kill_partition="0"):
    """Three members on a replicated topic; once they have acknowledged
    some records, the test kills (SIGKILL) the leader of partition
    `kill_partition` (0 by default), or with `coordinator` the group's
    coordinator (named in `kill` here; the test writes `killed`), more
    records come,
    and the members go on: no acknowledged record delivered again, every
    record acquired but not acknowledged delivered again, each accepted
    once."""
    limit = int(limit)
    _, group = prepare(bootstrap, topic, 3)
    where = {}
    produce(bootstrap, topic, range(300), where)
    members = [start_member(bootstrap, group, topic, f"s{i}", log_path) for i in range(3)]
    deadline = time.time() + DEADLINE_S
    while sum(1 for l in lines(log_path) if l[0] == "ack") < 60:
        check(time.time() < deadline, "no acknowledgements")
        for m in members:
            check(m.poll() is None, f"a member exited {m.returncode}")
        time.sleep(0.1)
    if kill_partition == "coordinator":
        victim = "coordinator"
    else:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        leader = admin.list_topics(topic, timeout=30).topics[topic].partitions[int(kill_partition)].leader
        victim = f"leader {leader}"
    with open(os.path.join(signal_dir, "kill.tmp"), "w") as f:
        f.write(victim.split(" ")[-1])
    os.rename(os.path.join(signal_dir, "kill.tmp"), os.path.join(signal_dir, "kill"))
    while not os.path.exists(os.path.join(signal_dir, "killed")):
        check(time.time() < deadline, "the leader was not killed")
        time.sleep(0.1)
    produce(bootstrap, topic, range(300, 450), where)
    wait_settled(log_path, where, limit, members, strict=False)
    deliveries, unknown = check_outcomes(log_path, where, limit, set(), strict=False)
    redelivered = sum(1 for l in lines(log_path) if l[0] == "got" and int(l[4]) > 1)
    print(f"failover: ok {len(where)} records, {victim} killed, {deliveries} deliveries, "
          f"{redelivered} redeliveries, {unknown} accepted when the answer was lost")


def drain(bootstrap, group, topic, count):
    """One ShareConsumer (implicit acknowledgement) until it has `count`
    distinct records, each checked byte for byte."""
    count = int(count)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    consumer.subscribe([topic])
    seen = set()
    deadline = time.time() + DEADLINE_S
    while len(seen) < count:
        check(time.time() < deadline, f"drained {len(seen)} of {count}")
        for m in consumer.poll(0.5) or []:
            if m.error():
                continue
            index = int(m.value().split(b"/")[0])
            check(m.value() == value_of(index), f"{m.partition()}@{m.offset()}: value differs")
            seen.add((m.partition(), m.offset()))
        consumer.commit_sync(30)
    consumer.close()
    print(f"drain: ok {len(seen)} records")


def close_releases(bootstrap, group, topic):
    """A member that closes its consumer holding records (never
    acknowledged) gives them back at once: another member gets them
    again, delivery count 2, long before their locks (the group's
    `share.record.lock.duration.ms`, 60 s) would have ended."""
    holder = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "share.acknowledgement.mode": "explicit"})
    holder.subscribe([topic])
    held = set()
    deadline = time.time() + DEADLINE_S
    while not held:
        check(time.time() < deadline, "the holder got no records")
        held = {(m.partition(), m.offset()) for m in holder.poll(0.5) or [] if not m.error()}
    holder.close()
    closed = time.time()
    other = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    other.subscribe([topic])
    again = {}
    while not held <= set(again):
        check(time.time() < closed + 20,
              f"{len(held - set(again))} of the {len(held)} held records not delivered again "
              f"within 20 s of the close")
        for m in other.poll(0.5) or []:
            if not m.error():
                again[(m.partition(), m.offset())] = m.delivery_count()
        other.commit_sync(30)
    other.close()
    counts = {again[k] for k in held}
    check(counts == {2}, f"held records came again with delivery counts {counts}")
    print(f"close: ok {len(held)} records given back at the close, "
          f"again after {time.time() - closed:.1f} s")


def committed_only(bootstrap, topic):
    """A share group with `share.isolation.level=read_committed` gets the
    records of committed transactions only: never those of an aborted one,
    those of an open one once it commits. A read_uncommitted group gets
    them all (what the check tells apart is in the log)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=1,
                                                replication_factor=1)]).values():
        future.result(timeout=30)
    for group, level in (("committed-" + topic, "read_committed"),
                         ("uncommitted-" + topic, "read_uncommitted")):
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest",
                        incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("share.isolation.level", level,
                        incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "share-" + topic})
    producer.init_transactions(30)

    def value(kind, i):
        return f"{kind}/{i}/".encode() + bytes((i * 13 + j) % 256 for j in range(i % 40))

    def transaction(kind, count, end):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(topic, value=value(kind, i), partition=0)
        check(producer.flush(30) == 0, f"{kind} records not delivered")
        if end == "commit":
            producer.commit_transaction(30)
        elif end == "abort":
            producer.abort_transaction(30)

    transaction("first", 20, "commit")
    transaction("aborted", 10, "abort")
    transaction("second", 20, "commit")
    transaction("open", 5, None)
    expected = {value("first", i) for i in range(20)} | {value("second", i) for i in range(20)}
    everything = expected | {value("aborted", i) for i in range(10)} | \
        {value("open", i) for i in range(5)}

    def consume(group, until, settle_s):
        consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        consumer.subscribe([topic])
        got = []
        deadline = time.time() + DEADLINE_S
        quiet_until = None
        while quiet_until is None or time.time() < quiet_until:
            check(time.time() < deadline, f"{group}: {len(got)} records, wanted {len(until)}")
            for m in consumer.poll(0.5) or []:
                if not m.error():
                    got.append(m.value())
            consumer.commit_sync(30)
            if quiet_until is None and until <= set(got):
                quiet_until = time.time() + settle_s
        return consumer, got

    committed, got = consume("committed-" + topic, expected, 3)
    check(len(got) == len(set(got)), "a record delivered twice")
    check(set(got) == expected,
          f"read_committed delivered {len(set(got) - expected)} records not committed and "
          f"missed {len(expected - set(got))}")
    uncommitted, seen = consume("uncommitted-" + topic, everything, 1)
    check(set(seen) == everything, "read_uncommitted did not deliver every record")
    uncommitted.close()
    # The open transaction commits: its records come now.
    producer.commit_transaction(30)
    opened = {value("open", i) for i in range(5)}
    more = []
    deadline = time.time() + DEADLINE_S
    while not opened <= set(more):
        check(time.time() < deadline, f"{len(more)} of the 5 records committed last delivered")
        more.extend(m.value() for m in committed.poll(0.5) or [] if not m.error())
        committed.commit_sync(30)
    check(set(more) == opened, f"{len(set(more) - opened)} other records delivered")
    committed.close()
    print(f"committed: ok {len(got)} committed records, {len(seen)} read uncommitted, "
          f"{len(more)} after the last commit")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "member":
        member(*args)
    elif mode == "queue":
        queue(*args)
    elif mode == "failover":
        failover(*args)
    elif mode == "drain":
        drain(*args)
    elif mode == "close":
        close_releases(*args)
    elif mode == "committed":
        committed_only(*args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
