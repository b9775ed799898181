"""Kafka clients authenticating with SASL (PLAIN, SCRAM-SHA-256 or
SCRAM-SHA-512) against a broker's SASL_PLAINTEXT or SASL_SSL listener:
confluent-kafka and kafka-python each create a topic, produce records and
read them back byte for byte with a consumer group; then each is refused
with a wrong password.

    sasl_check.py BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD [CA_PEM]

Prints one line per check: `<client>: ok <records>` and
`<client> refused: <error>`.

    sasl_check.py scram-admin BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD [CA_PEM]

confluent-kafka's admin API, authenticated as USER, manages SCRAM
credentials: sets user `dave`'s for both mechanisms, describes them,
is refused too few iterations and the deletion of a credential dave does
not have, deletes dave's SCRAM-SHA-256 one, then authenticates as dave
with SCRAM-SHA-512 and round-trips records. Prints `scram-admin: ...`
lines.

    sasl_check.py reauth BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD [CA_PEM]

confluent-kafka produces for 7 seconds against a broker whose sessions
expire every few seconds (connections.max.reauth.ms), authenticating
again on its connections, then reads every record back. Prints
`reauth: ok N`."""

import sys
import time

from checks import check, fail, kafka_python_round_trip, poll_messages

RECORDS = 100


def payload(client, i):
    return bytes((i * 7 + j) % 256 for j in range(200)) + f"{client}-{i}".encode()


def confluent_settings(bootstrap, protocol, mechanism, user, password, ca):
    settings = {"bootstrap.servers": bootstrap, "security.protocol": protocol,
                "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": password}
    if ca:
        settings["ssl.ca.location"] = ca
    return settings


def confluent(bootstrap, protocol, mechanism, user, password, ca):
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    settings = confluent_settings(bootstrap, protocol, mechanism, user, password, ca)
    topic = f"sasl-confluent-{mechanism.lower()}-{user}"
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
    read, error = poll_messages(consumer, RECORDS, 60)
    if error:
        raise KafkaException(error)
    check(len(read) == RECORDS, f"confluent-kafka: read {len(read)} of {RECORDS}")
    for i, msg in enumerate(read):
        check(msg.offset() == i and msg.value() == payload("confluent", i),
              f"confluent-kafka: record {i} differs")
    consumer.commit(asynchronous=False)
    consumer.close()
    print(f"confluent-kafka: ok {len(read)}", flush=True)


def confluent_refused(bootstrap, protocol, mechanism, user, password, ca):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(confluent_settings(bootstrap, protocol, mechanism, user,
                                           password + "-wrong", ca))
    try:
        admin.list_topics(timeout=10)
    except Exception as error:  # the client's own error type and text
        print(f"confluent-kafka refused: {error}", flush=True)
        return
    fail("confluent-kafka: a wrong password was served")


def python_settings(bootstrap, protocol, mechanism, user, password, ca):
    settings = {"bootstrap_servers": bootstrap, "security_protocol": protocol,
                "sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}
    if ca:
        settings["ssl_cafile"] = ca
    return settings


def kafka_python(bootstrap, protocol, mechanism, user, password, ca):
    kafka_python_round_trip(python_settings(bootstrap, protocol, mechanism, user, password, ca),
                            f"sasl-kafka-python-{mechanism.lower()}-{user}",
                            lambda i: payload("kafka-python", i), RECORDS, "sasl")


def kafka_python_refused(bootstrap, protocol, mechanism, user, password, ca):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        KafkaProducer(max_block_ms=10000, **python_settings(bootstrap, protocol, mechanism, user,
                                                             password + "-wrong", ca))
    except KafkaError as error:
        print(f"kafka-python refused: {type(error).__name__}: {error}", flush=True)
        return
    fail("kafka-python: a wrong password was served")


def scram_admin(bootstrap, protocol, mechanism, user, password, ca):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    admin = AdminClient(confluent_settings(bootstrap, protocol, mechanism, user, password, ca))

    def alter(changes):
        return {u: f.result(60) for u, f in admin.alter_user_scram_credentials(changes).items()}

    def refused(changes, code):
        try:
            alter(changes)
        except KafkaException as error:
            name = error.args[0].name()
            check(name == code, f"scram-admin: expected {code}, got {error}")
            print(f"scram-admin: refused {name}", flush=True)
            return
        fail(f"scram-admin: {changes} was taken")

    secret = b"dave-secret"
    alter([UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256,
                                                                    8192), secret),
           UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512,
                                                                    4096), secret)])

    def described():
        result = admin.describe_user_scram_credentials(["dave"])["dave"].result(60)
        return sorted((i.mechanism.name, i.iterations) for i in result.scram_credential_infos)

    infos = described()
    check(infos == [("SCRAM_SHA_256", 8192), ("SCRAM_SHA_512", 4096)],
          f"scram-admin: described {infos}")
    print(f"scram-admin: described {infos}", flush=True)
    refused([UserScramCredentialUpsertion(
        "erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 100), b"x")],
        "UNACCEPTABLE_CREDENTIAL")
    refused([UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)],
            "RESOURCE_NOT_FOUND")
    alter([UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)])
    infos = described()
    check(infos == [("SCRAM_SHA_512", 4096)], f"scram-admin: after delete {infos}")
    print(f"scram-admin: after delete {infos}", flush=True)
    confluent(bootstrap, protocol, "SCRAM-SHA-512", "dave", secret.decode(), ca)


def reauth(bootstrap, protocol, mechanism, user, password, ca, seconds=7):
    """A producer sending a record every 100 ms for `seconds`, across
    several re-authentications, then a consumer group reading them all."""
    from confluent_kafka import Consumer, KafkaException, Producer

    settings = confluent_settings(bootstrap, protocol, mechanism, user, password, ca)
    topic = f"sasl-reauth-{mechanism.lower()}"
    producer = Producer(dict(settings, **{"enable.idempotence": True}))
    errors = []
    sent = 0
    deadline = time.time() + seconds
    while time.time() < deadline:
        producer.produce(topic, value=payload("reauth", sent), partition=0,
                         on_delivery=lambda err, msg: err and errors.append(err))
        sent += 1
        producer.poll(0.1)
    check(producer.flush(60) == 0 and not errors, f"reauth: delivery failed: {errors[:3]}")
    consumer = Consumer(dict(settings, **{"group.id": f"reauth-{time.time_ns()}",
                                          "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    read, error = poll_messages(consumer, sent, 60)
    if error:
        raise KafkaException(error)
    check([m.value() for m in read] == [payload("reauth", i) for i in range(sent)],
          f"reauth: read {len(read)} of {sent}, or not byte for byte")
    consumer.close()
    print(f"reauth: ok {len(read)}", flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "reauth":
        reauth(*sys.argv[2:7], sys.argv[7] if len(sys.argv) == 8 else None)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "scram-admin":
        if len(sys.argv) not in (7, 8):
            fail("usage: sasl_check.py scram-admin BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD "
                 "[CA_PEM]")
        scram_admin(*sys.argv[2:7], sys.argv[7] if len(sys.argv) == 8 else None)
        return
    if len(sys.argv) not in (6, 7):
        fail("usage: sasl_check.py BOOTSTRAP PROTOCOL MECHANISM USER PASSWORD [CA_PEM]")
    args = sys.argv[1:6] + [sys.argv[6] if len(sys.argv) == 7 else None]
    confluent(*args)
    kafka_python(*args)
    confluent_refused(*args)
    kafka_python_refused(*args)


if __name__ == "__main__":
    main()
