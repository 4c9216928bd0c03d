"""The ConsumeQueue positions journal (store/queue/positions.py, journal.py): a clean
shutdown's snapshot and, after a process crash, snapshot + changes rebuild the queue table
without opening a queue file; what the journal cannot vouch for (a torn record, a file retention
deleted, a deleted topic, a machine crash, a foreign or damaged file) is read from the files or
dropped; and through the store, a kill -9 restart loads the journal and loses nothing."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from wharf.store.message_store import MessageStore
from wharf.store.queue import positions
from wharf.store.queue.consume_queue import ConsumeQueue
from wharf.store.queue.file_cache import QueueFileCache
from wharf.store.queue.journal import PositionsJournal
from wharf.store.queue.table import ConsumeQueueTable

from tests.store.helpers import msg, run_child_and_kill_9_blocking, small_config

FILE = 20 * 8  # eight units a file


def _units(queue_id: int, count: int, base: int = 0) -> list[tuple[int, int, int]]:
    return [(base + (queue_id * 1000 + i) * 100, 100, queue_id) for i in range(count)]


def _state(table: ConsumeQueueTable) -> dict[tuple[str, int], tuple[int, ...]]:
    return {key: queue.summary() for key, queue in table.queues.items()}


def _table(tmp_path: Path) -> tuple[ConsumeQueueTable, Path, Path]:
    root, journal_file = tmp_path / "consumequeue", tmp_path / "consumequeue.positions"
    return ConsumeQueueTable(root, FILE, QueueFileCache(16)), root, journal_file


def _load(root: Path, journal_file: Path, clean: bool, survived: bool) -> ConsumeQueueTable:
    return ConsumeQueueTable.load_blocking(
        root, FILE, QueueFileCache(16), journal_file, clean=clean, page_cache_survived=survived
    )


def _journal_on_snapshot(table: ConsumeQueueTable, journal_file: Path) -> PositionsJournal:
    """A journal kept from a snapshot of ``table`` taken at dispatch position 100."""
    size = table.save_positions_blocking(journal_file, 100)
    journal = PositionsJournal(table, journal_file)
    journal.opened(size, size, 100)
    return journal


def _count_queue_opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, *args: int) -> int:
        if "consumequeue/" in str(path):
            opened.append(str(path))
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", counting_open)
    return opened


def test_a_clean_shutdown_snapshot_rebuilds_the_table_without_opening_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, root, journal_file = _table(tmp_path)
    for queue_id in range(30):
        table.find_or_create(f"T{queue_id % 7}", queue_id).append_units(
            0, _units(queue_id, queue_id + 1)
        )
    for queue in table:
        queue.flush_blocking()
    state = _state(table)
    table.save_positions_blocking(journal_file, 12345)
    table.close()

    opened = _count_queue_opens(monkeypatch)
    loaded = _load(root, journal_file, clean=True, survived=False)
    monkeypatch.undo()
    assert loaded.loaded_from == "journal" and _state(loaded) == state
    assert opened == [] and loaded.journal_position is None  # clean: nothing to re-dispatch
    queue = loaded.find("T3", 10)
    assert queue is not None and list(queue.read_units(0, 20)) == _units(10, 11)
    loaded.close()

    # After a machine crash the journal is not trusted: the files are read, to the same state.
    crashed = _load(root, journal_file, clean=False, survived=False)
    assert crashed.loaded_from == "files" and _state(crashed) == {
        key: (*value[:5], crashed.queues[key].summary()[5]) for key, value in state.items()
    }
    crashed.close()


async def test_after_a_process_crash_the_last_record_and_its_position_are_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, root, journal_file = _table(tmp_path)
    for queue_id in range(10):
        table.find_or_create("T", queue_id).append_units(0, _units(queue_id, 3))
    journal = _journal_on_snapshot(table, journal_file)
    table.find("T", 2).append_units(3, _units(2, 9, base=50_000))  # type: ignore[union-attr]
    table.find_or_create("U", 0).append_units(0, _units(7, 2))
    await journal.record(lambda: 200)
    recorded = _state(table)
    # After the record: units and a queue the journal does not know of (re-dispatch from 200
    # brings them back in a store).
    table.find("T", 5).append_units(3, _units(5, 4, base=90_000))  # type: ignore[union-attr]
    table.find_or_create("V", 0).append_units(0, _units(8, 2))
    assert journal.records == 1 and journal.position == 200
    torn = positions.record(positions.CHANGES, 300, b"\x01T", 1)[:-3]  # cut by the crash
    positions.append_blocking(journal_file, torn)
    table.close()

    opened = _count_queue_opens(monkeypatch)
    loaded = _load(root, journal_file, clean=False, survived=True)
    monkeypatch.undo()
    assert opened == []
    assert loaded.loaded_from == "journal" and loaded.journal_position == 200
    assert _state(loaded) == recorded
    assert journal_file.stat().st_size == journal.size  # the torn record cut off
    loaded.close()


async def test_a_record_takes_the_dirty_queues_appended_to_since_the_last_one_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queues stay dirty until the thorough flush (60 s): a record takes those appended to
    since the last one, not every dirty queue again (after a 10,000-topic run that was 40,000
    idle queues every 5 s for a minute); what it leaves out was recorded before."""
    table, root, journal_file = _table(tmp_path)
    for queue_id in range(6):
        table.find_or_create("T", queue_id).append_units(0, _units(queue_id, 2))
    journal = _journal_on_snapshot(table, journal_file)
    captured: list[list[int]] = []
    capture_written = table.capture_written

    async def spy(queues: list[ConsumeQueue], states: bool = True) -> list[positions.Entry]:
        captured.append(sorted(queue.queue_id for queue in queues))
        return await capture_written(queues, states)

    monkeypatch.setattr(table, "capture_written", spy)
    await journal.record(lambda: 200)  # none recorded by the journal yet: every dirty one
    await journal.record(lambda: 300)  # nothing moved: no record
    table.find("T", 3).append_units(2, _units(3, 4, base=70_000))  # type: ignore[union-attr]
    await journal.record(lambda: 400)
    assert captured == [[0, 1, 2, 3, 4, 5], [3]] and journal.records == 2
    assert len(table.dirty) == 6  # all still dirty: nothing was flushed
    state = _state(table)
    table.close()

    loaded = _load(root, journal_file, clean=False, survived=True)
    assert loaded.loaded_from == "journal" and loaded.journal_position == 400
    assert _state(loaded) == state
    loaded.close()


async def test_a_queue_flushed_clean_after_it_moved_is_in_the_next_record(
    tmp_path: Path,
) -> None:
    """A dirty queue's appends add it to no set (``take_changed`` finds it in ``dirty``); a
    periodic flush that cleans it must hand it to ``changed``, or the next record (another
    queue moved: a newer D) leaves it at its older state and a restart re-dispatches past
    its missing units, filling them with blanks (the fault campaign, seed 31337: a replica
    dispatched the replicated log in 1 MiB chunks, each queue's run written through)."""
    table, root, journal_file = _table(tmp_path)
    queue = table.find_or_create("T", 0)
    queue.append_units(0, _units(0, 2))
    journal = _journal_on_snapshot(table, journal_file)
    await journal.record(lambda: 200)  # records T/0 at 2 units
    # 20 units at once: written through (past one file), no tail made, no set joined.
    queue.append_units(2, _units(0, 20, base=50_000))
    queue.spill()
    queue.flush_blocking()
    table.flushed([queue])  # the periodic flush: clean, out of ``dirty``
    table.find_or_create("T", 1).append_units(0, _units(1, 2))
    await journal.record(lambda: 300)
    state = _state(table)
    table.close()

    loaded = _load(root, journal_file, clean=False, survived=True)
    assert loaded.journal_position == 300
    assert _state(loaded) == state  # T/0 at 22 units, not 2
    loaded.close()


async def test_what_the_journal_cannot_vouch_for_is_read_or_dropped(tmp_path: Path) -> None:
    table, root, journal_file = _table(tmp_path)
    for queue_id in range(3):
        table.find_or_create("T", queue_id).append_units(0, _units(queue_id, 20))  # 3 files
    table.find_or_create("Gone", 0).append_units(0, _units(9, 2))
    table.find_or_create("Deleted", 0).append_units(0, _units(9, 2))
    journal = _journal_on_snapshot(table, journal_file)
    # Retention deleted queue 1's first file after the last record.
    queue = table.find("T", 1)
    assert queue is not None
    first = queue.files[0]
    queue.detach_files([first])
    os.unlink(first.path)
    # A topic deleted through the journal, another whose directory vanished unrecorded.
    removed = await journal.remove_topics(["Deleted"], lambda: table.remove_topic("Deleted"))
    for gone in removed:
        gone.destroy_blocking()
    shutil.rmtree(root / "Gone")
    table.close()

    loaded = _load(root, journal_file, clean=False, survived=True)
    assert set(loaded.queues) == {("T", 0), ("T", 1), ("T", 2)}
    again = loaded.find("T", 1)
    assert again is not None and again.min_offset == 8 and again.max_offset == 20
    assert list(again.read_units(8, 20)) == _units(1, 20)[8:]
    loaded.close()


def test_a_damaged_or_foreign_file_is_not_trusted(tmp_path: Path) -> None:
    table, root, journal_file = _table(tmp_path)
    table.find_or_create("T", 0).append_units(0, _units(0, 12))
    table.save_positions_blocking(journal_file, 0)
    table.close()
    data = bytearray(journal_file.read_bytes())
    data[30] ^= 1  # one bit of the snapshot
    journal_file.write_bytes(data)
    loaded = _load(root, journal_file, clean=True, survived=False)
    assert loaded.loaded_from == "files" and loaded.queues[("T", 0)].max_offset == 12
    loaded.close()
    items, count = positions.encode_entries([("T", 0, (0, 1, 0, 240, 1300, 0))])
    foreign = positions.header(FILE * 2) + positions.record(positions.SNAPSHOT, 0, items, count)
    journal_file.write_bytes(foreign)
    assert positions.read_blocking(journal_file, FILE) is None
    changes_first = positions.header(FILE) + positions.record(positions.CHANGES, 0, items, count)
    journal_file.write_bytes(changes_first)
    assert positions.read_blocking(journal_file, FILE) is None


CHILD = """
import asyncio, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from wharf.store.message_store import MessageStore
from tests.store.helpers import msg, small_config

async def main():
    store = MessageStore(small_config(Path({root!r}), flush_interval_consume_queue=3_600_000))
    await store.start()
    for queue_id in range(8):
        await store.put("T", queue_id, [msg(f"a{{queue_id}}-{{i}}") for i in range(5)])
    await store.put("Re", 0, [msg(f"old{{i}}") for i in range(6)])
    assert await store.wait_dispatched()
    await store._journal.record(lambda: store.dispatch_offset)
    for queue_id in range(0, 8, 2):
        await store.put("T", queue_id, [msg(f"b{{queue_id}}-{{i}}") for i in range(3)])
    await store.put("New", 1, [msg("n")])
    await store.delete_topics(["Re"])
    await store.put("Re", 0, [msg("new0")])
    assert await store.wait_dispatched()
    print("ready", flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_kill_9_restart_loads_the_journal_and_keeps_every_message(
    tmp_path: Path,
) -> None:
    """Through the store, killed with SIGKILL: messages before and after the journal's last
    record, a queue created after it, a topic deleted and created again after it."""
    assert await asyncio.to_thread(run_child_and_kill_9_blocking, CHILD, tmp_path) == "ready"

    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        recovered = store.recovered
        assert recovered is not None and recovered.page_cache_survived
        assert store.insides.queues.loaded_from == "journal" and recovered.redispatched_messages > 0
        for queue_id in range(8):
            got = store.get_messages("T", queue_id, 0, 100).messages
            expected = [f"a{queue_id}-{i}" for i in range(5)]
            if queue_id % 2 == 0:
                expected += [f"b{queue_id}-{i}" for i in range(3)]
            assert [m.body.decode() for m in got] == expected
            assert [m.queue_offset for m in got] == list(range(len(expected)))
        assert [m.body for m in store.get_messages("New", 1, 0, 10).messages] == [b"n"]
        renewed = store.get_messages("Re", 0, 0, 100).messages
        assert [m.body for m in renewed] == [b"new0"]
        appended = await store.put("T", 1, [msg("c")])
        assert appended.append.first_queue_offset == 5
    finally:
        await store.shutdown()


def test_a_topics_queues_come_from_its_index_however_the_table_was_built(
    tmp_path: Path,
) -> None:
    """``of_topic`` lists a topic's queues by id from a per-topic index (not a walk of every
    queue): right after creation, after a load from the journal or from the files, and none
    once the topic is removed."""
    table, root, journal_file = _table(tmp_path)
    for queue_id in (3, 0, 2):
        table.find_or_create("A", queue_id).append_units(0, _units(queue_id, 1))
    table.find_or_create("B", 1).append_units(0, _units(1, 1))
    assert [q.queue_id for q in table.of_topic("A")] == [0, 2, 3]
    assert [q.queue_id for q in table.of_topic("B")] == [1] and table.of_topic("C") == []
    for queue in table:
        queue.flush_blocking()
    table.save_positions_blocking(journal_file, 0)
    table.close()
    from_files = _load(root, journal_file, clean=False, survived=False)
    from_journal = _load(root, journal_file, clean=True, survived=False)
    assert (from_files.loaded_from, from_journal.loaded_from) == ("files", "journal")
    for loaded in (from_files, from_journal):
        assert [q.queue_id for q in loaded.of_topic("A")] == [0, 2, 3]
        assert loaded.of_topic("A")[1] is loaded.find("A", 2)
    from_files.close()
    removed = from_journal.remove_topic("A")
    assert sorted(q.queue_id for q in removed) == [0, 2, 3]
    assert from_journal.of_topic("A") == [] and from_journal.find("A", 0) is None
    assert [q.queue_id for q in from_journal.of_topic("B")] == [1]
    from_journal.close()
