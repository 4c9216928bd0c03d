"""A quixstreams application with ``processing_guarantee="exactly-once"`` (each checkpoint is
a Kafka transaction: its output and its input offsets committed together). Run by
``test_transactions_streams.py`` in the stream tools' venv (``make stream-tools``):

    python quix_eos_app.py BOOTSTRAP STATE_DIR

Copies ``eos-in`` to ``eos-out`` (value upper-cased) until SIGTERM or SIGKILL."""

from __future__ import annotations

import sys

from quixstreams import Application


def main() -> None:
    bootstrap, state_dir = sys.argv[1], sys.argv[2]
    app = Application(
        broker_address=bootstrap,
        consumer_group="eos-copy",
        auto_offset_reset="earliest",
        state_dir=state_dir,
        processing_guarantee="exactly-once",
        commit_interval=0.5,  # a transaction twice a second
        loglevel="INFO",
        # the killed instance's membership lapses in 6 s, not librdkafka's 45 s
        consumer_extra_config={"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000},
    )
    source = app.topic("eos-in", value_deserializer="bytes")
    out = app.topic("eos-out", value_serializer="bytes")
    app.dataframe(source).apply(bytes.upper).to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
