"""Fixtures: the real Wharf daemon on 127.0.0.1 (ephemeral ports), small files, fast retries."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.harness import BrokerProcess, Daemons

# Small files keep start-up cheap; 1 s delay levels keep retry/DLQ tests to seconds.
BROKER_SETTINGS = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 6000 * 20,
    "maxHashSlotNum": 10_000,
    "maxIndexNum": 40_000,
    "messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
}

_names = itertools.count()


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    """One daemon per test module; tests isolate themselves with unique topic/group names."""
    return module_daemons.broker("broker", settings=BROKER_SETTINGS)


@pytest.fixture
def fresh_broker(daemons: Daemons, tmp_path: Path) -> BrokerProcess:
    """A daemon of the test's own (for restarts)."""
    return daemons.broker(tmp_path / "broker", settings=BROKER_SETTINGS)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic/group name unique to the test."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"{base[:60]}-{next(_names)}"
