"""aiokafka (asyncio, Python's ssl) over each of a broker's secured
listeners: it creates a topic with its admin client, produces records
with acks=all and reads them back byte for byte in a consumer group that
commits its offsets.

    aiokafka_security_check.py CA_PEM CLIENT_CERT CLIENT_KEY LISTENER...

Each LISTENER is PROTOCOL@HOST:PORT[@MECHANISM@USER@PASSWORD]; on an SSL
listener the client shows CLIENT_CERT (mutual TLS). Prints one line per
listener: `<protocol>[/<mechanism>]: ok <records>`."""

import asyncio
import sys
import time

from checks import check

RECORDS = 150


def payload(name, i):
    # Every byte value appears, so a byte changed on the way shows.
    return bytes((i * 7 + j) % 256 for j in range(257)) + f"{name}-{i}".encode()


async def round_trip(listener, ca, cert, key):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.helpers import create_ssl_context

    parts = listener.split("@")
    protocol, bootstrap = parts[0], parts[1]
    settings = {"bootstrap_servers": bootstrap, "security_protocol": protocol}
    name = protocol.lower()
    if protocol in ("SSL", "SASL_SSL"):
        if protocol == "SSL":
            context = create_ssl_context(cafile=ca, certfile=cert, keyfile=key)
        else:
            context = create_ssl_context(cafile=ca)
        settings["ssl_context"] = context
    if protocol.startswith("SASL_"):
        mechanism, user, password = parts[2], parts[3], parts[4]
        settings.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                         "sasl_plain_password": password})
        name += "-" + mechanism.lower()
    topic = f"aiokafka-{name}"
    admin = AIOKafkaAdminClient(**settings)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
        listed = await admin.list_topics()
        check(topic in listed, f"{name}: the admin client does not list {topic}: {listed}")
    finally:
        await admin.close()
    producer = AIOKafkaProducer(acks="all", **settings)
    await producer.start()
    try:
        sent = [await producer.send(topic, key=str(i).encode(), value=payload(name, i),
                                    partition=i % 2) for i in range(RECORDS)]
        for future in sent:
            await future
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, group_id=f"{topic}-group-{time.time_ns()}",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                **settings)
    await consumer.start()
    seen = {}
    try:
        deadline = time.time() + 60
        while len(seen) < RECORDS:
            check(time.time() < deadline, f"{name}: read {len(seen)} of {RECORDS}")
            batches = await consumer.getmany(timeout_ms=1000)
            for records in batches.values():
                for record in records:
                    i = int(record.key)
                    check(record.value == payload(name, i), f"{name}: record {i} changed")
                    check(record.partition == i % 2, f"{name}: record {i} in partition {record.partition}")
                    seen[i] = True
        await consumer.commit()
        committed = [await consumer.committed(tp) for tp in consumer.assignment()]
        check(sum(c or 0 for c in committed) == RECORDS,
              f"{name}: committed {committed}, not {RECORDS} records")
    finally:
        await consumer.stop()
    print(f"{name}: ok {len(seen)}", flush=True)


async def main():
    ca, cert, key = sys.argv[1:4]
    for listener in sys.argv[4:]:
        await round_trip(listener, ca, cert, key)


asyncio.run(main())
