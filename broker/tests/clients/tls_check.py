"""Kafka clients over TLS (security.protocol SSL) against a broker's SSL
listener: confluent-kafka (librdkafka, OpenSSL) and kafka-python (Python's
ssl) each create a topic, produce records and read them back byte for byte,
with a consumer group committing its offsets.

    tls_check.py BOOTSTRAP CA_PEM [CLIENT_CERT_PEM CLIENT_KEY_PEM]

With a client certificate and key, both clients show it (mutual TLS).
Prints one line per client: `<client>: ok <records>`."""

import sys
import time

from checks import check, fail, kafka_python_round_trip

RECORDS = 200


def payload(client, i):
    # Every byte value appears, so a byte changed on the way shows.
    return bytes((i + j) % 256 for j in range(300)) + f"{client}-{i}".encode()


def confluent(bootstrap, ca, cert, key):
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca}
    if cert:
        tls.update({"ssl.certificate.location": cert, "ssl.key.location": key})
    topic = "tls-confluent"
    admin = AdminClient(dict(tls))
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(60)
    producer = Producer(dict(tls, **{"enable.idempotence": True, "acks": "all"}))
    errors = []
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=payload("confluent", i),
                         partition=i % 2,
                         on_delivery=lambda err, msg: err and errors.append(err))
    check(producer.flush(60) == 0, "confluent-kafka: records left unsent")
    check(not errors, f"confluent-kafka: delivery failed: {errors[:3]}")
    consumer = Consumer(dict(tls, **{
        "group.id": f"tls-group-{time.time_ns()}",
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
    }))
    consumer.subscribe([topic])
    seen, at_end = {}, set()
    deadline = time.time() + 60
    while len(at_end) < 2 or len(seen) < RECORDS:
        check(time.time() < deadline, f"confluent-kafka: read {len(seen)} of {RECORDS}")
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise KafkaException(msg.error())
        i = int(msg.key())
        check(msg.value() == payload("confluent", i), f"confluent-kafka: record {i} differs")
        check(i not in seen, f"confluent-kafka: record {i} read twice")
        seen[i] = msg.offset()
    consumer.commit(asynchronous=False)
    consumer.close()
    print(f"confluent-kafka: ok {len(seen)}", flush=True)


def kafka_python(bootstrap, ca, cert, key):
    from kafka.admin import KafkaAdminClient, NewTopic

    tls = {"bootstrap_servers": bootstrap, "security_protocol": "SSL", "ssl_cafile": ca,
           "ssl_check_hostname": True}
    if cert:
        tls.update({"ssl_certfile": cert, "ssl_keyfile": key})
    topic = "tls-kafka-python"
    admin = KafkaAdminClient(**tls)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    kafka_python_round_trip(tls, topic, lambda i: payload("kafka-python", i), RECORDS, "tls-group")


def main():
    if len(sys.argv) not in (3, 5):
        fail("usage: tls_check.py BOOTSTRAP CA_PEM [CLIENT_CERT_PEM CLIENT_KEY_PEM]")
    bootstrap, ca = sys.argv[1], sys.argv[2]
    cert, key = (sys.argv[3], sys.argv[4]) if len(sys.argv) == 5 else (None, None)
    confluent(bootstrap, ca, cert, key)
    kafka_python(bootstrap, ca, cert, key)


if __name__ == "__main__":
    main()
