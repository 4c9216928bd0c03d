"""Fixtures: the real Wharf daemon on 127.0.0.1 (ephemeral ports), small files, fast retries."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import BrokerProcess

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
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One daemon per test module; tests isolate themselves with unique topic/group names."""
    with BrokerProcess(tmp_path_factory.mktemp("broker"), settings=BROKER_SETTINGS) as process:
        yield process


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A daemon of the test's own (for restarts)."""
    with BrokerProcess(tmp_path / "broker", settings=BROKER_SETTINGS) as process:
        yield process


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic/group name unique to the test."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")
    return f"{base[:60]}-{next(_names)}"
