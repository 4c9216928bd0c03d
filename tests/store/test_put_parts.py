"""``put`` in two parts (``write``, then its ``Written``'s ``durable()``, or under SYNC_FLUSH
``flush_waiter()`` + ``flushed()``): the append is synchronous and files the group commit at
once; the durability part gives the statuses and errors ``put`` gives; ``dispatch_lagging`` says when
``put`` would have held the append back."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from wharf.store.config import ASYNC_FLUSH, SYNC_FLUSH
from wharf.store.errors import MasterFencedError
from wharf.store.log import mapped_file
from wharf.store.message_store import MessageStore
from wharf.store.model import PutStatus
from wharf.store.write import durable_all

from tests.store.helpers import msg, records, small_config


@pytest.fixture
async def sync_store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    s = MessageStore(small_config(tmp_path, flush_disk_type=SYNC_FLUSH, sync_flush_timeout=200))
    await s.start()
    yield s
    await s.shutdown()


async def test_the_append_files_the_group_commit_at_once_and_the_waiter_gives_put_s_result(
    sync_store: MessageStore,
) -> None:
    group_commit = sync_store.insides.commit_log.group_commit
    first = sync_store.write("T", 0, [msg("a"), msg("b")])
    waiter = first.flush_waiter()
    assert waiter is not None
    # Filed without an await: the sync is already asked for.
    assert [f for _, f in group_commit._pending] == [waiter] or waiter.done()
    second = sync_store.write("T", 0, [msg("c")])
    second_waiter = second.flush_waiter()
    assert second_waiter is not None
    await asyncio.wait_for(asyncio.gather(waiter, second_waiter), 5)
    put = first.flushed(waiter)
    assert put.status is PutStatus.PUT_OK and put.append.first_queue_offset == 0
    assert second.flushed(second_waiter).append.first_queue_offset == 2
    assert await sync_store.wait_dispatched(5)
    assert [m.body for m in sync_store.get_messages("T", 0, 0, 10).messages] == [b"a", b"b", b"c"]
    # The awaiting form gives the same: put is write + durable.
    assert (await sync_store.write("T", 0, [msg("d")]).durable()).status is (PutStatus.PUT_OK)


@pytest.fixture
async def slow_sync_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[MessageStore, list[bool]]]:
    """A SYNC_FLUSH store whose syncs sleep 0.4 s while ``slow[0]`` (the fdatasync seam is
    replaced before the start: the Python sync thread runs them)."""
    slow = [True]

    def slow_fdatasync(fd: int) -> None:
        if slow[0]:
            time.sleep(0.4)
        os.fdatasync(fd)

    monkeypatch.setattr(mapped_file, "fdatasync", slow_fdatasync)
    s = MessageStore(small_config(tmp_path, flush_disk_type=SYNC_FLUSH, sync_flush_timeout=200))
    await s.start()
    yield s, slow
    await s.shutdown()


async def test_a_slow_sync_is_a_flush_disk_timeout_and_a_fence_refuses_the_ack(
    slow_sync_store: tuple[MessageStore, list[bool]],
) -> None:
    sync_store, slow = slow_sync_store
    result = sync_store.write("T", 0, [msg("slow")])
    waiter = result.flush_waiter()
    assert waiter is not None
    assert await asyncio.wait_for(waiter, 5) is False
    assert result.flushed(waiter).status is PutStatus.FLUSH_DISK_TIMEOUT
    slow[0] = False
    fenced = sync_store.write("T", 0, [msg("fenced")])
    waiter = fenced.flush_waiter()
    assert waiter is not None
    sync_store.role.set_write_fence(lambda: "the lease ran out")
    await asyncio.wait_for(waiter, 5)
    with pytest.raises(MasterFencedError, match="the lease ran out"):
        fenced.flushed(waiter)
    sync_store.role.set_write_fence(None)


async def test_durable_all_waits_once_and_gives_every_write_the_last_one_s_status(
    slow_sync_store: tuple[MessageStore, list[bool]],
) -> None:
    sync_store, _ = slow_sync_store
    writes = [sync_store.write("T", 0, [msg(f"w{i}")]) for i in range(3)]
    puts = await durable_all(writes)
    # The slow sync times the last one out: the earlier ones are reported alike.
    assert [p.status for p in puts] == [PutStatus.FLUSH_DISK_TIMEOUT] * 3
    assert [p.append for p in puts] == [w.appended for w in writes]
    assert [w.appended.first_queue_offset for w in writes] == [0, 1, 2]


async def test_batches_written_together_wait_once_and_share_the_last_one_s_status(
    slow_sync_store: tuple[MessageStore, list[bool]],
) -> None:
    sync_store, slow = slow_sync_store
    many = sync_store.write_many(
        [("T", 0, records("T", "a", "b")), ("U", 1, records("U", "c"))], "10.0.0.1:5"
    )
    assert many.stored == 3 and many.end_offset == many.appended(1).end_offset
    assert await many.durable() is PutStatus.FLUSH_DISK_TIMEOUT  # the slow sync times it out
    slow[0] = False
    await asyncio.sleep(0.5)  # the slow sync in progress ends
    again = sync_store.write_many([("T", 0, records("T", "d")), ("U", 1, records("U", "e"))], "x:1")
    assert again.first_queue_offsets == [2, 1]
    assert await again.durable() is PutStatus.PUT_OK


async def test_a_cancelled_waiter_leaves_the_pending_list_after_the_next_sync(
    sync_store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fdatasync = mapped_file.fdatasync
    monkeypatch.setattr(mapped_file, "fdatasync", lambda fd: (time.sleep(0.05), real_fdatasync(fd)))
    group_commit = sync_store.insides.commit_log.group_commit
    waiters = []
    for i in range(5):
        waiter = sync_store.write("T", 0, [msg(f"m{i}")]).flush_waiter()
        assert waiter is not None
        waiters.append(waiter)
    for waiter in waiters:
        waiter.cancel()
    deadline = time.monotonic() + 5
    while group_commit._pending:
        assert time.monotonic() < deadline, "cancelled waiters are still pending"
        await asyncio.sleep(0.01)
    assert await sync_store.wait_dispatched(5)
    assert sync_store.get_max_offset("T", 0) == 5


async def test_no_flush_waiter_under_async_flush_and_durable_answers_at_once(
    tmp_path: Path,
) -> None:
    s = MessageStore(small_config(tmp_path, flush_disk_type=ASYNC_FLUSH))
    await s.start()
    try:
        result = s.write("T", 0, [msg("x")])
        assert result.flush_waiter() is None
        assert (await result.durable()).status is PutStatus.PUT_OK
    finally:
        await s.shutdown()


async def test_dispatch_lagging_says_when_put_would_hold_the_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = MessageStore(small_config(tmp_path, max_dispatch_lag_bytes=2000))
    await s.start()
    try:
        assert not s.dispatch_lagging()
        monkeypatch.setattr(s.insides.reput_service.source, "dispatch_limit", lambda: 0)  # stalls
        for _ in range(5):
            s.write("T", 0, [msg(b"x" * 500)])  # never waits: ~3 KB undispatched
        assert s.dispatch_lagging()
        monkeypatch.undo()
        assert await s.wait_dispatched(5)
        assert not s.dispatch_lagging()
    finally:
        monkeypatch.undo()
        await s.shutdown()
