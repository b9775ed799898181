"""confluent-kafka's admin ACL API and clients against a broker with the
authorizer on, over SASL_PLAINTEXT with PLAIN users admin (a super user),
alice and carol (passwords NAME-secret):

    acl_check.py BOOTSTRAP

admin creates ACLs with `create_acls` (carol: READ on topics prefixed
`audit-` and on group `auditors`, a DENY of READ on `audit-secret`),
`describe_acls` finds them by principal and by MATCH on a resource, a
binding Kafka refuses fails; then carol reads what admin wrote to
`audit-log` byte for byte with the group, her read of `audit-secret` and
with group `others` are refused with Kafka's codes, alice's producer to
`audit-log` is refused; `delete_acls` removes carol's prefixed READ and
her next read is refused. Prints one `acl: ...` line per check."""

import sys
import time

from checks import check, fail, poll_messages

RECORDS = 20


def settings(bootstrap, user):
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret"}


def payload(i):
    return bytes((i * 13 + j) % 256 for j in range(64)) + f"audit-{i}".encode()


def consume(bootstrap, user, topic, group, wanted):
    """Reads `wanted` records of `topic` as `user` in `group`; the records,
    or the KafkaError that stopped it."""
    from confluent_kafka import Consumer

    consumer = Consumer(dict(settings(bootstrap, user), **{
        "group.id": group, "auto.offset.reset": "earliest", "enable.partition.eof": True}))
    consumer.subscribe([topic])
    try:
        read, error = poll_messages(consumer, wanted, 30)
    finally:
        consumer.close()
    return error or [m.value() for m in read]


def main():
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                       AclPermissionType, AdminClient, NewTopic, ResourcePatternType,
                                       ResourceType)

    bootstrap = sys.argv[1]
    admin = AdminClient(settings(bootstrap, "admin"))
    for topic in ("audit-log", "audit-secret"):
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[
            topic].result(60)
    producer = Producer(settings(bootstrap, "admin"))
    for topic in ("audit-log", "audit-secret"):
        for i in range(RECORDS):
            producer.produce(topic, value=payload(i))
    check(producer.flush(60) == 0, "acl: admin's records not delivered")

    def binding(kind, name, pattern, op, permission, principal="User:carol"):
        return AclBinding(kind, name, pattern, principal, "*", op, permission)

    prefixed_read = binding(ResourceType.TOPIC, "audit-", ResourcePatternType.PREFIXED,
                            AclOperation.READ, AclPermissionType.ALLOW)
    bindings = [
        prefixed_read,
        binding(ResourceType.GROUP, "auditors", ResourcePatternType.LITERAL, AclOperation.READ,
                AclPermissionType.ALLOW),
        binding(ResourceType.TOPIC, "audit-secret", ResourcePatternType.LITERAL,
                AclOperation.READ, AclPermissionType.DENY),
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)
    print("acl: created 3", flush=True)
    futures = admin.create_acls([binding(ResourceType.BROKER, "not-the-cluster",
                                         ResourcePatternType.LITERAL, AclOperation.ALTER,
                                         AclPermissionType.ALLOW)])
    try:
        for future in futures.values():
            future.result(30)
        fail("acl: a cluster ACL named other than kafka-cluster was created")
    except KafkaException as error:
        print(f"acl: refused binding {error.args[0].name()}", flush=True)

    by_principal = admin.describe_acls(AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None, AclOperation.ANY,
        AclPermissionType.ANY)).result(30)
    check(len(by_principal) == 3, f"acl: carol's ACLs {by_principal}")
    matching = admin.describe_acls(AclBindingFilter(
        ResourceType.TOPIC, "audit-secret", ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY)).result(30)
    check(len(matching) == 2, f"acl: ACLs matching audit-secret {matching}")
    print(f"acl: described {len(by_principal)} by principal, {len(matching)} by match",
          flush=True)

    read = consume(bootstrap, "carol", "audit-log", "auditors", RECORDS)
    check(read == [payload(i) for i in range(RECORDS)], f"acl: carol read {read!r:.200}")
    print(f"acl: carol read {len(read)}", flush=True)
    denied = consume(bootstrap, "carol", "audit-secret", "auditors", 1)
    check(isinstance(denied, KafkaError), f"acl: carol read audit-secret: {denied!r:.200}")
    print(f"acl: carol audit-secret {denied.name()}", flush=True)
    denied = consume(bootstrap, "carol", "audit-log", "others", 1)
    check(isinstance(denied, KafkaError), f"acl: carol read with group others: {denied!r:.200}")
    print(f"acl: carol group others {denied.name()}", flush=True)

    errors = []
    alice = Producer(dict(settings(bootstrap, "alice"), **{"message.timeout.ms": 10000}))
    alice.produce("audit-log", value=b"x", on_delivery=lambda err, msg: errors.append(err))
    alice.flush(30)
    check(errors and errors[0] is not None, f"acl: alice wrote audit-log: {errors}")
    print(f"acl: alice produce {errors[0].name()}", flush=True)

    futures = admin.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "audit-", ResourcePatternType.PREFIXED, "User:carol", None,
        AclOperation.ANY, AclPermissionType.ALLOW)])
    deleted = [acl for future in futures.values() for acl in future.result(30)]
    check(len(deleted) == 1, f"acl: deleted {deleted}")
    denied = consume(bootstrap, "carol", "audit-log", "auditors", 1)
    check(isinstance(denied, KafkaError), f"acl: carol read after delete: {denied!r:.200}")
    print(f"acl: after delete carol {denied.name()}", flush=True)


if __name__ == "__main__":
    main()
