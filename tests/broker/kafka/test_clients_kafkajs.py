"""kafkajs (npm 2.2.4, pure JavaScript, installed into tests/broker/kafka/node/node_modules by
the Makefile's KAFKA_NODE_STAMP, a prerequisite of ``make test``) against the
``kafka_bootstrap`` broker (Wharf's Kafka front end; tansu with
``WHARF_KAFKA_TEST_BROKER=tansu``), through the scenario of ``clients/scenario.py``, driven by
``node/driver.js`` in a subprocess.

kafkajs never sends flexible versions (ApiVersions 2, Metadata 6, Produce 7, Fetch 11,
OffsetCommit 5, OffsetFetch 4, LeaveGroup 3 measured). Covered: admin CreateTopics; keyed
records, a null key, a tombstone, an empty (not null) key and value, binary headers and a
duplicate header key (an array value), uncompressed and gzip batches (the only codec kafkajs
has built in), acks=-1, each send's base offsets; a two-member group (fromBeginning, explicit
commitOffsets), every record exactly once, intact, at dense offsets from 0; admin
fetchOffsets; a member disconnects (LeaveGroup), another joins, and the group resumes from
the committed offsets.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.broker.kafka.clients.scenario import build, check, run_driver

pytestmark = pytest.mark.slow
NODE_DIR = Path(__file__).with_name("node")


def test_kafkajs_group_scenario(kafka_bootstrap: str) -> None:
    node = shutil.which("node")
    assert node and (NODE_DIR / "node_modules" / "kafkajs").is_dir(), (
        "kafkajs is not installed: install node and npm, then run "
        "`make tests/broker/kafka/node/node_modules/.installed-stamp` (done by make test)"
    )
    spec = build("kafkajs", kafka_bootstrap, ("none", "gzip"))
    result = run_driver([node, str(NODE_DIR / "driver.js")], spec, cwd=NODE_DIR)
    check(spec, result)
    assert len(result["delivered"]) == sum(map(len, spec["batches"]))
