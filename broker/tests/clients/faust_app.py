"""A faust-streaming application that counts records per key in a table
(its state: the compacted changelog topic `wordcount-counts-changelog`).

usage: BOOTSTRAP=host:port FAUST_DATADIR=dir [FAUST_TRACE=file] \
       python3 faust_app.py worker -l info

With FAUST_TRACE, every event processed appends a line
`TIME OFFSET KEY COUNT` to that file (TIME in seconds since the epoch,
OFFSET the input record's offset, COUNT the key's count after it).
"""

import os
import time

import faust

app = faust.App(
    "wordcount",
    broker=f"kafka://{os.environ['BOOTSTRAP']}",
    store="memory://",
    topic_partitions=1,
    topic_replication_factor=1,
    web_enabled=False,
    datadir=os.environ["FAUST_DATADIR"],
    # A killed worker's membership ends within seconds, so its successor
    # joins without waiting out faust's minute.
    broker_session_timeout=6,
    broker_heartbeat_interval=1,
    broker_rebalance_timeout=10,
)
words = app.topic("words", key_type=str, value_type=str, partitions=1)
counts = app.Table("counts", default=int, partitions=1)


@app.agent(words)
async def count(stream):
    trace = open(os.environ["FAUST_TRACE"], "a") if "FAUST_TRACE" in os.environ else None
    async for event in stream.events():
        counts[event.key] += 1
        if trace:
            trace.write(f"{time.time():.3f} {event.message.offset} {event.key} {counts[event.key]}\n")
            trace.flush()


if __name__ == "__main__":
    app.main()
