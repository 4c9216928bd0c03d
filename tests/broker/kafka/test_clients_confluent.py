"""confluent-kafka (PyPI 2.16.1, bundled librdkafka 2.16) against the ``kafka_bootstrap``
broker (Wharf's Kafka front end; tansu with ``WHARF_KAFKA_TEST_BROKER=tansu``), through the
scenario of ``clients/scenario.py``, driven by ``clients/confluent_driver.py`` in a subprocess.

Covered: CreateTopics (2 partitions); keyed records, a null key, a tombstone, an empty (not
null) key and value, binary and duplicate-key headers, in batches compressed with each codec
(none, gzip, snappy, lz4, zstd), acks=all, delivery reports with each record's offset; a group
of two members splitting the partitions, every record received exactly once, intact, at dense
offsets from 0; synchronous commits (OffsetCommit) and ``committed()`` (OffsetFetch); a member
leaves (LeaveGroup), another joins, and the group resumes from the committed offsets.
"""

from __future__ import annotations

import sys

import pytest

from tests.broker.kafka.clients.scenario import ALL_CODECS, build, check, run_driver

pytestmark = pytest.mark.slow


def test_confluent_kafka_group_scenario(kafka_bootstrap: str) -> None:
    spec = build("confluent", kafka_bootstrap, ALL_CODECS)
    result = run_driver([sys.executable, "-m", "tests.broker.kafka.clients.confluent_driver"], spec)
    check(spec, result)
    assert len(result["delivered"]) == sum(map(len, spec["batches"]))
