"""A confluent-kafka admin client that talks to a cluster as soon as its
nodes are started, as a script that starts the nodes and then creates a
topic does.

Usage: startup_check.py create BOOTSTRAP TOPIC PARTITIONS
  creates TOPIC (replication factor 1) through BOOTSTRAP, then lists the
  cluster's metadata, and prints "created in N ms" (from the script's
  first request) and "brokers: N controller: ID" as the listing says
"""

import sys
import time

from checks import check, fail

from confluent_kafka.admin import AdminClient, NewTopic

# Long enough that a client stalled by an empty Metadata answer (librdkafka
# waited about 40 s) still finishes and the test reports the time it took.
CREATE_TIMEOUT_S = 90
# How long a created topic may take to be listed by any broker.
LISTED_TIMEOUT_S = 10


def create(bootstrap, topic, partitions):
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, int(partitions), 1)],
                                  request_timeout=CREATE_TIMEOUT_S)
    for _, future in futures.items():
        future.result(timeout=CREATE_TIMEOUT_S)
    created_ms = int((time.monotonic() - started) * 1000)
    # The broker the listing goes to may apply the creation a moment after
    # the one that answered it: asked again until it does.
    deadline = time.monotonic() + LISTED_TIMEOUT_S
    while True:
        metadata = admin.list_topics(timeout=CREATE_TIMEOUT_S)
        if topic in metadata.topics or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    check(topic in metadata.topics, f"{topic} not listed {LISTED_TIMEOUT_S} s after its creation")
    print(f"created in {created_ms} ms", flush=True)
    print(f"brokers: {len(metadata.brokers)} controller: {metadata.controller_id}", flush=True)


def main():
    if len(sys.argv) != 5 or sys.argv[1] != "create":
        fail(__doc__)
    create(*sys.argv[2:])


if __name__ == "__main__":
    main()
