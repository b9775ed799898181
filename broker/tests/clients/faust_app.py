"""A faust-streaming application that counts records per key in a table
(its state: the compacted changelog topic `wordcount-counts-changelog`).

usage: BOOTSTRAP=host:port FAUST_DATADIR=dir python3 faust_app.py worker -l info
"""

import os

import faust

app = faust.App(
    "wordcount",
    broker=f"kafka://{os.environ['BOOTSTRAP']}",
    store="memory://",
    topic_partitions=1,
    topic_replication_factor=1,
    web_enabled=False,
    datadir=os.environ["FAUST_DATADIR"],
)
words = app.topic("words", key_type=str, value_type=str, partitions=1)
counts = app.Table("counts", default=int, partitions=1)


@app.agent(words)
async def count(stream):
    async for key, _value in stream.items():
        counts[key] += 1


if __name__ == "__main__":
    app.main()
