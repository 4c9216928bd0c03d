"""A Kafka OffsetCommit's answer waits for ``MetadataPersister.table_durable``: the offsets
table's change is in ``consumerOffset.json``'s journal (fsynced when ``sync``), concurrent
callers share one write (a group commit), and the file I/O runs off the loop."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from wharf.broker.meta import persist as persist_module
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persister import MetadataPersister


def _reloaded(directory: Path) -> ConsumerOffsetManager:
    fresh = ConsumerOffsetManager()
    MetadataPersister(directory, [fresh], 5.0).load_blocking()
    return fresh


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(persist_module.os, "fsync", counting)
    return calls


async def test_table_durable_returns_once_the_offset_is_in_the_files(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager()
    persister = MetadataPersister(tmp_path, [offsets], interval_s=60.0)  # no periodic round
    offsets.commit("g", "t", 0, 37)
    await persister.table_durable(offsets, sync=True)  # the first write: a snapshot
    offsets.commit("g", "t", 1, 5)
    assert _reloaded(tmp_path).query("g", "t", 1) == -1  # not yet written
    await persister.table_durable(offsets, sync=False)
    reloaded = _reloaded(tmp_path)
    assert (reloaded.query("g", "t", 0), reloaded.query("g", "t", 1)) == (37, 5)


async def test_a_commit_storm_is_a_few_group_commits(tmp_path: Path) -> None:
    """500 concurrent commits: each answered once in the files, with a handful of writes
    (the callers that arrive during a write share the next one), not 500."""
    offsets = ConsumerOffsetManager()
    persister = MetadataPersister(tmp_path, [offsets], interval_s=60.0)
    offsets.commit("g", "t", 0, 0)
    await persister.table_durable(offsets, sync=True)
    before = persister.table_writes

    async def commit(i: int) -> None:
        offsets.commit("g", f"t{i % 7}", i, i)
        await persister.table_durable(offsets, sync=True)

    await asyncio.gather(*(commit(i) for i in range(500)))
    writes = persister.table_writes - before
    assert 1 <= writes <= 10, writes
    reloaded = _reloaded(tmp_path)
    assert all(reloaded.query("g", f"t{i % 7}", i) == i for i in range(500))


async def test_async_flush_writes_without_fsync_and_a_round_fsyncs_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = ConsumerOffsetManager()
    persister = MetadataPersister(tmp_path, [offsets], interval_s=60.0)
    offsets.commit("g", "t", 0, 1)
    await persister.table_durable(offsets, sync=True)  # snapshot + journal header
    fsyncs = _count_fsyncs(monkeypatch)
    offsets.commit("g", "t", 0, 2)
    await persister.table_durable(offsets, sync=False)
    assert fsyncs == []  # ASYNC_FLUSH: in the page cache, what a kill -9 keeps
    assert _reloaded(tmp_path).query("g", "t", 0) == 2
    await persister.table_durable(offsets, sync=True)  # nothing new: fsyncs the unsynced append
    assert len(fsyncs) == 1
    offsets.commit("g", "t", 0, 3)
    await persister.table_durable(offsets, sync=True)  # SYNC_FLUSH: one fsync for the write
    assert len(fsyncs) == 2


async def test_a_change_a_round_captured_is_written_before_table_durable_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic round captured the commit (the table is no longer dirty) and is still
    writing: table_durable waits for that write under the journal's lock."""
    offsets = ConsumerOffsetManager()
    persister = MetadataPersister(tmp_path, [offsets], interval_s=60.0)
    offsets.commit("g", "t", 0, 1)
    await persister.table_durable(offsets, sync=True)
    journal = offsets.journal
    real_append = journal._append
    appending, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    first = [True]

    def slow_append(path: Path, line: bytes, sync: bool = True) -> None:
        if first[0]:
            first[0] = False
            loop.call_soon_threadsafe(appending.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)
        real_append(path, line, sync)

    monkeypatch.setattr(journal, "_append", slow_append)
    offsets.commit("g", "t", 0, 2)
    round_task = asyncio.create_task(persister.persist())
    await asyncio.wait_for(appending.wait(), 5)
    assert not offsets.dirty  # captured by the round
    durable = asyncio.create_task(persister.table_durable(offsets, sync=True))
    await asyncio.sleep(0.1)
    assert not durable.done()  # the round's write is not finished: not in the files yet
    release.set()
    await asyncio.wait_for(asyncio.gather(round_task, durable), 5)
    assert _reloaded(tmp_path).query("g", "t", 0) == 2
