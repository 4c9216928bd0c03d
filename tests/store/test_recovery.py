"""Recovery orchestration: abort file, queues ahead of / behind the log, torn tail, lost
queues, checkpoint-capped re-dispatch, and a real kill -9."""

from __future__ import annotations

import os
import shutil
import textwrap
from pathlib import Path

import pytest
from wharf.store.errors import DamagedQueueError
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.message_store import MessageStore
from wharf.store.model import GetStatus
from wharf.store.paths import write_abort_marker_blocking

from tests.store.helpers import msg, run_child_and_kill_9_blocking, small_config

N_BATCHES = 8
PER_BATCH = 5
TOTAL = N_BATCHES * PER_BATCH


async def _fill(root: Path) -> list[int]:
    """A cleanly shut down store with TOTAL keyed messages in T/0; returns their offsets."""
    store = MessageStore(small_config(root))
    await store.start()
    offsets: list[int] = []
    for b in range(N_BATCHES):
        batch = [
            msg(f"m{b * PER_BATCH + i}", keys=f"k{b * PER_BATCH + i}") for i in range(PER_BATCH)
        ]
        offsets.extend((await store.put("T", 0, batch)).append.offsets)
    assert await store.wait_dispatched()
    await store.shutdown()
    return offsets


def _queue_bytes(root: Path) -> bytes:
    files = sorted((root / "consumequeue" / "T" / "0").iterdir())
    return b"".join(p.read_bytes() for p in files)


def _zero_log_from(root: Path, cut: int) -> None:
    for path in sorted((root / "commitlog").iterdir()):
        start = int(path.name)
        size = path.stat().st_size
        if start + size <= cut:
            continue
        with open(path, "r+b") as f:
            local = max(cut - start, 0)
            f.seek(local)
            f.write(bytes(size - local))


def _write_torn_copy(root: Path, last_offset: int, last_size: int, end: int) -> None:
    """Half of a copy of the last record, written at the end of the log."""
    segment = sorted((root / "commitlog").iterdir())[-1]
    raw = segment.read_bytes()
    local_last = last_offset - int(segment.name)
    record = bytearray(raw[local_last : local_last + last_size])
    record[28:36] = end.to_bytes(8, "big")  # PHYSICALOFFSET of the torn copy
    with open(segment, "r+b") as f:
        f.seek(end - int(segment.name))
        f.write(bytes(record[: len(record) // 2]))


def _crash_marker(root: Path) -> None:
    (root / "abort").touch()


async def _reopen(root: Path) -> MessageStore:
    store = MessageStore(small_config(root))
    await store.start()
    return store


def _bodies(store: MessageStore) -> list[bytes]:
    got = store.get_messages("T", 0, 0, 1000)
    return [m.body for m in got.messages]


async def test_normal_restart_keeps_offsets_without_redispatch(tmp_path: Path) -> None:
    await _fill(tmp_path)
    assert not (tmp_path / "abort").exists()
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert not store.recovered.abnormal
        assert store.recovered.redispatched_messages == 0
        assert store.get_max_offset("T", 0) == TOTAL
        assert (await store.put("T", 0, [msg("next")])).append.first_queue_offset == TOTAL
        assert store.stats().recovery_seconds > 0
        assert (tmp_path / "abort").exists()  # present while running
    finally:
        await store.shutdown()


async def test_queue_behind_the_log_gets_exactly_the_missing_units(tmp_path: Path) -> None:
    await _fill(tmp_path)
    original = _queue_bytes(tmp_path)
    # Lose the last 7 units (as if their pages never reached the disk).
    files = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())
    keep = TOTAL - 7
    unit_file_size = files[0].stat().st_size
    for path in files:
        start = int(path.name)
        data = bytearray(path.read_bytes())
        cut = max(keep * 20 - start, 0)
        if cut < len(data):
            data[cut:] = bytes(len(data) - cut)
            path.write_bytes(bytes(data))
        if start >= keep * 20 and start > 0:
            path.unlink()
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None and store.recovered.abnormal
        assert store.recovered.redispatched_messages == 7
        assert store.get_max_offset("T", 0) == TOTAL
        assert _queue_bytes(tmp_path)[: TOTAL * 20] == original[: TOTAL * 20]
        assert unit_file_size == 20 * 16
        # Index entries were not duplicated by the re-dispatch.
        assert [m.body for m in store.query_messages("T", "k39", 10, 0, 2**62)] == [b"m39"]
        assert (await store.put("T", 0, [msg("after")])).append.first_queue_offset == TOTAL
    finally:
        await store.shutdown()


async def test_queue_and_index_ahead_of_the_log_are_cut_back(tmp_path: Path) -> None:
    offsets = await _fill(tmp_path)
    # Power loss: the last 6 records never reached the log, but their units and index entries
    # did; the checkpoint is gone too, so nothing vouches for the lost range.
    cut = offsets[TOTAL - 6]
    _zero_log_from(tmp_path, cut)
    (tmp_path / "checkpoint").unlink()
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert store.recovered.commit_log_end == cut
        assert store.recovered.dropped_units == 6
        assert store.get_max_offset("T", 0) == TOTAL - 6
        assert _bodies(store) == [f"m{i}".encode() for i in range(TOTAL - 6)]
        assert store.query_messages("T", "k39", 10, 0, 2**62) == []
        assert [m.body for m in store.query_messages("T", "k33", 10, 0, 2**62)] == [b"m33"]
        again = await store.put("T", 0, [msg("new", keys="k39")])
        assert again.append.first_queue_offset == TOTAL - 6
        assert again.append.offsets[0] == cut
        assert await store.wait_dispatched()
        assert [m.body for m in store.query_messages("T", "k39", 10, 0, 2**62)] == [b"new"]
    finally:
        await store.shutdown()


async def test_torn_tail_after_the_last_record_is_dropped(tmp_path: Path) -> None:
    offsets = await _fill(tmp_path)
    store = await _reopen(tmp_path)
    end = store.stats().commit_log_max_offset
    last = store.look_message_by_offset(offsets[-1])
    await store.shutdown()
    assert last is not None
    # Half of a record written at the end before the crash.
    _write_torn_copy(tmp_path, offsets[-1], last.store_size, end)
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None and store.recovered.commit_log_end == end
        assert store.get_max_offset("T", 0) == TOTAL
        assert store.get_messages("T", 0, TOTAL, 10).status is GetStatus.OFFSET_OVERFLOW_ONE
        assert (await store.put("T", 0, [msg("x")])).append.offsets[0] == end
    finally:
        await store.shutdown()


async def test_lost_consume_queues_are_rebuilt_from_the_log(tmp_path: Path) -> None:
    await _fill(tmp_path)
    original = _queue_bytes(tmp_path)
    shutil.rmtree(tmp_path / "consumequeue")
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert store.recovered.redispatch_from == 0
        assert store.recovered.redispatched_messages == TOTAL
        assert _queue_bytes(tmp_path) == original
        assert _bodies(store) == [f"m{i}".encode() for i in range(TOTAL)]
    finally:
        await store.shutdown()


async def test_checkpoint_caps_where_redispatch_starts_and_it_is_idempotent(tmp_path: Path) -> None:
    offsets = await _fill(tmp_path)
    original = _queue_bytes(tmp_path)
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    checkpoint.load_blocking()
    assert checkpoint.logics_offset >= offsets[-1]
    checkpoint.logics_offset = offsets[20]  # queue flush recorded only half of the dispatch
    checkpoint.flush_blocking()
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert store.recovered.redispatch_from == offsets[20]
        assert store.recovered.redispatched_messages == TOTAL - 20
        assert _queue_bytes(tmp_path) == original
        assert len(store.query_messages("T", "k25", 10, 0, 2**62)) == 1
    finally:
        await store.shutdown()


CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    sys.path.insert(0, {repo!r})
    from wharf.store.message_store import MessageStore
    from tests.store.helpers import msg, small_config

    async def main():
        store = MessageStore(small_config({root!r}))
        await store.start()
        for b in range(20):
            await store.put("T", b % 2, [msg(f"m{{b}}-{{i}}", keys=f"k{{b}}-{{i}}") for i in range(10)])
        assert await store.wait_dispatched()
        print("ready", flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


async def test_kill_9_keeps_every_dispatched_message_and_rebuilds_nothing_twice(
    tmp_path: Path,
) -> None:
    assert run_child_and_kill_9_blocking(CHILD, tmp_path) == "ready"
    assert (tmp_path / "abort").exists()
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None and store.recovered.abnormal
        for queue_id in (0, 1):
            assert store.get_max_offset("T", queue_id) == 100
            got = store.get_messages("T", queue_id, 0, 1000)
            assert [m.queue_offset for m in got.messages] == list(range(100))
        assert [m.body for m in store.query_messages("T", "k19-9", 10, 0, 2**62)] == [b"m19-9"]
        assert (await store.put("T", 1, [msg("x")])).append.first_queue_offset == 100
    finally:
        await store.shutdown()


async def test_files_cut_short_by_a_crash_during_creation_are_removed(tmp_path: Path) -> None:
    await _fill(tmp_path)
    queue_dir = tmp_path / "consumequeue" / "T" / "0"
    newest = sorted(queue_dir.iterdir())[-1]
    unfinished_queue = queue_dir / f"{int(newest.name) + 320:020d}"
    unfinished_queue.write_bytes(b"")
    unfinished_index = tmp_path / "index" / "99991231235959999"
    unfinished_index.write_bytes(b"\0" * 40)
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert not unfinished_queue.exists() and not unfinished_index.exists()
        assert store.get_max_offset("T", 0) == TOTAL
        assert (await store.put("T", 0, [msg("more")])).append.first_queue_offset == TOTAL
    finally:
        await store.shutdown()


async def test_process_crash_in_the_same_boot_trusts_the_queues_over_the_checkpoint(
    tmp_path: Path,
) -> None:
    offsets = await _fill(tmp_path)
    checkpoint = StoreCheckpoint(str(tmp_path / "checkpoint"))
    checkpoint.load_blocking()
    checkpoint.logics_offset = offsets[20]
    checkpoint.flush_blocking()
    write_abort_marker_blocking(tmp_path / "abort")  # this boot's id: a process crash
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert store.recovered.abnormal and store.recovered.page_cache_survived
        assert store.recovered.redispatched_messages == 0
        assert store.get_max_offset("T", 0) == TOTAL
    finally:
        await store.shutdown()


async def test_checkpoint_vouches_for_dispatch_only_after_a_thorough_queue_flush(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        await store.put("T", 0, [msg("a"), msg("b")])  # far less than least_pages dirty
        assert await store.wait_dispatched()
        flush = store.insides.queue_flush_service
        before = store.insides.checkpoint.logics_offset
        await flush.flush(flush.least_bytes)  # a periodic pass skips the queue
        assert store.insides.checkpoint.logics_offset == before
        await flush.flush_all()
        assert store.insides.checkpoint.logics_offset == store.dispatch_offset > before
    finally:
        await store.shutdown()


async def test_a_damaged_queue_is_set_aside_and_rebuilt_from_the_log(tmp_path: Path) -> None:
    await _fill(tmp_path)
    original = _queue_bytes(tmp_path)
    queue_file = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())[0]
    os.truncate(queue_file, 300)  # short, but holding units: the layout refuses it
    _crash_marker(tmp_path)
    store = await _reopen(tmp_path)
    try:
        assert store.recovered is not None
        assert store.recovered.redispatch_from == 0
        assert _bodies(store) == [f"m{i}".encode() for i in range(TOTAL)]
        assert _queue_bytes(tmp_path) == original
        aside = [p.name for p in (tmp_path / "consumequeue").iterdir() if p.name.startswith(".")]
        assert len(aside) == 1 and aside[0].startswith(".damaged-T-0-")
        assert (await store.put("T", 0, [msg("more")])).append.first_queue_offset == TOTAL
    finally:
        await store.shutdown()
    store = await _reopen(tmp_path)  # the set-aside directory is no topic
    try:
        assert _bodies(store)[-1] == b"more"
        assert store.insides.queues.find(".damaged-T-0", 0) is None
    finally:
        await store.shutdown()


@pytest.mark.parametrize("damage", ["short", "missing", "directory"])
async def test_damage_met_while_serving_fails_that_queue_only_and_the_next_start_rebuilds_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A clean start loads the queue table from the positions journal without opening a file,
    so a queue file damaged while the broker was down (cut short, removed) is met by the first
    read: that queue's reads fail with DamagedQueueError (no struct error from half a unit),
    dispatch, the other queues and the retention pass go on (a missing file stopped dispatch
    for every queue), the damaged queue is recorded and the journal removed, and the next
    start sets the queue aside and rebuilds it from the commit log."""
    await _fill(tmp_path)
    store = await _reopen(tmp_path)
    await store.put("U", 0, [msg("other")])
    await store.shutdown()
    files = sorted((tmp_path / "consumequeue" / "T" / "0").iterdir())
    if damage == "short":
        os.truncate(files[0], 307)  # mid-unit: unit 15 is cut in half
        bad = 15
    elif damage == "missing":
        os.unlink(files[-1])
        bad = int(files[-1].name) // 20
    else:
        shutil.rmtree(tmp_path / "consumequeue" / "T" / "0")
        bad = 0
    store = await _reopen(tmp_path)
    try:
        assert store.insides.queues.loaded_from == "journal"
        with pytest.raises(DamagedQueueError, match="consume queue T/0 is damaged"):
            store.get_messages("T", 0, bad, 5)
        if damage != "directory":
            assert len(store.get_messages("T", 0, 3, 5).messages) == 5  # before the damage
        await store.put("T", 0, [msg("late")])  # stored; its unit waits for the rebuild
        await store.put("U", 0, [msg("next")])
        assert await store.wait_dispatched()
        assert [m.body for m in store.get_messages("U", 0, 0, 10).messages] == [b"other", b"next"]
        await store.insides.cleanup_service.clean_queues_and_index()  # does not stop at T/0
        assert sum("is damaged" in r.message for r in caplog.records) == 1  # once a queue
    finally:
        await store.shutdown()
    assert not (tmp_path / "consumequeue.positions").exists()
    assert (tmp_path / "consumequeue" / ".damaged.json").exists()
    store = await _reopen(tmp_path)
    try:
        assert store.insides.queues.loaded_from == "files"
        assert store.recovered is not None and store.recovered.redispatch_from == 0
        assert _bodies(store) == [f"m{i}".encode() for i in range(TOTAL)] + [b"late"]
        assert [m.body for m in store.get_messages("U", 0, 0, 10).messages] == [b"other", b"next"]
        assert not (tmp_path / "consumequeue" / ".damaged.json").exists()
    finally:
        await store.shutdown()
