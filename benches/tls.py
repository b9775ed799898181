"""TLS against plaintext on the client listener: producer and consumer
throughput and the broker's CPU per GB, with confluent-kafka (librdkafka,
OpenSSL on the client side) against a release `strom` started fresh per
case, `--cores 1` pinned to CPU 0 (the client on CPU 1).

Each round runs PLAINTEXT then SSL (TLS 1.3, the suite the client and
rustls agree on): the producer writes 16 KiB records (acks=1, 1 MiB
batches, no compression) for --duration seconds, then a consumer reads
every record back from the start and checks each byte. The machine's
limit measured in the same run: `openssl speed` of AES-256-GCM (TLS 1.3's
usual suite) on one core. Medians over the rounds; the last line is a
JSON summary.

    benches/tls.sh [--rounds 5] [--duration 5]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transactions import START_DEADLINE_S, Node, free_ports, median, now  # noqa: E402

RECORD_BYTES = 16 << 10
TOPIC = "tls-bench"
VALUES = [bytes((seed + i) % 256 for i in range(RECORD_BYTES)) for seed in range(64)]


def fail(message):
    sys.exit(f"tls: {message}")


def certificates(dir):
    """A test authority and the broker's keystore for 127.0.0.1."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=dir, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=bench-ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "broker.key", "-out", "broker.csr")
    with open(os.path.join(dir, "broker.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "broker.ext", "-out", "broker.pem")
    with open(os.path.join(dir, "keystore.pem"), "wb") as out:
        for name in ("broker.key", "broker.pem"):
            with open(os.path.join(dir, name), "rb") as f:
                out.write(f.read())
    return os.path.join(dir, "keystore.pem"), os.path.join(dir, "ca.pem")


def aes_gcm_mb_s():
    """One core's AES-256-GCM rate on 16 KiB blocks, MB/s (openssl speed)."""
    out = subprocess.run(["openssl", "speed", "-seconds", "2", "-bytes", str(RECORD_BYTES),
                          "-evp", "aes-256-gcm"], capture_output=True, text=True, check=True).stdout
    line = [l for l in out.splitlines() if l.lower().startswith("aes-256-gcm")][-1]
    return float(line.split()[-1].rstrip("k")) * 1000 / 1e6


def start(strom, dir, protocol, keystore):
    client, admin = free_ports(2)
    args = []
    if protocol == "SSL":
        args = ["--set", f"listeners=SSL://127.0.0.1:{client}",
                "--set", f"ssl.keystore.location={keystore}"]
    node = Node(strom, dir, args, client, admin)
    deadline = now() + START_DEADLINE_S
    while not node.ready():
        if now() > deadline:
            node.stop()
            fail(f"not ready within {START_DEADLINE_S} s:\n{node.log_tail()}")
        time.sleep(0.1)
    return node


def case(strom, dir, protocol, keystore, ca, duration):
    node = start(strom, dir, protocol, keystore)
    try:
        settings = {"bootstrap.servers": f"127.0.0.1:{node.client_port}"}
        if protocol == "SSL":
            settings.update({"security.protocol": "SSL", "ssl.ca.location": ca})
        admin = AdminClient(dict(settings))
        admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)])[TOPIC].result(60)
        producer = Producer(dict(settings, **{
            "acks": "1", "linger.ms": 5, "batch.size": 1 << 20, "compression.type": "none",
            "queue.buffering.max.kbytes": 256 << 10}))
        failed = []
        cpu_before, started = node.cpu_s(), now()
        sent = 0
        while now() - started < duration:
            try:
                producer.produce(TOPIC, value=VALUES[sent % len(VALUES)], partition=0,
                                 on_delivery=lambda err, _: err and failed.append(err))
                sent += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        if producer.flush(120) != 0 or failed:
            fail(f"{protocol}: records not delivered: {failed[:3]}")
        produce_s, produce_cpu = now() - started, node.cpu_s() - cpu_before

        consumer = Consumer(dict(settings, **{
            "group.id": f"tls-bench-{time.time_ns()}", "enable.auto.commit": False,
            "enable.partition.eof": True, "fetch.max.bytes": 64 << 20,
            "max.partition.fetch.bytes": 16 << 20}))
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        cpu_before, started, read = node.cpu_s(), now(), 0
        while True:
            msg = consumer.poll(1.0)
            if msg is None:
                if now() - started > 300:
                    fail(f"{protocol}: read {read} of {sent}")
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and read >= sent:
                    break
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(msg.error())
            if msg.offset() != read or msg.value() != VALUES[read % len(VALUES)]:
                fail(f"{protocol}: record at offset {msg.offset()} is not record {read}")
            read += 1
        consume_s, consume_cpu = now() - started, node.cpu_s() - cpu_before
        consumer.close()
        gb = sent * RECORD_BYTES / 1e9
        return {
            "produce_mb_s": gb * 1000 / produce_s,
            "consume_mb_s": gb * 1000 / consume_s,
            "produce_cpu_s_per_gb": produce_cpu / gb,
            "consume_cpu_s_per_gb": consume_cpu / gb,
            "records": sent,
        }
    finally:
        problem = node.stop()
        if problem:
            fail(f"{protocol} broker {problem}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strom", default="target/release/strom")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    if args.rounds < 1 or args.duration <= 0:
        fail("--rounds and --duration must be positive")
    os.sched_setaffinity(0, {1})
    work = tempfile.mkdtemp(prefix="strom-tls-bench-")
    try:
        keystore, ca = certificates(work)
        limit = aes_gcm_mb_s()
        results = {"PLAINTEXT": [], "SSL": []}
        for n in range(args.rounds):
            for protocol in results:
                dir = os.path.join(work, f"{protocol}-{n}")
                results[protocol].append(case(args.strom, dir, protocol, keystore, ca, args.duration))
                shutil.rmtree(dir, ignore_errors=True)
        summary = {"aes_256_gcm_one_core_mb_s": round(limit)}
        print(f"{'':8} {'produce MB/s':>13} {'consume MB/s':>13} {'CPU s/GB in':>12} {'CPU s/GB out':>13}")
        for protocol, runs in results.items():
            row = {key: median([r[key] for r in runs]) for key in runs[0]}
            summary[protocol] = {k: round(v, 2) for k, v in row.items()}
            print(f"{protocol:8} {row['produce_mb_s']:13.0f} {row['consume_mb_s']:13.0f} "
                  f"{row['produce_cpu_s_per_gb']:12.2f} {row['consume_cpu_s_per_gb']:13.2f}")
        for key in ("produce_mb_s", "consume_mb_s"):
            summary[f"ssl_over_plaintext_{key}"] = round(summary["SSL"][key] / summary["PLAINTEXT"][key], 2)
        print(f"AES-256-GCM on one core (openssl speed, 16 KiB): {limit:.0f} MB/s")
        print(json.dumps(summary))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
