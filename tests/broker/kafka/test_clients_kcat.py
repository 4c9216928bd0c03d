"""kcat (Debian 1.7.1 with librdkafka 2.0.2 built in, installed by ``make system-deps``)
against the ``kafka_bootstrap`` broker (Wharf's Kafka front end; tansu with
``WHARF_KAFKA_TEST_BROKER=tansu``), through the scenario of ``clients/scenario.py``, driven by
``clients/kcat_driver.py``, which runs ``kcat -P`` and ``kcat -G`` processes.

librdkafka 2.0.2 asks ApiVersions v3 first and cannot read a v3 answer with non-empty tagged
fields (tansu's: the tap strips them); it sends Metadata 4, Produce 7, Fetch 11, OffsetFetch
7/9, JoinGroup 5 (measured). Covered: keyed records, a null key, a tombstone (``-Z``), binary and
duplicate-key headers (no NUL byte: kcat takes them from argv; no empty, not null, key or
value: ``-Z`` sends empty as null), each codec (none, gzip, snappy,
lz4, zstd), acks=all; a two-member balanced consumer group (``-G``), every record exactly once,
intact, at dense offsets from 0; kcat's own auto commit (every 200 ms and on close); SIGTERM
leaves the group, a new member joins, and the group resumes from the committed offsets.
kcat cannot create topics (confluent-kafka's admin does) nor report produced offsets.
"""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.broker.kafka.clients.scenario import ALL_CODECS, build, check, run_driver

pytestmark = pytest.mark.slow


def test_kcat_group_scenario(kafka_bootstrap: str) -> None:
    assert shutil.which("kcat"), "kcat is not installed: run `make system-deps` (Debian kcat)"
    spec = build("kcat", kafka_bootstrap, ALL_CODECS, nul_in_headers=False, empties=False)
    result = run_driver([sys.executable, "-m", "tests.broker.kafka.clients.kcat_driver"], spec)
    check(spec, result)
