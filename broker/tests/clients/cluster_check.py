"""Real Kafka clients against a Strom cluster of several brokers.

Usage: cluster_check.py MODE BOOTSTRAP [ARGS...]
  spread BOOTSTRAP TOPIC PARTITIONS   create TOPIC (replication factor 1) through
                                      BOOTSTRAP and print "leaders: a-b-c" (the
                                      partitions each broker leads, most first)
  roundtrip BOOTSTRAP TOPIC N         confluent-kafka (idempotent, acks=all) and
                                      kafka-python produce N keyed records with
                                      headers each; both read all 2N back from
                                      every leader and check every byte
  verify BOOTSTRAP TOPIC N            reads back what roundtrip TOPIC N wrote
  group_phase1 BOOTSTRAP TOPIC GROUP N STATE, group_phase2 ...
                                      a group reads half and commits, then,
                                      after a failover, resumes at its
                                      committed offsets and reads the rest
  create_assigned BOOTSTRAP TOPIC REPLICAS [KEY=VALUE...]
                                      creates TOPIC with one partition on the
                                      comma-separated broker ids REPLICAS
  admin BOOTSTRAP CONTROLLER_ID       through a broker that is not the active
                                      controller: describe_cluster names
                                      CONTROLLER_ID and every broker; create,
                                      add partitions, alter and incrementally
                                      alter configs, delete, each seen after
  group BOOTSTRAP_A BOOTSTRAP_B TOPIC N
                                      two members of one group, each bootstrapped
                                      from another broker, share TOPIC's N records
                                      (each read once across them) and commit; the
                                      committed offsets are the end offsets
"""

import sys
import time
import uuid

from checks import check, fail

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

DEADLINE_S = 120


def payload(source, i):
    """A value that names its record and carries bytes of every value."""
    body = bytes((i * 7 + j) % 256 for j in range(64 + i % 200))
    return f"{source}:{i}:".encode() + body


def create(bootstrap, topic, partitions, factor=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, factor)])
    for _, future in futures.items():
        future.result(timeout=60)
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        metadata = admin.list_topics(timeout=10)
        t = metadata.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions \
                and all(p.leader >= 0 for p in t.partitions.values()):
            return metadata
        time.sleep(0.1)
    fail(f"{topic} has no leader for every partition after {DEADLINE_S} s")


def create_assigned(bootstrap, topic, replicas, *configs):
    """Creates TOPIC with one partition on REPLICAS (comma-separated ids,
    the leader first) and the KEY=VALUE configs."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = dict(c.split("=", 1) for c in configs)
    assignment = [[int(r) for r in replicas.split(",")]]
    futures = admin.create_topics([NewTopic(topic, num_partitions=len(assignment), replication_factor=-1,
                                            replica_assignment=assignment, config=config)])
    for _, future in futures.items():
        future.result(timeout=60)
    print(f"created: {topic} on {assignment[0]}")


def spread(bootstrap, topic, partitions):
    metadata = create(bootstrap, topic, int(partitions))
    brokers = sorted(metadata.brokers)
    check(len(brokers) >= 3, f"brokers listed: {brokers}")
    counts = {b: 0 for b in brokers}
    for p in metadata.topics[topic].partitions.values():
        check(p.replicas == [p.leader], f"partition {p.id}: replicas {p.replicas}, leader {p.leader}")
        check(p.isrs == [p.leader], f"partition {p.id}: isr {p.isrs}")
        counts[p.leader] += 1
    print("leaders: " + "-".join(str(c) for c in sorted(counts.values(), reverse=True)))
    print(f"controller: {metadata.controller_id}")


def consume_all(bootstrap, topic, expected):
    """Reads TOPIC from the beginning with confluent-kafka until `expected`
    (key -> (value, headers)) is all seen; checks every byte."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{uuid.uuid4()}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    seen = {}
    deadline = time.time() + DEADLINE_S
    while len(seen) < len(expected) and time.time() < deadline:
        for message in consumer.consume(500, timeout=1.0):
            if message.error():
                fail(f"consume error: {message.error()}")
            key = message.key().decode()
            check(key in expected, f"unexpected key {key}")
            check(key not in seen, f"{key} read twice")
            value, headers = expected[key]
            check(message.value() == value, f"{key}: value differs")
            check(message.headers() == headers, f"{key}: headers {message.headers()} != {headers}")
            seen[key] = message.partition()
    consumer.close()
    check(len(seen) == len(expected), f"read {len(seen)} of {len(expected)}")
    return seen


def roundtrip_expected(n):
    """What `roundtrip` writes: key -> (value, headers)."""
    expected = {}
    for source, prefix in (("confluent", "ck"), ("kafka-python", "kp")):
        for i in range(n):
            headers = [("source", source.encode()), ("i", str(i).encode())]
            expected[f"{prefix}-{i}"] = (payload(source, i), headers)
    return expected


def verify(bootstrap, topic, n):
    """Reads back what `roundtrip` wrote (after failovers): every record
    there once, byte-exact."""
    partitions = consume_all(bootstrap, topic, roundtrip_expected(int(n)))
    print(f"verify: {len(partitions)} ok")


def roundtrip(bootstrap, topic, n):
    n = int(n)
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
    })
    expected = {}
    acknowledged = []

    def delivered(error, message):
        if error is not None:
            fail(f"delivery failed: {error}")
        acknowledged.append(message.key())

    for i in range(n):
        key = f"ck-{i}"
        headers = [("source", b"confluent"), ("i", str(i).encode())]
        expected[key] = (payload("confluent", i), headers)
        producer.produce(topic, key=key.encode(), value=expected[key][0], headers=headers,
                         on_delivery=delivered)
        producer.poll(0)
    check(producer.flush(60) == 0, "confluent producer did not flush")
    check(len(acknowledged) == n, f"{len(acknowledged)} of {n} acknowledged")

    from kafka import KafkaProducer
    kp = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
    futures = []
    for i in range(n):
        key = f"kp-{i}"
        headers = [("source", b"kafka-python"), ("i", str(i).encode())]
        expected[key] = (payload("kafka-python", i), headers)
        futures.append(kp.send(topic, key=key.encode(), value=expected[key][0], headers=headers))
    for future in futures:
        future.get(timeout=60)
    kp.close()

    partitions = consume_all(bootstrap, topic, expected)
    print(f"confluent read: {len(partitions)} ok over {len(set(partitions.values()))} partitions")

    from kafka import KafkaConsumer
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","),
                       auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=5000, group_id=None)
    seen = set()
    deadline = time.time() + DEADLINE_S
    while len(seen) < len(expected) and time.time() < deadline:
        for message in kc:
            key = message.key.decode()
            value, headers = expected[key]
            check(message.value == value, f"kafka-python {key}: value differs")
            check([(k, v) for k, v in message.headers] == headers, f"kafka-python {key}: headers")
            check(key not in seen, f"kafka-python read {key} twice")
            seen.add(key)
    kc.close()
    check(len(seen) == len(expected), f"kafka-python read {len(seen)} of {len(expected)}")
    print(f"kafka-python read: {len(seen)} ok")


def group(bootstrap_a, bootstrap_b, topic, n):
    n = int(n)
    producer = Producer({"bootstrap.servers": bootstrap_a, "acks": "all"})
    for i in range(n):
        producer.produce(topic, key=f"g-{i}".encode(), value=payload("group", i))
    check(producer.flush(60) == 0, "producer did not flush")
    group_id = f"cluster-group-{uuid.uuid4()}"
    members = [
        Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        })
        for bootstrap in (bootstrap_a, bootstrap_b)
    ]
    for member in members:
        member.subscribe([topic])
    seen = {}
    per_member = [0, 0]
    deadline = time.time() + DEADLINE_S
    while len(seen) < n and time.time() < deadline:
        for index, member in enumerate(members):
            for message in member.consume(200, timeout=0.2):
                if message.error():
                    fail(f"consume error: {message.error()}")
                key = message.key().decode()
                i = int(key.split("-")[1])
                check(message.value() == payload("group", i), f"{key}: value differs")
                seen.setdefault(key, index)
                per_member[index] += 1
            try:
                member.commit(asynchronous=False)
            except KafkaException as error:
                if "NO_OFFSET" not in str(error):
                    fail(f"commit failed: {error}")
    check(len(seen) == n, f"the group read {len(seen)} of {n}")
    assignments = [len(m.assignment()) for m in members]
    check(all(a > 0 for a in assignments), f"both members hold partitions: {assignments}")
    committed_total = 0
    for member in members:
        for tp in member.committed(member.assignment(), timeout=10):
            low, high = member.get_watermark_offsets(TopicPartition(topic, tp.partition), timeout=10)
            check(tp.offset == high, f"partition {tp.partition}: committed {tp.offset}, end {high}")
            committed_total += tp.offset - low
        member.close()
    check(committed_total == n, f"committed offsets cover {committed_total} of {n}")
    print(f"group: {n} ok, assignments {assignments}")


def admin(bootstrap, controller_id):
    from confluent_kafka.admin import (
        AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType,
    )
    client = AdminClient({"bootstrap.servers": bootstrap})
    cluster = client.describe_cluster(request_timeout=30).result()
    check(cluster.controller.id == int(controller_id),
          f"describe_cluster names controller {cluster.controller.id}, not {controller_id}")
    check(sorted(n.id for n in cluster.nodes) == [1, 2, 3], f"nodes {cluster.nodes}")

    topic = f"admin-{uuid.uuid4().hex[:8]}"
    create(bootstrap, topic, 3)
    for _, f in client.create_partitions([NewPartitions(topic, 5)]).items():
        f.result(timeout=60)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    for _, f in client.alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                     set_config={"retention.ms": "3600000"})]).items():
        f.result(timeout=60)
    entry = ConfigEntry("segment.bytes", "1048576",
                        incremental_operation=AlterConfigOpType.SET)
    for _, f in client.incremental_alter_configs(
            [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])]).items():
        f.result(timeout=60)
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        t = client.list_topics(topic, timeout=10).topics[topic]
        configs = client.describe_configs([resource])[resource].result(timeout=30)
        if len(t.partitions) == 5 and configs["retention.ms"].value == "3600000" \
                and configs["segment.bytes"].value == "1048576":
            break
        time.sleep(0.1)
    else:
        fail("the changes made through a non-controller broker are not all seen")
    for _, f in client.delete_topics([topic]).items():
        f.result(timeout=60)
    while time.time() < deadline:
        if topic not in client.list_topics(timeout=10).topics:
            break
        time.sleep(0.1)
    else:
        fail(f"{topic} still listed after its deletion")
    print("admin: ok")


def group_phase1(bootstrap, topic, group_id, n, state_file):
    """Produces N records, reads about half of them in GROUP_ID, commits
    and records the committed offsets and keys read; prints the group's
    coordinator."""
    import json
    n = int(n)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, key=f"f-{i}".encode(), value=payload("failover", i))
    check(producer.flush(60) == 0, "producer did not flush")
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group_id,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    keys = []
    deadline = time.time() + DEADLINE_S
    while len(keys) < n // 2 and time.time() < deadline:
        for message in consumer.consume(100, timeout=1.0):
            if message.error():
                fail(f"consume error: {message.error()}")
            keys.append(message.key().decode())
    consumer.commit(asynchronous=False)
    committed = {tp.partition: tp.offset
                 for tp in consumer.committed(consumer.assignment(), timeout=10)}
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group_id])[group_id].result(timeout=30)
    json.dump({"keys": keys, "committed": committed}, open(state_file, "w"))
    print(f"coordinator: {description.coordinator.id}")
    print(f"phase1: read {len(keys)} committed {sum(committed.values())}")


def group_phase2(bootstrap, topic, group_id, n, state_file):
    """Resumes GROUP_ID after a failover: each partition starts exactly at
    its committed offset, and the two phases together read every record."""
    import json
    n = int(n)
    state = json.load(open(state_file))
    committed = {int(p): o for p, o in state["committed"].items()}
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group_id,
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    first = {}
    keys = set(state["keys"])
    deadline = time.time() + DEADLINE_S
    while len(keys) < n and time.time() < deadline:
        for message in consumer.consume(200, timeout=1.0):
            if message.error():
                fail(f"consume error: {message.error()}")
            first.setdefault(message.partition(), message.offset())
            key = message.key().decode()
            i = int(key.split("-")[1])
            check(message.value() == payload("failover", i), f"{key}: value differs")
            keys.add(key)
    consumer.close()
    for partition, offset in first.items():
        # No commit (-1001): the group starts at the earliest offset, 0.
        expected = max(committed.get(partition, 0), 0)
        check(offset == expected,
              f"partition {partition} resumed at {offset}, committed {committed.get(partition)}")
    check(len(keys) == n, f"the two phases read {len(keys)} of {n}")
    print(f"phase2: resumed at the committed offsets, {len(keys)} of {n} read")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    mode = sys.argv[1]
    args = sys.argv[2:]
    if mode == "spread":
        spread(*args)
    elif mode == "roundtrip":
        roundtrip(*args)
    elif mode == "create_assigned":
        create_assigned(*args)
    elif mode == "group_phase1":
        group_phase1(*args)
    elif mode == "group_phase2":
        group_phase2(*args)
    elif mode == "verify":
        verify(*args)
    elif mode == "admin":
        admin(*args)
    elif mode == "group":
        group(*args)
    else:
        fail(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
