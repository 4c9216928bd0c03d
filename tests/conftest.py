"""The two fixture factories every test module gets its brokers from.

``daemons`` (and ``module_daemons``, the same ``harness.Daemons`` living for a whole module)
launches ``wharf.broker`` / ``wharf-namesrv`` subprocesses, tracks them and stops them at
teardown: a graceful SIGTERM when the test passed, SIGKILL when it failed (a
failing test must not wait on a daemon it may have wedged). A failed test's report carries the
tail of each live daemon's log.

``inproc_broker`` starts a ``BrokerController`` in the test's event loop (no subprocess; the
``FakeStore`` or the real store) and shuts it down at teardown.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.harness import Daemons

if TYPE_CHECKING:
    from tests.inproc import InProcBroker, InProcFactory

_live: list[Daemons] = []  # every open factory, whose logs a failed test's report shows


# `make test` runs the suite on 2 pytest-xdist workers, a test file to one worker (--dist
# loadfile: its module-scoped daemons start once, its tests keep their order). The fault
# tests go first: the campaign alone is ~4 min, the longest tail if it started last.
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # a worker of a distributed run
        items.sort(key=lambda item: not item.nodeid.startswith("tests/fault/"))


def _factory(root: Path, request: pytest.FixtureRequest) -> Iterator[Daemons]:
    daemons = Daemons(root)
    failures = request.session.testsfailed
    _live.append(daemons)
    try:
        yield daemons
    finally:
        _live.remove(daemons)
        daemons.close(failed=request.session.testsfailed > failures)


@pytest.fixture
def daemons(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Daemons]:
    """The test's daemons, under ``tmp_path``."""
    yield from _factory(tmp_path, request)


@pytest.fixture(scope="module")
def module_daemons(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Daemons]:
    """Daemons shared by a module's tests (module-scoped fixtures build on it)."""
    yield from _factory(tmp_path_factory.mktemp("daemons"), request)


@pytest.fixture
async def inproc_broker(tmp_path: Path) -> AsyncIterator[InProcFactory]:
    """``await inproc_broker(store_factory=None, root=None, **settings)``: a started
    ``InProcBroker`` (``tests/inproc.py``) with its store under ``root`` (default ``tmp_path``),
    ``FakeStore`` or ``None`` (the real ``MessageStore``) as ``store_factory``; every one is
    shut down at teardown."""
    from tests.inproc import start_inproc  # imports the broker: only for the tests using it

    started: list[InProcBroker] = []

    async def start(
        store_factory: Any = None, root: Path | None = None, **settings: str
    ) -> InProcBroker:
        started.append(await start_inproc(root or tmp_path, store_factory, **settings))
        return started[-1]

    yield start
    for broker in reversed(started):
        await broker.close()
