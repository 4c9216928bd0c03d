"""kafka-python (PyPI 3.0.12, pure Python) against the ``kafka_bootstrap`` broker (Wharf's
Kafka front end; tansu with ``WHARF_KAFKA_TEST_BROKER=tansu``), through the scenario of
``clients/scenario.py``, driven by ``clients/kafka_python_driver.py`` in a subprocess.

kafka-python 3 is the one client here whose producer is idempotent by default: it asks for a
producer id (InitProducerId) and stamps every batch with id, epoch and sequence numbers; the
test asserts the broker granted one. Codecs: all five (its snappy is xerial-framed, unlike
librdkafka's raw snappy; lz4, zstandard and python-snappy are dev dependencies). Otherwise as the
other clients: CreateTopics; keyed, null-key, tombstone, empty-key and empty-value records
with binary and duplicate-key headers; acks=all; a two-member group, exactly once; commit; a
member change resuming from the committed offsets.
"""

from __future__ import annotations

import sys

import pytest

from tests.broker.kafka.clients.scenario import ALL_CODECS, build, check, run_driver

pytestmark = pytest.mark.slow


def test_kafka_python_idempotent_group_scenario(kafka_bootstrap: str) -> None:
    spec = build("kafka_python", kafka_bootstrap, ALL_CODECS)
    result = run_driver(
        [sys.executable, "-m", "tests.broker.kafka.clients.kafka_python_driver"], spec
    )
    check(spec, result)
    assert len(result["delivered"]) == sum(map(len, spec["batches"]))
    # One producer per codec and batch, each granted a producer id by InitProducerId.
    producers = sum(len({r["codec"] for r in batch}) for batch in spec["batches"])
    ids = result["producer_ids"]
    assert len(ids) == producers and all(pid >= 0 and epoch >= 0 for pid, epoch in ids), ids
    assert len({pid for pid, _ in ids}) == producers, f"producer ids handed out twice: {ids}"
