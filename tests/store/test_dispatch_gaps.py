"""A dispatch run past its queue's end (store/dispatch/gaps.py): the queue's missing units are
re-dispatched from the commit log, never written over blank units while their records exist;
blanks only where a re-dispatch found no record; and the positions journal case the fault
campaign met (seed 31337), end to end through a kill -9."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from wharf.store.dispatch.dispatcher import Dispatcher, DispatchPlan, QueueRun
from wharf.store.message_store import MessageStore
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE, UNIT
from wharf.store.queue.file_cache import QueueFileCache
from wharf.store.queue.table import ConsumeQueueTable

from tests.store.helpers import msg, run_child_and_kill_9_blocking, small_config


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, str]]:
    got = store.get_messages(topic, queue_id, 0, 1000).messages
    return [(m.queue_offset, m.body.decode()) for m in got]


async def test_a_gap_is_re_dispatched_from_the_queues_last_record_not_blanked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        await store.put("T", 0, [msg(f"a{i}") for i in range(10)])
        await store.put("T", 1, [msg(f"b{i}") for i in range(3)])
        assert await store.wait_dispatched()
        queue = store.insides.queues.find("T", 0)
        assert queue is not None
        queue.truncate_to_offset(4)  # units 4..9 lost (as a stale journal record loses them)
        with caplog.at_level(logging.ERROR, "wharf.store.dispatch.gaps"):
            await store.put("T", 0, [msg("a10"), msg("a11")])  # dispatch meets offset 10
            assert await store.wait_dispatched()
        assert _bodies(store, "T", 0) == [(i, f"a{i}") for i in range(12)]
        assert _bodies(store, "T", 1) == [(i, f"b{i}") for i in range(3)]
        units = list(queue.read_units(0, 100))
        assert len(units) == 12 and all(size != BLANK_UNIT_SIZE for _, size, _ in units)
        gaps = store.insides.reput_service.dispatcher.gaps
        assert (gaps.rewinds, gaps.blank_filled) == (1, 0)
        assert "ends at offset 4 but dispatch met offset 10" in caplog.text
    finally:
        await store.shutdown()


def test_a_gap_whose_records_a_re_dispatch_did_not_find_is_blanked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The records of offsets 3..4 are not in the log: held once, the re-dispatch (the same
    chunk here) meets the gap at the same queue end, and only then blanks fill it."""
    table = ConsumeQueueTable(tmp_path, 20 * 16, QueueFileCache(8))
    dispatcher = Dispatcher(table, None, [])
    queue = table.find_or_create("T", 0)
    queue.append_units(0, [(100 * i, 100, 0) for i in range(3)])  # records end at 300
    units = b"".join(UNIT.pack(100 * i, 100, 0) for i in (5, 6))
    plan = DispatchPlan([QueueRun(("T", 0), 5, 2, units, 700)], [], 0, 0)

    assert dispatcher.apply_queues(plan) == {}  # held
    assert dispatcher.gaps.rewind(500) == 300  # the end of its last record
    assert dispatcher.gaps.rewind(500) is None  # asked once
    with caplog.at_level(logging.ERROR, "wharf.store.dispatch.gaps"):
        assert dispatcher.apply_queues(plan) == {("T", 0): 7}
    assert dispatcher.gaps.rewind(300) is None and dispatcher.gaps.blank_filled == 1
    assert [size for _, size, _ in queue.read_units(0, 10)] == [100] * 3 + [BLANK_UNIT_SIZE] * 2 + [
        100
    ] * 2
    assert "holds no record of queue offsets 3..4" in caplog.text
    # A queue claiming a record past the chunk: the chunk is read again, never skipped.
    again = table.find_or_create("U", 0)
    again.append_units(0, [(9000, 100, 0)])
    late = DispatchPlan([QueueRun(("U", 0), 3, 1, UNIT.pack(800, 100, 0), 900)], [], 0, 0)
    assert dispatcher.apply_queues(late) == {} and dispatcher.gaps.rewind(700) == 700
    table.close()


# One commit log segment and one queue file hold it all: the 240 units are one dispatch run
# into an existing file (a new file would join the changed set: ``adopt_files``).
SIZES = {
    "mapped_file_size_commit_log": 1 << 20,
    "mapped_file_size_consume_queue": 20 * 1000,
    "flush_interval_consume_queue": 3_600_000,
}

CHILD = """
import asyncio, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from wharf.store.message_store import MessageStore
from tests.store.helpers import msg, small_config
from tests.store.test_dispatch_gaps import SIZES

async def main():
    store = MessageStore(small_config(Path({root!r}), **SIZES))
    await store.start()
    await store.put("T", 0, [msg(f"a{{i}}") for i in range(2)])
    assert await store.wait_dispatched()
    journal, table = store._journal, store.insides.queues
    await journal.record(lambda: store.dispatch_offset)
    # One run of 240 units (4,800 B: past TAIL_BYTES, written through in its file), as a
    # replica dispatches the replicated log in 1 MiB chunks; a periodic flush cleans it.
    await store.put("T", 0, [msg(f"a{{i}}") for i in range(2, 242)])
    assert await store.wait_dispatched()
    queue = table.find("T", 0)
    queue.spill()
    queue.flush_blocking()
    table.flushed([queue])
    await store.put("T", 1, [msg("b0")])  # another queue moves: the next record has a newer D
    assert await store.wait_dispatched()
    await journal.record(lambda: store.dispatch_offset)
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_kill_9_after_a_queue_was_flushed_clean_keeps_every_message(
    tmp_path: Path,
) -> None:
    """The fault campaign's case (seed 31337), through the store and SIGKILL: the journal's
    last record must carry the queue a flush cleaned after it moved, and the restart reads
    every message by queue offset (no blank unit)."""
    assert await asyncio.to_thread(run_child_and_kill_9_blocking, CHILD, tmp_path) == "ready"

    store = MessageStore(small_config(tmp_path, **SIZES))
    await store.start()
    try:
        assert store.insides.queues.loaded_from == "journal"
        assert _bodies(store, "T", 0) == [(i, f"a{i}") for i in range(242)]
        assert _bodies(store, "T", 1) == [(0, "b0")]
        appended = await store.put("T", 0, [msg("a242")])
        assert appended.append.first_queue_offset == 242
    finally:
        await store.shutdown()


STALE_CHILD = """
import asyncio, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from wharf.store.message_store import MessageStore
from wharf.store.queue import positions
from tests.store.helpers import msg, small_config
from tests.store.test_dispatch_gaps import SIZES

async def main():
    root = Path({root!r})
    store = MessageStore(small_config(root, **SIZES))
    await store.start()
    await store.put("T", 0, [msg(f"a{{i}}") for i in range(10)])
    await store.put("T", 1, [msg("b0")])
    assert await store.wait_dispatched()
    fourth = store.get_messages("T", 0, 3, 1).messages[0]
    first = store.get_messages("T", 0, 0, 1).messages[0]
    end = fourth.commit_log_offset + fourth.store_size
    # A CHANGES record that left T/0 at 4 units with a D past its 10 (what the flushed-clean
    # queue was before the fix): re-dispatch from D meets a10 past the queue's end.
    stale = (0, 1, 0, 4 * 20, end, first.commit_log_offset)
    store.insides.queues.find("T", 0).spill()  # as a record writes the tails it counts
    t1 = store.insides.queues.find("T", 1).summary()
    items, count = positions.encode_entries([("T", 0, stale), ("T", 1, t1)])
    record = positions.record(positions.CHANGES, store.dispatch_offset, items, count)
    positions.append_blocking(root / "consumequeue.positions", record)
    await store.put("T", 0, [msg("a10"), msg("a11")])
    assert await store.wait_dispatched()
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_recovery_re_dispatches_a_gap_a_stale_journal_record_left(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Defence in depth, in recovery's re-dispatch after a kill -9: a queue restored short of
    its units by a stale positions record gets them back from the commit log."""
    assert await asyncio.to_thread(run_child_and_kill_9_blocking, STALE_CHILD, tmp_path) == "ready"

    store = MessageStore(small_config(tmp_path, **SIZES))
    with caplog.at_level(logging.ERROR, "wharf.store.dispatch.gaps"):
        await store.start()
    try:
        assert store.insides.queues.loaded_from == "journal"
        assert _bodies(store, "T", 0) == [(i, f"a{i}") for i in range(12)]
        assert _bodies(store, "T", 1) == [(0, "b0")]
        assert "ends at offset 4 but dispatch met offset 10" in caplog.text
        appended = await store.put("T", 0, [msg("a12")])
        assert appended.append.first_queue_offset == 12
    finally:
        await store.shutdown()
