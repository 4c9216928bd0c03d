"""CommitLog lifecycle: the first roll never blocks the event loop, a lone message is visible with the transient store pool, and recovery does not rescan what the checkpoint vouches for."""

from __future__ import annotations

import asyncio
import logging
import os
import time

from wharf.broker.settings import load_settings
from wharf.store import codec as fmt
from wharf.store.config import StoreConfig
from wharf.store.log import allocate as allocate_service
from wharf.store.log import recovery as commit_log_recovery
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.log.mapped_file_queue import create_segment_blocking
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput

SEGMENT = 4096
SLOW_PREALLOCATION_S = 1.0


class LoopGapMeter:
    """The longest time the event loop went without running a 5 ms ticker."""

    def __init__(self) -> None:
        self.max_gap = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(0.005)
            self.max_gap = max(self.max_gap, time.monotonic() - before)

    def __enter__(self) -> LoopGapMeter:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def started_small_store(tmp_path) -> MessageStore:
    """A started store of 64 KiB segments without the index (the tests here watch segments)."""
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=64 * 1024,
        message_index_enable=False,
    )
    store = MessageStore(config)
    await store.start()
    return store


async def test_first_puts_do_not_block_the_loop_while_preallocation_is_slow(tmp_path, monkeypatch):
    real_create = allocate_service.create_segment_blocking

    def slow_create(*args):  # a 1 GiB prefault, compressed into a sleep
        time.sleep(SLOW_PREALLOCATION_S)
        return real_create(*args)

    monkeypatch.setattr(allocate_service, "create_segment_blocking", slow_create)
    store = await started_small_store(tmp_path)
    try:
        with LoopGapMeter() as meter:
            await asyncio.sleep(0.02)
            # ~200 KiB: the first segment (made during start) and three rolls while every
            # preallocation is still sleeping in its thread.
            for _ in range(200):
                await store.put("T", 0, [MessageInput(b"x" * 1000)])
            await asyncio.sleep(0.02)
        commit_log = store._commit_log
        assert commit_log is not None
        assert commit_log.segment_count >= 4
        assert commit_log.allocator.late_takes >= 1  # the rolls really found creation in flight
        # Waiting for a preallocation would stall the loop >= 1 s; generous bound for CI noise.
        assert meter.max_gap < SLOW_PREALLOCATION_S / 2, meter.max_gap
        assert await store.wait_dispatched(10.0)
        got = store.get_messages("T", 0, 0, 300)
        assert [m.queue_offset for m in got.messages] == list(range(200))
    finally:
        await store.shutdown()


def test_start_gets_its_first_segment_from_recovery_not_from_the_first_append(tmp_path):
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)
    log = CommitLog(config)
    log.load_blocking()
    log.recover_blocking(abnormal=False)  # runs in a thread at MessageStore.start
    assert log.allocator.has_ready(0)
    log.append("T", 0, 0, [MessageInput(b"x" * 100)], 1)
    assert log.sync_segment_creations == 0
    log.close()


async def test_transient_pool_commits_a_lone_small_message_within_the_thorough_interval(
    tmp_path,
):
    config = StoreConfig(
        store_path_root_dir=str(tmp_path),
        mapped_file_size_commit_log=64 * 1024,
        transient_store_pool_enable=True,
        transient_store_pool_size=2,
        commit_commit_log_least_pages=4,  # a 300-byte message is far below 4 pages
        commit_commit_log_thorough_interval=200,
    )
    log = CommitLog(config)
    await asyncio.to_thread(log.load_blocking)
    await asyncio.to_thread(log.recover_blocking, False)
    log.start()
    try:
        result = log.append("T", 0, 0, [MessageInput(b"y" * 300)], 1)
        log.wakeup_flush()
        started = time.monotonic()
        for _ in range(300):
            if log.max_offset >= result.end_offset:
                break
            await asyncio.sleep(0.01)
        assert log.max_offset == result.end_offset  # committed: readable and dispatchable
        assert time.monotonic() - started < 2.0  # ~200-400 ms expected; generous for CI
        message = log.read_message(result.offsets[0])
        assert message is not None and message.body == b"y" * 300
    finally:
        await log.shutdown()
        log.close()


def test_commit_thorough_interval_loads_from_its_rocketmq_name(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text("commitCommitLogThoroughInterval = 350\n", encoding="utf-8")
    assert load_settings(path).store.commit_commit_log_thorough_interval == 350
    assert StoreConfig().commit_commit_log_thorough_interval == 200  # RocketMQ's default


def _write_three_segments_then_crash(tmp_path) -> tuple[int, StoreCheckpoint]:
    """Records over three segments, the third partly filled, two empty preallocated segments
    after it (as the allocator leaves them at kill -9), the checkpoint at the data end."""
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    log = CommitLog(config, checkpoint=checkpoint)
    log.load_blocking()
    log.recover_blocking(abnormal=False)
    i = 0
    while log.segment_count < 3 or log.queue.last().wrote_position < SEGMENT // 2:
        log.append("T", 0, i, [MessageInput(b"z" * 300, {"KEYS": f"k{i}"})], 1000 + i)
        i += 1
    end = log.wrote_offset
    for n in (1, 2):
        create_segment_blocking(
            log.store_path, log.queue.last().file_from_offset + n * SEGMENT, SEGMENT, False
        ).close()
    log.queue.flush_blocking()
    checkpoint.physic_offset = end
    checkpoint.physic_msg_timestamp = 1000 + i - 1
    checkpoint.logics_msg_timestamp = 1000 + i - 1
    checkpoint.flush_blocking()
    log.close()  # no shutdown
    return end, checkpoint


def test_checkpoint_at_data_end_before_empty_segments_is_accepted_without_rescan(
    tmp_path, monkeypatch, caplog
):
    end, _ = _write_three_segments_then_crash(tmp_path)
    assert len(os.listdir(tmp_path / "commitlog")) == 5
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    checkpoint.load_blocking()
    assert checkpoint.valid and checkpoint.physic_offset == end
    calls = 0
    real_check = commit_log_recovery.check_record

    def counting_check(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real_check(*args, **kwargs)

    monkeypatch.setattr(commit_log_recovery, "check_record", counting_check)
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)
    log = CommitLog(config, checkpoint=checkpoint)
    log.load_blocking()
    with caplog.at_level(logging.INFO, logger="wharf.store.log.recovery"):
        recovered = log.recover_blocking(abnormal=True, checkpoint=checkpoint)
    assert recovered == end
    assert "validating more" not in caplog.text
    assert "inside a segment that is not the last" not in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # routine, not alarm
    # The start check, two empty-segment probes, the walk's one look at the end (x2 for the
    # log line): a rescan would validate every record of the last segments (> 20).
    assert calls <= 8, calls
    assert log.segment_count == 3  # the empty segments are gone: the next append continues
    names = sorted(os.listdir(tmp_path / "commitlog"))
    assert names[:3] == [fmt.segment_file_name(n * SEGMENT) for n in range(3)]
    result = log.append("T", 0, 999, [MessageInput(b"after")], 5000)
    assert result.offsets[0] == end
    log.close()


def test_checkpoint_at_data_end_before_a_segment_with_data_is_still_validated(tmp_path, caplog):
    end, _ = _write_three_segments_then_crash(tmp_path)
    # Data in a later segment after a zero gap is not the preallocation case: stay careful.
    last = os.path.join(tmp_path, "commitlog", fmt.segment_file_name(end - end % SEGMENT + SEGMENT))
    with open(last, "r+b") as f:
        f.write(b"\x00\x00\x01\x00")  # a non-zero TOTALSIZE
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    checkpoint.load_blocking()
    config = StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)
    log = CommitLog(config, checkpoint=checkpoint)
    log.load_blocking()
    with caplog.at_level(logging.WARNING, logger="wharf.store.log.recovery"):
        assert log.recover_blocking(abnormal=True, checkpoint=checkpoint) == end
    assert "validating more" in caplog.text
    log.close()


async def test_the_start_up_segment_is_read_ahead_after_start_and_a_stop_cancels_it(
    tmp_path, monkeypatch
):
    """The first segment's read prefault (1.0-2.4 s a GiB here) is not part of the start: the
    allocator's thread runs it once started, while puts go on; a stop ends it early."""
    began = asyncio.Event()
    seen: list[tuple[int, bool]] = []
    loop = asyncio.get_running_loop()

    def slow_prefault(mapped, cancel):
        loop.call_soon_threadsafe(began.set)
        seen.append((mapped.file_from_offset, cancel.is_set()))
        cancel.wait(30)  # a long prefault, until the stop cancels it
        seen.append((mapped.file_from_offset, cancel.is_set()))

    monkeypatch.setattr(allocate_service, "prefault_segment_blocking", slow_prefault)
    store = await started_small_store(tmp_path)
    try:
        await asyncio.wait_for(began.wait(), 10)
        assert seen == [(0, False)]  # the start-up segment, after the store started
        result = await store.put("T", 0, [MessageInput(b"x" * 1000)])  # not held up by it
        assert result.status.name == "PUT_OK"
    finally:
        await store.shutdown()
    assert seen == [(0, False), (0, True)]  # the stop cancelled it, before its 30 s
