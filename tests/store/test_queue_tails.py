"""Queue tails (store/queue/consume_queue.py, "Tails"): a queue's newest units wait in memory
for one write of a page. Readers see them at once; the tails stay under their budget; the queue
flush writes every tail before it syncs and the checkpoint vouches; a process crash that took
the tails (no positions journal to start from) loses no unit; a stop whose final write failed
leaves the abort marker, so the next start re-dispatches the units."""

from __future__ import annotations

import errno
import os
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.store.codec.layout import CQ_UNIT
from wharf.store.dispatch.dispatcher import Dispatcher, DispatchPlan, QueueRun, QueueRuns
from wharf.store.message_store import MessageStore
from wharf.store.queue import consume_queue
from wharf.store.queue import table as table_module
from wharf.store.queue.consume_queue import TAIL_BYTES, ConsumeQueue
from wharf.store.queue.table import ConsumeQueueTable

from tests.store.helpers import msg, run_child_and_kill_9_blocking, small_config

UNIT = 20
FILE = UNIT * 1000


def _units(count: int, base: int = 0) -> list[tuple[int, int, int]]:
    return [(base + i * 100, 100, i) for i in range(count)]


def _file_bytes(queue: ConsumeQueue) -> bytes:
    return b"".join(Path(file.path).read_bytes() for file in queue.files)


def test_a_tail_reads_back_at_once_and_reaches_its_file_at_the_spill(tmp_path: Path) -> None:
    queue = ConsumeQueue("T", 0, tmp_path / "T" / "0", FILE)
    units = _units(11)
    try:
        queue.append_units(0, units[:1])  # creates the file: written through
        links = queue._links
        assert not links.tails
        queue.append_units(1, units[1:])
        assert links.tails == {queue} and links.tail_bytes == 10 * UNIT
        assert _file_bytes(queue)[UNIT : 11 * UNIT] == bytes(10 * UNIT)  # in memory only
        assert list(queue.read_units(0, 100)) == units
        assert list(queue.read_units(7, 100)) == units[7:]
        assert queue.get_unit(10) == units[10] and queue.get_unit(11) is None
        assert queue.flush_blocking() == UNIT  # a sync covers what the files hold
        queue.spill()
        assert not links.tails and links.tail_bytes == 0
        assert _file_bytes(queue)[: 11 * UNIT] == b"".join(
            consume_queue.UNIT.pack(*unit) for unit in units
        )
        more = _units(5, base=10_000)
        queue.append_units(11, more)  # a new tail after the written units
        assert list(queue.read_units(8, 5)) == (units + more)[8:13]
        assert queue.flush_blocking() == 10 * UNIT
    finally:
        queue.close()


def test_a_tail_of_a_page_is_written_and_every_tail_stays_under_the_budget(
    tmp_path: Path,
) -> None:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    links = table.links
    try:
        first = table.find_or_create("T", 0)
        per_page = TAIL_BYTES // UNIT  # 204
        for i in range(per_page + 2):
            first.append_units(i, [(i * 100, 100, 0)])
            if i <= per_page:
                assert links.tail_bytes == i * UNIT
        # The first unit created the file, 204 more stayed in memory (4,080 B), and the next
        # wrote them at once and started the next tail, which the compiled path extends.
        assert first in links.tails and links.tail_bytes == UNIT
        packed = [consume_queue.UNIT.pack(i * 100, 100, 0) for i in range(per_page + 3)]
        written = _file_bytes(first)[: (per_page + 2) * UNIT]
        assert written == b"".join(packed[: per_page + 1]) + bytes(UNIT)
        assert list(first.read_units(0, 1000)) == [(i * 100, 100, 0) for i in range(per_page + 2)]
        runs = QueueRuns.of([QueueRun(("T", 0), per_page + 2, 1, packed[-1], 0)])
        advanced: dict[tuple[str, int], int] = {}
        rest = consume_queue.append_usual_runs(
            table.queues, links, (runs.keys, runs.firsts, runs.bounds, runs.ends, runs.data),
            advanced,
        )  # fmt: skip
        assert list(rest) == [] and advanced == {("T", 0): per_page + 3}
        assert links.tail_bytes == 2 * UNIT
        first.spill()
        assert _file_bytes(first)[: (per_page + 3) * UNIT] == b"".join(packed)
        assert first not in links.tails and links.tail_bytes == 0
        links.tail_budget = 50 * UNIT
        for queue_id in range(1, 9):  # 8 queues x 10 units: more than the budget of 50
            queue = table.find_or_create("T", queue_id)
            queue.append_units(0, [(0, 100, 0)])  # creates its file
            queue.append_units(1, _units(10, base=100)[:9])
            assert links.tail_bytes <= links.tail_budget
        assert links.tail_bytes == 45 * UNIT and len(links.tails) == 5
        written = [q for q in table if q.queue_id > 0 and q not in links.tails]
        assert len(written) == 3
        expected = [(0, 100, 0), *_units(10, base=100)[:9]]
        packed = b"".join(consume_queue.UNIT.pack(*unit) for unit in expected)
        for queue in written:  # past the budget: straight to the file
            assert _file_bytes(queue)[: 10 * UNIT] == packed
        for queue in table:
            if queue.queue_id:
                assert list(queue.read_units(0, 10)) == expected
    finally:
        table.close()


async def test_the_queue_flush_writes_every_tail_before_the_checkpoint_moves(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        for queue_id in range(4):
            await store.put("T", queue_id, [msg(f"q{queue_id}-{i}") for i in range(3)])
        assert await store.wait_dispatched()
        links = store.insides.queues.links
        assert len(links.tails) == 4
        await store.insides.queue_flush_service.flush_all()
        assert not links.tails and links.tail_bytes == 0
        assert store.insides.checkpoint.logics_offset == store.dispatch_offset
        for queue_id in range(4):
            queue = store.insides.queues.find("T", queue_id)
            assert queue is not None
            assert queue.unflushed_bytes == 0
            assert _file_bytes(queue)[: 3 * UNIT] != bytes(3 * UNIT)
    finally:
        await store.shutdown()


async def test_a_tail_budget_of_zero_writes_every_dispatch_at_once(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path, consume_queue_tail_budget=0))
    await store.start()
    try:
        for round_ in range(3):
            await store.put("T", 0, [msg(f"m{round_}-{i}") for i in range(3)])
            assert await store.wait_dispatched()
            queue = store.insides.queues.find("T", 0)
            assert queue is not None and not store.insides.queues.links.tails
            written = _file_bytes(queue)[: 3 * (round_ + 1) * UNIT]
            assert all(size > 0 for _, size, _ in consume_queue.UNIT.iter_unpack(written))
    finally:
        await store.shutdown()


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {repo!r})
    from wharf.store.message_store import MessageStore
    from tests.store.helpers import msg, small_config

    async def main():
        # No flush while it runs: queue 0's units stay in its tail, in memory.
        store = MessageStore(small_config({root!r}, flush_interval_consume_queue=3_600_000))
        await store.start()
        await store.put("T", 0, [msg(f"a{{i}}") for i in range(10)])
        assert await store.wait_dispatched()
        for b in range(10):  # later records, in queue 1's files (more than a page of units)
            await store.put("T", 1, [msg(f"b{{b}}-{{i}}") for i in range(30)])
        assert await store.wait_dispatched()
        links = store.insides.queues.links
        print("ready", store.insides.queues.find("T", 0) in links.tails,
              store.insides.queues.find("T", 1) in links.tails, flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


async def test_a_process_crash_without_a_positions_journal_rebuilds_the_lost_tails(
    tmp_path: Path,
) -> None:
    assert run_child_and_kill_9_blocking(CHILD, tmp_path).split() == ["ready", "True", "False"]
    # The journal gone (a write of it failed): the queues are read from their files, where
    # queue 1 ends past every unit queue 0 lost with the process.
    (tmp_path / "consumequeue.positions").unlink()
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        assert store.recovered is not None and store.recovered.page_cache_survived
        got = store.get_messages("T", 0, 0, 100)
        assert [m.body for m in got.messages] == [f"a{i}".encode() for i in range(10)]
        assert store.get_max_offset("T", 1) == 300
        assert (await store.put("T", 0, [msg("next")])).append.first_queue_offset == 10
    finally:
        await store.shutdown()


async def test_a_stop_whose_tails_could_not_be_written_leaves_the_abort_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    await store.put("T", 0, [msg(f"m{i}") for i in range(5)])
    assert await store.wait_dispatched()

    def failing(fd: int, data: object, at: int, path: str) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as patch:
        patch.setattr(consume_queue, "_pwrite_all", failing)
        await store.shutdown()
    assert (tmp_path / "abort").exists()
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        assert store.recovered is not None and store.recovered.abnormal
        got = store.get_messages("T", 0, 0, 100)
        assert [m.body for m in got.messages] == [f"m{i}".encode() for i in range(5)]
    finally:
        await store.shutdown()


# A dispatch run: its first offset against the queue's end (below: a re-dispatch overlapping
# it; above: a gap of blank units) and its unit count. Three in five steps are runs.
_run = st.tuples(st.just("run"), st.integers(-3, 2), st.integers(1, 40))
_steps = st.lists(
    st.one_of(
        _run,
        _run,
        _run,
        st.tuples(st.just("spill"), st.just(0), st.just(0)),
        # The next file created ahead of the writer while a tail may be in the newest one.
        st.tuples(st.just("ahead"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_steps, budget=st.sampled_from([0, 15 * UNIT, TAIL_BYTES, 1 << 20]))
def test_dispatch_runs_read_back_like_a_list_whatever_the_tail_holds(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]], budget: int
) -> None:
    """``append_packed`` takes a short path for the usual run (the next units, a tail in the
    newest file with room in it and in the budget) and the general one otherwise: runs that
    overlap, leave gaps, cross files (64-unit files), fill a tail past a page, meet a small
    budget, follow a spill, or come after the next file was adopted ahead of a tail all read
    back like a list, before and after the tails are written and the queue reopened."""
    directory = tmp_path_factory.mktemp("cq")
    file_size = 64 * UNIT
    links = consume_queue.QueueLinks(tail_budget=budget)
    queue = ConsumeQueue("T", 0, directory, file_size, links=links)
    oracle: list[tuple[int, int, int]] = []
    physical = 0
    try:
        for kind, shift, count in steps:
            if kind == "spill":
                queue.spill()
            elif kind == "ahead" and queue.files:
                queue.adopt_files(queue.create_files_blocking([queue.files[-1].end]))
            elif kind == "run":
                first = max(len(oracle) + shift, 0)
                units = [(physical + i * 100, 100, first + i) for i in range(count)]
                physical += count * 100
                added = queue.append_units(first, units)
                new = units[len(oracle) - first :] if first < len(oracle) else units
                gap = [(0, consume_queue.BLANK_UNIT_SIZE, 0)] * max(first - len(oracle), 0)
                oracle.extend(gap + new)
                assert added == len(new)
                assert links.tail_bytes <= budget
            assert queue.max_offset == len(oracle)
            assert list(queue.read_units(0, len(oracle) + 1)) == oracle
        queue.spill()
        assert not links.tails and links.tail_bytes == 0
        queue.flush_blocking()
    finally:
        queue.close()
    reopened = ConsumeQueue.load_blocking("T", 0, directory, file_size)
    try:
        assert reopened.max_offset == len(oracle)
        assert list(reopened.read_units(0, len(oracle) + 1)) == oracle
    finally:
        reopened.close()


# A chunk's runs: queue (a, b, or c: c created by its first run), first offset against the
# queue's end (an overlap below, a gap above) and unit count; several runs of a queue in a
# chunk keep their order.
_chunk = st.lists(
    st.tuples(st.sampled_from("abc"), st.integers(-2, 1), st.integers(1, 30)),
    min_size=1,
    max_size=12,
)


def _apply_chunks(
    root: Path, chunks: list[list[tuple[str, int, int]]], budget: int, file_units: int = 64
) -> tuple[list[object], dict[str, list[tuple[int, int, int]]]]:
    """Each chunk through ``Dispatcher.apply_ready`` as the reput task applies it (the runs
    left wait for their files, created in place here); per chunk what it answered, and the
    queues read back at the end, after the tails are written and the queues reopened."""
    table = ConsumeQueueTable(root, file_units * UNIT)
    table.links.tail_budget = budget
    dispatcher = Dispatcher(table, None, [])
    ends = {name: 0 for name in "abc"}
    answers: list[object] = []
    physical = 0
    try:
        for chunk in chunks:
            runs = []
            for name, shift, count in chunk:
                first = max(ends[name] + shift, 0)
                units = b"".join(
                    CQ_UNIT.pack(physical + i * 100, 100, first + i) for i in range(count)
                )
                physical += count * 100
                runs.append(QueueRun((name, 0), first, count, units, physical))
                ends[name] = max(ends[name], first + count)
            plan = DispatchPlan(QueueRuns.of(runs), [], len(runs), 0)
            advanced, left = dispatcher.apply_ready(plan)
            rest = plan._replace(runs=left)
            for queue, starts in dispatcher.missing_files(rest):
                queue.adopt_files(queue.create_files_blocking(starts))
            answers.append((advanced, [tuple(run) for run in left], dispatcher.apply_queues(rest)))
            # The budget counts what the tails hold (a spill takes its tail out). Not compared
            # between the paths: the compiled call takes a chunk's usual runs before the loop
            # takes the rest, so under a tight budget a queue may write through where the
            # other path kept a tail (the same units either way).
            tails = sum(len(queue._tail or b"") for queue in table.queues.values())
            assert table.links.tail_bytes == tails <= budget
        for queue in table.queues.values():
            queue.spill()
            queue.flush_blocking()
    finally:
        table.close()
    back = {}
    for name in "abc":
        if not (root / name / "0").is_dir():
            continue  # no run of it
        queue = ConsumeQueue.load_blocking(name, 0, root / name / "0", file_units * UNIT)
        try:
            back[name] = list(queue.read_units(0, queue.max_offset + 1))
        finally:
            queue.close()
    return answers, back


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chunks=st.lists(_chunk, min_size=1, max_size=12),
    budget=st.sampled_from([0, 15 * UNIT, TAIL_BYTES, 1 << 20]),
    # 64-unit files hold less than a tail (4 KiB); 1,024-unit ones let tails fill and spill.
    file_units=st.sampled_from([64, 1024]),
)
def test_the_compiled_usual_runs_apply_as_append_next_run_by_run(
    tmp_path_factory: pytest.TempPathFactory,
    chunks: list[list[tuple[str, int, int]]],
    budget: int,
    file_units: int,
) -> None:
    """``append_usual_runs`` (store/fast/_log_scan.c ``append_runs``) against the Python
    ``append_next`` loop it replaces: the same queues advanced to the same offsets, the same
    runs left for new files, and the same units read back, whatever the chunks hold
    (overlaps, gaps, a queue's several runs, new queues, 64-unit files, small budgets, full
    tails spilled)."""
    compiled = _apply_chunks(tmp_path_factory.mktemp("compiled"), chunks, budget, file_units)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(consume_queue, "_compiled", None)
        reference = _apply_chunks(tmp_path_factory.mktemp("python"), chunks, budget, file_units)
    assert compiled == reference


def test_the_compiled_module_takes_a_chunk_of_usual_runs_whole(tmp_path: Path) -> None:
    """The usual chunk (each queue's next units, in its newest file, room in its tail) is
    taken by the one compiled call: nothing comes back for the Python loop."""
    assert consume_queue._compiled is not None  # built by `make setup`
    table = ConsumeQueueTable(tmp_path, FILE)
    dispatcher = Dispatcher(table, None, [])
    try:
        first_runs = [QueueRun((t, 0), 0, 1, CQ_UNIT.pack(0, 100, 0), 100) for t in "xyz"]
        plan = DispatchPlan(first_runs, [], 3, 0)
        for queue, starts in dispatcher.missing_files(plan):
            queue.adopt_files(queue.create_files_blocking(starts))
        dispatcher.apply_queues(plan)  # the first units: files, tails
        runs = QueueRuns.of(
            [QueueRun((t, 0), 1, 2, CQ_UNIT.pack(1, 100, 0) * 2, 300) for t in "xyz"]
        )
        advanced: dict[tuple[str, int], int] = {}
        before = table.links.tail_bytes
        rest = consume_queue.append_usual_runs(
            table.queues, table.links, (runs.keys, runs.firsts, runs.bounds, runs.ends, runs.data),
            advanced,
        )  # fmt: skip
        assert list(rest) == []
        assert advanced == {("x", 0): 3, ("y", 0): 3, ("z", 0): 3}
        assert table.links.tail_bytes == before + 3 * 2 * UNIT
        assert [u[0] for u in table.find("y", 0).read_units(0, 5)] == [0, 1, 1]
        assert table.find("y", 0).max_physical_offset == 300
        # A tail grows by doubling (bytearray's own growth is the run exactly: a copy of the
        # whole tail a run), never past TAIL_BYTES; the budget counts its length.
        tail = table.find("y", 0)._tail
        assert tail is not None and len(tail) == 3 * UNIT
        assert tail.__alloc__() >= 2 * len(tail)
        sizes, first = [], 3
        while len(tail) + 16 * UNIT < consume_queue.TAIL_BYTES:
            run = QueueRuns.of([QueueRun(("y", 0), first, 16, CQ_UNIT.pack(1, 100, 0) * 16, 300)])
            rest = consume_queue.append_usual_runs(
                table.queues, table.links, (run.keys, run.firsts, run.bounds, run.ends, run.data),
                {},
            )  # fmt: skip
            assert list(rest) == []
            first += 16
            sizes.append(tail.__alloc__())
        # 12 runs, 3 growths (bytearray keeps a byte for a trailing NUL)
        assert len(set(sizes)) <= 3 and max(sizes) <= consume_queue.TAIL_BYTES + 1
        assert len(tail) == first * UNIT and table.find("y", 0).max_offset == first
    finally:
        table.close()


def _fill_and_spill(root: Path) -> tuple[list[list[int]], list[object]]:
    """A queue whose tail fills (runs of 16 units, the file allocated far ahead as a busy
    queue's is), then more runs: per run the indexes ``append_usual_runs`` left (the rest
    applied as ``Dispatcher.apply_ready`` does), and the state after it; last the file."""
    table = ConsumeQueueTable(root, FILE)
    dispatcher = Dispatcher(table, None, [])
    try:
        plan = DispatchPlan([QueueRun(("y", 0), 0, 1, CQ_UNIT.pack(0, 100, 0), 100)], [], 1, 0)
        for queue, starts in dispatcher.missing_files(plan):
            queue.adopt_files(queue.create_files_blocking(starts))
        dispatcher.apply_queues(plan)
        queue = table.find("y", 0)
        assert queue is not None
        newest = queue.files[-1]
        newest.allocate(queue._fd(newest), FILE)  # allocated ahead: no allocation below
        left: list[list[int]] = []
        states: list[object] = []
        first = 1
        while first * UNIT < TAIL_BYTES + 3 * 16 * UNIT:  # past the first spill
            units = b"".join(CQ_UNIT.pack(first + i, 100, 0) for i in range(16))
            runs = QueueRuns.of([QueueRun(("y", 0), first, 16, units, 100 * (first + 16))])
            advanced: dict[tuple[str, int], int] = {}
            columns = (runs.keys, runs.firsts, runs.bounds, runs.ends, runs.data)
            rest = list(
                consume_queue.append_usual_runs(table.queues, table.links, columns, advanced)
            )
            for _ in rest:
                queue.append_packed(first, units, 100 * (first + 16))
                advanced[("y", 0)] = queue.max_offset
            first += 16
            left.append(rest)
            states.append((advanced, queue._file_pos, queue._write_pos, bytes(queue._tail or b""),
                           table.links.tail_bytes, queue.max_physical_offset))  # fmt: skip
        with open(newest.path, "rb") as file:
            states.append(file.read())
        return left, states
    finally:
        table.close()


def test_a_full_tail_is_spilled_by_the_compiled_call_as_by_the_python_write(
    tmp_path: Path,
) -> None:
    """The run that finds its queue's tail full (4 KiB) writes the tail into the file and
    starts the next one: in the compiled call (its file open in the cache, allocated) as in
    ``ConsumeQueue._write``, with the same file bytes, positions and tails' count."""
    assert consume_queue._compiled is not None
    left, compiled = _fill_and_spill(tmp_path / "compiled")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(consume_queue, "_compiled", None)
        _, reference = _fill_and_spill(tmp_path / "python")
    assert compiled == reference
    assert all(rest == [] for rest in left)  # every run taken by the compiled call
    assert any(state[1] > 0 for state in compiled[:-1])  # type: ignore[index]  # a spill


def _packed(units: list[tuple[int, int, int]]) -> bytes:
    return b"".join(consume_queue.UNIT.pack(*unit) for unit in units)


async def test_captured_tails_are_written_in_a_thread_and_readable_until_trimmed(
    tmp_path: Path,
) -> None:
    """The thorough flush and the positions journal write tails off the loop: captured (the
    queue's state and a copy of its tail), written by ``write_tails_blocking``, trimmed by
    ``tail_written``. Units appended meanwhile stay in the tail, readers see every unit all
    along, and a tail the loop wrote itself meanwhile (or a closed queue's) is left alone."""
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    links = table.links
    try:
        busy, spilled, closed = (table.find_or_create("T", q) for q in range(3))
        units = _units(9)
        for queue in (busy, spilled, closed):
            queue.append_units(0, units[:1])  # creates the file: written through
            queue.append_units(1, units[1:5])  # a tail of 4 units
        entries, writes = table.capture([busy, spilled, closed])
        assert [entry[2][3] for entry in entries] == [5 * UNIT] * 3  # write pos counts the tail
        assert [w.data for w in writes] == [_packed(units[1:5])] * 3
        busy.append_units(5, units[5:])  # dispatch goes on meanwhile
        spilled.spill()  # the loop wrote its tail itself
        spilled.append_units(5, units[5:7])  # and began a new one
        closed.close()
        errors = consume_queue.write_tails_blocking(writes)
        assert errors == [None, None, None]
        assert list(busy.read_units(0, 100)) == units  # before the trim: from the tail
        for write, error in zip(writes, errors, strict=True):
            assert write.queue.tail_written(write, error) is None
        assert _file_bytes(busy)[: 5 * UNIT] == _packed(units[:5])
        assert busy._tail == _packed(units[5:]) and list(busy.read_units(0, 100)) == units
        assert spilled._tail == _packed(units[5:7])  # its new tail untouched
        assert list(spilled.read_units(0, 100)) == units[:7]
        assert links.tails == {busy, spilled}
        assert links.tail_bytes == len(busy._tail) + len(spilled._tail)
        assert busy.flush_blocking() == 5 * UNIT  # the sync covers what the files hold now
    finally:
        for queue in table.queues.values():
            queue.close()


async def test_a_tail_write_that_fails_keeps_the_tail_and_raises(tmp_path: Path) -> None:
    """What vouches for units must not go on when their tail did not reach the file: the error
    is raised after the others are trimmed, and the failed tail stays in memory, readable; a
    file deleted from under a live queue is left to its own spill (damage, or the descriptor
    the cache still holds)."""
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    try:
        good, bad, gone = (table.find_or_create("T", q) for q in range(3))
        units = _units(4)
        for queue in (good, bad, gone):
            queue.append_units(0, units[:1])
            queue.append_units(1, units[1:])
        _, writes = table.capture([good, bad, gone])
        os.chmod(bad.files[0].path, 0o400)  # read-only (the suite runs as root: see below)
        os.unlink(gone.files[0].path)
        if os.access(bad.files[0].path, os.W_OK):  # root ignores modes: break it another way
            os.unlink(bad.files[0].path)
            os.mkdir(bad.files[0].path)  # a directory: open(O_WRONLY) fails with EISDIR
        with pytest.raises(OSError) as failed:
            await table.write_tails(writes)
        assert failed.value.errno in (errno.EACCES, errno.EISDIR)
        assert good._tail is None and _file_bytes(good)[: 4 * UNIT] == _packed(units)
        assert bad._tail == _packed(units[1:]) and list(bad.read_units(0, 10)) == units
        assert gone._tail is None  # its own spill took it (into the descriptor still open)
    finally:
        for queue in table.queues.values():
            queue.close()


async def _store_with_tails(tmp_path: Path, queues: int) -> MessageStore:
    """A started store whose ``queues`` queues (topics T0.. queue 0) hold one unit in their
    file and one in their tail, dispatched."""
    s = MessageStore(small_config(tmp_path / "store"))
    await s.start()
    try:
        for body in ("a", "b"):  # the first unit creates the file, the second is a tail
            for q in range(queues):
                s.append(f"T{q}", 0, [msg(body)])
            assert await s.wait_dispatched()
    except BaseException:
        await s.shutdown()
        raise
    return s


async def test_the_positions_journal_writes_no_tail_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A journal record of 300 queues with tails spills none of them on the loop (40,000 such
    spills held the loop ~3 s every 5 s at 10,000 topics); what it recorded is in the files."""
    s = await _store_with_tails(tmp_path, 300)
    try:
        table = s.insides.queues
        assert len(table.links.tails) >= 250  # (the periodic flush spills 16 a second)
        spills: list[ConsumeQueue] = []
        real_spill = ConsumeQueue.spill
        monkeypatch.setattr(ConsumeQueue, "spill", lambda q: spills.append(q) or real_spill(q))
        journal = s.insides.queue_flush_service.journal
        assert journal is not None
        await journal.record(lambda: s.insides.reput_service.reput_from_offset)
        assert spills == [] and not table.links.tails  # written in the thread, trimmed
        for queue in table.queues.values():  # no tail left: these reads are the files'
            assert queue._file_pos == queue._write_pos
            assert len(list(queue.read_units(0, 1000))) == queue.max_offset == 2
    finally:
        monkeypatch.undo()
        await s.shutdown()


async def test_a_journal_record_whose_tails_fail_records_them_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is recorded when a tail cannot be written, and its queues stay changed: the next
    record carries them (dropped, a later record's newer D would have skipped their units at a
    restart)."""
    s = await _store_with_tails(tmp_path, 20)
    try:
        table = s.insides.queues
        journal = s.insides.queue_flush_service.journal
        assert journal is not None
        records = journal.records
        tailed = set(table.links.tails)
        assert tailed
        failing = OSError(errno.EMFILE, "Too many open files")
        monkeypatch.setattr(
            "wharf.store.queue.table.write_tails_blocking", lambda writes: [failing] * len(writes)
        )
        with pytest.raises(OSError, match="Too many open files"):
            await journal.record(lambda: s.insides.reput_service.reput_from_offset)
        assert journal.records == records and tailed <= table.links.changed
        monkeypatch.undo()
        await journal.record(lambda: s.insides.reput_service.reput_from_offset)
        assert journal.records == records + 1 and not table.links.changed
        assert not table.links.tails
    finally:
        monkeypatch.undo()
        await s.shutdown()


async def test_tails_are_captured_and_written_a_chunk_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``capture_written`` writes each chunk's tails before it captures the next (the copies
    in flight are one chunk's, not the whole budget's) and leaves every tail in its file."""
    monkeypatch.setattr(table_module, "CAPTURE_CHUNK", 2)
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE)
    written: list[int] = []
    real_write = table.write_tails

    async def write_tails(writes: list[consume_queue.TailWrite]) -> None:
        assert all(w.queue._tail is not None for w in writes)  # captured, not yet trimmed
        assert sum(1 for q in table.queues.values() if q._tail is None) == sum(written)
        written.append(len(writes))
        await real_write(writes)

    monkeypatch.setattr(table, "write_tails", write_tails)
    try:
        queues = [table.find_or_create("T", q) for q in range(5)]
        units = _units(3)
        for queue in queues:
            queue.append_units(0, units[:1])  # creates the file: written through
            queue.append_units(1, units[1:])  # a tail of 2 units
        entries = await table.capture_written(queues)
        assert written == [2, 2, 1]
        assert [entry[2][3] for entry in entries] == [3 * UNIT] * 5
        assert not table.links.tails and table.links.tail_bytes == 0
        for queue in queues:
            assert _file_bytes(queue)[: 3 * UNIT] == _packed(units)
    finally:
        for queue in table.queues.values():
            queue.close()
