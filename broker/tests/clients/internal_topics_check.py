"""Internal topics through kafka-python's admin client: __consumer_offsets
is marked internal in Metadata, and deleting it or adding partitions to it
is refused with Kafka's error (INVALID_TOPIC_EXCEPTION). (kafka-python's
producer refuses internal topics itself; the produce refusal is tested
with kcat.)

usage: internal_topics_check.py BOOTSTRAP
"""

import sys

from kafka.admin import KafkaAdminClient, NewPartitions
from kafka.errors import InvalidTopicError, KafkaError
from checks import fail

TOPIC = "__consumer_offsets"
DEADLINE_S = 60


def main():
    bootstrap = sys.argv[1]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=DEADLINE_S * 1000)
    # The first group request creates the offsets topic.
    admin.list_group_offsets("internal-check")
    described = admin.describe_topics([TOPIC])
    if len(described) != 1 or described[0]["error_code"] != 0:
        fail(f"describe {TOPIC}: {described}")
    if described[0]["is_internal"] is not True:
        fail(f"{TOPIC} is not marked internal: {described[0]}")
    partitions = len(described[0]["partitions"])

    try:
        result = admin.delete_topics([TOPIC])
        fail(f"deleting {TOPIC} was not refused: {result}")
    except InvalidTopicError as error:
        print(f"delete refused: {error}")
    except KafkaError as error:
        fail(f"deleting {TOPIC} refused with the wrong error: {error!r}")

    try:
        result = admin.create_partitions({TOPIC: NewPartitions(partitions + 1)})
        fail(f"adding partitions to {TOPIC} was not refused: {result}")
    except InvalidTopicError as error:
        print(f"create partitions refused: {error}")
    except KafkaError as error:
        fail(f"adding partitions to {TOPIC} refused with the wrong error: {error!r}")

    after = admin.describe_topics([TOPIC])
    if len(after[0]["partitions"]) != partitions:
        fail(f"{TOPIC} went from {partitions} to {len(after[0]['partitions'])} partitions")
    print("OK")


if __name__ == "__main__":
    main()
