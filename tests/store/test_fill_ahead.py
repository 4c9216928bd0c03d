"""The segment being written, zero-filled ahead of its writer (``FillAhead``, SYNC_FLUSH): the
zeros go only where no record is, keep their pace, leave the file with no unwritten extent
where they went, and are off without SYNC_FLUSH or with ``zeroFillAheadMbps`` 0."""

from __future__ import annotations

import asyncio
import time

import pytest
from wharf.store.config import SYNC_FLUSH, StoreConfig
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.fill_ahead import FILL_LEAD
from wharf.store.log.mapped_file import ZERO_FILL_STEP
from wharf.store.model import MessageInput

from tests.store.helpers import has_unwritten_extents, unwritten_extents

SEGMENT = 1 << 20  # 4 fill steps


def make_log(tmp_path, segment: int = SEGMENT, **overrides) -> CommitLog:
    settings = {"flush_disk_type": SYNC_FLUSH, "zero_fill_ahead_mbps": 1000, **overrides}
    config = StoreConfig(
        store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=segment, **settings
    )
    log = CommitLog(config)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    return log


def body(i: int) -> bytes:
    return (f"record-{i}-".encode() * 100)[:1000]


async def _filled(log: CommitLog, at_least: int) -> None:
    for _ in range(300):
        mapped = log.queue.last()
        if mapped is not None and mapped.zeroed_to >= at_least:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the fill did not get there")


async def test_the_writers_segment_is_zero_filled_ahead_and_its_records_stay_intact(tmp_path):
    log = make_log(tmp_path)
    log.start()
    try:
        first = log.append("T", 0, 0, [MessageInput(body(0))], 1)
        mapped = log.queue.last()
        assert mapped is not None and mapped.zeroed_to == 0  # fallocated only, at first
        await _filled(log, SEGMENT)  # 1 MiB ahead is the whole (test) segment
        # Appended after the fill went past them: written over the zeros, read back whole.
        later = [log.append("T", 0, i, [MessageInput(body(i))], 1) for i in range(1, 50)]
        await log.flush()
        for i, result in enumerate([first, *later]):
            message = log.read_message(result.offsets[0])
            assert message is not None and message.body == body(i)
        if has_unwritten_extents(tmp_path):
            assert unwritten_extents(mapped.path) == 0
    finally:
        await log.shutdown()
        log.close()


async def test_a_step_that_runs_after_more_appends_starts_at_the_write_position(tmp_path):
    log = make_log(tmp_path)
    assert log.fill_ahead is not None
    log.fill_ahead._step_s = 10.0  # one step in this test: where it started shows
    log.start()
    try:
        log.append("T", 0, 0, [MessageInput(body(0))], 1)  # schedules a step, not run yet
        # Appends in the same loop turn move the write position past where the fill stood.
        results = [log.append("T", 0, i, [MessageInput(body(i))], 1) for i in range(1, 20)]
        mapped = log.queue.last()
        assert mapped is not None and mapped.zeroed_to == 0
        await _filled(log, 1)
        assert mapped.zeroed_to == mapped.wrote_position + ZERO_FILL_STEP
        for i, result in enumerate(results, start=1):
            message = log.read_message(result.offsets[0])
            assert message is not None and message.body == body(i)
        with pytest.raises(ValueError, match="overwrite records"):
            mapped.write_zeros(mapped.wrote_position - 1, mapped.wrote_position + 10)
    finally:
        await log.shutdown()
        log.close()


async def test_the_fill_keeps_its_pace(tmp_path):
    # One step of 256 KiB a second: the second waits.
    log = make_log(tmp_path, zero_fill_ahead_mbps=1)
    assert log.fill_ahead is not None
    log.fill_ahead._step_s = 1.0
    log.start()
    try:
        log.append("T", 0, 0, [MessageInput(body(0))], 1)
        await _filled(log, 1)
        started = time.monotonic()
        log.append("T", 0, 1, [MessageInput(body(1))], 1)  # asks for the next step
        await asyncio.sleep(0.3)
        assert log.fill_ahead.steps == 1
        await _filled(log, 2 * ZERO_FILL_STEP)
        assert time.monotonic() - started >= 0.6
    finally:
        await log.shutdown()
        log.close()


async def test_a_fast_writer_is_not_filled_ahead(tmp_path):
    log = make_log(tmp_path, segment=32 << 20)
    assert log.fill_ahead is not None
    log.fill_ahead.clock = lambda: 100.0  # the whole test within one second of the writer's
    log.start()
    try:
        # 17 MiB in one burst (FAST_WRITER_BPS is 16 MiB a second): the first append asks
        # for a step, which runs after the burst; no other follows within the second.
        records = [MessageInput(body(i)) for i in range(16)]
        for i in range(1100):
            log.append("T", 0, i * 16, records, 1)
        await asyncio.sleep(0.2)
        assert log.fill_ahead.steps == 1
        mapped = log.queue.last()
        assert mapped is not None
        assert mapped.zeroed_to < mapped.wrote_position + FILL_LEAD
    finally:
        await log.shutdown()
        log.close()


@pytest.mark.parametrize(
    "overrides", [{"flush_disk_type": "ASYNC_FLUSH"}, {"zero_fill_ahead_mbps": 0}]
)
def test_no_fill_without_sync_flush_or_with_the_setting_off(tmp_path, overrides):
    log = make_log(tmp_path, **overrides)
    try:
        assert log.fill_ahead is None
    finally:
        log.close()
