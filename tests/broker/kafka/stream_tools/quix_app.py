"""A quixstreams stateful application: a count per key, state in RocksDB with its changelog
topic. Run by ``test_stream_processors.py`` in the streams venv (``make stream-tools``):

    python quix_app.py BOOTSTRAP STATE_DIR [exactly-once]

Reads ``qx-words`` (key: a word, value: JSON), counts each key's records in its state and
writes ``{"word": key, "count": n}`` to ``qx-counts`` for each record, at-least-once, until
SIGTERM (the application's graceful stop: the last checkpoint committed). ``exactly-once``:
the same in transactions, on ``qx-words-eos`` / ``qx-counts-eos`` as ``qx-wordcount-eos``."""

from __future__ import annotations

import sys

from quixstreams import Application, State

APP = "qx-wordcount"
SOURCE, COUNTS = "qx-words", "qx-counts"


def count(value: dict, key: str, timestamp: int, headers: object, state: State) -> dict:
    total = int(state.get("count", 0)) + 1
    state.set("count", total)
    return {"word": key, "count": total}


def main() -> None:
    bootstrap, state_dir = sys.argv[1], sys.argv[2]
    guarantee = sys.argv[3] if len(sys.argv) > 3 else "at-least-once"
    suffix = "-eos" if guarantee == "exactly-once" else ""
    app = Application(
        broker_address=bootstrap,
        consumer_group=APP + suffix,
        processing_guarantee=guarantee,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        commit_interval=0.5,  # a checkpoint (changelog flushed, offsets committed) twice a second
        loglevel="INFO",
    )
    source = app.topic(SOURCE + suffix, key_deserializer="str", value_deserializer="json")
    counts = app.topic(COUNTS + suffix, key_serializer="str", value_serializer="json")
    sdf = app.dataframe(source)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    sdf.to_topic(counts)
    app.run()


if __name__ == "__main__":
    main()
