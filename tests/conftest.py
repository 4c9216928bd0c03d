"""The two fixture factories every test module gets its brokers from.

``daemons`` (and ``module_daemons``, the same factory living for a whole module) launches
``wharf.broker`` / ``wharf-namesrv`` subprocesses through ``tests/harness.py``, tracks them and
stops them at teardown: a graceful SIGTERM when the test passed, SIGKILL when it failed (a
failing test must not wait on a daemon it may have wedged). A failed test's report carries the
tail of each live daemon's log.

``inproc_broker`` starts a ``BrokerController`` in the test's event loop (no subprocess; the
``FakeStore`` or the real store) and shuts it down at teardown.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.harness import BrokerProcess, NamesrvProcess

if TYPE_CHECKING:
    import grpc
    from wharf.broker.controller import BrokerController

LOG_TAIL_CHARS = 4000  # of each daemon's log in a failed test's report: its last ~50 lines


class Daemons:
    """Launches daemons under ``root`` and stops every one it launched in ``close``.

    ``root`` of a daemon: a ``Path`` is used as given; a ``str`` is a folder name under the
    factory's root; ``None`` is a fresh ``broker-N`` / ``namesrv-N`` folder there."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[BrokerProcess] = []

    def _root(self, root: Path | str | None, kind: str) -> Path:
        if isinstance(root, Path):
            return root
        return self.root / (root or f"{kind}-{len(self.processes)}")

    def broker(
        self, root: Path | str | None = None, *, start: bool = True, **kwargs: Any
    ) -> BrokerProcess:
        """A ``BrokerProcess`` (started unless ``start=False``); ``kwargs`` are its own."""
        process = BrokerProcess(self._root(root, "broker"), **kwargs)
        self.processes.append(process)
        return process.start() if start else process

    def namesrv(
        self, root: Path | str | None = None, *, start: bool = True, **kwargs: Any
    ) -> NamesrvProcess:
        """A ``NamesrvProcess`` (started unless ``start=False``); ``kwargs`` are its own."""
        process = NamesrvProcess(self._root(root, "namesrv"), **kwargs)
        self.processes.append(process)
        return process.start() if start else process

    def log_tails(self) -> str:
        return "".join(
            f"--- {p.log_path} (last {LOG_TAIL_CHARS} chars)\n{p.log()[-LOG_TAIL_CHARS:]}\n"
            for p in self.processes
            if p.proc is not None
        )

    def close(self, failed: bool) -> None:
        """Brokers before the NameServers they register with: the reverse launch order."""
        for process in reversed(self.processes):
            if process.proc is None or process.proc.poll() is not None:
                continue
            os.kill(process.pid, signal.SIGCONT)  # a test may have left it SIGSTOPped
            if failed:
                process.kill()
                continue
            try:
                process.stop(timeout=15)  # kills it when that runs out
            except Exception:
                process.kill()


_live: list[Daemons] = []  # every open factory, whose logs a failed test's report shows


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed:
        tails = "".join(daemons.log_tails() for daemons in _live)
        if tails:
            report.sections.append(("daemon logs", tails))
    return report


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


@dataclass
class InProcBroker:
    """A started in-process broker and a channel to its gRPC port."""

    controller: BrokerController
    channel: grpc.aio.Channel


InProcFactory = Callable[..., Awaitable[InProcBroker]]


@pytest.fixture
async def inproc_broker(tmp_path: Path) -> AsyncIterator[InProcFactory]:
    """``await inproc_broker(store_factory=None, root=None, **settings)``: a
    ``BrokerController`` on ephemeral ports with ``settings`` (snake_case, as strings) over its
    defaults, the store under ``root`` (default ``tmp_path``), ``store_factory`` the
    controller's (``None``: the real ``MessageStore``; ``FakeStore`` for the fast tests)."""
    import grpc
    from wharf.broker.controller import BrokerController
    from wharf.broker.settings import load_settings

    started: list[InProcBroker] = []

    async def start(
        store_factory: Any = None, root: Path | None = None, **settings: str
    ) -> InProcBroker:
        overrides = {
            "listen": "127.0.0.1:0",
            "metrics_listen": "127.0.0.1:0",
            "store_path_root_dir": str(root or tmp_path),
            **settings,
        }
        controller = BrokerController(load_settings(None, {}, overrides), store_factory)
        await controller.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}")
        started.append(InProcBroker(controller, channel))
        return started[-1]

    yield start
    for broker in reversed(started):
        await broker.channel.close()
        await broker.controller.shutdown()
