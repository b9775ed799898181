"""Admin API behaviours Kafka clients' own test suites rely on, checked
against a running strom broker with kafka-python and confluent-kafka.

usage: admin_compat_check.py BOOTSTRAP MODE
Each mode prints "MODE: ok" or exits non-zero with a message on the first
mismatch. Every wait is bounded by a deadline.
"""

import sys

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewPartitions, NewTopic
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import KafkaAdminClient
from checks import check, fail

DEADLINE_S = 60


def kafka_python_admin(bootstrap):
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=DEADLINE_S * 1000)


def mode_create_null_message(bootstrap):
    client = kafka_python_admin(bootstrap)
    result = client.create_topics({"null-message": {"num_partitions": 2, "replication_factor": 1}})
    topics = result["topics"]
    check(len(topics) == 1, f"one topic result: {result}")
    topic = topics[0]
    check(topic["error_code"] == 0, f"created: {topic}")
    check(topic["error_message"] is None, f"error_message of a created topic is null, got {topic['error_message']!r}")
    client.close()


def confluent_admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def wait_all(futures):
    return {key: future.result(timeout=DEADLINE_S) for key, future in futures.items()}


def confluent_error(futures):
    """The KafkaError code of the one future, or None when it succeeded."""
    (future,) = futures.values()
    try:
        future.result(timeout=DEADLINE_S)
        return None
    except KafkaException as e:
        return e.args[0].code()


def partition_count(client, topic):
    metadata = client.list_topics(topic, timeout=DEADLINE_S)
    return len(metadata.topics[topic].partitions)


INVALID_REPLICA_ASSIGNMENT = 39
INVALID_REQUEST = 42


def mode_manual_assignment(bootstrap):
    client = confluent_admin(bootstrap)
    # One broker (id 0): three partitions with it as the only replica.
    wait_all(client.create_topics([NewTopic("assigned", num_partitions=3, replica_assignment=[[0], [0], [0]])]))
    check(partition_count(client, "assigned") == 3, "three assigned partitions")
    wait_all(client.create_partitions([NewPartitions("assigned", 5, replica_assignment=[[0], [0]])]))
    check(partition_count(client, "assigned") == 5, "grown to five with an assignment")
    refusals = {
        "unknown broker": [[7]],
        "broker twice": [[0, 0]],
    }
    for what, assignment in refusals.items():
        code = confluent_error(client.create_topics([NewTopic(f"bad-{len(what)}", num_partitions=len(assignment), replica_assignment=assignment)]))
        check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"{what}: INVALID_REPLICA_ASSIGNMENT, got {code}")
    code = confluent_error(client.create_partitions([NewPartitions("assigned", 8, replica_assignment=[[0]])]))
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"too few assignments: INVALID_REPLICA_ASSIGNMENT, got {code}")
    code = confluent_error(client.create_partitions([NewPartitions("assigned", 6, replica_assignment=[[3]])]))
    check(code == KafkaError.INVALID_REPLICA_ASSIGNMENT, f"unknown broker: INVALID_REPLICA_ASSIGNMENT, got {code}")
    check(partition_count(client, "assigned") == 5, "refused growths left five partitions")

    # Shapes confluent-kafka cannot send: gaps, and counts next to assignments.
    kp = kafka_python_admin(bootstrap)
    cases = [
        ("gap", {"assignments": {0: [0], 2: [0]}}, INVALID_REPLICA_ASSIGNMENT),
        ("not-from-zero", {"assignments": {1: [0]}}, INVALID_REPLICA_ASSIGNMENT),
        ("with-count", {"num_partitions": 1, "assignments": {0: [0]}}, INVALID_REQUEST),
        ("with-factor", {"replication_factor": 1, "assignments": {0: [0]}}, INVALID_REQUEST),
        ("uneven", {"assignments": {0: [0], 1: []}}, INVALID_REPLICA_ASSIGNMENT),
    ]
    for name, spec, expected in cases:
        result = kp.create_topics({f"kp-{name}": spec}, raise_errors=False)
        (topic,) = result["topics"]
        check(topic["error_code"] == expected, f"{name}: error {expected}, got {topic}")
    result = kp.create_topics({"kp-assigned": {"assignments": {1: [0], 0: [0]}}}, raise_errors=False)
    (topic,) = result["topics"]
    check(topic["error_code"] == 0 and topic["num_partitions"] == 2 and topic["replication_factor"] == 1, f"assigned out of order: {topic}")
    kp.close()


def kp_describe(bootstrap, resource_type, name):
    """Every config of a resource (kafka-python asks DescribeConfigs v4)."""
    kp = kafka_python_admin(bootstrap)
    result = kp.describe_configs([KpConfigResource(resource_type, name)], include_synonyms=True, config_filter="all")
    kp.close()
    (by_name,) = result[resource_type.lower()].values()
    return by_name


def incremental(client, resource_type, name, changes):
    """IncrementalAlterConfigs of (key, value, op) on one resource: the
    KafkaError code, or None when it was applied."""
    entries = [ConfigEntry(key, value, incremental_operation=op) for key, value, op in changes]
    return confluent_error(client.incremental_alter_configs([ConfigResource(resource_type, name, incremental_configs=entries)]))


def kp_broker_resource(bootstrap, name, configs):
    """IncrementalAlterConfigs SET on broker resource `name`, sent to the
    broker connected to: the cluster-wide default "" (neither client's
    admin API names it) or another broker's id (the clients would send it
    to that broker). kafka-python builds and sends the request; returns the
    error code."""
    kp = kafka_python_admin(bootstrap)
    request = kp._alter_configs_request([KpConfigResource("BROKER", name, configs=configs)], False, True)
    response = kp._manager.run(kp._manager.send, request)
    kp.close()
    (result,) = response.responses
    return result.error_code


def confluent_describe(client, resource_type, name):
    result = wait_all(client.describe_configs([ConfigResource(resource_type, name)]))
    (entries,) = result.values()
    return entries


def produce_one(bootstrap, topic, size):
    """Produces one record of `size` bytes: the delivery error code or None."""
    outcome = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000, "retries": 0})
    producer.produce(topic, b"x" * size, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(DEADLINE_S)
    check(len(outcome) == 1, f"one delivery report for {topic}")
    return None if outcome[0] is None else outcome[0].code()


SET = AlterConfigOpType.SET
BROKER = ConfigResource.Type.BROKER
TOPIC = ConfigResource.Type.TOPIC
UNKNOWN_TYPE = "UNKNOWN"


def check_dynamic_values(bootstrap, client):
    """What mode broker-configs changed, as seen now."""
    broker = confluent_describe(client, BROKER, "0")
    retention = broker["log.retention.bytes"]
    check(retention.value == "123456789", f"log.retention.bytes: {retention}")
    check(retention.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, f"source of log.retention.bytes: {retention.source}")
    flush = broker["log.flush.interval.messages"]
    check(flush.value == "77" and flush.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, f"log.flush.interval.messages: {flush}")
    check(broker["log.retention.check.interval.ms"].value == "1000", "log.retention.check.interval.ms")
    kp = kafka_python_admin(bootstrap)
    request = kp._describe_configs_request([KpConfigResource("BROKER", "")], True)
    response = kp._manager.run(kp._manager.send, request)
    kp.close()
    (result,) = response.results
    defaults = {c.name: (c.value, c.config_source) for c in result.configs}
    check(defaults == {"log.flush.interval.messages": ("77", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)},
          f"cluster-wide defaults: {defaults}")
    # Live: a topic without overrides runs with the new broker defaults.
    topic = confluent_describe(client, TOPIC, "typed")
    check(topic["retention.bytes"].value == "123456789", f"topic default follows the broker: {topic['retention.bytes']}")
    check(topic["flush.messages"].value == "77", f"topic default follows the cluster default: {topic['flush.messages']}")
    code = produce_one(bootstrap, "typed", 10_000)
    check(code == KafkaError.MSG_SIZE_TOO_LARGE, f"10,000 bytes over message.max.bytes=3000: {code}")
    check(produce_one(bootstrap, "typed", 100) is None, "a small record is still accepted")


def mode_broker_configs(bootstrap):
    broker = kp_describe(bootstrap, "BROKER", "0")
    check(len(broker) >= 50, f"every broker setting, got {len(broker)}: {sorted(broker)}")
    for name in ["advertised.listeners", "listeners", "log.dirs", "log.flush.interval.messages", "log.retention.bytes",
                 "log.segment.bytes", "log.retention.ms", "log.cleanup.policy", "message.max.bytes",
                 "log.retention.check.interval.ms", "num.partitions", "broker.id", "compression.type"]:
        check(name in broker, f"{name} is described")
    for name, entry in broker.items():
        check(entry["config_type"] != UNKNOWN_TYPE, f"{name} has a type: {entry}")
        check(entry["synonyms"], f"{name} has synonyms: {entry}")
    check(broker["advertised.listeners"]["read_only"], "advertised.listeners is read-only")
    check(not broker["log.retention.bytes"]["read_only"], "log.retention.bytes can change")
    check(broker["log.retention.bytes"]["config_type"] == "LONG", f"{broker['log.retention.bytes']}")
    check(broker["log.cleanup.policy"]["config_type"] == "LIST", f"{broker['log.cleanup.policy']}")

    client = confluent_admin(bootstrap)
    wait_all(client.create_topics([NewTopic("typed", num_partitions=1, replication_factor=1)]))
    topic = kp_describe(bootstrap, "TOPIC", "typed")
    for name, entry in topic.items():
        check(entry["config_type"] != UNKNOWN_TYPE, f"topic {name} has a type: {entry}")
    check(topic["retention.bytes"]["config_type"] == "LONG", f"{topic['retention.bytes']}")
    check(topic["segment.bytes"]["config_type"] == "INT", f"{topic['segment.bytes']}")
    check(topic["cleanup.policy"]["config_type"] == "LIST", f"{topic['cleanup.policy']}")

    code = incremental(client, BROKER, "0", [
        ("log.retention.bytes", "123456789", SET),
        ("message.max.bytes", "3000", SET),
        ("log.retention.check.interval.ms", "1000", SET),
    ])
    check(code is None, f"dynamic broker settings applied: {code}")
    code = kp_broker_resource(bootstrap, "", {"log.flush.interval.messages": "77"})
    check(code == 0, f"cluster-wide default applied: {code}")
    for name, value in [("advertised.listeners", "PLAINTEXT://127.0.0.1:1"), ("node.id", "3"), ("log.dirs", "/tmp/x")]:
        code = incremental(client, BROKER, "0", [(name, value, SET)])
        check(code == KafkaError.INVALID_REQUEST, f"read-only {name}: INVALID_REQUEST, got {code}")
    code = incremental(client, BROKER, "0", [("log.retention.bytes", "lots", SET)])
    check(code == KafkaError.INVALID_CONFIG, f"a bad value: INVALID_CONFIG, got {code}")
    code = kp_broker_resource(bootstrap, "5", {"log.retention.bytes": "1"})
    check(code == INVALID_REQUEST, f"another broker's id: INVALID_REQUEST, got {code}")
    check_dynamic_values(bootstrap, client)


def mode_broker_configs_restarted(bootstrap):
    check_dynamic_values(bootstrap, confluent_admin(bootstrap))


GROUP = ConfigResource.Type.GROUP
APPEND = AlterConfigOpType.APPEND
SUBTRACT = AlterConfigOpType.SUBTRACT
GROUP_KEYS = {
    "consumer.session.timeout.ms": "45000",
    "consumer.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
    "streams.session.timeout.ms": "45000",
    "streams.heartbeat.interval.ms": "5000",
    "streams.num.standby.replicas": "0",
}


def check_group_configs(client):
    group = confluent_describe(client, GROUP, "tuned")
    check(set(group) == set(GROUP_KEYS), f"every group setting: {sorted(group)}")
    session = group["consumer.session.timeout.ms"]
    check(session.value == "50000" and session.source == ConfigSource.GROUP_CONFIG.value, f"{session}")
    heartbeat = group["consumer.heartbeat.interval.ms"]
    check(heartbeat.value == "6000" and heartbeat.source == ConfigSource.GROUP_CONFIG.value, f"{heartbeat}")
    for name, default in GROUP_KEYS.items():
        if name not in ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"):
            entry = group[name]
            check(entry.value == default and entry.source == ConfigSource.DEFAULT_CONFIG.value, f"{name}: {entry}")
    other = confluent_describe(client, GROUP, "untouched")
    check(other["consumer.session.timeout.ms"].value == "45000", "another group keeps the defaults")


def mode_group_configs(bootstrap):
    client = confluent_admin(bootstrap)
    code = incremental(client, GROUP, "tuned", [
        ("consumer.session.timeout.ms", "50000", SET),
        ("consumer.heartbeat.interval.ms", "6000", SET),
    ])
    check(code is None, f"group settings applied: {code}")
    for name, value in [("consumer.session.timeout.ms", "1000"), ("consumer.heartbeat.interval.ms", "60000"),
                        ("no.such.setting", "1")]:
        code = incremental(client, GROUP, "tuned", [(name, value, SET)])
        check(code == KafkaError.INVALID_CONFIG, f"group {name}={value}: INVALID_CONFIG, got {code}")
    check_group_configs(client)

    # APPEND and SUBTRACT on list settings, refused on the others.
    wait_all(client.create_topics([NewTopic("listed", num_partitions=1, replication_factor=1)]))
    check(incremental(client, TOPIC, "listed", [("cleanup.policy", "delete", APPEND)]) is None, "APPEND delete")
    check(incremental(client, TOPIC, "listed", [("cleanup.policy", "compact", SUBTRACT)]) is None, "SUBTRACT compact")
    entry = confluent_describe(client, TOPIC, "listed")["cleanup.policy"]
    check(entry.value == "delete" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"cleanup.policy: {entry}")
    # A compacted topic from a deleting one and back, as Kafka's tools do it.
    check(incremental(client, TOPIC, "listed", [("cleanup.policy", "compact", APPEND)]) is None, "APPEND compact")
    entry = confluent_describe(client, TOPIC, "listed")["cleanup.policy"]
    check(entry.value == "delete,compact", f"cleanup.policy after APPEND compact: {entry}")
    check(incremental(client, TOPIC, "listed", [("cleanup.policy", "delete", SUBTRACT)]) is None, "SUBTRACT delete")
    entry = confluent_describe(client, TOPIC, "listed")["cleanup.policy"]
    check(entry.value == "compact", f"cleanup.policy after SUBTRACT delete: {entry}")
    code = incremental(client, TOPIC, "listed", [("cleanup.policy", "compact", SUBTRACT)])
    check(code == KafkaError.INVALID_CONFIG, f"SUBTRACT to an empty policy: INVALID_CONFIG, got {code}")
    check(incremental(client, TOPIC, "listed", [("cleanup.policy", "delete", SET)]) is None, "SET delete")
    code = incremental(client, TOPIC, "listed", [("retention.ms", "5", APPEND)])
    check(code == KafkaError.INVALID_CONFIG, f"APPEND to a number: INVALID_CONFIG, got {code}")
    check(incremental(client, BROKER, "0", [("log.cleanup.policy", "delete", APPEND)]) is None, "broker APPEND")
    entry = confluent_describe(client, BROKER, "0")["log.cleanup.policy"]
    check(entry.value == "delete" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, f"log.cleanup.policy: {entry}")


def mode_group_configs_restarted(bootstrap):
    check_group_configs(confluent_admin(bootstrap))


# What each topic codec's test producer sends: always another codec, so the
# broker recompresses every batch.
PRODUCER_CODEC = {
    "uncompressed": "lz4",
    "gzip": "zstd",
    "snappy": "gzip",
    "lz4": "none",
    "zstd": "snappy",
}
TOPIC_LEVELS = {
    "gzip": {"compression.gzip.level": "9"},
    "lz4": {"compression.lz4.level": "12"},
    "zstd": {"compression.zstd.level": "10"},
}


def mode_recompress(bootstrap):
    import confluent_check as cc
    client = confluent_admin(bootstrap)
    count, partitions = 3000, 2
    for codec, producer_codec in PRODUCER_CODEC.items():
        topic = f"recompressed-{codec}"
        config = {"compression.type": codec, **TOPIC_LEVELS.get(codec, {})}
        wait_all(client.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config)]))
        entry = confluent_describe(client, TOPIC, topic)["compression.type"]
        check(entry.value == codec, f"{topic}: compression.type {entry}")
        # Idempotent, acks=all: the recompressed batches keep the producer's
        # id, epoch and sequence, or the producer fails on its next batch.
        cc.produce(bootstrap, topic, count, partitions, {"compression.type": producer_codec})
        cc.verify(cc.consume(bootstrap, topic, count, partitions), count, partitions)
        print(f"{codec} from {producer_codec}: ok")
    for name, value in [("compression.type", "brotli"), ("compression.gzip.level", "10"),
                        ("compression.zstd.level", "23"), ("compression.lz4.level", "0")]:
        code = confluent_error(client.create_topics([NewTopic(f"bad-{name}", num_partitions=1, replication_factor=1,
                                                              config={name: value})]))
        check(code == KafkaError.INVALID_CONFIG, f"{name}={value}: INVALID_CONFIG, got {code}")
    # The broker default, changed live: a topic without its own value follows.
    wait_all(client.create_topics([NewTopic("recompressed-default", num_partitions=1, replication_factor=1)]))
    check(incremental(client, BROKER, "0", [("compression.type", "zstd", SET)]) is None, "broker compression.type")
    cc.produce(bootstrap, "recompressed-default", 500, 1, {"compression.type": "gzip"})
    cc.verify(cc.consume(bootstrap, "recompressed-default", 500, 1), 500, 1)


def mode_retention_check_live(bootstrap):
    """log.retention.check.interval.ms changed while the broker runs
    takes effect at once: the broker starts with the default (5 minutes),
    retention then deletes the old segments within seconds."""
    import time
    import confluent_check as cc
    from confluent_kafka import Consumer, TopicPartition
    client = confluent_admin(bootstrap)
    topic = "retained"
    config = {"segment.bytes": "20000", "retention.bytes": "1"}
    wait_all(client.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1, config=config)]))
    cc.produce(bootstrap, topic, 1000, 1, {"linger.ms": 0, "batch.num.messages": 20})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
    check(low == 0 and high == 1000, f"nothing deleted yet under the 5-minute default: {low}..{high}")
    check(incremental(client, BROKER, "0", [("log.retention.check.interval.ms", "300", SET)]) is None,
          "log.retention.check.interval.ms applied")
    deadline = time.monotonic() + 30
    while True:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=DEADLINE_S)
        if low > 0:
            break
        check(time.monotonic() < deadline, f"retention ran within 30 s of the change: {low}..{high}")
        time.sleep(0.2)
    consumer.close()


# Every topic config of Kafka 4 that Strom keeps without acting on it, at a
# value other than its default.
KAFKA_TOPIC_CONFIGS = {
    "segment.jitter.ms": "10",
    "delete.retention.ms": "1000",
    "min.compaction.lag.ms": "5",
    "max.compaction.lag.ms": "600000",
    "min.cleanable.dirty.ratio": "0.25",
    "file.delete.delay.ms": "0",
    "preallocate": "true",
    "message.format.version": "2.8",
    "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.after.max.ms": "7200000",
    "message.downconversion.enable": "false",
    "leader.replication.throttled.replicas": "0:0",
    "follower.replication.throttled.replicas": "*",
    "remote.storage.enable": "false",
    "local.retention.ms": "60000",
    "local.retention.bytes": "1048576",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
}


def check_kafka_topic_configs(client, topic, expected):
    entries = confluent_describe(client, TOPIC, topic)
    for name, value in expected.items():
        entry = entries.get(name)
        check(entry is not None, f"{name} is described")
        check(entry.value == value, f"{name}={entry.value}, expected {value}")
        check(entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, f"{name}: source {entry.source}")
    # Kafka's defaults on a topic that sets none of them.
    defaults = confluent_describe(client, TOPIC, "kafka-defaults")
    for name, value in [("delete.retention.ms", "86400000"), ("file.delete.delay.ms", "60000"),
                        ("min.cleanable.dirty.ratio", "0.5"), ("remote.storage.enable", "false")]:
        entry = defaults[name]
        check(entry.value == value and entry.source == ConfigSource.DEFAULT_CONFIG.value,
              f"default {name}: {entry.value} ({entry.source})")


def mode_kafka_topic_configs(bootstrap):
    """Topic configs Kafka 4 defines are accepted at creation and by
    IncrementalAlterConfigs, described as set; unknown keys and bad
    values are refused with INVALID_CONFIG."""
    client = confluent_admin(bootstrap)
    wait_all(client.create_topics([
        NewTopic("kafka-configs", num_partitions=1, replication_factor=1, config=KAFKA_TOPIC_CONFIGS),
        NewTopic("kafka-defaults", num_partitions=1, replication_factor=1),
    ]))
    check(incremental(client, TOPIC, "kafka-configs", [("delete.retention.ms", "2000", SET)]) is None,
          "delete.retention.ms altered")
    check_kafka_topic_configs(client, "kafka-configs", dict(KAFKA_TOPIC_CONFIGS, **{"delete.retention.ms": "2000"}))
    for name, value in [("delete.retention.mss", "1000"), ("min.cleanable.dirty.ratio", "2"),
                        ("remote.storage.enable", "true"), ("message.format.version", "latest")]:
        code = confluent_error(client.create_topics([NewTopic("refused", num_partitions=1, replication_factor=1,
                                                              config={name: value})]))
        check(code == KafkaError.INVALID_CONFIG, f"create with {name}={value}: INVALID_CONFIG, got {code}")
        code = incremental(client, TOPIC, "kafka-configs", [(name, value, SET)])
        check(code == KafkaError.INVALID_CONFIG, f"alter {name}={value}: INVALID_CONFIG, got {code}")


def mode_kafka_topic_configs_restarted(bootstrap):
    check_kafka_topic_configs(confluent_admin(bootstrap), "kafka-configs",
                              dict(KAFKA_TOPIC_CONFIGS, **{"delete.retention.ms": "2000"}))


MODES = {
    "kafka-topic-configs": mode_kafka_topic_configs,
    "kafka-topic-configs-restarted": mode_kafka_topic_configs_restarted,
    "retention-check-live": mode_retention_check_live,
    "recompress": mode_recompress,
    "group-configs": mode_group_configs,
    "group-configs-restarted": mode_group_configs_restarted,
    "broker-configs": mode_broker_configs,
    "broker-configs-restarted": mode_broker_configs_restarted,
    "manual-assignment": mode_manual_assignment,
    "create-null-message": mode_create_null_message,
}


def main():
    bootstrap, mode = sys.argv[1], sys.argv[2]
    MODES[mode](bootstrap)
    print(f"{mode}: ok")


if __name__ == "__main__":
    main()
