"""Transactional producer throughput against the idempotent producer's,
and commit latency, on release-built `strom` brokers started here.

Each round measures the machine's durable-write latency (fio, as the
matrix does) and then runs three cases, each on a fresh broker (or a
fresh three-node cluster with --cluster) and a fresh topic, in an order
that rotates by round:

  idempotent  an idempotent producer (acks=all) produces for DURATION s
  txn-100ms   a transactional producer: begin, produce for 100 ms, commit,
              again until DURATION s have passed
  txn-1000ms  the same with 1 s transactions

Same client (confluent-kafka), settings, record size and partitions in
every case; the producer runs flat out, one record after another, each
to the next partition in turn. Throughput is what was acknowledged
(idempotent) or committed (transactions) over the time from the first
record to the last acknowledgement or commit. Before committing, the
transactional producer flushes (waits for every record of the
transaction to be acknowledged), so commit_transaction() times EndTxn
alone: the commit latency. After each case a read_committed consumer
reads the topic back and must see every acknowledged or committed record
once, in order per partition, byte for byte, and nothing else.

Around each case the brokers' CPU time and metrics are sampled: the
requests they served (Produce, AddPartitionsToTxn, EndTxn) with their mean
time from decode to answer, and their log syncs. Each case's data dir is
removed after its read-back (a 5 s case at 500 MB/s writes 2.5 GB).

Prints one line per case and round, a table of medians, and one
machine-readable line `txn-bench-summary: {json}`. Exits 1 when a case
saw an error or the read-back check failed (after printing what it saw).

usage: python3 benches/transactions.py [--rounds 5] [--duration 5]
       [--cluster] [--dir target/txn-bench] [--strom target/release/strom]
"""

import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# Every wait has a deadline.
START_DEADLINE_S = 60
STOP_DEADLINE_S = 30
REQUEST_DEADLINE_S = 60
FLUSH_DEADLINE_S = 60
READ_DEADLINE_S = 600
FIO_SECONDS = 5
# Transactions per case at most (the loop ends after DURATION s before that).
TXN_COUNT_MAX = 100_000
# Records between looks at the clock in the produce loop.
PRODUCE_STEP = 256
# The producer's queue by default (librdkafka's own default is 1 GiB);
# see producer_config.
QUEUE_KBYTES = 8 * 1024
# A run stops before it starts when the data dir's filesystem has less free.
FREE_BYTES_MIN = 3 << 30

# Each record: 16 bytes of header (run tag, sequence), then a body that
# is the same for every record of a run (random, so incompressible).
HEADER = struct.Struct(">QQ")

CLK_TCK = os.sysconf("SC_CLK_TCK")


def now():
    return time.monotonic()


def free_ports(count):
    """`count` distinct free loopback ports (all held until all are taken)."""
    held = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


def percentile(values, p):
    """Nearest-rank percentile of `values` (p in 0..100)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def median(values):
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return float("nan")
    return ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2


def process_cpu_s(pid):
    """User + system CPU seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def machine_cpu():
    """(busy, steal, total) jiffies of the whole machine."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    busy = user + nice + system + irq + softirq
    return busy, steal, sum(values[:8])


def fail(message):
    raise BenchFailure(message)


class BenchFailure(Exception):
    pass


# ---------------------------------------------------------------- brokers


class Node:
    """One `strom` process on loopback, pinned to CPU 0 as the matrix's."""

    def __init__(self, strom, dir, args, client_port, admin_port):
        self.dir = dir
        self.client_port = client_port
        self.admin_port = admin_port
        os.makedirs(dir, exist_ok=True)
        self.log_path = os.path.join(dir, "strom.log")
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [strom, "start", "--data-dir", os.path.join(dir, "data"),
             "--listen", f"127.0.0.1:{client_port}",
             "--admin-listen", f"127.0.0.1:{admin_port}", "--cores", "1", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            preexec_fn=lambda: os.sched_setaffinity(0, {0}))
        log.close()

    def ready(self):
        if self.process.poll() is not None:
            fail(f"strom exited with {self.process.returncode} while starting:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def cpu_s(self):
        return process_cpu_s(self.process.pid)

    def metrics(self):
        """The broker's counters and histogram sums summed over its cores
        (`shard="all"`), by series name and remaining labels."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/metrics",
                                    timeout=REQUEST_DEADLINE_S) as r:
            text = r.read().decode()
        series = {}
        for line in text.splitlines():
            if line.startswith("#") or 'shard="all"' not in line:
                continue
            name_labels, value = line.rsplit(" ", 1)
            series[name_labels.replace('shard="all",', "").replace('{shard="all"}', "")] = float(value)
        return series

    def log_tail(self, lines=30):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])

    def warnings(self):
        """The log's WARN and ERROR lines."""
        with open(self.log_path, errors="replace") as f:
            return [line.rstrip() for line in f if " WARN " in line or " ERROR " in line]

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_DEADLINE_S)
                return f"did not stop within {STOP_DEADLINE_S} s of SIGTERM: killed"
        if self.process.returncode != 0:
            return f"exited with {self.process.returncode}"
        return None


class Brokers:
    """A single broker, or three nodes that are each broker and controller
    voter (`--cores 1` each, all on CPU 0, own ports and data dirs)."""

    def __init__(self, strom, dir, nodes):
        self.nodes = []
        if nodes == 1:
            client, admin = free_ports(2)
            self.nodes.append(Node(strom, os.path.join(dir, "node-1"), [], client, admin))
        else:
            ports = free_ports(3 * nodes)
            voters = ",".join(f"{i + 1}@127.0.0.1:{ports[3 * i + 1]}" for i in range(nodes))
            for i in range(nodes):
                client, controller, admin = ports[3 * i:3 * i + 3]
                args = ["--node-id", str(i + 1)]
                for setting in (
                    f"listeners=PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{controller}",
                    "controller.listener.names=CONTROLLER",
                    f"controller.quorum.voters={voters}",
                    "process.roles=broker,controller",
                ):
                    args += ["--set", setting]
                self.nodes.append(Node(strom, os.path.join(dir, f"node-{i + 1}"), args, client, admin))
        deadline = now() + START_DEADLINE_S
        for node in self.nodes:
            while not node.ready():
                if now() > deadline:
                    self.stop()
                    fail(f"a broker was not ready within {START_DEADLINE_S} s:\n{node.log_tail()}")
                time.sleep(0.1)

    def bootstrap(self):
        return ",".join(f"127.0.0.1:{n.client_port}" for n in self.nodes)

    def cpu_s(self):
        return sum(n.cpu_s() for n in self.nodes)

    def metrics(self):
        """Every node's `Node.metrics`, summed."""
        total = {}
        for node in self.nodes:
            for key, value in node.metrics().items():
                total[key] = total.get(key, 0.0) + value
        return total

    def warnings(self):
        return [f"node-{i + 1}: {line}" for i, n in enumerate(self.nodes) for line in n.warnings()]

    def stop(self):
        problems = []
        for i, node in enumerate(self.nodes):
            problem = node.stop()
            if problem:
                problems.append(f"node-{i + 1} {problem}")
        return problems


# ---------------------------------------------------------------- limits


def durable_write_ms(dir):
    """p50 and p99 (ms) of one durable write at a time: fio, 64 KiB
    O_DIRECT + O_DSYNC over a file written once, as the matrix measures
    it; None when fio is not installed."""
    if shutil.which("fio") is None:
        return None
    path = os.path.join(dir, "fio-durable")
    try:
        out = subprocess.run(
            ["fio", "--name=durable", "--rw=write", "--bs=64k", "--direct=1", "--sync=dsync",
             "--ioengine=psync", "--size=64M", "--overwrite=1", "--time_based",
             f"--runtime={FIO_SECONDS}", "--output-format=json", f"--filename={path}"],
            capture_output=True, timeout=FIO_SECONDS + 60, check=True).stdout
    finally:
        if os.path.exists(path):
            os.remove(path)
    percentiles = json.loads(out)["jobs"][0]["write"]["clat_ns"]["percentile"]
    return percentiles["50.000000"] / 1e6, percentiles["99.000000"] / 1e6


# ---------------------------------------------------------------- producing


def create_topic(bootstrap, topic, partitions, replication):
    config = {"min.insync.replicas": "2"} if replication > 1 else {}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
            [NewTopic(topic, partitions, replication, config=config)]).values():
        future.result(REQUEST_DEADLINE_S)
    # The topic's leaders are known to the cluster before the run starts.
    deadline = now() + REQUEST_DEADLINE_S
    while True:
        meta = admin.list_topics(topic, timeout=REQUEST_DEADLINE_S).topics[topic]
        if meta.error is None and len(meta.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == replication for p in meta.partitions.values()):
            return
        if now() > deadline:
            fail(f"{topic}: leaders and ISRs not in place within {REQUEST_DEADLINE_S} s")
        time.sleep(0.1)


def producer_config(bootstrap, transactional_id, queue_kbytes):
    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "compression.type": "none",
        # A bounded queue, as Java's buffer.memory bounds it: the loop
        # waits for room, and a flush drains at most this much.
        "queue.buffering.max.messages": 100_000,
        "queue.buffering.max.kbytes": queue_kbytes,
        # The delivery callback runs for failures only: the Python loop
        # stays the same cost whatever the case.
        "delivery.report.only.error": True,
    }
    if transactional_id:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = 60_000
    return config


class Run:
    """One producer's run on one topic."""

    def __init__(self, bootstrap, topic, partitions, record_bytes, tag, transactional_id,
                 queue_kbytes):
        self.topic = topic
        self.partitions = partitions
        self.tag = tag
        self.body = os.urandom(record_bytes - HEADER.size)
        self.errors = []
        self.producer = Producer({
            **producer_config(bootstrap, transactional_id, queue_kbytes),
            "on_delivery": self.delivered,
        })
        self.seq = 0

    def delivered(self, err, msg):
        if err is not None:
            self.errors.append(f"delivery of {HEADER.unpack(msg.value()[:HEADER.size])[1]}: {err}")

    def produce_until(self, until):
        """Produces records flat out until the clock passes `until`."""
        p, topic, partitions, tag, body = (
            self.producer, self.topic, self.partitions, self.tag, self.body)
        pack = HEADER.pack
        seq = self.seq
        while now() < until:
            step_end = seq + PRODUCE_STEP
            while seq < step_end:
                try:
                    p.produce(topic, pack(tag, seq) + body, partition=seq % partitions)
                except BufferError:
                    # The client's queue is full: serve it, then retry.
                    p.poll(0.001)
                    if now() >= until:
                        break
                    continue
                seq += 1
            p.poll(0)
        self.seq = seq

    def flush(self):
        left = self.producer.flush(FLUSH_DEADLINE_S)
        if left:
            fail(f"{left} records not acknowledged within {FLUSH_DEADLINE_S} s")


def run_idempotent(run, duration):
    started = now()
    run.produce_until(started + duration)
    run.flush()
    elapsed = now() - started
    if run.errors:
        fail(f"{len(run.errors)} delivery errors, first: {run.errors[0]}")
    return {"elapsed_s": elapsed, "records": run.seq, "transactions": 0}


def run_transactional(run, duration, interval):
    flush_ms, commit_ms, span_ms = [], [], []
    started = now()
    end = started + duration
    committed = 0
    while now() < end and len(commit_ms) < TXN_COUNT_MAX:
        run.producer.begin_transaction()
        began = now()
        run.produce_until(began + interval)
        before_flush = now()
        run.flush()
        before_commit = now()
        try:
            run.producer.commit_transaction(REQUEST_DEADLINE_S)
        except KafkaException as e:
            fail(f"commit of transaction {len(commit_ms) + 1} failed after "
                 f"{(now() - before_commit) * 1e3:.1f} ms: {e}")
        done = now()
        flush_ms.append((before_commit - before_flush) * 1e3)
        commit_ms.append((done - before_commit) * 1e3)
        span_ms.append((done - began) * 1e3)
        committed = run.seq
    elapsed = now() - started
    if run.errors:
        fail(f"{len(run.errors)} delivery errors, first: {run.errors[0]}")
    return {"elapsed_s": elapsed, "records": committed, "transactions": len(commit_ms),
            "commit_ms": commit_ms, "flush_ms": flush_ms, "span_ms": span_ms}


# ---------------------------------------------------------------- checking


def read_back(bootstrap, topic, partitions, record_bytes, tag, expected, body):
    """Reads the topic with read_committed from the start to its end: every
    sequence below `expected` once, in order per partition, on partition
    seq % partitions, with the run's tag and body; nothing else. Returns
    the count read."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-bench-read-{time.time_ns()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 8 << 20,
    })
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = bytearray(expected)
    last = [-1] * partitions
    count, at_end = 0, set()
    deadline = now() + READ_DEADLINE_S
    unpack = HEADER.unpack_from
    try:
        while len(at_end) < partitions:
            if now() > deadline:
                fail(f"read-back: {count} of {expected} records and {len(at_end)} of "
                     f"{partitions} partitions at their end within {READ_DEADLINE_S} s")
            for msg in c.consume(10_000, 0.5):
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    fail(f"read-back: {msg.error()}")
                partition = msg.partition()
                at_end.discard(partition)
                value = msg.value()
                record_tag, seq = unpack(value)
                if record_tag != tag or len(value) != record_bytes or not value.endswith(body):
                    fail(f"read-back: partition {partition} offset {msg.offset()}: not a record "
                         f"of this run, or its bytes differ")
                if seq >= expected or seen[seq]:
                    fail(f"read-back: record {seq} at partition {partition} offset {msg.offset()}: "
                         f"{'read twice' if seq < expected else 'never committed'}")
                if seq % partitions != partition or seq <= last[partition]:
                    fail(f"read-back: record {seq} at partition {partition} offset {msg.offset()} "
                         f"out of place (the partition's last was {last[partition]})")
                seen[seq] = 1
                last[partition] = seq
                count += 1
    finally:
        c.close()
    if count != expected:
        fail(f"read-back: {count} records, {expected} acknowledged or committed "
             f"(first missing: {seen.find(0)})")
    return count


# ---------------------------------------------------------------- cases


CASES = (("idempotent", None), ("txn-100ms", 0.1), ("txn-1000ms", 1.0))


def run_case(args, round_no, case, interval):
    dir = os.path.join(args.dir, f"{case}-{round_no}")
    shutil.rmtree(dir, ignore_errors=True)
    os.makedirs(dir)
    free = shutil.disk_usage(dir).free
    if free < FREE_BYTES_MIN:
        fail(f"{free >> 20} MiB free on the data dir's filesystem, {FREE_BYTES_MIN >> 20} MiB needed")
    nodes = 3 if args.cluster else 1
    brokers = Brokers(args.strom, dir, nodes)
    result = {"case": case, "round": round_no}
    try:
        bootstrap = brokers.bootstrap()
        topic = f"bench-{case}-{round_no}"
        create_topic(bootstrap, topic, args.partitions, nodes)
        tag = time.time_ns()
        run = Run(bootstrap, topic, args.partitions, args.record_bytes, tag,
                  f"txn-bench-{case}-{round_no}" if interval else None, args.queue_kbytes)
        if interval:
            # The producer id and the coordinator before the clock starts.
            run.producer.init_transactions(REQUEST_DEADLINE_S)
        load_before = os.getloadavg()[0]
        metrics = brokers.metrics()
        broker_cpu, client_cpu, machine = brokers.cpu_s(), os.times(), machine_cpu()
        if interval:
            figures = run_transactional(run, args.duration, interval)
        else:
            figures = run_idempotent(run, args.duration)
        broker_cpu = brokers.cpu_s() - broker_cpu
        metrics = broker_view(metrics, brokers.metrics())
        after = os.times()
        client_cpu = (after.user - client_cpu.user) + (after.system - client_cpu.system)
        busy, steal, total = (a - b for a, b in zip(machine_cpu(), machine))
        elapsed = figures["elapsed_s"]
        mb = figures["records"] * args.record_bytes / 1e6
        result.update(figures)
        result.update({
            "records_s": figures["records"] / elapsed,
            "mb_s": mb / elapsed,
            "broker_cpu_s_per_gb": broker_cpu / (mb / 1e3) if mb else float("nan"),
            "broker_cpu_share": broker_cpu / elapsed,
            "client_cpu_share": client_cpu / elapsed,
            # CPU the machine spent on neither the brokers nor this client:
            # other work sharing the 2 cores, in cores.
            "other_cpu_share": max(0.0, busy / CLK_TCK - broker_cpu - client_cpu) / elapsed,
            "steal_pct": 100.0 * steal / total if total else 0.0,
            "load_avg_1m": load_before,
            "broker_view": metrics,
        })
        run.producer = None  # closes the client before the read-back
        result["read_back"] = read_back(bootstrap, topic, args.partitions, args.record_bytes,
                                        tag, figures["records"], run.body)
    finally:
        result["broker_warnings"] = brokers.warnings()
        problems = brokers.stop()
        if problems:
            result["broker_stop"] = problems
    if not args.keep:
        shutil.rmtree(dir, ignore_errors=True)
    if result.get("broker_stop"):
        fail(f"{case}: broker stop: {result['broker_stop']}")
    return result


BROKER_APIS = ("Produce", "AddPartitionsToTxn", "EndTxn")


def broker_view(before, after):
    """What the brokers saw during the run: requests and their mean time
    from decode to response ready, per API; syncs and their mean time."""
    def delta(key):
        return after.get(key, 0.0) - before.get(key, 0.0)
    view = {}
    for api in BROKER_APIS:
        count = delta(f'strom_request_latency_seconds_count{{api="{api}"}}')
        seconds = delta(f'strom_request_latency_seconds_sum{{api="{api}"}}')
        view[api] = {"requests": int(count), "mean_ms": 1e3 * seconds / count if count else None}
    syncs = delta("strom_fdatasync_latency_seconds_count")
    view["syncs"] = {"count": int(syncs),
                     "mean_ms": 1e3 * delta("strom_fdatasync_latency_seconds_sum") / syncs
                     if syncs else None}
    view["journal_writes"] = int(delta("strom_journal_writes_total"))
    return view


def describe(r):
    line = (f"round {r['round']} {r['case']:<11} {r['records_s']:>9,.0f} records/s "
            f"{r['mb_s']:>6.1f} MB/s over {r['elapsed_s']:.1f} s, read back {r['read_back']:,}; "
            f"broker {r['broker_cpu_s_per_gb']:.2f} CPU s/GB ({r['broker_cpu_share']:.2f} of a core), "
            f"client {r['client_cpu_share']:.2f}, other work {r['other_cpu_share']:.2f} cores, "
            f"steal {r['steal_pct']:.1f}%")
    if r["transactions"]:
        line += (f"; {r['transactions']} commits, commit p50/p99 "
                 f"{percentile(r['commit_ms'], 50):.2f}/{percentile(r['commit_ms'], 99):.2f} ms, "
                 f"flush before it p50/p99 {percentile(r['flush_ms'], 50):.2f}/"
                 f"{percentile(r['flush_ms'], 99):.2f} ms, begin to committed p50 "
                 f"{percentile(r['span_ms'], 50):.0f} ms")
    v = r["broker_view"]
    line += "; broker: " + ", ".join(
        f"{api} {v[api]['requests']} x {v[api]['mean_ms']:.2f} ms"
        for api in BROKER_APIS if v[api]["requests"])
    if v["syncs"]["count"]:
        line += f", syncs {v['syncs']['count']} x {v['syncs']['mean_ms']:.2f} ms"
    if r["broker_warnings"]:
        line += f"; {len(r['broker_warnings'])} WARN/ERROR log lines, first: {r['broker_warnings'][0]}"
    return line


def summarize(results, limits):
    """Medians over the rounds; each transactional figure also as a ratio
    to the idempotent one of its round."""
    summary = {"limits": limits, "cases": {}}
    by_round = {}
    for r in results:
        by_round.setdefault(r["round"], {})[r["case"]] = r
    for case, interval in CASES:
        runs = [r for r in results if r["case"] == case]
        if not runs:
            continue
        entry = {
            "records_s": median([r["records_s"] for r in runs]),
            "mb_s": median([r["mb_s"] for r in runs]),
            "mb_s_runs": [round(r["mb_s"], 1) for r in runs],
            "broker_cpu_s_per_gb": median([r["broker_cpu_s_per_gb"] for r in runs]),
            "client_cpu_share": median([r["client_cpu_share"] for r in runs]),
            "other_cpu_share": median([r["other_cpu_share"] for r in runs]),
            "steal_pct_max": max(r["steal_pct"] for r in runs),
            "read_back_ok": all(r["read_back"] == r["records"] for r in runs),
            "broker_warnings": sum(len(r["broker_warnings"]) for r in runs),
            "broker_produce_mean_ms": median([r["broker_view"]["Produce"]["mean_ms"] for r in runs]),
            "broker_syncs_per_s": median([r["broker_view"]["syncs"]["count"] / r["elapsed_s"]
                                          for r in runs]),
            "broker_sync_mean_ms": median([r["broker_view"]["syncs"]["mean_ms"] for r in runs]),
        }
        if interval:
            ratios = [r["mb_s"] / by_round[r["round"]]["idempotent"]["mb_s"]
                      for r in runs if "idempotent" in by_round[r["round"]]]
            entry["ratio_to_idempotent"] = median(ratios)
            entry["ratio_runs"] = [round(x, 3) for x in ratios]
            commits = [ms for r in runs for ms in r["commit_ms"]]
            flushes = [ms for r in runs for ms in r["flush_ms"]]
            entry.update({
                "transactions": sum(r["transactions"] for r in runs),
                "commit_ms_p50": percentile(commits, 50),
                "commit_ms_p99": percentile(commits, 99),
                "commit_ms_max": max(commits),
                "commit_ms_p50_runs": [round(percentile(r["commit_ms"], 50), 2) for r in runs],
                "commit_ms_p99_runs": [round(percentile(r["commit_ms"], 99), 2) for r in runs],
                "flush_ms_p50": percentile(flushes, 50),
                "flush_ms_p99": percentile(flushes, 99),
                "span_ms_p50": percentile([ms for r in runs for ms in r["span_ms"]], 50),
                "broker_end_txn_mean_ms": median([r["broker_view"]["EndTxn"]["mean_ms"]
                                                  for r in runs]),
                "broker_add_partitions_mean_ms": median(
                    [r["broker_view"]["AddPartitionsToTxn"]["mean_ms"] for r in runs]),
                "add_partitions_per_txn": median(
                    [r["broker_view"]["AddPartitionsToTxn"]["requests"] / r["transactions"]
                     for r in runs]),
            })
        summary["cases"][case] = entry
    return summary


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of producing per case")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--record-bytes", type=int, default=1024, help="value size, header included")
    parser.add_argument("--cluster", action="store_true",
                        help="three nodes (voters, --cores 1 each), replication factor 3, "
                             "min.insync.replicas=2")
    parser.add_argument("--dir", default="target/txn-bench")
    parser.add_argument("--strom", default="target/release/strom")
    parser.add_argument("--client-cpu", type=int, default=1,
                        help="CPU this client runs on (the brokers run on CPU 0)")
    parser.add_argument("--queue-kbytes", type=int, default=QUEUE_KBYTES,
                        help="the producer's queue.buffering.max.kbytes")
    parser.add_argument("--cases", default=",".join(c for c, _ in CASES),
                        help="which cases, comma-separated")
    parser.add_argument("--keep", action="store_true", help="keep each case's data dirs and logs")
    args = parser.parse_args()
    if not os.access(args.strom, os.X_OK):
        sys.exit(f"transactions: {args.strom} missing: cargo build --release")
    if args.record_bytes <= HEADER.size:
        sys.exit(f"transactions: --record-bytes must be above {HEADER.size}")
    os.makedirs(args.dir, exist_ok=True)
    os.sched_setaffinity(0, {args.client_cpu})

    results, limits, failures = [], [], []
    wanted = args.cases.split(",")
    unknown = set(wanted) - {c for c, _ in CASES}
    if unknown:
        sys.exit(f"transactions: unknown cases {sorted(unknown)}")
    order = [(c, interval) for c, interval in CASES if c in wanted]
    for round_no in range(1, args.rounds + 1):
        limit = durable_write_ms(args.dir)
        if limit:
            limits.append({"round": round_no, "durable_write_ms_p50": limit[0],
                           "durable_write_ms_p99": limit[1]})
            print(f"round {round_no} durable 64 KiB write (fio) p50/p99 "
                  f"{limit[0]:.2f}/{limit[1]:.2f} ms", flush=True)
        for case, interval in order:
            try:
                r = run_case(args, round_no, case, interval)
            except (BenchFailure, KafkaException) as e:
                failures.append(f"round {round_no} {case}: {e}")
                print(f"round {round_no} {case}: FAILED: {e}", flush=True)
                continue
            results.append(r)
            print(describe(r), flush=True)
        order = order[1:] + order[:1]

    summary = summarize(results, limits)
    summary.update({
        "topology": "3 nodes, RF=3, min.insync.replicas=2" if args.cluster else "1 broker",
        "rounds": args.rounds, "duration_s": args.duration, "partitions": args.partitions,
        "record_bytes": args.record_bytes, "queue_kbytes": args.queue_kbytes, "failures": failures,
    })
    if limits:
        summary["durable_write_ms_p50"] = median([l["durable_write_ms_p50"] for l in limits])
        summary["durable_write_ms_p99"] = median([l["durable_write_ms_p99"] for l in limits])
    print()
    print(f"| case | MB/s (median) | records/s | ratio to idempotent | commit p50 / p99 ms |")
    for case, entry in summary["cases"].items():
        ratio = f"{entry['ratio_to_idempotent']:.2f}" if "ratio_to_idempotent" in entry else "1"
        commit = (f"{entry['commit_ms_p50']:.2f} / {entry['commit_ms_p99']:.2f}"
                  if "commit_ms_p50" in entry else "")
        print(f"| {case} | {entry['mb_s']:.1f} | {entry['records_s']:,.0f} | {ratio} | {commit} |")
    print("txn-bench-summary: " + json.dumps(summary, sort_keys=True))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
