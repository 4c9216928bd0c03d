"""Fixtures for the broker tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import BrokerProcess


@pytest.fixture
def spawn_broker(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``spawn_broker(settings=...)`` -> a started BrokerProcess that is killed at teardown
    whatever the test did (tests that kill, restart or stop daemons by hand never leak one)."""
    spawned: list[BrokerProcess] = []

    def spawn(**kwargs: Any) -> BrokerProcess:
        broker = BrokerProcess(tmp_path, **kwargs)
        spawned.append(broker)
        return broker.start()

    yield spawn
    for broker in spawned:
        broker.kill()
