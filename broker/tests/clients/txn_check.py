"""Transactions through confluent-kafka (librdkafka's transactional
producer and read_committed consumers).

usage: txn_check.py BOOTSTRAP CASE [ARGS]
CASE:
  commit-abort TOPICS PARTITIONS [RF]  a transactional producer commits one
        transaction over every partition of TOPICS topics, aborts a second,
        commits a third; a read_committed consumer reads each committed
        record exactly once and no aborted one, a read_uncommitted consumer
        reads both (markers skipped); every byte checked
  offsets  consume-transform-produce: a group consumer reads `in`, the
        transactional producer writes `out` and commits the consumer's
        offsets in the transaction (send_offsets_to_transaction); an
        aborted transaction's offsets and records never show
  fence  a second producer with the same transactional id fences the
        first: the first's writes and commit fail and never show
  hang TXN_ID  opens a transaction on `hang`, writes to it and exits
        without ending it (os._exit), as a killed producer would
  unblocked  waits until a read_committed consumer of `hang` reaches the
        end (the coordinator aborted the open transaction after its
        timeout) and checks that nothing of it is visible
  loop TXNS PARTITIONS STATE  on `loop` (created with replication factor
        3 and min.insync.replicas 2), TXNS transactions of 10 records
        each over PARTITIONS partitions, each tried until it commits
        (aborted and tried again after an abortable error, the producer
        made anew after a fatal one) while the test kills brokers; STATE
        gets what was acknowledged and which attempts ended unknown
  verify-loop STATE PARTITIONS  every attempt is visible to read_committed
        whole or not at all, every acknowledged one is, and one attempt
        per transaction is, unless an earlier one ended unknown
  compacted-produce STATE  on the compacted topic `txn-compacted`, one
        transactional producer alternately commits and aborts rounds over
        the same 20 keys (the last committed round over half of them),
        then a plain record rolls the segment; STATE gets the latest
        committed value of every key
  compacted-check STATE  after the cleaner ran: read_uncommitted and
        read_committed consumers both see exactly the latest committed
        record of every key (aborted records are gone from the log, not
        only hidden); `__transaction_state` is compacted
  compacted-more STATE  the same transactional id commits one more round
        over every key, and read_committed sees all of it (no aborted
        transaction whose marker the cleaner removed hides the producer's
        later records)
Prints "<case>: ok ..." lines; exits non-zero at the first miss. Every
wait is bounded by a deadline.
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from checks import check, create_topics, fail, read_to_end

DEADLINE_S = 120


def producer(bootstrap, txn_id, **extra):
    config = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "transaction.timeout.ms": 60000,
    }
    config.update(extra)
    p = Producer(config)
    p.init_transactions(DEADLINE_S)
    return p


def read_all(bootstrap, topic, partitions, isolation):
    """Every record of the topic's partitions from the start to the end
    visible under `isolation`, as (partition, offset, key, value)."""
    return [(msg.partition(), msg.offset(), msg.key(), msg.value())
            for msg in read_to_end(bootstrap, [topic], partitions, isolation, "txn-read", DEADLINE_S)]


def payloads(records):
    return sorted((k, v) for _, _, k, v in records)


def commit_abort(bootstrap, topics, partitions, replication):
    names = [f"txn-{i}" for i in range(topics)]
    create_topics(bootstrap, names, partitions, replication, DEADLINE_S)
    p = producer(bootstrap, "txn-commit-abort")
    expected_committed = {n: [] for n in names}
    expected_aborted = {n: [] for n in names}
    for round_name, commit in (("first", True), ("second", False), ("third", True)):
        p.begin_transaction()
        for n in names:
            for part in range(partitions):
                for i in range(25):
                    key = f"{round_name}-{part}-{i}".encode()
                    value = os.urandom(16) + key
                    p.produce(n, key=key, value=value, partition=part)
                    (expected_committed if commit else expected_aborted)[n].append((key, value))
        if commit:
            p.commit_transaction(DEADLINE_S)
        else:
            p.flush(DEADLINE_S)
            p.abort_transaction(DEADLINE_S)
    for n in names:
        committed = read_all(bootstrap, n, partitions, "read_committed")
        check(payloads(committed) == sorted(expected_committed[n]),
              f"{n}: read_committed saw {len(committed)} records, want the {len(expected_committed[n])} committed ones exactly once")
        everything = read_all(bootstrap, n, partitions, "read_uncommitted")
        want = sorted(expected_committed[n] + expected_aborted[n])
        check(payloads(everything) == want,
              f"{n}: read_uncommitted saw {len(everything)} records, want {len(want)}")
    print(f"commit-abort: ok {topics} topics x {partitions} partitions, "
          f"{sum(len(v) for v in expected_committed.values())} committed, "
          f"{sum(len(v) for v in expected_aborted.values())} aborted")


def committed_offset(bootstrap, group, topic, partition):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, partition)], timeout=30)
        return tp.offset
    finally:
        c.close()


def offsets(bootstrap):
    create_topics(bootstrap, ["in", "out"], 1, deadline_s=DEADLINE_S)
    src = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        src.produce("in", key=str(i).encode(), value=f"v{i}".encode())
    check(src.flush(DEADLINE_S) == 0, "offsets: input not delivered")
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "txn-app",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
    })
    consumer.subscribe(["in"])
    p = producer(bootstrap, "txn-app-producer")
    seen = []
    deadline = time.time() + DEADLINE_S
    while len(seen) < 100:
        check(time.time() < deadline, f"offsets: read {len(seen)} of 100 inputs")
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        seen.append(msg)
    # First 50 in a transaction that aborts, then all 100 in one that commits.
    for commit, batch in ((False, seen[:50]), (True, seen)):
        p.begin_transaction()
        for msg in batch:
            p.produce("out", key=msg.key(), value=b"out-" + msg.value())
        last = batch[-1]
        p.send_offsets_to_transaction(
            [TopicPartition("in", 0, last.offset() + 1)],
            consumer.consumer_group_metadata(), DEADLINE_S)
        if commit:
            p.commit_transaction(DEADLINE_S)
        else:
            p.flush(DEADLINE_S)
            p.abort_transaction(DEADLINE_S)
            got = committed_offset(bootstrap, "txn-app-probe", "in", 0)
            check(got < 0, f"offsets: probe group has offset {got}")
    consumer.close()
    got = committed_offset(bootstrap, "txn-app", "in", 0)
    check(got == 100, f"offsets: the group's committed offset is {got}, want 100")
    out = read_all(bootstrap, "out", 1, "read_committed")
    want = sorted((str(i).encode(), f"out-v{i}".encode()) for i in range(100))
    check(payloads(out) == want, f"offsets: out holds {len(out)} records, want the 100 committed once")
    print("offsets: ok 100 records and the group's offset committed in one transaction, the aborted one invisible")


def fence(bootstrap):
    create_topics(bootstrap, ["fenced"], 1, deadline_s=DEADLINE_S)
    first = producer(bootstrap, "txn-fence")
    first.begin_transaction()
    first.produce("fenced", key=b"zombie", value=b"never-visible")
    check(first.flush(DEADLINE_S) == 0, "fence: first write not delivered")
    second = producer(bootstrap, "txn-fence")
    second.begin_transaction()
    second.produce("fenced", key=b"live", value=b"visible")
    second.commit_transaction(DEADLINE_S)
    failed = None
    try:
        first.produce("fenced", key=b"zombie", value=b"after-fence")
        first.commit_transaction(DEADLINE_S)
    except KafkaException as e:
        failed = e.args[0]
    check(failed is not None, "fence: the fenced producer committed")
    check(failed.fatal() or failed.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                               KafkaError.INVALID_PRODUCER_EPOCH),
          f"fence: the fenced producer failed with {failed}, not a fencing error")
    seen = payloads(read_all(bootstrap, "fenced", 1, "read_committed"))
    check(seen == [(b"live", b"visible")], f"fence: read_committed saw {seen}")
    print(f"fence: ok the first producer failed with {failed.name()}, only the second's record visible")


def hang(bootstrap, txn_id):
    create_topics(bootstrap, ["hang"], 1, deadline_s=DEADLINE_S)
    p = producer(bootstrap, txn_id, **{"transaction.timeout.ms": 5000})
    p.begin_transaction()
    p.produce("hang", key=b"open", value=b"left-open")
    check(p.flush(DEADLINE_S) == 0, "hang: write not delivered")
    print("hang: ok a transaction left open", flush=True)
    os._exit(0)


def unblocked(bootstrap):
    src = Producer({"bootstrap.servers": bootstrap})
    src.produce("hang", key=b"after", value=b"plain")
    check(src.flush(DEADLINE_S) == 0, "unblocked: write not delivered")
    # The open transaction holds the last stable offset back until the
    # coordinator aborts it (its 5 s timeout, then the abort check).
    deadline = time.time() + DEADLINE_S
    while True:
        seen = payloads(read_all(bootstrap, "hang", 1, "read_committed"))
        if seen:
            break
        check(time.time() < deadline, "unblocked: the open transaction was never aborted")
        time.sleep(0.5)
    check(seen == [(b"after", b"plain")], f"unblocked: read_committed saw {seen}")
    print("unblocked: ok the open transaction was aborted, the record after it visible")


def loop(bootstrap, txns, partitions, state):
    import json
    create_topics(bootstrap, ["loop"], partitions, 3, DEADLINE_S, exists_ok=False)
    acked, unknown = [], []
    p = producer(bootstrap, "txn-loop", **{"transaction.timeout.ms": 10000})
    deadline = time.time() + 600
    for txn in range(txns):
        attempt = 0
        while True:
            check(time.time() < deadline, f"loop: transaction {txn} not committed in time")
            name = f"{txn}.{attempt}"
            try:
                p.begin_transaction()
                for j in range(10):
                    p.produce("loop", key=f"{name}/{j}".encode(), value=name.encode() + os.urandom(8),
                              partition=j % partitions)
                p.commit_transaction(60)
                acked.append(name)
                with open(state + ".progress", "w") as f:
                    f.write(str(len(acked)))
                break
            except KafkaException as e:
                error = e.args[0]
                unknown.append(name)
                attempt += 1
                if error.fatal():
                    p = producer(bootstrap, "txn-loop", **{"transaction.timeout.ms": 10000})
                elif error.txn_requires_abort():
                    try:
                        p.abort_transaction(60)
                    except KafkaException:
                        p = producer(bootstrap, "txn-loop", **{"transaction.timeout.ms": 10000})
                else:
                    time.sleep(0.2)
                    try:
                        p.abort_transaction(60)
                    except KafkaException:
                        p = producer(bootstrap, "txn-loop", **{"transaction.timeout.ms": 10000})
    with open(state, "w") as f:
        json.dump({"acked": acked, "unknown": unknown}, f)
    print(f"loop: ok {len(acked)} transactions committed, {len(unknown)} attempts failed and tried again")


def verify_loop(bootstrap, state, partitions):
    import json
    with open(state) as f:
        saved = json.load(f)
    records = read_all(bootstrap, "loop", partitions, "read_committed")
    by_attempt = {}
    for _, _, key, value in records:
        name, j = key.decode().split("/")
        check(value.startswith(name.encode()), f"verify-loop: record {key} holds {value}")
        by_attempt.setdefault(name, []).append(int(j))
    for name, js in by_attempt.items():
        check(sorted(js) == list(range(10)), f"verify-loop: attempt {name} visible in part: {sorted(js)}")
    for name in saved["acked"]:
        check(name in by_attempt, f"verify-loop: acknowledged transaction {name} is not visible")
    by_txn = {}
    for name in by_attempt:
        by_txn.setdefault(name.split(".")[0], []).append(name)
    unknown = set(saved["unknown"])
    for txn, names in by_txn.items():
        if len(names) > 1:
            extra = sorted(names)[:-1]
            check(all(n in unknown for n in extra), f"verify-loop: transaction {txn} visible {len(names)} times: {names}")
    print(f"verify-loop: ok {len(by_attempt)} attempts visible whole, {len(saved['acked'])} acknowledged all visible")


COMPACTED = "txn-compacted"
COMPACTED_SEGMENT_MS = 2000
COMPACTED_KEYS = 20


def compacted_produce(bootstrap, state_path):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {
        "cleanup.policy": "compact",
        "segment.ms": str(COMPACTED_SEGMENT_MS),
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "1000",
    }
    admin.create_topics([NewTopic(COMPACTED, 1, 1, config=config)])[COMPACTED].result(DEADLINE_S)
    p = producer(bootstrap, "compactor")
    latest, aborted = {}, 0
    for round_ in range(7):
        keys = range(COMPACTED_KEYS if round_ < 6 else COMPACTED_KEYS // 2)
        values = {f"key-{k}": f"round {round_} key {k} " + "v" * k for k in keys}
        p.begin_transaction()
        for key, value in values.items():
            p.produce(COMPACTED, key=key.encode(), value=value.encode(), partition=0)
        if round_ % 2 == 0:
            p.commit_transaction(DEADLINE_S)
            latest.update(values)
        else:
            p.flush(DEADLINE_S)
            p.abort_transaction(DEADLINE_S)
            aborted += len(values)
    # segment.ms later, a plain record rolls the segment holding the rest.
    time.sleep(COMPACTED_SEGMENT_MS / 1000 + 0.5)
    plain = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    offsets = []
    plain.produce(COMPACTED, key=b"sentinel", value=b"roll", partition=0,
                  on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else err))
    plain.flush(DEADLINE_S)
    check(len(offsets) == 1 and isinstance(offsets[0], int), f"compacted-produce: sentinel {offsets}")
    latest["sentinel"] = "roll"
    with open(state_path, "w") as f:
        json.dump(latest, f)
    print(f"compacted-produce: ok {len(latest) - 1} keys committed, {aborted} records aborted, "
          f"sentinel at {offsets[0]}")


def compacted_visible(bootstrap, isolation):
    seen = {}
    for _, offset, key, value in read_all(bootstrap, COMPACTED, 1, isolation):
        key = key.decode()
        check(key not in seen, f"compacted ({isolation}): {key} twice (at {offset})")
        seen[key] = value.decode()
    return seen


def compacted_check(bootstrap, state_path):
    with open(state_path) as f:
        latest = json.load(f)
    for isolation in ["read_uncommitted", "read_committed"]:
        seen = compacted_visible(bootstrap, isolation)
        check(seen == latest,
              f"compacted-check ({isolation}): got {sorted(seen.items())[:4]}..., "
              f"want {sorted(latest.items())[:4]}... ({len(seen)} vs {len(latest)} keys)")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__transaction_state")
    configs = admin.describe_configs([resource])[resource].result(DEADLINE_S)
    policy = configs["cleanup.policy"].value
    check(policy == "compact", f"compacted-check: __transaction_state cleanup.policy {policy}")
    print(f"compacted-check: ok {len(latest)} keys, the latest committed value of each only")


def compacted_more(bootstrap, state_path):
    with open(state_path) as f:
        latest = json.load(f)
    p = producer(bootstrap, "compactor")
    values = {f"key-{k}": f"round 7 key {k}" for k in range(COMPACTED_KEYS)}
    p.begin_transaction()
    for key, value in values.items():
        p.produce(COMPACTED, key=key.encode(), value=value.encode(), partition=0)
    p.commit_transaction(DEADLINE_S)
    latest.update(values)
    # Uncleaned yet: the earlier records of the keys are there too, but
    # the last of each key is the new round.
    last = {}
    for _, _, key, value in read_all(bootstrap, COMPACTED, 1, "read_committed"):
        last[key.decode()] = value.decode()
    check(last == latest, f"compacted-more: got {sorted(last.items())[:4]}..., want {sorted(latest.items())[:4]}...")
    print(f"compacted-more: ok {len(values)} records of a new transaction visible")


def main():
    bootstrap, case = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    if case == "commit-abort":
        commit_abort(bootstrap, int(args[0]), int(args[1]), int(args[2]) if len(args) > 2 else 1)
    elif case == "offsets":
        offsets(bootstrap)
    elif case == "fence":
        fence(bootstrap)
    elif case == "hang":
        hang(bootstrap, args[0])
    elif case == "unblocked":
        unblocked(bootstrap)
    elif case == "loop":
        loop(bootstrap, int(args[0]), int(args[1]), args[2])
    elif case == "verify-loop":
        verify_loop(bootstrap, args[0], int(args[1]))
    elif case == "compacted-produce":
        compacted_produce(bootstrap, args[0])
    elif case == "compacted-check":
        compacted_check(bootstrap, args[0])
    elif case == "compacted-more":
        compacted_more(bootstrap, args[0])
    else:
        fail(f"unknown case {case}")


if __name__ == "__main__":
    main()
