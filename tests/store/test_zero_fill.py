"""Zero-filled segments (``zeroFillAheadMbps``): a preallocated segment's extents written ahead
of the writer, paced, only when the log rolls slowly enough, cancelled by a roll or a stop."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from wharf.store.log import allocate as allocate_service
from wharf.store.log.mapped_file import ZERO_FILL_STEP, ZeroFill
from wharf.store.log.mapped_file_queue import MappedFileQueue, create_segment_blocking

from tests.store.helpers import has_unwritten_extents, unwritten_extents

SIZE = 1 << 20


def test_a_zero_filled_segment_has_no_unwritten_extents_and_reads_as_zeros(tmp_path):
    plain = create_segment_blocking(str(tmp_path / "a"), 0, SIZE, warm=False)
    fill = ZeroFill(bytes_per_s=10**9)
    filled = create_segment_blocking(str(tmp_path / "b"), 0, SIZE, warm=False, zero_fill=fill)
    try:
        assert fill.filled == SIZE
        for segment in (plain, filled):
            with open(segment.path, "rb") as handle:
                assert handle.read() == bytes(SIZE)  # what recovery reads: the same zeros
        if has_unwritten_extents(tmp_path):
            assert unwritten_extents(plain.path) > 0  # posix_fallocate's extents
            assert unwritten_extents(filled.path) == 0
    finally:
        plain.close()
        filled.close()


def test_the_fill_keeps_its_pace_and_a_cancel_ends_it_at_the_next_step(tmp_path):
    fill = ZeroFill(bytes_per_s=4 * ZERO_FILL_STEP)  # 4 steps a second: 1 MiB in ~1 s
    fd = os.open(tmp_path / "seg", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, SIZE)
        started = time.monotonic()
        fill.run_blocking(fd, 2 * ZERO_FILL_STEP)
        assert time.monotonic() - started >= 0.4  # the second step waited for its turn
        assert fill.filled == 2 * ZERO_FILL_STEP
        fill.filled = 0
        fill.cancel.set()
        fill.run_blocking(fd, SIZE)
        assert fill.filled == 0
    finally:
        os.close(fd)


async def _settle(service: allocate_service.AllocateMappedFileService) -> None:
    for _ in range(500):
        if service.idle:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("preallocation did not finish")


@pytest.mark.parametrize(
    ("segment_s", "filled"),
    [(10.0, True), (2.0, False)],  # 1 MiB at 1 MB/s takes ~1 s: fill when rolls are >= 4 s apart
)
async def test_segments_are_zero_filled_only_when_the_log_rolls_slowly(
    tmp_path, monkeypatch, segment_s, filled
):
    clock = [100.0]
    queue = MappedFileQueue(str(tmp_path), SIZE)
    service = allocate_service.AllocateMappedFileService(queue, zero_fill_bps=10**6)
    service.clock = lambda: clock[0]
    # the fill's own pace: fast here, the decision is what is under test
    monkeypatch.setattr(allocate_service, "ZeroFill", lambda bps: ZeroFill(10**9))
    service.start()
    try:
        service.request_after(-SIZE)  # start: no roll seen, no interval: never filled
        await _settle(service)
        queue.roll()  # the first roll: still no interval
        await _settle(service)
        assert service.zero_filled == 0
        clock[0] += segment_s
        queue.roll()  # the second: the interval decides the segment asked for now (3 * SIZE)
        await _settle(service)
        assert service.zero_filled == (1 if filled else 0)
        if has_unwritten_extents(tmp_path):
            assert (unwritten_extents(service._ready[3 * SIZE].path) == 0) is filled
    finally:
        await service.stop()
        queue.close()


async def test_a_stop_cancels_a_slow_fill_at_once(tmp_path):
    clock = [100.0]
    queue = MappedFileQueue(str(tmp_path), 8 * SIZE)
    service = allocate_service.AllocateMappedFileService(queue, zero_fill_bps=10**6)
    service.clock = lambda: clock[0]
    service.start()
    try:
        service.request_after(-8 * SIZE)
        await _settle(service)
        queue.roll()
        clock[0] += 1000.0
        queue.roll()  # asks for a segment filled at 1 MB/s: ~8 s
        for _ in range(200):
            if service._inflight:
                break
            await asyncio.sleep(0.01)
        assert service._inflight
    finally:
        started = time.perf_counter()
        await service.stop()
        queue.close()
    assert time.perf_counter() - started < 2.0
    assert service.zero_filled == 0
