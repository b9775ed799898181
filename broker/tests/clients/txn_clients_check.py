"""Transactions through kafka-python's and aiokafka's own transactional
producers and consumers (confluent-kafka creates the topics and reads
along as a second, independent consumer).

usage: txn_clients_check.py BOOTSTRAP MODE RF
MODE: kafka-python or aiokafka.

Creates two topics of four partitions with replication factor RF, then the
client's transactional producer runs ten transactions over all eight
partitions, committing the even ones and aborting the odd ones. The first
three also send a group's offsets to the transaction (commit, abort,
commit), the fourth (aborted) a second group's; after each, OffsetFetch
(confluent-kafka's `committed`) shows the last committed transaction's
offsets of the first group and none of the second. Then
confluent-kafka's consumer and the client's own consumer read every
partition from its start: read_committed, each committed record exactly
once and no aborted one; read_uncommitted, both; every key, value and
partition byte-exact, and each partition's end past its records by
exactly one control marker per transaction, none of them read as a
record.

Prints "<MODE>: ok N committed, M aborted" (N and M counting records)
only when every check passed; exits non-zero with a FAIL line at the
first miss. Every wait is bounded: each client call by its own deadline,
the whole script by SCRIPT_DEADLINE_S. TXN_CLIENTS_DEBUG=1 turns on the
clients' debug logs (on stderr).
"""

import asyncio
import faulthandler
import hashlib
import logging
import os
import sys
import threading
import time
import traceback

from confluent_kafka import Consumer, KafkaException, TopicPartition
from checks import check, create_topics, fail, read_to_end

# One client call (a commit, a flush, a read of all partitions).
CALL_DEADLINE_S = 120
# The whole script, a backstop behind the per-call deadlines.
SCRIPT_DEADLINE_S = 600

PARTITIONS = 4
TRANSACTIONS = 10
RECORDS_PER_PARTITION = 5
# The transactions that send consumer offsets: the kept group's in a
# commit, an abort and a commit, the dropped group's in the abort after.
# One group per transaction: aiokafka 0.14 sends AddOffsetsToTxn for the
# first group of a transaction only, and commits a second group's offsets
# without it.
KEPT_GROUP_TRANSACTIONS = (0, 1, 2)
DROPPED_GROUP_TRANSACTION = 3
OFFSET_TRANSACTIONS = DROPPED_GROUP_TRANSACTION + 1


def topic_names(mode):
    return [f"txn-{mode}-a", f"txn-{mode}-b"]


def committed_txn(txn):
    return txn % 2 == 0


def record(mode, txn, n):
    """Record n of transaction txn: (topic, partition, key, value). Every
    transaction writes RECORDS_PER_PARTITION records to each partition of
    both topics; the value holds bytes of every kind (0x00, 0xff, not
    UTF-8) and its length varies."""
    topics = topic_names(mode)
    topic = topics[n % len(topics)]
    partition = (n // len(topics)) % PARTITIONS
    key = f"t{txn}-{n}".encode()
    digest = hashlib.sha256(f"{mode}/{txn}/{n}".encode()).digest()
    value = bytes([0x00, 0xff, n & 0xff, txn & 0xff]) + digest * (1 + n % 3) + key
    return topic, partition, key, value


def records_of(mode, txn):
    per_txn = len(topic_names(mode)) * PARTITIONS * RECORDS_PER_PARTITION
    return [record(mode, txn, n) for n in range(per_txn)]


def offsets_of(txn, partition):
    """The offset a transaction commits for the kept group."""
    return 1000 * (txn + 1) + partition


def dropped_offset(partition):
    return 7000 + partition


def within(what, fn, seconds=CALL_DEADLINE_S):
    """Runs a blocking client call that takes no timeout of its own;
    fails when it does not return within `seconds`."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller below
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        print(f"FAIL: {what}: no answer within {seconds} s", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr)
        os._exit(1)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def committed_offsets(bootstrap, group, topic):
    """OffsetFetch of the group for the topic's partitions, through
    confluent-kafka; -1001 (OFFSET_INVALID) where nothing is committed."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        tps = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=CALL_DEADLINE_S)
    except KafkaException as e:
        # librdkafka asks for stable offsets and retries UNSTABLE_OFFSET_COMMIT
        # until its timeout: a transaction's offsets never settled.
        fail(f"OffsetFetch {group} {topic}: {e}")
    finally:
        c.close()
    for tp in tps:
        check(tp.error is None, f"OffsetFetch {group} {topic}-{tp.partition}: {tp.error}")
    return [tp.offset for tp in sorted(tps, key=lambda tp: tp.partition)]


def check_offsets(bootstrap, mode, last_ended):
    """After transaction `last_ended` ended: the kept group shows the
    offsets of the last committed offset transaction, the dropped group
    none."""
    topic = topic_names(mode)[0]
    kept, dropped = f"txn-{mode}-kept", f"txn-{mode}-dropped"
    committed = [t for t in KEPT_GROUP_TRANSACTIONS if t <= last_ended and committed_txn(t)]
    want = [offsets_of(committed[-1], p) for p in range(PARTITIONS)]
    got = committed_offsets(bootstrap, kept, topic)
    check(got == want, f"{mode}: after transaction {last_ended} group {kept} has offsets {got}, "
                       f"want {want} (those of transaction {committed[-1]})")
    got = committed_offsets(bootstrap, dropped, topic)
    check(got == [-1001] * PARTITIONS,
          f"{mode}: group {dropped}, whose offsets were only in an aborted transaction, has offsets {got}")


def offsets_to_send(mode, txn):
    """{group: {(topic, partition): offset}} that transaction txn sends."""
    topic = topic_names(mode)[0]
    if txn in KEPT_GROUP_TRANSACTIONS:
        return {f"txn-{mode}-kept": {(topic, p): offsets_of(txn, p) for p in range(PARTITIONS)}}
    if txn == DROPPED_GROUP_TRANSACTION:
        return {f"txn-{mode}-dropped": {(topic, p): dropped_offset(p) for p in range(PARTITIONS)}}
    return {}


def produce_kafka_python(bootstrap, mode):
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTopicPartition

    p = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        client_id=f"txn-{mode}",
        transactional_id=f"txn-{mode}",
        transaction_timeout_ms=60000,
        max_block_ms=CALL_DEADLINE_S * 1000,
        request_timeout_ms=30000,
    )
    within("kafka-python init_transactions", p.init_transactions)
    for txn in range(TRANSACTIONS):
        p.begin_transaction()
        sent = [(r, p.send(r[0], key=r[2], value=r[3], partition=r[1])) for r in records_of(mode, txn)]
        for group, offsets in offsets_to_send(mode, txn).items():
            within(f"kafka-python send_offsets_to_transaction {group} (transaction {txn})",
                   lambda: p.send_offsets_to_transaction(
                       {KTopicPartition(t, part): OffsetAndMetadata(o, "", -1)
                        for (t, part), o in offsets.items()}, group))
        if committed_txn(txn):
            # commit_transaction flushes the records first.
            within(f"kafka-python commit_transaction {txn}", p.commit_transaction)
        else:
            # Flushed first, so the aborted records are in the log.
            within(f"kafka-python flush {txn}", lambda: p.flush(CALL_DEADLINE_S))
        for r, future in sent:
            check(future.is_done, f"{mode}: record {r[2]} of transaction {txn} undelivered at its end")
            check(future.succeeded(), f"{mode}: record {r[2]} of transaction {txn} failed: {future.exception}")
            meta = future.value
            check((meta.topic, meta.partition) == (r[0], r[1]),
                  f"{mode}: record {r[2]} went to {meta.topic}-{meta.partition}, not {r[0]}-{r[1]}")
        if not committed_txn(txn):
            within(f"kafka-python abort_transaction {txn}", p.abort_transaction)
        if txn < OFFSET_TRANSACTIONS:
            check_offsets(bootstrap, mode, txn)
    within("kafka-python close", lambda: p.close(timeout=CALL_DEADLINE_S))


async def bounded(what, aw, seconds=CALL_DEADLINE_S):
    try:
        return await asyncio.wait_for(aw, seconds)
    except asyncio.TimeoutError:
        fail(f"{what}: no answer within {seconds} s")


async def produce_aiokafka(bootstrap, mode):
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        client_id=f"txn-{mode}",
        transactional_id=f"txn-{mode}",
        transaction_timeout_ms=60000,
        request_timeout_ms=30000,
    )
    # start() initializes the transactions (InitProducerId).
    await bounded("aiokafka producer start", p.start())
    try:
        for txn in range(TRANSACTIONS):
            await bounded(f"aiokafka begin_transaction {txn}", p.begin_transaction())
            sent = []
            for r in records_of(mode, txn):
                future = await bounded(f"aiokafka send {r[2]}", p.send(r[0], key=r[2], value=r[3], partition=r[1]))
                sent.append((r, future))
            for group, offsets in offsets_to_send(mode, txn).items():
                await bounded(f"aiokafka send_offsets_to_transaction {group} (transaction {txn})",
                              p.send_offsets_to_transaction(
                                  {ATopicPartition(t, part): o for (t, part), o in offsets.items()}, group))
            if committed_txn(txn):
                # commit_transaction flushes the records first.
                await bounded(f"aiokafka commit_transaction {txn}", p.commit_transaction())
            else:
                # Delivered first, so the aborted records are in the log.
                await bounded(f"aiokafka delivery of transaction {txn}",
                              asyncio.gather(*(f for _, f in sent), return_exceptions=True))
            for r, future in sent:
                check(future.done(), f"{mode}: record {r[2]} of transaction {txn} undelivered at its end")
                check(future.exception() is None,
                      f"{mode}: record {r[2]} of transaction {txn} failed: {future.exception()!r}")
                meta = future.result()
                check((meta.topic, meta.partition) == (r[0], r[1]),
                      f"{mode}: record {r[2]} went to {meta.topic}-{meta.partition}, not {r[0]}-{r[1]}")
            if not committed_txn(txn):
                await bounded(f"aiokafka abort_transaction {txn}", p.abort_transaction())
            if txn < OFFSET_TRANSACTIONS:
                check_offsets(bootstrap, mode, txn)
    finally:
        await bounded("aiokafka producer stop", p.stop())


def ends(bootstrap, mode):
    """Each partition's high watermark (every transaction ended, so also
    its last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{mode}-ends"})
    try:
        return {(t, part): c.get_watermark_offsets(TopicPartition(t, part), timeout=CALL_DEADLINE_S)[1]
                for t in topic_names(mode) for part in range(PARTITIONS)}
    finally:
        c.close()


def read_confluent(bootstrap, mode, isolation):
    """Every record of the topics' partitions from the start to the end
    visible under `isolation`: [(topic, partition, offset, key, value)]."""
    messages = read_to_end(bootstrap, topic_names(mode), PARTITIONS, isolation, f"txn-{mode}-read",
                           CALL_DEADLINE_S, what=f"confluent-kafka {isolation}")
    return [(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()) for msg in messages]


def reader_config(bootstrap, mode, isolation):
    """kafka-python's and aiokafka's consumer settings (the same names in
    both) for reading every partition from its start: no group, nothing
    committed."""
    return {
        "bootstrap_servers": bootstrap.split(","),
        "client_id": f"txn-{mode}-{isolation}",
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": isolation,
        "auto_offset_reset": "earliest",
    }


def reached_ends(what, positions, end, deadline):
    """Whether every partition's position reached its end; fails past the
    deadline, naming the partitions short of it."""
    behind = [tp for tp in positions if positions[tp] < end[(tp.topic, tp.partition)]]
    if not behind:
        return True
    check(time.time() < deadline,
          f"{what}: {len(behind)} partitions short of their end within {CALL_DEADLINE_S} s: "
          + ", ".join(f"{tp.topic}-{tp.partition} at {positions[tp]} of {end[(tp.topic, tp.partition)]}"
                      for tp in behind))
    return False


def read_kafka_python(bootstrap, mode, isolation, end):
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTopicPartition

    c = KafkaConsumer(**reader_config(bootstrap, mode, isolation))
    tps = [KTopicPartition(t, part) for t, part in end]
    records = []
    try:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.time() + CALL_DEADLINE_S
        while True:
            positions = {tp: c.position(tp, timeout_ms=CALL_DEADLINE_S * 1000) for tp in tps}
            if reached_ends(f"kafka-python {isolation}", positions, end, deadline):
                break
            for tp, batch in c.poll(timeout_ms=500).items():
                records.extend((m.topic, m.partition, m.offset, m.key, m.value) for m in batch)
    finally:
        c.close(autocommit=False, timeout_ms=CALL_DEADLINE_S * 1000)
    return records


async def read_aiokafka(bootstrap, mode, isolation, end):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    c = AIOKafkaConsumer(**reader_config(bootstrap, mode, isolation))
    await bounded(f"aiokafka {isolation} consumer start", c.start())
    tps = [ATopicPartition(t, part) for t, part in end]
    records = []
    try:
        c.assign(tps)
        await bounded(f"aiokafka {isolation} seek_to_beginning", c.seek_to_beginning(*tps))
        deadline = time.time() + CALL_DEADLINE_S
        while True:
            positions = {tp: await bounded(f"aiokafka {isolation} position", c.position(tp)) for tp in tps}
            if reached_ends(f"aiokafka {isolation}", positions, end, deadline):
                break
            got = await bounded(f"aiokafka {isolation} getmany", c.getmany(timeout_ms=500))
            for tp, batch in got.items():
                records.extend((m.topic, m.partition, m.offset, m.key, m.value) for m in batch)
    finally:
        await bounded(f"aiokafka {isolation} consumer stop", c.stop())
    return records


def check_read(reader, isolation, records, want, end):
    """The records read are exactly `want` (each once, byte-exact, in its
    partition), in offset order within each partition."""
    name = f"{reader} {isolation}"
    by_partition = {}
    for topic, partition, offset, _, _ in records:
        by_partition.setdefault((topic, partition), []).append(offset)
    for tp, offsets in by_partition.items():
        check(offsets == sorted(set(offsets)), f"{name}: {tp[0]}-{tp[1]} offsets not read once each in order")
        check(offsets[-1] < end[tp], f"{name}: {tp[0]}-{tp[1]} read offset {offsets[-1]} at or past its end {end[tp]}")
    got = sorted((t, part, k, v) for t, part, _, k, v in records)
    if got != want:
        got_set, want_set = set(got), set(want)
        missing = sorted(want_set - got_set)
        extra = sorted(got_set - want_set)
        fail(f"{name}: read {len(got)} records, want {len(want)}; {len(missing)} missing "
             f"(first {[(t, part, k) for t, part, k, _ in missing[:3]]}), {len(extra)} unexpected "
             f"(first {[(t, part, k, v[:16]) for t, part, k, v in extra[:3]]}), "
             f"{len(got) - len(got_set)} read twice")


def check_markers(isolation, records, end):
    """read_uncommitted reads every record of the log: each partition's
    end is its records plus one control marker per transaction."""
    for tp, hw in end.items():
        count = sum(1 for t, part, _, _, _ in records if (t, part) == tp)
        check(hw == count + TRANSACTIONS,
              f"{isolation}: {tp[0]}-{tp[1]} ends at {hw} with {count} records: "
              f"{hw - count} offsets are not records, want {TRANSACTIONS} (one marker per transaction)")


def main():
    faulthandler.dump_traceback_later(SCRIPT_DEADLINE_S, exit=True)
    bootstrap, mode, replication = sys.argv[1], sys.argv[2], int(sys.argv[3])
    check(mode in ("kafka-python", "aiokafka"), f"unknown mode {mode}")
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if os.environ.get("TXN_CLIENTS_DEBUG") == "1" else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    create_topics(bootstrap, topic_names(mode), PARTITIONS, replication, CALL_DEADLINE_S, exists_ok=False)
    if mode == "kafka-python":
        produce_kafka_python(bootstrap, mode)
    else:
        asyncio.run(produce_aiokafka(bootstrap, mode))

    committed, aborted = [], []
    for txn in range(TRANSACTIONS):
        (committed if committed_txn(txn) else aborted).extend(records_of(mode, txn))
    committed.sort()
    everything = sorted(committed + aborted)
    end = ends(bootstrap, mode)

    for isolation, want in (("read_committed", committed), ("read_uncommitted", everything)):
        records = read_confluent(bootstrap, mode, isolation)
        check_read("confluent-kafka", isolation, records, want, end)
        if isolation == "read_uncommitted":
            check_markers("confluent-kafka read_uncommitted", records, end)
        if mode == "kafka-python":
            records = read_kafka_python(bootstrap, mode, isolation, end)
        else:
            records = asyncio.run(read_aiokafka(bootstrap, mode, isolation, end))
        check_read(mode, isolation, records, want, end)
        if isolation == "read_uncommitted":
            check_markers(f"{mode} read_uncommitted", records, end)
    print(f"{mode}: ok {len(committed)} committed, {len(aborted)} aborted", flush=True)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        fail(f"{sys.argv[2] if len(sys.argv) > 2 else '?'}: a client call raised (traceback above)")
