"""aiokafka (PyPI 0.14.0, pure Python asyncio) against the ``kafka_bootstrap`` broker
(Wharf's Kafka front end; tansu with ``WHARF_KAFKA_TEST_BROKER=tansu``), through the scenario
of ``clients/scenario.py``, driven by ``clients/aiokafka_driver.py`` in a subprocess.

Covered: CreateTopics (2 partitions); keyed records, a null key, a tombstone, an empty (not
null) key and value, binary and duplicate-key headers, in batches compressed with each codec
(none, gzip, snappy, lz4, zstd), acks=all, each send's offset; a group of two members
splitting the partitions (aiokafka never sends flexible versions: ApiVersions 0, Metadata 5,
Produce 7, Fetch 11, JoinGroup 5, OffsetCommit 3 measured), every record received exactly
once, intact, at dense offsets from 0; commits and ``committed()``; a member leaves, another
joins, and the group resumes from the committed offsets.
"""

from __future__ import annotations

import sys

import pytest

from tests.broker.kafka.clients.scenario import ALL_CODECS, build, check, run_driver

pytestmark = pytest.mark.slow


def test_aiokafka_group_scenario(kafka_bootstrap: str) -> None:
    spec = build("aiokafka", kafka_bootstrap, ALL_CODECS)
    result = run_driver([sys.executable, "-m", "tests.broker.kafka.clients.aiokafka_driver"], spec)
    check(spec, result)
    assert len(result["delivered"]) == sum(map(len, spec["batches"]))
