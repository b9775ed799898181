"""Produces known records with confluent-kafka (librdkafka) for the
`strom log dump` tests, and prints what the broker acknowledged.

usage: log_dump_produce.py BOOTSTRAP TOPIC CODEC

Two rounds, each flushed on its own (so at least two batches): records with
keys, compressible values and headers; a null-value record (a tombstone), a
record without a key and one with a binary key. One JSON object per
delivered record on stdout: offset, timestamp (the Nth record produced
has BASE_TS + N), key (UTF-8 or null), key_hex (when the
key is not UTF-8), value_bytes (null for a null value), headers ([key,
value size or null]). Exits non-zero on any delivery error.
"""

import json
import sys

from confluent_kafka import Producer
from checks import check

DEADLINE_S = 120
BASE_TS = 1_700_000_000_000


def records(first, last):
    """The records of one round: (key, value, headers)."""
    out = []
    for i in range(first, last):
        # Repetitive, so every codec makes the batch smaller and is kept.
        value = (f"value-{i} " * (20 + i)).encode()
        headers = [("index", str(i).encode()), ("empty", b""), ("none", None)]
        out.append((f"key-{i}".encode(), value, headers))
    return out


def main():
    bootstrap, topic, codec = sys.argv[1:4]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "compression.type": codec,
            # One batch per round: flush() sends at once.
            "linger.ms": 1000,
        }
    )
    delivered = []
    errors = []

    def delivery(key, value, headers):
        """What to record once the record given is acknowledged: its offset,
        and what was given (a delivery report carries no headers)."""

        def on_delivery(err, msg):
            if err is not None:
                errors.append(err)
                return
            entry = {
                "offset": msg.offset(),
                "timestamp": msg.timestamp()[1],
                "value_bytes": None if value is None else len(value),
            }
            if key is None:
                entry["key"] = None
            else:
                try:
                    entry["key"] = key.decode("utf-8")
                except UnicodeDecodeError:
                    entry["key"] = None
                    entry["key_hex"] = key.hex()
            entry["headers"] = [[k, None if v is None else len(v)] for k, v in headers]
            delivered.append(entry)

        return on_delivery

    first_round = records(0, 20)
    first_round.append((b"tomb", None, [("why", b"deleted")]))
    first_round.append((None, b"no key " * 30, []))
    first_round.append((b"\x00\xff\x10\x80", b"binary key " * 30, []))
    produced = 0
    for round_records in (first_round, records(20, 30)):
        for key, value, headers in round_records:
            producer.produce(
                topic,
                key=key,
                value=value,
                headers=headers,
                timestamp=BASE_TS + produced,
                partition=0,
                on_delivery=delivery(key, value, headers),
            )
            produced += 1
        remaining = producer.flush(DEADLINE_S)
        check(remaining == 0, f"{remaining} records not delivered")
    check(not errors, f"delivery errors: {errors[:5]}")
    check(len(delivered) == 33, f"{len(delivered)} delivered, 33 produced")
    for entry in sorted(delivered, key=lambda e: e["offset"]):
        print(json.dumps(entry))


if __name__ == "__main__":
    main()
