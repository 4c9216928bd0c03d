"""A faust-streaming application with a table: a count per key, kept in memory and recovered
from the table's changelog topic at every start. Run by ``test_stream_processors.py`` in the
streams venv (``make stream-tools``):

    python faust_app.py BOOTSTRAP DATA_DIR

Reads ``fs-words`` (key: a word, value: JSON), counts each key's records in the table
``counts`` and sends ``{"word": key, "count": n}`` to ``fs-counts`` for each record,
at-least-once, until SIGTERM (the worker's graceful stop: offsets committed)."""

from __future__ import annotations

import sys

import faust

APP = "fs-wordcount"
SOURCE, COUNTS = "fs-words", "fs-counts"


def make_app(bootstrap: str, data_dir: str) -> faust.App:
    app = faust.App(
        APP,
        broker=f"kafka://{bootstrap}",
        store="memory://",  # nothing kept locally: each start recovers the table from its changelog
        datadir=data_dir,
        topic_partitions=2,
        topic_replication_factor=1,
        broker_commit_interval=0.5,
        web_enabled=False,
    )
    words = app.topic(SOURCE, key_serializer="raw", value_serializer="json", partitions=2)
    counts_out = app.topic(COUNTS, key_serializer="raw", value_serializer="json", partitions=2)
    counts = app.Table("counts", default=int, partitions=2)

    @app.agent(words)
    async def count(stream: faust.StreamT) -> None:
        async for key, _value in stream.items():
            word = key.decode()
            counts[word] += 1
            await counts_out.send(key=key, value={"word": word, "count": counts[word]})

    return app


def main() -> None:
    bootstrap, data_dir = sys.argv[1], sys.argv[2]
    app = make_app(bootstrap, data_dir)
    sys.argv = [sys.argv[0], "worker", "--loglevel", "info"]
    app.main()


if __name__ == "__main__":
    main()
