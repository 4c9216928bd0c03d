"""CommitLogSource (the reput's reader) returns the records ``CommitLog.iter_dispatch`` returns,
in one-segment steps, never past the dispatch limit, across blank tails, in both decodings; and
a backlog dispatched as columns is visible through the facade."""

from __future__ import annotations

from pathlib import Path

import pytest
import wharf.store.dispatch.reput as reput_module
from wharf.store.config import StoreConfig
from wharf.store.dispatch.reput import CommitLogSource
from wharf.store.fast.dispatch_columns import DispatchColumns, decode_dispatch_columns
from wharf.store.log.commit_log import CommitLog
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput
from wharf.store.read.filter import parse_tag_expression

from tests.store.helpers import mapped_bytes, msg, small_config

SEGMENT = 8 * 1024


def make_log(tmp_path: Path) -> CommitLog:
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)
    log = CommitLog(config)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


def offsets_of(records: object) -> list[int]:
    if isinstance(records, DispatchColumns):
        return records.offsets.tolist()
    return [r.commit_log_offset for r in records]  # type: ignore[attr-defined]


def read_all(source: CommitLogSource, limit: int, max_bytes: int) -> tuple[list[int], int]:
    offset, seen = 0, []
    while True:
        records, next_offset = source.read_dispatch_chunk(offset, limit, max_bytes)
        seen.extend(offsets_of(records))
        assert next_offset <= limit
        if next_offset == offset:
            return seen, offset
        offset = next_offset


def test_bytes_dispatched_far_behind_leave_the_maps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading the log maps its pages; those dispatched ``release_behind`` ago and more are
    released (their data unchanged), the newest stay mapped for readers at the tail."""
    monkeypatch.setattr(reput_module, "RELEASE_STEP", 4096)
    log = make_log(tmp_path)
    try:
        for i in range(80):
            log.append("T", i % 3, i, [MessageInput(bytes([65 + i % 26]) * 900)], 5)
        segments = list(log.queue.files)
        assert len(segments) >= 8
        source = CommitLogSource(log, sync_flush=False)
        source.release_behind = 3 * SEGMENT
        before = [log.read_bytes(m.file_from_offset, 4096) for m in segments]
        assert all(mapped_bytes(m.path) for m in segments)  # the appends' reads mapped them
        seen, end = read_all(source, log.max_offset, 1 << 20)
        assert len(seen) == 80 and end == log.max_offset
        below = (end - 3 * SEGMENT) // 4096 * 4096  # the last read started at ``end``
        for mapped in segments:
            resident = mapped_bytes(mapped.path)
            if mapped.file_from_offset + SEGMENT <= below:
                assert resident == 0, mapped  # wholly behind: released
            elif mapped.file_from_offset >= below:
                assert resident > 0, mapped  # within the window: still mapped
        assert [log.read_bytes(m.file_from_offset, 4096) for m in segments] == before
        # Those reads (a consumer catching up) mapped old pages again: the next release, one
        # step of dispatch later, takes them out too.
        first = segments[0]
        assert mapped_bytes(first.path) > 0
        located = log.readable_segment(segments[1].file_from_offset, 100)
        assert located is not None and bytes(located[0][:4])  # read through the map
        assert mapped_bytes(segments[1].path) > 0
        for i in range(10):
            log.append("T", 0, 80 + i, [MessageInput(b"z" * 900)], 5)
        offset = end
        while offset < log.max_offset:  # dispatch the new records: the mark moves a step
            _, offset = source.read_dispatch_chunk(offset, log.max_offset, 1 << 20)
        source.read_dispatch_chunk(offset, log.max_offset, 1 << 20)
        assert mapped_bytes(first.path) == 0 and mapped_bytes(segments[1].path) == 0
    finally:
        log.close()


@pytest.mark.parametrize("columns_from", [1, 10**9])
@pytest.mark.parametrize("max_bytes", [700, 3000, 1 << 20])
def test_source_reads_what_iter_dispatch_reads_up_to_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, columns_from: int, max_bytes: int
) -> None:
    monkeypatch.setattr(reput_module, "COLUMNS_FROM", columns_from)
    log = make_log(tmp_path)
    try:
        for i in range(60):  # sizes vary, so segments end in blank tails of varying length
            body = bytes([65 + i % 26]) * (100 + 37 * (i % 11))
            log.append("T", i % 3, i, [MessageInput(body, {"UNIQ_KEY": f"U{i}"})] * 2, 5)
        assert log.segment_count > 3
        expected = []
        offset = 0
        while True:  # iter_dispatch reads across segments; the source goes one at a time
            batch = log.iter_dispatch(offset, 1 << 30)
            expected.extend(r.commit_log_offset for r in batch.requests)
            if batch.next_offset == offset:
                break
            offset = batch.next_offset
        assert len(expected) == 120
        source = CommitLogSource(log, sync_flush=False, max_records=7)
        seen, end = read_all(source, log.max_offset, max_bytes)
        assert seen == expected and end == log.max_offset
        # A limit inside a record: dispatch stops before that record, and resumes later.
        cut = expected[50] + 10
        seen, end = read_all(source, cut, max_bytes)
        assert seen == expected[:50] and end == expected[50]
    finally:
        log.close()


async def test_a_backlog_dispatched_as_columns_is_pulled_and_queried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the facade: a backlog of several hundred records goes through the columnar path
    (chunks far above COLUMNS_FROM); queues, tag filters and index queries see all of it."""
    columnar: list[int] = []

    def decode(buf: object, positions: list[int], base: int) -> DispatchColumns:
        columnar.append(len(positions))
        return decode_dispatch_columns(buf, positions, base)  # type: ignore[arg-type]

    monkeypatch.setattr(reput_module, "decode_dispatch_columns", decode)
    config = small_config(
        tmp_path,
        mapped_file_size_commit_log=1 << 20,
        mapped_file_size_consume_queue=20 * 1000,
        max_hash_slot_num=64,
        max_index_num=2000,
    )
    store = MessageStore(config)
    await store.start()
    try:
        reput = store.insides.reput_service
        await reput.stop()  # build a backlog
        for i in range(300):
            tags = "even" if i % 2 == 0 else "odd"
            store.append("T", i % 2, [msg(f"m{i}", tags=tags, keys=f"k{i} shared", uniq=f"U{i}")])
        reput.start()
        assert await store.wait_dispatched()
        assert reput.dispatched_messages == 300 and sum(columnar) == 300
        got = store.get_messages("T", 0, 0, 1000, parse_tag_expression("even"))
        assert [m.body for m in got.messages] == [f"m{i}".encode() for i in range(0, 300, 2)]
        assert store.get_messages("T", 1, 0, 1000, parse_tag_expression("even")).messages == []
        assert [m.body for m in store.query_messages("T", "k123", 5, 0, 2**62)] == [b"m123"]
        assert [m.body for m in store.query_messages("T", "U7", 5, 0, 2**62)] == [b"m7"]
        assert len(store.query_messages("T", "shared", 1000, 0, 2**62)) == 300
    finally:
        await store.shutdown()
