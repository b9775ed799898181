"""Kafka clients authenticating with SASL PLAIN against a broker's
SASL_PLAINTEXT or SASL_SSL listener: confluent-kafka and kafka-python each
create a topic, produce records and read them back byte for byte with a
consumer group; then each is refused with a wrong password.

    sasl_check.py BOOTSTRAP PROTOCOL USER PASSWORD [CA_PEM]

Prints one line per check: `<client>: ok <records>` and
`<client> refused: <error>`."""

import sys
import time

from checks import check, fail, kafka_python_round_trip

RECORDS = 100


def payload(client, i):
    return bytes((i * 7 + j) % 256 for j in range(200)) + f"{client}-{i}".encode()


def confluent_settings(bootstrap, protocol, user, password, ca):
    settings = {"bootstrap.servers": bootstrap, "security.protocol": protocol,
                "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": password}
    if ca:
        settings["ssl.ca.location"] = ca
    return settings


def confluent(bootstrap, protocol, user, password, ca):
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    settings = confluent_settings(bootstrap, protocol, user, password, ca)
    topic = "sasl-confluent"
    admin = AdminClient(dict(settings))
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(60)
    producer = Producer(dict(settings, **{"enable.idempotence": True}))
    errors = []
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=payload("confluent", i),
                         on_delivery=lambda err, msg: err and errors.append(err))
    check(producer.flush(60) == 0 and not errors, f"confluent-kafka: delivery failed: {errors[:3]}")
    consumer = Consumer(dict(settings, **{"group.id": f"sasl-{time.time_ns()}",
                                          "auto.offset.reset": "earliest",
                                          "enable.partition.eof": True}))
    consumer.subscribe([topic])
    read = []
    deadline = time.time() + 60
    while len(read) < RECORDS:
        check(time.time() < deadline, f"confluent-kafka: read {len(read)} of {RECORDS}")
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(msg.error())
        i = len(read)
        check(msg.offset() == i and msg.value() == payload("confluent", i),
              f"confluent-kafka: record {i} differs")
        read.append(msg)
    consumer.commit(asynchronous=False)
    consumer.close()
    print(f"confluent-kafka: ok {len(read)}", flush=True)


def confluent_refused(bootstrap, protocol, user, password, ca):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_settings(bootstrap, protocol, user, password + "-wrong", ca))
    try:
        admin.list_topics(timeout=10)
    except Exception as error:  # the client's own error type and text
        print(f"confluent-kafka refused: {error}", flush=True)
        return
    fail("confluent-kafka: a wrong password was served")


def python_settings(bootstrap, protocol, user, password, ca):
    settings = {"bootstrap_servers": bootstrap, "security_protocol": protocol,
                "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
                "sasl_plain_password": password}
    if ca:
        settings["ssl_cafile"] = ca
    return settings


def kafka_python(bootstrap, protocol, user, password, ca):
    kafka_python_round_trip(python_settings(bootstrap, protocol, user, password, ca),
                            "sasl-kafka-python", lambda i: payload("kafka-python", i), RECORDS,
                            "sasl")


def kafka_python_refused(bootstrap, protocol, user, password, ca):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        KafkaProducer(max_block_ms=10000, **python_settings(bootstrap, protocol, user,
                                                             password + "-wrong", ca))
    except KafkaError as error:
        print(f"kafka-python refused: {type(error).__name__}: {error}", flush=True)
        return
    fail("kafka-python: a wrong password was served")


def main():
    if len(sys.argv) not in (5, 6):
        fail("usage: sasl_check.py BOOTSTRAP PROTOCOL USER PASSWORD [CA_PEM]")
    args = sys.argv[1:5] + [sys.argv[5] if len(sys.argv) == 6 else None]
    confluent(*args)
    kafka_python(*args)
    confluent_refused(*args)
    kafka_python_refused(*args)


if __name__ == "__main__":
    main()
