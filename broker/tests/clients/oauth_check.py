"""confluent-kafka over SASL/OAUTHBEARER with tokens the test signed: an
administrator's token creates a topic and ACLs for alice; alice's token
produces records and reads them back byte for byte in a consumer group;
bob's token (no ACL) is refused writing; each bad token (expired, wrong
audience, wrong issuer, signed by another key) fails to authenticate.

    oauth_check.py BOOTSTRAP ADMIN_TOKEN ALICE_TOKEN BOB_TOKEN BAD_TOKEN...

Prints `ok <records> refused <bad tokens>`."""

import sys
import time

from checks import check

BOOTSTRAP = sys.argv[1]
ADMIN, ALICE, BOB = sys.argv[2:5]
BAD = sys.argv[5:]
RECORDS = 120
TOPIC = "alice-orders"


def settings(token, principal):
    return {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": lambda _config: (token, time.time() + 300, principal, {})}


def payload(i):
    return bytes((i * 13 + j) % 256 for j in range(200)) + f"alice-{i}".encode()


def main():
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       AdminClient, NewTopic, ResourcePatternType,
                                       ResourceType)
    admin = AdminClient(settings(ADMIN, "admin"))
    admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])[TOPIC].result(30)
    bindings = [AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:alice",
                           "*", op, AclPermissionType.ALLOW)
                for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)]
    bindings.append(AclBinding(ResourceType.GROUP, "alice-group", ResourcePatternType.LITERAL,
                               "User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW))
    for future in admin.create_acls(bindings).values():
        future.result(30)

    producer = Producer(dict(settings(ALICE, "alice"), **{"acks": "all"}))
    errors = []
    for i in range(RECORDS):
        producer.produce(TOPIC, key=str(i).encode(), value=payload(i), partition=i % 2,
                         on_delivery=lambda err, msg: err and errors.append(err))
    check(producer.flush(60) == 0, "alice: records left unsent")
    check(not errors, f"alice: delivery failed: {errors[:3]}")
    consumer = Consumer(dict(settings(ALICE, "alice"), **{
        "group.id": "alice-group", "auto.offset.reset": "earliest", "enable.partition.eof": True}))
    consumer.subscribe([TOPIC])
    seen, at_end = {}, set()
    deadline = time.time() + 60
    while len(at_end) < 2 or len(seen) < RECORDS:
        check(time.time() < deadline, f"alice read {len(seen)} of {RECORDS}")
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        i = int(msg.key())
        check(msg.value() == payload(i), f"alice: record {i} changed")
        seen[i] = True
    consumer.commit(asynchronous=False)
    consumer.close()

    bob = Producer(settings(BOB, "bob"))
    refused = []
    bob.produce(TOPIC, value=b"bob", partition=0,
                on_delivery=lambda err, msg: refused.append(err))
    bob.flush(30)
    check(len(refused) == 1 and refused[0] is not None
          and refused[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED,
          f"bob wrote alice's topic: {refused}")

    for n, token in enumerate(BAD):
        client = AdminClient(settings(token, f"bad-{n}"))
        try:
            client.list_topics(timeout=5)
            check(False, f"bad token {n} was accepted")
        except KafkaException as e:
            check(e.args[0].code() in (KafkaError._AUTHENTICATION, KafkaError._TRANSPORT,
                                       KafkaError._TIMED_OUT, KafkaError.SASL_AUTHENTICATION_FAILED),
                  f"bad token {n}: {e}")
    print(f"ok {len(seen)} refused {len(BAD)}", flush=True)


main()
