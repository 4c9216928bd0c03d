"""ReputService behaviour that the facade tests do not pin down."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from wharf.store import ConsumerLink
from wharf.store.codec.dispatch import DispatchRequest
from wharf.store.codec.hashes import java_string_hash
from wharf.store.codec.properties import SCHEDULE_TOPIC
from wharf.store.dispatch.reput import Dispatcher
from wharf.store.fast.dispatch_columns import columns_from_requests
from wharf.store.message_store import MessageStore
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE
from wharf.store.queue.table import ConsumeQueueTable

from tests.store.helpers import msg, small_config


def _request(
    offset: int, topic: str, queue_offset: int, tags: str = "", **props: str
) -> DispatchRequest:
    return DispatchRequest(
        offset, 100, topic, 0, queue_offset, 1_000_000, 0, tags, [], "", props, 0, 0
    )


async def _dispatched(store: MessageStore) -> None:
    """Everything dispatched and the task's run over: ``wait_dispatched`` returns at the
    progress of the chunk that reached the end, while the task may still be in its run, and
    ``dispatch_inline`` / ``prepare_inline`` (driven by hand here) defer to a task in a run."""
    assert await store.wait_dispatched()
    reput = store.insides.reput_service
    for _ in range(1000):
        if not reput.in_run:
            return
        await asyncio.sleep(0)
    raise AssertionError("the dispatch task's run did not end")


def test_tags_code_is_the_java_hash_or_the_deliver_time_for_delayed_messages() -> None:
    dispatcher = Dispatcher(queues=None, index=None, delay_levels_ms=[1000, 5000])  # type: ignore[arg-type]
    assert dispatcher.tags_code(_request(0, "T", 0, tags="TagA")) == java_string_hash("TagA")
    assert dispatcher.tags_code(_request(0, "T", 0)) == 0
    delayed = _request(0, SCHEDULE_TOPIC, 0, DELAY="2")
    assert dispatcher.tags_code(delayed) == 1_000_000 + 5000
    clamped = _request(0, SCHEDULE_TOPIC, 0, DELAY="7")
    assert dispatcher.tags_code(clamped) == 1_000_000 + 5000


@pytest.mark.parametrize("form", ["requests", "columns"])
def test_runs_that_need_a_new_queue_file_wait_with_their_queue_s_later_runs(
    tmp_path: Path, form: str
) -> None:
    """``apply_ready`` (the reput task's pass, no ``missing_files`` first): the runs that fit
    their queue's newest file are written; a run that needs a file is left, with every later
    run of that queue (never one of its runs before an earlier one), for the files to be
    created in a thread; applied after that, every queue reads back in log order."""
    table = ConsumeQueueTable(tmp_path, 4 * 20)  # 4 units a file
    dispatcher = Dispatcher(table, None, [])
    for topic in ("A", "C"):
        queue = table.find_or_create(topic, 0)
        queue.adopt_files(queue.create_files_blocking(queue.missing_files(0, 1)))
    # Log order: A 0-2, B 0-1 (no file yet), C 0, A 4 (past A's file), C 1, A 5.
    order = ["A0", "A1", "A2", "B0", "B1", "C0", "A4", "C1", "A5"]
    records = [_request(offset, name[0], int(name[1])) for offset, name in enumerate(order)]
    # Both forms of a chunk: a request a record (small chunks) or columns (QueueRuns).
    plan = dispatcher.plan(records if form == "requests" else columns_from_requests(records))
    advanced, left = dispatcher.apply_ready(plan)
    assert advanced == {("A", 0): 3, ("C", 0): 2}
    # (queues in log order of their first unit, or grouped by queue: a queue's runs in order)
    assert sorted((run.key, run.first, run.unit_count) for run in left) == [
        (("A", 0), 4, 2),
        (("B", 0), 0, 2),
    ]
    rest = plan._replace(runs=left)
    for queue, starts in dispatcher.missing_files(rest):
        queue.adopt_files(queue.create_files_blocking(starts))
    # A 4 lies past A's end (offset 3 never came): held, dispatch goes back to A's last record
    # (store/dispatch/gaps.py); met again at the same end, offset 3 is not in the log.
    assert dispatcher.apply_queues(rest) == {("B", 0): 2}
    assert dispatcher.gaps.rewind(0) == 0
    assert dispatcher.apply_queues(rest) == {("A", 0): 6, ("B", 0): 2}
    blank = (0, BLANK_UNIT_SIZE, 0)  # offset 3 is in no record: a blank unit keeps offsets
    for topic, units in (
        ("A", [(0, 100, 0), (1, 100, 0), (2, 100, 0), blank, (6, 100, 0), (8, 100, 0)]),
        ("B", [(3, 100, 0), (4, 100, 0)]),
        ("C", [(5, 100, 0), (7, 100, 0)]),
    ):
        assert list(table.find_or_create(topic, 0).read_units(0, 10)) == units
    table.close()


async def test_a_corrupt_record_stops_dispatch_and_shows_in_health(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        reput = store.insides.reput_service
        await reput.stop()
        result = store.append("T", 0, [msg("good"), msg("bad")])
        # Garble the second record's magic code in the mapped segment.
        segment = store.insides.commit_log.queue.files[0]
        segment.raw[result.offsets[1] + 4 : result.offsets[1] + 8] = b"\0\0\0\1"
        reput.start()
        await asyncio.sleep(0.2)
        [reput_health] = [h for h in store.health() if h["name"] == "ReputMessageService"]
        assert reput_health["failures"] >= 1
        assert "corrupt" in str(reput_health["last_error"]).lower()
        # The good record before it is dispatched; nothing at or past the bad one.
        assert store.dispatch_offset == result.offsets[1]
        assert store.get_max_offset("T", 0) == 1
        assert not await store.wait_dispatched(5)
    finally:
        await store.shutdown()


async def test_queue_files_are_created_off_the_event_loop(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path))  # 16 units per queue file
    await store.start()
    try:
        for _ in range(5):
            await store.put("T", 0, [msg(str(i)) for i in range(10)])
        await store.put("U", 7, [msg("x")])
        await _dispatched(store)
        queue = store.insides.queues.find("T", 0)
        assert queue is not None and len(queue.files) == 4
        assert queue.sync_creations == 0
        assert [m.queue_offset for m in store.get_messages("T", 0, 0, 100).messages] == list(
            range(50)
        )
    finally:
        await store.shutdown()


async def test_sync_flush_put_returns_with_its_message_already_dispatched(tmp_path: Path) -> None:
    """SYNC_FLUSH with a reader waiting: a small sync is dispatched in the sync's own callback,
    before the writer is answered: no reput wake-up, no polling (the reput's intervals are
    far away here)."""
    store = MessageStore(
        small_config(tmp_path, flush_disk_type="SYNC_FLUSH"),
        consumers=ConsumerLink(waiting=lambda: True),
    )
    await store.start()
    try:
        reput = store.insides.reput_service
        reput.idle_interval_s = reput.interval_s = 3600.0  # the safety net never fires
        arrivals: list[tuple[str, int, int]] = []
        store.add_arrival_listener(lambda t, q, offset: arrivals.append((t, q, offset)))
        await store.put("T", 0, [msg("first")])  # creates the queue file
        await _dispatched(store)
        before = reput.inline_dispatches
        for i in range(1, 4):
            result = await store.put("T", 0, [msg(f"m{i}")])
            # Visible the moment the put returns: nothing awaited in between.
            assert store.dispatch_offset >= result.append.end_offset
            assert store.get_max_offset("T", 0) == i + 1
            assert arrivals[-1] == ("T", 0, i + 1)
        assert reput.inline_dispatches - before == 3
    finally:
        await store.shutdown()


async def test_inline_dispatch_leaves_index_rolls_to_the_task(tmp_path: Path) -> None:
    """Entries that do not fit the newest IndexFile (64 here) are written by the task's next
    run (a roll creates a file in a thread): every key stays queryable."""
    store = MessageStore(
        small_config(tmp_path, flush_disk_type="SYNC_FLUSH"),
        consumers=ConsumerLink(waiting=lambda: True),
    )
    await store.start()
    try:
        await store.put("T", 0, [msg("first")])
        for i in range(100):
            await store.put("T", 0, [msg(f"m{i}", keys=f"k{i}")])
        await _dispatched(store)
        for _ in range(50):  # the task's run writing the leftovers
            if all(store.query_messages("T", f"k{i}", 1, 0, 2**62) for i in (0, 63, 64, 99)):
                break
            await asyncio.sleep(0.02)
        for i in (0, 63, 64, 99):
            [found] = store.query_messages("T", f"k{i}", 1, 0, 2**62)
            assert found.body == f"m{i}".encode()
        assert store.get_max_offset("T", 0) == 101
    finally:
        await store.shutdown()


async def test_inline_dispatch_defers_to_the_task_when_it_would_create_a_file(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path))  # ASYNC: dispatch_inline called by hand
    await store.start()
    try:
        reput = store.insides.reput_service
        store.append("NEW", 3, [msg("x")])  # its ConsumeQueue file does not exist yet
        assert reput.dispatch_inline() is False  # needs a thread: the task's job
        await _dispatched(store)
        assert store.get_max_offset("NEW", 3) == 1
        store.append("NEW", 3, [msg("y")])
        assert reput.dispatch_inline() is True  # the file exists: done on the spot
        assert store.get_max_offset("NEW", 3) == 2
    finally:
        await store.shutdown()


async def test_sync_flush_without_a_waiting_reader_answers_writers_first(tmp_path: Path) -> None:
    """Nobody waits (no parked pull): dispatch is left to the reput task, woken by the resumed
    writer, so the writers' acks are not held up by dispatch (a producer's requests in
    flight stay short); the message is still dispatched."""
    waiting = False
    store = MessageStore(
        small_config(tmp_path, flush_disk_type="SYNC_FLUSH"),
        consumers=ConsumerLink(waiting=lambda: waiting),
    )
    await store.start()
    try:
        reput = store.insides.reput_service
        await store.put("T", 0, [msg("first")])
        await _dispatched(store)
        result = await store.put("T", 0, [msg("second")])
        assert store.dispatch_offset < result.append.end_offset  # not yet: the task's turn
        await _dispatched(store)
        assert store.get_max_offset("T", 0) == 2
        assert reput.inline_dispatches == 0
        waiting = True
        result = await store.put("T", 0, [msg("third")])
        assert store.dispatch_offset >= result.append.end_offset
        assert reput.inline_dispatches == 1
    finally:
        await store.shutdown()


async def test_sync_flush_plans_the_dispatch_while_the_sync_runs(tmp_path: Path) -> None:
    """With a reader waiting, the records a sync will cover are read and planned when the sync
    is requested and applied when it is done: nothing is visible before the sync, everything
    right after it, as planned."""
    store = MessageStore(
        small_config(tmp_path, flush_disk_type="SYNC_FLUSH"),
        consumers=ConsumerLink(waiting=lambda: True),
    )
    await store.start()
    try:
        reput = store.insides.reput_service
        reput.idle_interval_s = reput.interval_s = 3600.0  # the safety net never fires
        await store.put("T", 0, [msg("first", keys="k0")])  # creates the queue and index files
        await _dispatched(store)
        for _ in range(50):  # the task's run that creates the IndexFile
            if store.query_messages("T", "k0", 1, 0, 2**62):
                break
            await asyncio.sleep(0.02)
        used = reput.prepared_used
        for i in range(1, 4):
            result = store.write("T", 0, [msg(f"m{i}", keys=f"k{i}")])
            waiter = result.flush_waiter()
            assert waiter is not None
            assert store.get_max_offset("T", 0) == i  # planned, not applied: not durable yet
            put = result.flushed(await _done(waiter))
            assert put.status.name == "PUT_OK"
            assert store.get_max_offset("T", 0) == i + 1
        assert reput.prepared_used - used == 3
        bodies = [m.body for m in store.get_messages("T", 0, 0, 10).messages]
        assert bodies == [b"first", b"m1", b"m2", b"m3"]
        [found] = store.query_messages("T", "k2", 1, 0, 2**62)
        assert found.body == b"m2"
    finally:
        await store.shutdown()


async def _done(waiter: asyncio.Future[bool]) -> asyncio.Future[bool]:
    await waiter
    return waiter


async def test_a_stale_or_cut_plan_is_dropped_and_the_records_read_afresh(
    tmp_path: Path,
) -> None:
    """A plan made ahead is applied only when it starts where dispatch stands and ends within
    the dispatch limit; otherwise the records are read again: none dispatched twice or
    skipped."""
    store = MessageStore(small_config(tmp_path))  # ASYNC: the reput is driven by hand
    await store.start()
    try:
        reput = store.insides.reput_service
        reput.idle_interval_s = reput.interval_s = 3600.0
        await store.put("T", 0, [msg("first")])
        await _dispatched(store)
        # Stale: planned, then dispatched by the task before dispatch_inline runs.
        store.append("T", 0, [msg("a")])
        reput.prepare_inline(store.insides.commit_log.max_offset)
        await _dispatched(store)
        store.append("T", 0, [msg("b")])
        assert reput.dispatch_inline() is True
        # Cut: one plan of two records, the limit covers only the first.
        first = store.append("T", 0, [msg("c")])
        store.append("T", 0, [msg("d")])
        reput.prepare_inline(store.insides.commit_log.max_offset)
        full_limit = reput.source.dispatch_limit
        reput.source.dispatch_limit = lambda: first.end_offset  # type: ignore[method-assign]
        assert reput.dispatch_inline() is True
        assert store.get_max_offset("T", 0) == 4
        reput.source.dispatch_limit = full_limit  # type: ignore[method-assign]
        assert reput.dispatch_inline() is True
        assert reput.prepared_used == 0
        await _dispatched(store)
        result = store.get_messages("T", 0, 0, 10)
        assert [m.body for m in result.messages] == [b"first", b"a", b"b", b"c", b"d"]
        assert [m.queue_offset for m in result.messages] == [0, 1, 2, 3, 4]
        # Planned ahead and in order: both plans are used.
        store.append("T", 0, [msg("e")])
        reput.prepare_inline(store.insides.commit_log.max_offset)
        store.append("T", 0, [msg("f")])
        reput.prepare_inline(store.insides.commit_log.max_offset)
        assert reput.dispatch_inline() is True
        assert reput.prepared_used == 2
        assert store.get_max_offset("T", 0) == 7
    finally:
        await store.shutdown()


async def test_inline_dispatch_notifies_arrivals_before_writing_the_index(
    tmp_path: Path,
) -> None:
    """A reader woken by the arrival (a parked pull answered in place) runs before the chunk's
    index entries are written; by the time dispatch reports progress both are written. An
    index write that fails leaves the chunk to the task, which writes it again (units already
    written are skipped): no entry is lost."""
    store = MessageStore(small_config(tmp_path))  # ASYNC: the reput is driven by hand
    await store.start()
    try:
        reput = store.insides.reput_service
        reput.idle_interval_s = reput.interval_s = 3600.0
        await store.put("T", 0, [msg("first", keys="k0")])
        await _dispatched(store)
        for _ in range(50):  # the task's run that creates the IndexFile
            if store.query_messages("T", "k0", 1, 0, 2**62):
                break
            await asyncio.sleep(0.02)
        seen: list[tuple[int, int]] = []

        def listener(topic: str, queue_id: int, max_offset: int) -> None:
            seen.append((max_offset, len(store.query_messages("T", "k1", 1, 0, 2**62))))

        store.add_arrival_listener(listener)
        store.append("T", 0, [msg("m1", keys="k1")])
        assert reput.dispatch_inline() is True
        assert seen == [(2, 0)]  # woken with its message readable, the index not yet written
        [found] = store.query_messages("T", "k1", 1, 0, 2**62)
        assert found.body == b"m1"

        index = reput.dispatcher.index
        assert index is not None
        real_put = index.put_entries_nowait

        def failing_put(entries: object) -> int:
            raise OSError("index write failed")

        index.put_entries_nowait = failing_put  # type: ignore[method-assign]
        store.append("T", 0, [msg("m2", keys="k2")])
        dispatched = reput.dispatched_messages
        assert reput.dispatch_inline() is False  # left to the task
        index.put_entries_nowait = real_put  # type: ignore[method-assign]
        await _dispatched(store)
        assert reput.dispatched_messages == dispatched + 1  # counted once
        [found] = store.query_messages("T", "k2", 1, 0, 2**62)
        assert found.body == b"m2"
        assert store.get_max_offset("T", 0) == 3
        bodies = [m.body for m in store.get_messages("T", 0, 0, 10).messages]
        assert bodies == [b"first", b"m1", b"m2"]
    finally:
        await store.shutdown()
