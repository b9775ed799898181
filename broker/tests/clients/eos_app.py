"""Exactly-once consume-transform-produce through confluent-kafka: a
stream-processing application and its checks.

usage: eos_app.py BOOTSTRAP MODE [ARGS]
MODE:
  produce PARTITIONS RF COUNT  creates `eos-in` and `eos-out` (PARTITIONS
        partitions, RF replicas, min.insync.replicas 2 when RF > 1) and
        writes COUNT input records to `eos-in` with an idempotent acks=all
        producer: record i goes to partition i % PARTITIONS, its key and
        value are functions of i (`input_record`)
  app INSTANCE COUNT BATCH PROGRESS  the application: a consumer of group
        `eos-app` (static member `eos-app-INSTANCE`, read_committed, no
        auto commit) reads `eos-in`; a transactional producer
        (`transactional.id` `eos-app-INSTANCE`, so a restarted instance
        fences its zombie) writes one `eos-out` record per input record
        (`transform`) and commits the consumer's offsets in the same
        transaction, BATCH input records at most a transaction. After an
        abortable error the transaction is aborted and the consumer
        rewound to the group's committed offsets; after a fatal one the
        producer is made anew. Exits 0 once the group's committed offsets
        reach the end of `eos-in` (COUNT records in all). PROGRESS gets
        `PHASE TXNS RECORDS` after each step (replaced whole): PHASE is
        init, written (a transaction's records are in the log), committing
        or committed, TXNS the transactions this instance committed,
        RECORDS their input records
  verify PARTITIONS COUNT  `eos-in` holds the COUNT input records, each
        byte-exact; `eos-out` read with read_committed holds exactly one
        output record per input record (named by its input partition and
        offset), byte-exact to the transform, none missing, none twice;
        the group's committed offsets are the ends of `eos-in`; prints
        `verify: ok COUNT records ...`
Exits non-zero at the first miss (`FAIL: ...` on stderr). Every wait is
bounded by a deadline. EOS_DEBUG=1 turns on librdkafka's eos, txn and
cgrp debug logs (on stderr).
"""

import hashlib
import os
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from checks import check, fail, read_to_end

IN = "eos-in"
OUT = "eos-out"
GROUP = "eos-app"
# One call to the cluster (create, init, commit, abort, offset fetch) may
# take this long while brokers are killed and their leaders move.
CALL_TIMEOUT_S = 30
# The whole application run, and each read of the checker.
RUN_DEADLINE_S = 900
READ_DEADLINE_S = 300
# Tries of one call that keeps failing with a retriable error.
RETRIES_MAX = 20
# Asks to create the topics, each bounded by CALL_TIMEOUT_S.
CREATE_TRIES_MAX = 5
# Producers and consumers made anew after fatal errors, per run.
REMAKES_MAX = 50
TRANSACTION_TIMEOUT_MS = 20000


def debug_config():
    return {"debug": "eos,txn,cgrp"} if os.environ.get("EOS_DEBUG") else {}


def log(message):
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def input_record(i):
    """Input record i: its key and value (16 to 112 bytes of a hash of the
    key after its number)."""
    key = b"k%07d" % i
    body = hashlib.blake2b(key, digest_size=16).digest() * 7
    return key, b"in-%d-" % i + body[:16 * (1 + i % 7)]


def transform(partition, offset, value):
    """The output value of the input record at `partition`/`offset`."""
    return b"%d/%d/" % (partition, offset) + value[::-1]


def source_of(value):
    """The input partition and offset an output value names."""
    partition, offset, _ = value.split(b"/", 2)
    return int(partition), int(offset)


# ---------------------------------------------------------------- produce

def create(bootstrap, partitions, replication):
    """Creates both topics, asking again after a timeout (a topic the
    timed-out ask created already exists)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if replication > 1 else {}
    left = [IN, OUT]
    for attempt in range(CREATE_TRIES_MAX):
        topics = [NewTopic(name, partitions, replication, config=config) for name in left]
        futures = admin.create_topics(topics, request_timeout=CALL_TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result(CALL_TIMEOUT_S + 5)
                left.remove(name)
            except KafkaException as e:
                error = e.args[0]
                if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    left.remove(name)
                else:
                    check(error.retriable() or error.code() == KafkaError.REQUEST_TIMED_OUT,
                          f"create {name}: {error}")
                    log(f"create {name}: {error}, again")
            except TimeoutError:
                log(f"create {name}: no answer within {CALL_TIMEOUT_S + 5} s, again")
        if not left:
            return
    fail(f"create: {left} not created in {CREATE_TRIES_MAX} tries")


def produce(bootstrap, partitions, replication, count):
    create(bootstrap, partitions, replication)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 20,
    })
    failed = []
    delivered = [0]

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            delivered[0] += 1

    deadline = time.time() + READ_DEADLINE_S
    for i in range(count):
        key, value = input_record(i)
        while True:
            check(time.time() < deadline, f"produce: {delivered[0]} of {count} delivered in time")
            try:
                producer.produce(IN, key=key, value=value, partition=i % partitions,
                                 on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(READ_DEADLINE_S)
    check(left == 0 and not failed, f"produce: {left} undelivered, errors {failed[:3]}")
    check(delivered[0] == count, f"produce: {delivered[0]} of {count} delivered")
    print(f"produce: ok {count} records over {partitions} partitions", flush=True)


# -------------------------------------------------------------------- app

class Progress:
    """The progress file, replaced whole so a reader never sees half."""

    def __init__(self, path):
        self.path = path
        self.txns = 0
        self.records = 0

    def write(self, phase):
        temporary = self.path + ".tmp"
        with open(temporary, "w") as f:
            f.write(f"{phase} {self.txns} {self.records}\n")
        os.replace(temporary, self.path)


# Calls tried again after a retriable error, over the run.
retried = [0]


def retrying(what, call):
    """Calls `call` until it returns, again after a retriable error (at
    most RETRIES_MAX tries); other errors are raised."""
    for attempt in range(RETRIES_MAX):
        try:
            return call()
        except KafkaException as e:
            error = e.args[0]
            if not error.retriable() or attempt + 1 == RETRIES_MAX:
                raise
            retried[0] += 1
            log(f"{what}: retriable {error}, again")
    raise AssertionError("unreachable")


class App:
    def __init__(self, bootstrap, instance, count, batch_max, progress):
        self.bootstrap = bootstrap
        self.instance = instance
        self.count = count
        self.batch_max = batch_max
        self.progress = progress
        self.remakes = 0
        self.aborts = 0
        self.producer = None
        self.consumer = None
        self.deadline = time.time() + RUN_DEADLINE_S

    def make_producer(self):
        if self.producer is not None:
            self.remakes += 1
            check(self.remakes <= REMAKES_MAX, f"app: {self.remakes} producers made anew")
        self.producer = Producer({
            "bootstrap.servers": self.bootstrap,
            "transactional.id": f"eos-app-{self.instance}",
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            **debug_config(),
        })
        # Fences the previous instance's producer and ends (aborts) its
        # open transaction before this one reads the group's offsets.
        retrying("init_transactions", lambda: self.producer.init_transactions(CALL_TIMEOUT_S))

    def make_consumer(self):
        if self.consumer is not None:
            self.remakes += 1
            check(self.remakes <= REMAKES_MAX, f"app: {self.remakes} consumers made anew")
            self.consumer.close()
        self.consumer = Consumer({
            "bootstrap.servers": self.bootstrap,
            "group.id": GROUP,
            "group.instance.id": f"eos-app-{self.instance}",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            **debug_config(),
        })
        self.consumer.subscribe(
            [IN],
            on_assign=lambda c, parts: log(f"assigned {[p.partition for p in parts]}"),
            on_revoke=lambda c, parts: log(f"revoked {[p.partition for p in parts]}"),
            on_lost=lambda c, parts: log(f"lost {[p.partition for p in parts]}"))

    def ends(self):
        """The end offset of each partition of `eos-in`; all COUNT input
        records must be there before the application starts."""
        metadata = retrying("metadata", lambda: self.consumer.list_topics(IN, CALL_TIMEOUT_S))
        partitions = sorted(metadata.topics[IN].partitions)
        ends = {}
        for p in partitions:
            _, high = retrying("watermarks", lambda: self.consumer.get_watermark_offsets(
                TopicPartition(IN, p), CALL_TIMEOUT_S))
            ends[p] = high
        check(sum(ends.values()) == self.count, f"app: {IN} ends at {ends}, not {self.count} records")
        return ends

    def committed(self, partitions):
        """The group's committed offset of each partition (stable: offsets
        of a transaction still open are waited for)."""
        tps = [TopicPartition(IN, p) for p in partitions]
        got = retrying("committed", lambda: self.consumer.committed(tps, CALL_TIMEOUT_S))
        for tp in got:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {tp.partition: tp.offset for tp in got}

    def rewind(self):
        """Seeks every assigned partition to the group's committed offset
        (the start of the log when none), so the records of an aborted
        transaction are processed again."""
        assignment = self.consumer.assignment()
        if not assignment:
            return
        for p, offset in self.committed([tp.partition for tp in assignment]).items():
            to = offset if offset >= 0 else 0
            try:
                self.consumer.seek(TopicPartition(IN, p, to))
            except KafkaException as e:
                log(f"seek {p} to {to}: {e}; the consumer is made anew")
                self.make_consumer()
                return
            log(f"rewound {p} to {to}")

    def end_transaction(self):
        """Aborts the open transaction, and makes the producer anew if it
        cannot."""
        self.aborts += 1
        try:
            retrying("abort_transaction", lambda: self.producer.abort_transaction(CALL_TIMEOUT_S))
        except KafkaException as e:
            log(f"abort failed: {e.args[0]}; the producer is made anew")
            self.make_producer()

    def process(self, batch):
        """One transaction: the batch's output records and the consumer's
        next offsets, committed together."""
        producer = self.producer
        producer.begin_transaction()
        next_offsets = {}
        for msg in batch:
            p, offset = msg.partition(), msg.offset()
            check(next_offsets.get(p, offset) == offset,
                  f"app: {IN}-{p} gave offset {offset} after {next_offsets.get(p)}")
            next_offsets[p] = offset + 1
            while True:
                try:
                    producer.produce(OUT, key=msg.key(), value=transform(p, offset, msg.value()),
                                     partition=p)
                    break
                except BufferError:
                    producer.poll(0.1)
        # Every output record in the log (uncommitted) before the offsets
        # join the transaction: a kill from here on leaves records that
        # only an abort may hide.
        check(producer.flush(CALL_TIMEOUT_S) == 0, "app: output records not delivered in time")
        self.progress.write("written")
        positions = self.consumer.position([TopicPartition(IN, p) for p in sorted(next_offsets)])
        for tp in positions:
            check(tp.offset == next_offsets[tp.partition],
                  f"app: position of {IN}-{tp.partition} is {tp.offset}, "
                  f"the batch ends before {next_offsets[tp.partition]}")
        retrying("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(
            positions, self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S))
        self.progress.write("committing")
        retrying("commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_S))
        self.progress.txns += 1
        self.progress.records += len(batch)
        self.progress.write("committed")

    def done(self, ends):
        offsets = self.committed(sorted(ends))
        return all(offsets[p] >= end for p, end in ends.items())

    def run(self):
        self.make_producer()
        self.make_consumer()
        self.progress.write("init")
        ends = self.ends()
        log(f"started: {IN} ends at {ends}")
        while True:
            check(time.time() < self.deadline,
                  f"app: not done within {RUN_DEADLINE_S} s ({self.progress.txns} transactions)")
            msgs = self.consumer.consume(self.batch_max, 1.0)
            batch = []
            for msg in msgs:
                if msg.error():
                    log(f"consumer: {msg.error()}")
                    check(not msg.error().fatal(), f"app: consumer failed: {msg.error()}")
                else:
                    batch.append(msg)
            if not batch:
                try:
                    if self.done(ends):
                        break
                except KafkaException as e:
                    log(f"committed offsets: {e.args[0]}")
                continue
            try:
                self.process(batch)
            except KafkaException as e:
                error = e.args[0]
                log(f"transaction of {len(batch)} records failed: {error} "
                    f"(fatal {error.fatal()}, abortable {error.txn_requires_abort()})")
                if error.fatal():
                    self.make_producer()
                else:
                    self.end_transaction()
                self.rewind()
        self.consumer.close()
        print(f"app: ok {self.progress.txns} transactions of {self.progress.records} records "
              f"committed, {self.aborts} aborted, {retried[0]} calls retried, "
              f"{self.remakes} clients made anew", flush=True)


# ----------------------------------------------------------------- verify

def read_all(bootstrap, topic, partitions, isolation):
    """Every record of `topic` from the start to the end visible under
    `isolation`, as (partition, offset, key, value)."""
    messages = read_to_end(bootstrap, [topic], partitions, isolation, "eos-read", READ_DEADLINE_S,
                           batch=1000)
    return [(msg.partition(), msg.offset(), msg.key(), msg.value()) for msg in messages]


def verify(bootstrap, partitions, count):
    inputs = {}
    seen_numbers = set()
    for p, offset, key, value in read_all(bootstrap, IN, partitions, "read_committed"):
        i = int(key[1:])
        check(i not in seen_numbers, f"verify: input {key} twice (at {p}/{offset})")
        seen_numbers.add(i)
        check((key, value) == input_record(i) and p == i % partitions,
              f"verify: input at {p}/{offset} is {key}={value[:40]}..., not record {i}")
        inputs[(p, offset)] = (key, value)
    check(len(inputs) == count, f"verify: {IN} holds {len(inputs)} records, want {count}")
    outputs = {}
    doubled = []
    for p, offset, key, value in read_all(bootstrap, OUT, partitions, "read_committed"):
        try:
            source = source_of(value)
        except ValueError:
            fail(f"verify: output at {p}/{offset} names no input: {value[:40]}")
        check(source in inputs, f"verify: output at {p}/{offset} names {source}, not an input")
        in_key, in_value = inputs[source]
        check(key == in_key and value == transform(*source, in_value) and p == source[0],
              f"verify: output at {p}/{offset} for input {source} is {key}={value[:40]}..., "
              f"not the transform of {in_key}={in_value[:40]}...")
        if source in outputs:
            doubled.append((source, outputs[source], (p, offset)))
        outputs[source] = (p, offset)
    check(not doubled,
          f"verify: {len(doubled)} inputs have two outputs (input, first output, second output): "
          f"{doubled[:10]}")
    missing = sorted(set(inputs) - set(outputs))
    check(not missing, f"verify: {len(missing)} inputs have no output: {missing[:20]}")
    everything = read_all(bootstrap, OUT, partitions, "read_uncommitted")
    aborted = len(everything) - len(outputs)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed"})
    try:
        tps = consumer.committed([TopicPartition(IN, p) for p in range(partitions)], CALL_TIMEOUT_S)
        offsets = {tp.partition: tp.offset for tp in tps}
    finally:
        consumer.close()
    ends = {}
    for p, offset in inputs:
        ends[p] = max(ends.get(p, 0), offset + 1)
    check(offsets == ends, f"verify: the group committed {offsets}, the ends of {IN} are {ends}")
    print(f"verify: ok {count} records, each output once, byte-exact; "
          f"{aborted} output records of aborted transactions hidden; "
          f"group offsets at the ends {offsets}", flush=True)


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    args = sys.argv[3:]
    if mode == "produce":
        produce(bootstrap, int(args[0]), int(args[1]), int(args[2]))
    elif mode == "app":
        progress = Progress(args[3])
        App(bootstrap, args[0], int(args[1]), int(args[2]), progress).run()
    elif mode == "verify":
        verify(bootstrap, int(args[0]), int(args[1]))
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
