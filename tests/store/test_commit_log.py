"""CommitLog writes and reads: rolling, blank markers, dispatch scan, preallocation, transient pool."""

from __future__ import annotations

import asyncio
import os

import pytest
from wharf.store import codec as fmt
from wharf.store.config import StoreConfig
from wharf.store.errors import InvalidMessageError, StoreShutDownError
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import MessageInput

SEGMENT = 4096


def make_log(tmp_path, **overrides) -> CommitLog:
    config = StoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT, **overrides
    )
    log = CommitLog(config)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


def body(i: int, size: int = 300) -> bytes:
    return (f"message-{i}-".encode() * size)[:size]


def test_append_assigns_offsets_and_reads_back_byte_for_byte(tmp_path):
    log = make_log(tmp_path)
    result = log.append(
        "TopicA", 2, 10, [MessageInput(body(0)), MessageInput(body(1), {"TAGS": "t"})], 123
    )
    assert result.offsets == [0, result.sizes[0]]
    assert result.end_offset == sum(result.sizes) == log.max_offset == log.wrote_offset
    second = log.read_message(result.offsets[1])
    assert second is not None
    assert (second.body, second.queue_offset, second.queue_id, second.topic) == (
        body(1),
        11,
        2,
        "TopicA",
    )
    assert second.tags == "t" and second.store_timestamp == 123
    assert log.read_message(result.offsets[1], result.sizes[1]) == second
    assert log.read_message(result.end_offset) is None  # nothing written there yet
    assert log.read_bytes(0, result.sizes[0]) == log.read_bytes(0, result.sizes[0])
    assert log.store_timestamp_at(result.offsets[1]) == 123
    assert log.messages_put_total == 2
    log.close()


def test_rolling_writes_blank_marker_never_splits_a_record_and_names_segments(tmp_path):
    log = make_log(tmp_path)
    results = [log.append("T", 0, i, [MessageInput(body(i))], 1000 + i) for i in range(40)]
    names = sorted(os.listdir(log.store_path))
    assert len(names) > 3
    assert names == [fmt.segment_file_name(i * SEGMENT) for i in range(len(names))]
    for r in results:
        start, end = r.offsets[0], r.end_offset
        assert start // SEGMENT == (end - 1) // SEGMENT, "a record spans two segments"
    for mapped in log.queue.files[:-1]:
        # the bytes after the last record of a full segment are a blank marker to its end
        last = max(
            r.end_offset
            for r in results
            if r.offsets[0] // SEGMENT == mapped.file_from_offset // SEGMENT
        )
        local = last - mapped.file_from_offset
        total, magic = fmt.BLANK_HEADER.unpack(mapped.read(local, 8))
        assert magic == fmt.BLANK_MAGIC_CODE and local + total == SEGMENT
    for i, r in enumerate(results):
        assert log.read_message(r.offsets[0]).body == body(i)
    log.close()


def test_batch_that_does_not_fit_moves_whole_to_the_next_segment(tmp_path):
    log = make_log(tmp_path)
    log.append("T", 0, 0, [MessageInput(body(0, 3000))], 1)
    batch = log.append("T", 0, 1, [MessageInput(body(i, 400)) for i in range(3)], 2)
    assert batch.offsets[0] == SEGMENT
    assert [log.read_message(o).queue_offset for o in batch.offsets] == [1, 2, 3]
    log.close()


def test_batch_larger_than_a_segment_is_invalid_and_writes_nothing(tmp_path):
    log = make_log(tmp_path)
    log.append("T", 0, 0, [MessageInput(b"x")], 1)
    before = (log.wrote_offset, log.segment_count)
    with pytest.raises(InvalidMessageError, match="more than a commit log segment"):
        log.append("T", 0, 1, [MessageInput(body(i, 1000)) for i in range(5)], 2)
    with pytest.raises(InvalidMessageError):
        log.append("T", 0, 1, [MessageInput(b"fine"), MessageInput(b"")], 2)
    assert (log.wrote_offset, log.segment_count) == before
    log.close()


def test_iter_dispatch_walks_across_blank_tails_in_bounded_steps(tmp_path):
    log = make_log(tmp_path)
    results = [
        log.append("T", i % 3, i, [MessageInput(body(i), {"KEYS": f"k{i}"})], 5) for i in range(30)
    ]
    seen = []
    offset = 0
    while True:
        batch = log.iter_dispatch(offset, max_bytes=700)
        assert len(batch.requests) <= 3
        seen.extend(batch.requests)
        if batch.next_offset == offset:
            break
        offset = batch.next_offset
    assert offset == log.max_offset
    assert [r.commit_log_offset for r in seen] == [r.offsets[0] for r in results]
    assert [r.keys for r in seen] == [[f"k{i}"] for i in range(30)]
    # one record bigger than max_bytes still comes out
    assert len(log.iter_dispatch(0, max_bytes=10).requests) == 1
    log.close()


def test_read_messages_returns_consecutive_records_across_segments(tmp_path):
    log = make_log(tmp_path)
    for i in range(20):
        log.append("T", 0, i, [MessageInput(body(i))], 5)
    messages = log.read_messages(0, max_count=1000, max_bytes=1 << 20)
    assert [m.queue_offset for m in messages] == list(range(20))
    assert [m.body for m in messages[:3]] == [body(0), body(1), body(2)]
    assert len(log.read_messages(0, max_count=4)) == 4
    log.close()


async def test_preallocation_keeps_segment_creation_off_the_append_path(tmp_path):
    log = make_log(tmp_path)
    log.start()
    try:
        for i in range(60):
            log.append("T", 0, i, [MessageInput(body(i))], 5)
            for _ in range(200):  # give the allocation thread its turn, as a live broker does
                if log.allocator.idle:
                    break
                await asyncio.sleep(0.002)
        assert log.segment_count > 4
        assert log.allocator.created >= log.segment_count - 1
        assert log.sync_segment_creations <= 1  # at most the very first segment
    finally:
        await log.shutdown()
        log.close()
    # unused preallocated segments are removed at shutdown
    assert len(os.listdir(log.store_path)) == log.segment_count


def test_append_after_close_is_refused(tmp_path):
    log = make_log(tmp_path)
    log.close()
    with pytest.raises(StoreShutDownError):
        log.append("T", 0, 0, [MessageInput(b"x")], 1)


async def test_transient_pool_appends_become_readable_after_commit(tmp_path):
    log = make_log(
        tmp_path,
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        commit_interval_commit_log=10,
    )
    log.start()
    try:
        results = [log.append("T", 0, i, [MessageInput(body(i))], 5) for i in range(30)]
        log.wakeup_flush()
        flushed = await log.flush()
        assert flushed == log.wrote_offset == log.max_offset
        for i, r in enumerate(results):
            assert log.read_message(r.offsets[0]).body == body(i)
        assert log.transient_pool.deficient_borrows >= 1  # 2 buffers for more segments than that
    finally:
        await log.shutdown()
        log.close()


def test_iter_dispatch_raises_at_a_corrupt_record_and_can_stop_short_of_it(tmp_path):
    from wharf.store.errors import CorruptRecordError

    log = make_log(tmp_path)
    results = [log.append("T", 0, i, [MessageInput(body(i))], 5) for i in range(3)]
    bad = results[1].offsets[0]
    log.queue.files[0].raw[bad + 4 : bad + 8] = b"\0\0\0\1"  # garble the magic code
    with pytest.raises(CorruptRecordError) as excinfo:
        log.iter_dispatch(0, 1 << 20)
    assert excinfo.value.offset == bad
    batch = log.iter_dispatch(0, bad)  # the budget ends right before the bad record
    assert [r.commit_log_offset for r in batch.requests] == [0] and batch.next_offset == bad
    with pytest.raises(CorruptRecordError):
        log.read_messages(bad, 10)
    log.close()
