"""Deferred writes of the compiled sync thread (store/fast/_syncer.c ``Syncer.defer``) and the
engine's ``write_when_durable`` (sync_engine.NativeSyncEngine): bytes sent on a real socket
right after the fdatasync that makes them durable, never before, in order per socket, with
every outcome reported once and no fd or buffer left behind."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import socket
import subprocess
import sys
import textwrap

import pytest
from wharf.store import fast
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.sync_engine import (
    CLOSED,
    DEFERRED,
    DURABLE,
    NOT_SYNCED,
    REFUSED,
    NativeSyncEngine,
    SyncPlan,
)
from wharf.store.model import MessageInput

from tests.store.test_sync_engine import make_log

_syncer = fast.load("_syncer")
pytestmark = pytest.mark.skipif(_syncer is None, reason="the compiled syncer is not built")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def wait_readable(fd: int) -> None:
    ready, _, _ = select.select([fd], [], [], 5)
    assert ready, "the sync thread did not report within 5 s"


def run_job(syncer, job_id: int, fds: tuple[int, ...]) -> tuple:
    """Submit a job and wait until take() reports it done or failed."""
    syncer.submit(job_id, fds)
    while True:
        wait_readable(syncer.fileno())
        taken = syncer.take()
        if taken[0] >= job_id or taken[5]:
            return taken


def nothing_to_read(sock: socket.socket) -> bool:
    ready, _, _ = select.select([sock], [], [], 0.05)
    return not ready


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    out = b""
    while len(out) < size:
        wait_readable(sock.fileno())
        chunk = sock.recv(size - len(out))
        assert chunk
        out += chunk
    return out


@pytest.fixture
def data_fd(tmp_path):
    fd = os.open(tmp_path / "log", os.O_RDWR | os.O_CREAT)
    os.write(fd, b"r" * 4096)
    yield fd
    os.close(fd)


@pytest.fixture
def syncer():
    s = _syncer.Syncer()
    yield s
    s.close()


def test_a_deferred_write_leaves_after_its_sync_and_is_reported_with_it(syncer, data_fd):
    a, b = socket.socketpair()
    with a, b:
        assert syncer.defer(1, a.fileno(), b"pull answer", 7) == 0
        assert syncer.defer(2, a.fileno(), b"later", 8) == 0
        assert nothing_to_read(b)  # no sync yet: nothing leaves
        assert syncer.take_deferred() == []
        run_job(syncer, 1, (data_fd,))
        # Sent before the eventfd was written: take_deferred has it at the first wake-up.
        assert syncer.take_deferred() == [(7, len(b"pull answer"))]
        assert recv_exactly(b, 11) == b"pull answer"
        assert nothing_to_read(b)  # job 2 not synced: its entry waits
        run_job(syncer, 2, (data_fd,))
        assert syncer.take_deferred() == [(8, 5)]
        assert recv_exactly(b, 5) == b"later"
        assert syncer.take_deferred() == []  # each outcome reported once


def test_durable_already_is_answered_without_a_copy(syncer, data_fd):
    a, b = socket.socketpair()
    with a, b:
        run_job(syncer, 3, (data_fd,))
        assert syncer.defer(3, a.fileno(), b"x", 1) == 1
        assert syncer.defer(2, a.fileno(), b"x", 2) == 1  # a newer job covers it
        assert syncer.defer(4, a.fileno(), b"y", 3) == 0
        assert nothing_to_read(b)
        assert syncer.take_deferred() == []
        # Bad fds: durable still says so (the caller writes), else refused.
        assert syncer.defer(3, -1, b"x", 4) == 1
        assert syncer.defer(9, -1, b"x", 5) == -1
        spare = os.dup(a.fileno())
        os.close(spare)
        assert syncer.defer(9, spare, b"x", 6) == -1  # a closed fd


def test_entries_leave_in_the_order_deferred(syncer, data_fd):
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    with a, b, c, d:
        for i in range(5):
            assert syncer.defer(1, a.fileno(), b"<%d>" % i, i) == 0
        # Job 2's entry on (c, d) waits; job 1's on the same socket after it waits behind it
        # (one stream's bytes keep their order), on another socket it leaves.
        assert syncer.defer(2, c.fileno(), b"second", 10) == 0
        assert syncer.defer(1, c.fileno(), b"third", 11) == 0
        assert syncer.defer(1, a.fileno(), b"<5>", 5) == 0
        run_job(syncer, 1, (data_fd,))
        assert syncer.take_deferred() == [(i, 3) for i in range(6)]
        assert recv_exactly(b, 18) == b"<0><1><2><3><4><5>"
        assert nothing_to_read(d)
        run_job(syncer, 2, (data_fd,))
        assert syncer.take_deferred() == [(10, 6), (11, 5)]
        assert recv_exactly(d, 11) == b"secondthird"
        # Nothing of the socket waits any more: durable is answered directly again.
        assert syncer.defer(1, c.fileno(), b"x", 12) == 1


def test_the_dup_keeps_the_socket_after_the_caller_closes_it(syncer, data_fd):
    a, b = socket.socketpair()
    with b:
        before = open_fds()
        assert syncer.defer(1, a.fileno(), b"kept alive", 1) == 0
        assert open_fds() == before + 1  # the dup
        a.close()  # and its number may be reused: the thread writes to the dup
        reused = os.open(os.devnull, os.O_RDONLY)
        try:
            run_job(syncer, 1, (data_fd,))
        finally:
            os.close(reused)
        assert syncer.take_deferred() == [(1, 10)]
        assert recv_exactly(b, 10) == b"kept alive"
        assert open_fds() == before - 1  # the dup closed, and the caller's
        assert b.recv(10) == b""  # the last holder of the socket closed it


def test_a_failed_sync_drops_its_entries_unwritten(syncer, data_fd):
    read_end, write_end = os.pipe()
    a, b = socket.socketpair()
    with a, b:
        before = open_fds()
        assert syncer.defer(1, a.fileno(), b"never", 1) == 0
        assert syncer.defer(2, a.fileno(), b"never either", 2) == 0
        taken = run_job(syncer, 1, (data_fd, read_end))  # fdatasync on a pipe: EINVAL
        assert (taken[5], taken[6]) == (1, errno.EINVAL)
        assert syncer.take_deferred() == [(1, _syncer.Syncer.NOT_SYNCED), (2, -1000)]
        assert open_fds() == before  # the dups closed
        assert nothing_to_read(b)
        run_job(syncer, 2, (data_fd,))  # a sync after a failure proves nothing
        assert syncer.defer(2, a.fileno(), b"after", 3) == -1
        assert syncer.defer(3, a.fileno(), b"after", 4) == -1
        assert nothing_to_read(b)
    os.close(read_end)
    os.close(write_end)


def test_at_most_max_deferred_and_close_reports_the_rest(data_fd):
    syncer = _syncer.Syncer()
    a, b = socket.socketpair()
    with a, b:
        before = open_fds()
        limit = _syncer.Syncer.MAX_DEFERRED
        assert limit == 64
        for i in range(limit):
            assert syncer.defer(5, a.fileno(), b"%d" % i, i) == 0
        assert syncer.defer(5, a.fileno(), b"one too many", 99) == -1
        assert open_fds() == before + limit
        syncer.close()  # job 5 never submitted: nothing written
        assert open_fds() == before - 1  # the dups and the eventfd closed
        assert syncer.take_deferred() == [(i, _syncer.Syncer.CLOSED) for i in range(limit)]
        assert syncer.defer(5, a.fileno(), b"closed", 100) == -1
        assert nothing_to_read(b)
        syncer.close()
        assert syncer.take_deferred() == []


def test_a_slot_is_free_again_once_its_outcome_is_taken(syncer, data_fd):
    a, b = socket.socketpair()
    with a, b:
        limit = _syncer.Syncer.MAX_DEFERRED
        for i in range(limit):
            assert syncer.defer(1, a.fileno(), b"x", i) == 0
        run_job(syncer, 1, (data_fd,))
        assert syncer.defer(2, a.fileno(), b"y", 100) == -1  # finished, not yet taken
        assert len(syncer.take_deferred()) == limit
        assert syncer.defer(2, a.fileno(), b"y", 101) == 0
        assert recv_exactly(b, limit) == b"x" * limit


def test_a_closed_peer_is_an_errno_not_a_sigpipe(tmp_path):
    # Python ignores SIGPIPE; the broker's embedders might not: run with the default action.
    script = textwrap.dedent(
        f"""
        import os, select, signal, socket
        from wharf.store import fast
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        syncer = fast.load("_syncer").Syncer()
        fd = os.open({str(tmp_path / "log")!r}, os.O_RDWR | os.O_CREAT)
        os.write(fd, b"r")
        a, b = socket.socketpair()
        b.close()
        assert syncer.defer(1, a.fileno(), b"to nobody", 1) == 0
        syncer.submit(1, (fd,))
        select.select([syncer.fileno()], [], [], 5)
        syncer.take()
        print(syncer.take_deferred())
        syncer.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.strip() in (f"[(1, {-errno.EPIPE})]", f"[(1, {-errno.ECONNRESET})]")


def test_a_full_socket_reports_what_it_took_and_holds_the_rest(syncer, data_fd):
    a, b = socket.socketpair()
    with a, b:
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = bytes(range(256)) * 4096  # 1 MiB: more than the socket takes
        assert syncer.defer(1, a.fileno(), big, 1) == 0
        assert syncer.defer(1, a.fileno(), b"after the big one", 2) == 0
        run_job(syncer, 1, (data_fd,))
        # Deferred on that socket before the caller heard: reported unwritten, after it.
        assert syncer.defer(1, a.fileno(), b"later still", 3) == 0
        (tok1, sent), (tok2, second), (tok3, third) = syncer.take_deferred()
        assert (tok1, tok2, tok3) == (1, 2, 3)
        assert 0 < sent < len(big)  # partial: the caller writes big[sent:]
        assert second == 0 and third == 0  # behind an incomplete entry: the caller writes them
        assert recv_exactly(b, sent) == big[:sent]
        assert nothing_to_read(b)
        # Reported: the socket is the caller's again.
        assert syncer.defer(1, a.fileno(), b"x", 4) == 1


def test_a_full_socket_from_the_start_writes_nothing(syncer, data_fd):
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        filled = 0
        with pytest.raises(BlockingIOError):
            while True:
                filled += a.send(b"f" * 65536)
        assert syncer.defer(1, a.fileno(), b"no room", 1) == 0
        run_job(syncer, 1, (data_fd,))
        assert syncer.take_deferred() == [(1, 0)]


# === the engine =================================================================================


class GatedSyncer:
    """The real Syncer whose submits wait for ``release()``: a job stays submitted, not synced."""

    MAX_FDS = 16

    def __init__(self) -> None:
        self.inner = _syncer.Syncer()
        self.held: list[tuple[int, tuple[int, ...]]] = []

    def submit(self, job_id, fds) -> None:
        self.held.append((job_id, tuple(fds)))

    def release(self) -> None:
        for job in self.held:
            self.inner.submit(*job)
        self.held.clear()

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def test_write_when_durable_through_a_commit_log(tmp_path) -> None:
    log: CommitLog = make_log(tmp_path)
    gated: list[GatedSyncer] = []

    def make() -> GatedSyncer:
        gated.append(GatedSyncer())
        return gated[-1]

    engine = NativeSyncEngine(make, log._sync_plan, log._settle_sync, log._flushed_where)
    log.group_commit.engine = engine
    a, b = socket.socketpair()
    outcomes: list[int] = []
    REFUSED_BEFORE_START = log.write_when_durable(1, a.fileno(), b"x", outcomes.append)
    assert REFUSED_BEFORE_START == REFUSED
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"one")])
        end = result.end_offset
        assert log.write_when_durable(end, a.fileno(), b"x", outcomes.append) == REFUSED  # no job
        waiter = log.flush_waiter(end)  # submits a job covering end (held by the gate)
        assert log.write_when_durable(end, a.fileno(), b"answer", outcomes.append) == DEFERRED
        await asyncio.sleep(0.05)
        assert nothing_to_read(b) and outcomes == []
        gated[0].release()
        assert await waiter
        assert outcomes == [6]
        assert recv_exactly(b, 6) == b"answer"
        assert log.write_when_durable(end, a.fileno(), b"x", outcomes.append) == DURABLE
        assert outcomes == [6] and nothing_to_read(b)
    finally:
        gated[0].release()
        await log.shutdown()
        log.close()
        a.close()
        b.close()


class Plans:
    """A minimal engine's owner: every plan syncs ``fds`` and makes ``mark`` durable."""

    def __init__(self, fds: tuple[int, ...]) -> None:
        self.fds = fds
        self.appended = 0
        self.flushed = 0

    def plan(self, max_fds: int) -> SyncPlan:
        return SyncPlan(self.fds, self.appended, self.appended)

    def settle(self, mark: int) -> int:
        self.flushed = max(self.flushed, mark)
        return self.flushed


def minimal_engine(fds: tuple[int, ...]) -> tuple[NativeSyncEngine, Plans, list[GatedSyncer]]:
    plans = Plans(fds)
    gated: list[GatedSyncer] = []

    def make() -> GatedSyncer:
        gated.append(GatedSyncer())
        return gated[-1]

    return NativeSyncEngine(make, plans.plan, plans.settle, lambda: plans.flushed), plans, gated


async def test_a_failing_done_is_logged_and_the_others_still_run(data_fd, caplog) -> None:
    engine, plans, gated = minimal_engine((data_fd,))
    served: list[int] = []
    engine.start(lambda flushed, *_: served.append(flushed), lambda exc: None)
    a, b = socket.socketpair()
    calls: list[int] = []

    def broken(outcome: int) -> None:
        raise RuntimeError("broken callback")

    try:
        plans.appended = 100
        engine.request(100)
        assert engine.write_when_durable(50, a.fileno(), b"one", broken) == DEFERRED
        assert engine.write_when_durable(100, a.fileno(), b"two", calls.append) == DEFERRED
        assert engine.write_when_durable(101, a.fileno(), b"x", calls.append) == REFUSED
        with caplog.at_level(logging.ERROR):
            gated[0].release()
            await asyncio.wait_for(engine.wait_idle(), 5)  # reported in the same wake-up
        assert served == [100] and calls == [3]
        assert "done callback failed" in caplog.text
        assert recv_exactly(b, 6) == b"onetwo"
        # Durable now and nothing deferred pending: the caller writes.
        assert engine.write_when_durable(100, a.fileno(), b"x", calls.append) == DURABLE
    finally:
        engine.close()
        a.close()
        b.close()


async def test_the_engine_reports_not_synced_and_closed(data_fd) -> None:
    read_end, write_end = os.pipe()
    engine, plans, gated = minimal_engine((data_fd, read_end))  # fdatasync(pipe): EINVAL
    failures: list[BaseException] = []
    engine.start(lambda *_: None, failures.append)
    a, b = socket.socketpair()
    outcomes: list[int] = []
    try:
        plans.appended = 10
        engine.request(10)
        assert engine.write_when_durable(10, a.fileno(), b"never", outcomes.append) == DEFERRED
        gated[0].release()
        await asyncio.wait_for(engine.wait_idle(), 5)
        assert outcomes == [NOT_SYNCED] and len(failures) == 1
        assert engine.write_when_durable(10, a.fileno(), b"x", outcomes.append) == REFUSED
        assert nothing_to_read(b)
    finally:
        engine.close()
    engine, plans, gated = minimal_engine((data_fd,))
    engine.start(lambda *_: None, failures.append)
    try:
        plans.appended = 10
        engine.request(10)  # held by the gate: never synced
        assert engine.write_when_durable(10, a.fileno(), b"never", outcomes.append) == DEFERRED
    finally:
        engine.close()
    assert outcomes == [NOT_SYNCED, CLOSED]
    assert engine.write_when_durable(10, a.fileno(), b"x", outcomes.append) == REFUSED
    assert nothing_to_read(b)
    for each in (a, b):
        each.close()
    os.close(read_end)
    os.close(write_end)


async def test_the_reference_engine_always_refuses(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WHARF_NO_SPEEDUPS", "1")
    log = make_log(tmp_path)
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"one")])
        assert await log.wait_flushed(result.end_offset)
        assert log.write_when_durable(result.end_offset, 0, b"x", print) == REFUSED
    finally:
        await log.shutdown()
        log.close()
