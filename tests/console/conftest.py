"""Fixtures: a real broker (module-wide), the console app on it through Starlette's TestClient,
and helpers to fill the broker through the SDK's blocking wrappers."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient
from wharf.client.console.app import build_app
from wharf.client.console.brokers import BrokerPool
from wharf.client.console.context import Console
from wharf.client.console.security import Guard

from tests.harness import BrokerProcess, Daemons

BROKER_SETTINGS = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 6000 * 20,
    "maxHashSlotNum": 10_000,
    "maxIndexNum": 40_000,
}
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(module_daemons: Daemons) -> BrokerProcess:
    return module_daemons.broker("broker", settings=BROKER_SETTINGS)


def make_client(endpoints: list[str], guard: Guard | None = None) -> TestClient:
    """The app at ``http://console.test`` (a name the guard is told to allow, as
    ``--allowed-host console.test`` would)."""
    guard = guard or Guard(allowed_hosts=["console.test"])
    console = Console(BrokerPool(endpoints), guard, sample_interval_s=0.2)
    return TestClient(build_app(console), base_url="http://console.test")


@pytest.fixture
def client(broker: BrokerProcess) -> Iterator[TestClient]:
    with make_client([broker.endpoint]) as test_client:
        yield test_client


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic/group name unique to the test."""
    base = re.sub(r"[^a-zA-Z0-9_-]", "-", request.node.name)
    return f"{base[:50]}-{next(_names)}"


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found, "page has no form with a CSRF token"
    return found.group(1)


def post(client: TestClient, path: str, data: dict[str, str], **kwargs: object):  # type: ignore[no-untyped-def]
    """A same-origin form POST with the console's CSRF token (read from the overview)."""
    token = csrf_of(client.get("/topics").text)
    return client.post(
        path,
        data={"csrf_token": token, **data},
        headers={"Origin": "http://console.test"},
        follow_redirects=False,
        **kwargs,
    )
