"""The operator APIs under the authorizer, through confluent-kafka's admin
client as three SASL PLAIN users: admin (a super user), alice (ACLs on
topic `orders`, group `billing` and DESCRIBE on the cluster, set by the
test first) and bob (DESCRIBE on `orders` only, so he sees it). Each call alice may make succeeds with its
effect checked; each bob may not make fails with Kafka's code; the
authorized-operations fields report exactly what each may do; a share
group of each (READ on `alices-share` and `bobs-share`) gets records only
from a topic its user may read.

    acl_operator_check.py BOOTSTRAP

Prints `ok <checks>` when every check held."""

import sys
import time

from checks import check, fail

BOOTSTRAP = sys.argv[1]
checks = 0


def admin_as(user):
    from confluent_kafka.admin import AdminClient
    return AdminClient(settings(user))


def settings(user):
    return {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user,
            "sasl.password": f"{user}-secret"}


def code(future_call):
    """The Kafka error name a call fails with, None when it succeeds."""
    from confluent_kafka import KafkaException
    try:
        future_call()
        return None
    except KafkaException as e:
        return e.args[0].name()


def expect(what, got, wanted):
    global checks
    check(got == wanted, f"{what}: {got}, not {wanted}")
    checks += 1


def main():
    from confluent_kafka import (ConsumerGroupTopicPartitions, Consumer, Producer,
                                 TopicCollection, TopicPartition)
    from confluent_kafka.admin import (AclOperation, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, ResourceType, NewPartitions)
    admin, alice, bob = admin_as("admin"), admin_as("alice"), admin_as("bob")
    topic = ConfigResource(ResourceType.TOPIC, "orders")
    broker = ConfigResource(ResourceType.BROKER, "0")

    # DescribeConfigs: DESCRIBE_CONFIGS on the topic, on the cluster for the broker.
    described = alice.describe_configs([topic])[topic].result(30)
    expect("alice describes the topic's configs", "retention.ms" in described, True)
    expect("bob describes the topic's configs",
           code(lambda: bob.describe_configs([topic])[topic].result(30)),
           "TOPIC_AUTHORIZATION_FAILED")
    expect("alice describes the broker's configs",
           code(lambda: alice.describe_configs([broker])[broker].result(30)),
           "CLUSTER_AUTHORIZATION_FAILED")
    expect("admin describes the broker's configs",
           code(lambda: admin.describe_configs([broker])[broker].result(30)), None)

    # IncrementalAlterConfigs: ALTER_CONFIGS on the topic.
    def alter(client, value):
        change = ConfigResource(ResourceType.TOPIC, "orders", incremental_configs=[
            ConfigEntry("retention.ms", value, incremental_operation=AlterConfigOpType.SET)])
        return client.incremental_alter_configs([change])[change].result(30)
    expect("alice alters the topic", code(lambda: alter(alice, "3600000")), None)
    expect("bob alters the topic", code(lambda: alter(bob, "1")),
           "TOPIC_AUTHORIZATION_FAILED")
    value = admin.describe_configs([topic])[topic].result(30)["retention.ms"].value
    expect("the topic's retention as alice set it", value, "3600000")

    # CreatePartitions: ALTER on the topic.
    expect("bob adds partitions",
           code(lambda: bob.create_partitions([NewPartitions("orders", 3)])["orders"].result(30)),
           "TOPIC_AUTHORIZATION_FAILED")
    expect("alice adds partitions",
           code(lambda: alice.create_partitions([NewPartitions("orders", 3)])["orders"].result(30)),
           None)
    deadline = time.time() + 30
    while len(admin.list_topics("orders", timeout=10).topics["orders"].partitions) != 3:
        check(time.time() < deadline, "orders never had 3 partitions")
        time.sleep(0.2)

    # DeleteRecords: DELETE on the topic.
    producer = Producer(settings("admin"))
    for i in range(3):
        producer.produce("orders", value=f"order-{i}".encode(), partition=0)
    check(producer.flush(30) == 0, "records left unsent")
    cut = TopicPartition("orders", 0, 1)
    expect("bob deletes records",
           code(lambda: bob.delete_records([cut])[cut].result(30)),
           "TOPIC_AUTHORIZATION_FAILED")
    deleted = alice.delete_records([cut])[cut].result(30)
    expect("alice deletes records up to 1", deleted.low_watermark, 1)

    # ElectLeaders: ALTER on the cluster.
    from confluent_kafka import ElectionType
    election = TopicPartition("orders", 0)
    expect("bob elects leaders",
           code(lambda: bob.elect_leaders(ElectionType.PREFERRED, [election]).result(30)),
           "CLUSTER_AUTHORIZATION_FAILED")

    # Authorized operations: exactly what each may do.
    def topic_ops(client):
        described = client.describe_topics(TopicCollection(["orders"]),
                                           include_authorized_operations=True)
        return sorted(op.name for op in described["orders"].result(30).authorized_operations)
    expect("alice's operations on orders", topic_ops(alice),
           sorted(["READ", "DESCRIBE", "ALTER", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"]))
    expect("admin's operations on orders", topic_ops(admin),
           sorted(["READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
                   "DESCRIBE_CONFIGS", "ALTER_CONFIGS"]))

    def cluster_ops(client):
        described = client.describe_cluster(include_authorized_operations=True).result(30)
        return sorted(op.name for op in described.authorized_operations)
    expect("alice's operations on the cluster", cluster_ops(alice), ["DESCRIBE"])
    check("ALTER" in cluster_ops(admin) and "CLUSTER_ACTION" in cluster_ops(admin),
          f"admin's cluster operations: {cluster_ops(admin)}")

    # A group alice reads: its operations, and OffsetDelete (DELETE on the group).
    consumer = Consumer(dict(settings("alice"), **{"group.id": "billing",
                                                  "auto.offset.reset": "earliest",
                                                  "enable.auto.commit": False}))
    consumer.assign([TopicPartition("orders", 0)])
    message = None
    deadline = time.time() + 30
    while message is None:
        check(time.time() < deadline, "alice read nothing")
        message = consumer.poll(1.0)
    check(message.error() is None, f"alice's read failed: {message.error()}")
    expect("alice reads the first record left", message.value(), b"order-1")
    consumer.commit(message, asynchronous=False)
    consumer.close()
    groups = alice.describe_consumer_groups(["billing"], include_authorized_operations=True)
    operations = sorted(op.name for op in groups["billing"].result(30).authorized_operations)
    expect("alice's operations on billing", operations, ["DESCRIBE", "READ"])
    # OffsetDelete, through kafka-python (confluent-kafka has no call for it).
    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartition as Partition

    def delete_offsets(user):
        client = KafkaAdminClient(bootstrap_servers=BOOTSTRAP, security_protocol="SASL_PLAINTEXT",
                                  sasl_mechanism="PLAIN", sasl_plain_username=user,
                                  sasl_plain_password=f"{user}-secret")
        try:
            result = client.delete_group_offsets("billing", [Partition("orders", 0)])
            failed = [str(e) for e in (result or {}).values() if e is not None and
                      getattr(e, "errno", 0) != 0]
            return ",".join(failed) or None
        except Exception as e:
            return type(e).__name__
        finally:
            client.close()
    expect("alice deletes billing's offsets", delete_offsets("alice"),
           "GroupAuthorizationFailedError")
    expect("admin deletes billing's offsets", delete_offsets("admin"), None)
    committed = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("billing", [TopicPartition("orders", 0)])])
    offsets = committed["billing"].result(30).topic_partitions
    expect("billing's offset is gone", [p.offset for p in offsets], [-1001])
    share_checks()
    print(f"ok {checks}", flush=True)


def share_records(user, group, produce_after_s, wait_s):
    """A ShareConsumer of `user` in `group` on `orders`: records and
    errors it got; 5 records are produced (by admin) once it has polled
    `produce_after_s` seconds (a new share group starts at the log end)."""
    from confluent_kafka import KafkaException, Producer, ShareConsumer
    consumer = ShareConsumer({**settings(user), "group.id": group})
    consumer.subscribe(["orders"])
    got, errors = [], []
    started = time.time()
    produced = False
    while time.time() < started + wait_s:
        if not produced and time.time() >= started + produce_after_s:
            producer = Producer(settings("admin"))
            for i in range(5):
                producer.produce("orders", value=f"share-{group}-{i}".encode(), partition=0)
            check(producer.flush(30) == 0, "the records were not produced")
            produced = True
        try:
            messages = consumer.poll(0.5) or []
        except KafkaException as e:
            # librdkafka raises a partition's fetch error from poll.
            errors.append(e.args[0].name())
            messages = []
        for m in messages:
            if m.error():
                errors.append(m.error().name())
            else:
                got.append(m.value().decode())
        if produced and len(got) >= 5:
            break
    consumer.close()
    return got, errors


def share_checks():
    """ShareFetch checks READ on the group and on each topic: alice (READ
    on both) gets the records produced after she joined; bob (READ on his
    group, DESCRIBE only on the topic) gets none of the records produced
    after he joined."""
    got, _ = share_records("alice", "alices-share", 5, 40)
    expect("alice's share records", sorted(got), [f"share-alices-share-{i}" for i in range(5)])
    got, errors = share_records("bob", "bobs-share", 5, 15)
    expect("bob's share records", got, [])
    expect("bob's share fetch refused", "TOPIC_AUTHORIZATION_FAILED" in errors, True)


main()
