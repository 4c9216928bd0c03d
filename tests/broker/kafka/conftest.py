"""``kafka_bootstrap``: the ``host:port`` Kafka clients bootstrap from, on one of two brokers.

- ``"wharf"`` (the default: the product under test): the real daemon (``BrokerProcess`` through
  the ``daemons`` fixture, ``tests/harness.py``) with ``--kafka-listen 127.0.0.1:0``; the
  address is the ``"kafka"`` key of its ready file.
- ``"tansu"``: tansu, a Kafka-compatible reference broker (memory storage, behind a small tap:
  ``clients/tansu.py``), to check the client drivers themselves.

The kind is ``WHARF_KAFKA_TEST_BROKER`` (``wharf`` or ``tansu``) unless a test parametrizes the
fixture: ``@pytest.mark.parametrize("kafka_bootstrap", ["tansu"], indirect=True)``. Run the
client tests against tansu with
``WHARF_KAFKA_TEST_BROKER=tansu .venv/bin/pytest tests/broker/kafka/test_clients_*.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker.kafka.clients.tansu import TansuBroker

KIND_ENV = "WHARF_KAFKA_TEST_BROKER"
KINDS = ("wharf", "tansu")
KAFKA_LISTEN = ["--kafka-listen", "127.0.0.1:0"]
# Broker settings of the "wharf" kind (RocketMQ names, broker.toml); topics come from the
# clients' CreateTopics.
WHARF_SETTINGS: dict[str, Any] = {}

_tansus: list[TansuBroker] = []  # running ones, whose logs a failed test's report shows


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        for tansu in _tansus:
            report.sections.append(
                ("tansu", f"{tansu.log()[-3000:]}\n--- requests (tap.log) ---\n{tap_log(tansu)}")
            )
    return report


def tap_log(tansu: TansuBroker) -> str:
    log = tansu.root / "tap.log"
    return log.read_text() if log.exists() else ""


def broker_kind(request: pytest.FixtureRequest) -> str:
    kind = str(getattr(request, "param", None) or os.environ.get(KIND_ENV) or "wharf")
    if kind not in KINDS:
        raise pytest.UsageError(f"{KIND_ENV}={kind!r}: one of {', '.join(KINDS)}")
    return kind


@pytest.fixture
def kafka_bootstrap(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """``host:port`` of a fresh Kafka-speaking broker (see the module doc), stopped after."""
    if broker_kind(request) == "tansu":
        tansu = TansuBroker(tmp_path / "tansu").start()
        _tansus.append(tansu)
        try:
            yield tansu.bootstrap
        finally:
            _tansus.remove(tansu)
            tansu.stop()
        return
    daemons = request.getfixturevalue("daemons")
    broker = daemons.broker(settings=WHARF_SETTINGS, extra_args=KAFKA_LISTEN)
    assert broker.kafka_endpoint, (
        f"the broker's ready file names no Kafka listener (key 'kafka') though it was started "
        f"with {' '.join(KAFKA_LISTEN)}:\n{broker.log()[-3000:]}"
    )
    yield broker.kafka_endpoint
