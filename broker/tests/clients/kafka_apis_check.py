"""Kafka APIs as a Kafka broker without an authorizer answers them, through
confluent-kafka's AdminClient and kafka-python 3's KafkaAdminClient.

usage: kafka_apis_check.py BOOTSTRAP CASE [DATA_DIR]
CASE: authorized-operations | admin-apis (DATA_DIR: the broker's) | versions
Prints one "<what>: ok" line per check; exits non-zero at the first miss.
"""

import os
import sys
import time
import uuid

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic as KpNewTopic, OffsetSpec
from kafka.protocol.api_message import ApiMessage
import kafka.protocol.admin  # noqa: F401 (registers the request classes)
import kafka.protocol.consumer  # noqa: F401
import kafka.protocol.metadata  # noqa: F401
import kafka.protocol.producer  # noqa: F401
from checks import fail

DEADLINE_S = 60

# Kafka's AclEntry.supportedOperations: all allowed without an authorizer.
TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                    "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
                      "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE"}


def expect(what, got, want):
    if got != want:
        fail(f"{what}: got {got!r}, want {want!r}")
    print(f"{what}: ok")


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    futures[name].result(timeout=DEADLINE_S)


def authorized_operations(bootstrap):
    create_topic(bootstrap, "ops", 2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=DEADLINE_S)
    expect("confluent describe_cluster operations",
           {op.name for op in (cluster.authorized_operations or [])}, CLUSTER_OPERATIONS)
    topics = admin.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)
    topic = topics["ops"].result(timeout=DEADLINE_S)
    expect("confluent describe_topics operations",
           {op.name for op in (topic.authorized_operations or [])}, TOPIC_OPERATIONS)
    plain = admin.describe_cluster().result(timeout=DEADLINE_S)
    expect("confluent describe_cluster without operations", plain.authorized_operations, None)

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = kp.describe_cluster()
        expect("kafka-python describe_cluster operations",
               set(described["authorized_operations"] or []), CLUSTER_OPERATIONS)
        [described_topic] = kp.describe_topics(["ops"])
        expect("kafka-python describe_topics operations",
               set(described_topic["authorized_operations"] or []), TOPIC_OPERATIONS)
    finally:
        kp.close()


def log_dirs(admin, data_dir):
    """DescribeLogDirs: the data dir, a size per partition, offset lag 0."""
    [broker] = admin.describe_log_dirs()
    [log_dir] = broker["log_dirs"]
    expect("describe_log_dirs error", log_dir["error_code"], 0)
    expect("describe_log_dirs dir", log_dir["log_dir"], os.path.abspath(data_dir))
    sizes = {(t["name"], p["partition_index"]): p for t in log_dir["topics"] for p in t["partitions"]}
    expect("describe_log_dirs partitions", sorted(sizes),
           [("dirs", 0), ("dirs", 1), ("dirs", 2), ("pages", 0), ("pages", 1)])
    written = {k for k, p in sizes.items() if p["partition_size"] > 0}
    expect("describe_log_dirs sizes", written, {("dirs", 0), ("dirs", 1)})
    expect("describe_log_dirs lag", {p["offset_lag"] for p in sizes.values()}, {0})
    expect("describe_log_dirs future", {p["is_future_key"] for p in sizes.values()}, {False})
    if not (log_dir["total_bytes"] > 0 and 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]):
        fail(f"describe_log_dirs filesystem bytes: {log_dir}")
    print("describe_log_dirs filesystem bytes: ok")
    [broker] = admin.describe_log_dirs({"dirs": [1, 7]})
    [log_dir] = broker["log_dirs"]
    named = {t["name"]: [p["partition_index"] for p in t["partitions"]] for t in log_dir["topics"]}
    # Kafka lists every topic of the dir, with only the partitions asked for.
    expect("describe_log_dirs filtered", named, {"dirs": [1], "pages": []})


def topic_partitions(admin):
    """DescribeTopicPartitions: pages of at most the limit, through the cursor."""
    seen = []
    cursor = None
    for _ in range(10):
        page = admin.describe_topic_partitions(["pages", "dirs"], response_partition_limit=2, cursor=cursor)
        count = sum(len(t["partitions"]) for t in page["topics"])
        if count > 2:
            fail(f"describe_topic_partitions page over its limit: {page}")
        for topic in page["topics"]:
            if topic["error_code"] != 0 or topic["topic_authorized_operations"] != 3576:
                fail(f"describe_topic_partitions topic: {topic}")
            seen.extend((topic["name"], p["partition_index"]) for p in topic["partitions"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    expect("describe_topic_partitions pages", seen,
           [("dirs", 0), ("dirs", 1), ("dirs", 2), ("pages", 0), ("pages", 1)])
    page = admin.describe_topic_partitions(["nope"])
    expect("describe_topic_partitions unknown topic",
           [(t["name"], t["error_code"]) for t in page["topics"]], [("nope", 3)])
    page = admin.describe_topic_partitions([])
    expect("describe_topic_partitions all topics", [t["name"] for t in page["topics"]], ["dirs", "pages"])


def config_resources(admin):
    """ListConfigResources: every type Kafka lists, or the ones asked for."""
    expect("list_config_resources", admin.list_config_resources(),
           {"broker_logger": ["0"], "broker": ["0"], "topic": ["dirs", "pages"]})
    expect("list_config_resources topics", admin.list_config_resources(["TOPIC"]),
           {"topic": ["dirs", "pages"]})


def producers(admin, producer_id, before_ms, after_ms):
    """DescribeProducers: the idempotent producer's state, no transaction."""
    states = admin.describe_producers([TopicPartition("dirs", 0), TopicPartition("dirs", 2)])
    [state] = states[TopicPartition("dirs", 0)].active_producers
    expect("describe_producers id", state.producer_id, producer_id)
    expect("describe_producers epoch", state.producer_epoch, 0)
    # 5 records to partition 0: sequences 0-4.
    expect("describe_producers last sequence", state.last_sequence, 4)
    expect("describe_producers coordinator epoch", state.coordinator_epoch, -1)
    expect("describe_producers txn start", state.current_transaction_start_offset, -1)
    if not before_ms <= state.last_timestamp <= after_ms:
        fail(f"describe_producers last timestamp {state.last_timestamp} not in [{before_ms}, {after_ms}]")
    print("describe_producers last timestamp: ok")
    expect("describe_producers idle partition", states[TopicPartition("dirs", 2)].active_producers, [])


def admin_apis(bootstrap, data_dir):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([KpNewTopic("dirs", 3, 1), KpNewTopic("pages", 2, 1)])
        before_ms = int(time.time() * 1000)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        futures = [producer.send("dirs", f"v{i}".encode() * 50, partition=i % 2) for i in range(10)]
        producer.flush(timeout=DEADLINE_S)
        for future in futures:
            future.get(timeout=DEADLINE_S)
        producer_id = producer._transaction_manager.producer_id_and_epoch.producer_id
        producer.close()
        after_ms = int(time.time() * 1000)
        log_dirs(admin, data_dir)
        topic_partitions(admin)
        config_resources(admin)
        producers(admin, producer_id, before_ms, after_ms)
    finally:
        admin.close()


def request_classes():
    """kafka-python's request class of each api key."""
    found = {}
    pending = list(ApiMessage.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", 1) is None and cls.is_request():
            found[cls.API_KEY] = cls
    return found


# Advertised APIs kafka-python has no request class for, and the test that
# proves each instead. Any other advertised key without a class fails.
BEYOND_KAFKA_PYTHON = {
    68: "ConsumerGroupHeartbeat: consumer_protocol (confluent-kafka group.protocol=consumer, raw)",
    69: "ConsumerGroupDescribe: consumer_protocol (confluent-kafka admin, strom group describe, raw)",
    76: "ShareGroupHeartbeat: share_groups (confluent-kafka ShareConsumer)",
    78: "ShareFetch: share_groups (confluent-kafka ShareConsumer)",
    77: "ShareGroupDescribe: share_groups (strom share-group describe)",
    79: "ShareAcknowledge: share_groups (confluent-kafka ShareConsumer)",
    80: "AddRaftVoter: voter_replacement (strom cluster add-voter)",
    81: "RemoveRaftVoter: voter_replacement (strom cluster remove-voter)",
    84: "ReadShareGroupState: share_groups (a share partition's leader, in a cluster)",
    85: "WriteShareGroupState: share_groups (a share partition's leader, in a cluster)",
    90: "DescribeShareGroupOffsets: share_groups (strom share-group describe)",
    91: "AlterShareGroupOffsets: share_groups (strom share-group reset-offsets, raw)",
    92: "DeleteShareGroupOffsets: share_groups (raw)",
}


# Fields a request needs to be answered at all: acks=0 gets no answer, and
# a fetch would wait for data.
REQUEST_FIELDS = {
    0: dict(acks=-1, timeout_ms=1000),
    1: dict(max_wait_ms=0, min_bytes=0, max_bytes=1000),
}


def topic_ids(bootstrap, admin):
    """Metadata v10+ carries topic ids; v12+ finds topics by id."""
    admin.create_topics([KpNewTopic("ids", 2, 1)])
    [by_name] = admin.describe_topics(["ids"])
    if not by_name["topic_id"]:
        fail(f"no topic id: {by_name}")
    topic_id = uuid.UUID(str(by_name["topic_id"]))
    [again] = admin.describe_topics(["ids"])
    expect("topic id stable", uuid.UUID(str(again["topic_id"])), topic_id)
    [by_id] = admin.describe_topics([topic_id])
    expect("topic by id", (by_id["error_code"], by_id["name"], len(by_id["partitions"])), (0, "ids", 2))
    [unknown] = admin.describe_topics([uuid.uuid4()])
    expect("unknown topic id", unknown["error_code"], 100)
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    described = confluent.describe_topics(TopicCollection(["ids"]))["ids"].result(timeout=DEADLINE_S)
    mask = (1 << 64) - 1
    bits = ((described.topic_id.get_most_significant_bits() & mask) << 64) | (
        described.topic_id.get_least_significant_bits() & mask)
    expect("confluent topic id", uuid.UUID(int=bits), topic_id)


def offset_specs(bootstrap, admin):
    """ListOffsets v8's EARLIEST_LOCAL and v9's LATEST_TIERED (kafka-python
    asks for them at v8+ only), as Kafka without tiered storage answers."""
    admin.create_topics([KpNewTopic("specs", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(3):
        producer.send("specs", f"s{i}".encode(), partition=0).get(timeout=DEADLINE_S)
    producer.close()
    tp = TopicPartition("specs", 0)
    for name, spec, want in [
        ("earliest local", OffsetSpec.EARLIEST_LOCAL, (0, -1)),
        ("latest tiered", OffsetSpec.LATEST_TIERED, (-1, -1)),
        ("earliest", OffsetSpec.EARLIEST, (0, -1)),
        ("latest", OffsetSpec.LATEST, (3, -1)),
    ]:
        found = admin.list_partition_offsets({tp: spec})[tp]
        expect(name, (found.offset, found.timestamp), want)


def versions(bootstrap, _):
    """Every advertised version of every API, sent and decoded by kafka-python."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        print(f"inferred broker version: {admin._manager.broker_version_data.broker_version}")
        advertised = {int(key): span for key, span in admin.api_versions().items()}
        print(f"advertised: {sorted(advertised.items())}")
        classes = request_classes()
        for key, (low, high) in sorted(advertised.items()):
            cls = classes.get(key)
            if cls is None:
                if key in BEYOND_KAFKA_PYTHON:
                    print(f"api key {key} beyond kafka-python: {BEYOND_KAFKA_PYTHON[key]}")
                    continue
                fail(f"kafka-python has no request class for api key {key}")
            for version in range(low, high + 1):
                if version > cls.max_version:
                    print(f"{cls.__name__} v{version}: beyond kafka-python")
                    continue
                request = cls(version=version, **REQUEST_FIELDS.get(key, {}))
                try:
                    response = admin._manager.run(admin._manager.send, request)
                except Exception as error:  # noqa: BLE001 (reported, then failed)
                    fail(f"{cls.__name__} v{version}: {error!r}")
                if response.API_VERSION != version:
                    fail(f"{cls.__name__} v{version} answered at v{response.API_VERSION}")
        print("round trip: ok")
        features = admin.describe_features()
        print(f"features: {sorted(features.items())}")
        topic_ids(bootstrap, admin)
        offset_specs(bootstrap, admin)
    finally:
        admin.close()


CASES = {
    "versions": versions,
    "authorized-operations": lambda bootstrap, _: authorized_operations(bootstrap),
    "admin-apis": admin_apis,
}


def main():
    bootstrap, case = sys.argv[1], sys.argv[2]
    data_dir = sys.argv[3] if len(sys.argv) > 3 else None
    if case not in CASES:
        fail(f"unknown case {case!r}; one of {sorted(CASES)}")
    CASES[case](bootstrap, data_dir)


if __name__ == "__main__":
    main()
