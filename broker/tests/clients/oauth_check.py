"""confluent-kafka, kafka-python and aiokafka over SASL/OAUTHBEARER with
tokens the test signed: an administrator's token creates a topic and ACLs
for alice; alice's token produces records and reads them back byte for
byte in a consumer group (with each client);
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
        "group.id": "alice-group", "auto.offset.reset": "earliest", "enable.partition.eof": True,
        # The commit below commits what was read: an automatic commit
        # first (every 5 s) would leave it nothing to commit (_NO_OFFSET).
        "enable.auto.commit": False}))
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
    python_clients()
    print(f"ok {len(seen)} refused {len(BAD)}", flush=True)


def python_clients():
    """alice's token with kafka-python and aiokafka: records written and
    read back byte for byte in her group."""
    import asyncio

    from kafka import KafkaConsumer, KafkaProducer
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Alice(AbstractTokenProvider):
        def token(self):
            return ALICE

    oauth = {"bootstrap_servers": BOOTSTRAP, "security_protocol": "SASL_PLAINTEXT",
             "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Alice()}
    producer = KafkaProducer(acks="all", **oauth)
    for i in range(20):
        producer.send(TOPIC, key=f"kp-{i}".encode(), value=payload(1000 + i), partition=0)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(TOPIC, group_id="alice-group", auto_offset_reset="earliest",
                             consumer_timeout_ms=15000, **oauth)
    got = {m.key: m.value for m in consumer if m.key and m.key.startswith(b"kp-")}
    consumer.close()
    check(len(got) == 20 and all(got[f"kp-{i}".encode()] == payload(1000 + i) for i in range(20)),
          f"kafka-python read {len(got)} of 20")

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.abc import AbstractTokenProvider as AsyncProvider

    class AsyncAlice(AsyncProvider):
        async def token(self):
            return ALICE

    async def round_trip():
        settings = dict(oauth, sasl_oauth_token_provider=AsyncAlice())
        producer = AIOKafkaProducer(acks="all", **settings)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait(TOPIC, key=f"ak-{i}".encode(),
                                             value=payload(2000 + i), partition=1)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(TOPIC, group_id="alice-group", auto_offset_reset="earliest",
                                    **settings)
        await consumer.start()
        seen = {}
        try:
            deadline = time.time() + 30
            while len(seen) < 20:
                check(time.time() < deadline, f"aiokafka read {len(seen)} of 20")
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    for r in records:
                        if r.key and r.key.startswith(b"ak-"):
                            check(r.value == payload(2000 + int(r.key[3:])), "aiokafka: changed")
                            seen[r.key] = True
        finally:
            await consumer.stop()
    asyncio.run(round_trip())


main()
