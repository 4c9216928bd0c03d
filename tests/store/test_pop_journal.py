"""The pop journal: record codec, torn-tail detection, batched syncs, sticky failures,
compaction fallback; the per-queue state's bookkeeping; DLQ put failures."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest
from wharf.store.codec.layout import (
    POP_JOURNAL_MAGIC,
    POP_RECORD_ACK,
    POP_RECORD_CHANGE,
    POP_RECORD_DONE,
    POP_RECORD_HEADER_SIZE,
    POP_RECORD_POP,
    POP_RECORD_RESET,
)
from wharf.store.errors import (
    DiskFullError,
    FlushFailedError,
    StoreError,
    SyncDiskFullError,
)
from wharf.store.message_store import MessageStore
from wharf.store.pop import journal as journal_module
from wharf.store.pop.journal import JournalWriter, load_journal_blocking
from wharf.store.pop.records import PopRecord, encode_record, parse_journal
from wharf.store.pop.state import PopState

from tests.store.helpers import msg, small_config

RECORDS = [
    PopRecord(POP_RECORD_POP, "g", "T", 3, 17, 1, 1_800_000_000_000, 2**64 - 1, 2),
    PopRecord(POP_RECORD_ACK, "group-x", "%RETRY%t", 0, 2**40, nonce=5),
    PopRecord(POP_RECORD_CHANGE, "g" * 122, "t" * 127, 2**31 - 1, 0, visible_at=9, nonce=7),
    PopRecord(POP_RECORD_DONE, "g", "T", 1, 0, 2**40),
    PopRecord(POP_RECORD_RESET, "g", "T", 1, 0, 0),
    PopRecord(POP_RECORD_ACK, "g" * 255, "t" * 249, 1, 2, nonce=3),  # Kafka's longest topic
]


def test_records_round_trip_and_sizes_follow_the_layout() -> None:
    data = POP_JOURNAL_MAGIC + b"".join(encode_record(r) for r in RECORDS)
    records, end = parse_journal(data)
    assert records == RECORDS and end == len(data)
    assert len(encode_record(RECORDS[0])) == POP_RECORD_HEADER_SIZE + 1 + 1


def test_a_torn_or_damaged_record_ends_the_valid_data() -> None:
    whole = POP_JOURNAL_MAGIC + b"".join(encode_record(r) for r in RECORDS[:2])
    last = encode_record(RECORDS[2])
    for cut in (1, 8, POP_RECORD_HEADER_SIZE, len(last) - 1):
        records, end = parse_journal(whole + last[:cut])
        assert records == RECORDS[:2] and end == len(whole)
    flipped = bytearray(last)
    flipped[-1] ^= 0x01  # a byte of the topic: CRC mismatch
    assert parse_journal(whole + bytes(flipped) + encode_record(RECORDS[3]))[1] == len(whole)
    zeros = parse_journal(whole + bytes(200))  # preallocated/zeroed tail
    assert zeros == (RECORDS[:2], len(whole))
    assert parse_journal(b"") == ([], 0)
    assert parse_journal(POP_JOURNAL_MAGIC[:3]) == ([], 0)
    with pytest.raises(ValueError):
        parse_journal(b"NOTAJRNL" + encode_record(RECORDS[0]))


def test_load_cuts_the_torn_tail_creates_a_missing_file_and_drops_a_stale_tmp(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pop" / "journal"
    assert load_journal_blocking(path) == ([], len(POP_JOURNAL_MAGIC))
    assert path.read_bytes() == POP_JOURNAL_MAGIC
    whole = POP_JOURNAL_MAGIC + encode_record(RECORDS[0])
    path.write_bytes(whole + encode_record(RECORDS[1])[:30])
    (tmp_path / "pop" / "journal.tmp").write_bytes(b"half a snapshot")
    records, size = load_journal_blocking(path)
    assert records == RECORDS[:1] and size == len(whole)
    assert path.read_bytes() == whole
    assert not (tmp_path / "pop" / "journal.tmp").exists()
    path.write_bytes(b"garbage!" + whole)
    with pytest.raises(StoreError, match="not a pop journal"):
        load_journal_blocking(path)


async def _writer(tmp_path: Path, compact_bytes: int = 1 << 20) -> JournalWriter:
    path = tmp_path / "journal"
    _, size = load_journal_blocking(path)
    return JournalWriter(path, size, lambda: encode_record(RECORDS[3]), compact_bytes)


async def test_one_sync_covers_a_burst_of_appends(tmp_path: Path) -> None:
    writer = await _writer(tmp_path)

    async def one(i: int) -> None:
        writer.append(encode_record(RECORDS[i % 4]))
        await writer.sync()

    await asyncio.gather(*(one(i) for i in range(200)))
    assert writer.syncs <= 2
    await writer.close()
    records, _ = parse_journal((tmp_path / "journal").read_bytes())
    assert records == [RECORDS[i % 4] for i in range(200)]


@pytest.mark.parametrize(
    ("code", "error"), [(errno.EIO, FlushFailedError), (errno.ENOSPC, SyncDiskFullError)]
)
async def test_a_failed_sync_is_sticky(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, error: type[StoreError]
) -> None:
    writer = await _writer(tmp_path)

    def fail(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(journal_module.os, "fdatasync", fail)
    writer.append(encode_record(RECORDS[0]))
    with pytest.raises(error):
        await writer.sync()
    monkeypatch.undo()
    with pytest.raises(error):
        writer.append(encode_record(RECORDS[1]))
    with pytest.raises(error):
        await writer.sync()
    await writer.close()


async def test_compaction_replaces_the_file_and_a_failed_one_appends_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = await _writer(tmp_path, compact_bytes=200)
    for record in RECORDS:
        writer.append(encode_record(record))
    await writer.sync()  # 8 + ~700 bytes >= 200: written as the snapshot instead
    assert writer.compactions == 1
    assert parse_journal((tmp_path / "journal").read_bytes())[0] == [RECORDS[3]]

    def no_space(path: Path, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(journal_module, "write_bytes_atomic_blocking", no_space)
    writer._compact_after = 0  # due again
    writer.append(encode_record(RECORDS[0]))
    await writer.sync()
    assert writer.compactions == 1
    assert parse_journal((tmp_path / "journal").read_bytes())[0] == [RECORDS[3], RECORDS[0]]
    assert writer._compact_after == writer.size + 200  # next try after more growth
    await writer.close()


def test_state_bookkeeping_out_of_order_acks_gaps_and_snapshot() -> None:
    state = PopState()
    apply = state.apply
    for offset in range(6):
        apply(PopRecord(POP_RECORD_POP, "g", "T", 0, offset, 1, 100 + offset, offset + 1, 1))
    apply(PopRecord(POP_RECORD_ACK, "g", "T", 0, 2, nonce=3))
    apply(PopRecord(POP_RECORD_ACK, "g", "T", 0, 4, nonce=99))  # stale nonce: no effect
    apply(PopRecord(POP_RECORD_DONE, "g", "T", 0, 3, 1))
    queue = state.queues[("g", "T", 0)]
    assert (queue.pop_offset, queue.acked, sorted(queue.in_flight)) == (0, {2, 3}, [0, 1, 4, 5])
    apply(PopRecord(POP_RECORD_ACK, "g", "T", 0, 0, nonce=1))
    apply(PopRecord(POP_RECORD_ACK, "g", "T", 0, 1, nonce=2))
    assert (queue.pop_offset, queue.acked) == (4, set())
    assert queue.expired(104, 10) == [4] and queue.next_visible_at() == 104
    apply(PopRecord(POP_RECORD_CHANGE, "g", "T", 0, 4, visible_at=500, nonce=77))
    assert queue.expired(104, 10) == [] and queue.next_visible_at() == 105
    queue.high = 9  # a FIFO scan passed over 6..8
    assert list(queue.gaps()) == [6, 7, 8]
    apply(PopRecord(POP_RECORD_DONE, "g", "T", 0, 0, 5))  # retention: below 5 is gone
    assert queue.pop_offset == 5 and sorted(queue.in_flight) == [5]
    copy = PopState()
    for record in state.snapshot_records():
        copy.apply(record)
    again = copy.queues[("g", "T", 0)]
    assert again.pop_offset == 5 and again.in_flight == queue.in_flight


async def test_a_failed_dlq_put_leaves_the_message_in_flight_and_is_retried(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    try:
        await store.put("T", 0, [msg("poison")])
        assert await store.wait_dispatched()
        (first,) = await store.pop.pop("g", "T", None, None, 1, 1_000, 1, now=0)
        real_put = store.pop._put
        calls = 0

        async def full(*args: object) -> object:
            nonlocal calls
            calls += 1
            raise DiskFullError("disk full: test")

        store.pop._put = full  # type: ignore[assignment]
        assert await store.pop.pop("g", "T", None, None, 1, 1_000, 1, now=2_000) == []
        assert calls == 1
        assert store.pop.state.queues[("g", "T", 0)].in_flight[0].dead_lettering is False
        store.pop._put = real_put  # type: ignore[assignment]
        assert await store.pop.pop("g", "T", None, None, 1, 1_000, 1, now=3_000) == []
        assert await store.wait_dispatched()
        assert [m.body for m in store.get_messages("%DLQ%g", 0, 0, 9).messages] == [b"poison"]
        assert not store.pop.state.queues[("g", "T", 0)].in_flight
        del first
    finally:
        await store.shutdown()


async def test_pop_ack_and_change_answer_only_after_their_records_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    gate = threading.Event()
    real = os.fdatasync

    def held(fd: int) -> None:
        gate.wait(5)
        real(fd)

    try:
        await store.put("T", 0, [msg("a")])
        assert await store.wait_dispatched()
        monkeypatch.setattr(journal_module.os, "fdatasync", held)
        calls = [
            lambda: store.pop.pop("g", "T", now=0),
            lambda: store.pop.change_invisible("g", "T", handle, 1_000, now=1),
            lambda: store.pop.ack("g", "T", handle),
        ]
        handle = ""
        for call in calls:
            gate.clear()
            task = asyncio.ensure_future(call())
            await asyncio.sleep(0.1)
            assert not task.done(), "answered before its journal record was synced"
            gate.set()
            result = await asyncio.wait_for(task, 5)
            if isinstance(result, list):
                handle = result[0].receipt_handle
            elif isinstance(result, str):
                handle = result
    finally:
        gate.set()
        monkeypatch.undo()
        await store.shutdown()


@pytest.mark.parametrize("speedups", [True, False])
async def test_both_sync_engines_sync_each_burst_once_and_compact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speedups: bool
) -> None:
    """The compiled GIL-free thread (when built) and the Python thread (WHARF_NO_SPEEDUPS)
    keep the same contract: a waiter answered once its bytes are fdatasync'd, one sync per
    burst, compactions in between (each one a sync)."""
    if speedups:
        monkeypatch.delenv("WHARF_NO_SPEEDUPS", raising=False)
    else:
        monkeypatch.setenv("WHARF_NO_SPEEDUPS", "1")
    writer = await _writer(tmp_path, compact_bytes=4096)
    for burst in range(6):  # ~70 B records, 20 a burst: the file passes 4 KiB on the way

        async def one(i: int) -> None:
            writer.append(encode_record(RECORDS[i % 4]))
            await writer.sync()

        await asyncio.gather(*(one(i) for i in range(20)))
        assert writer.syncs == burst + 1
    expected = {True: "NativeSyncEngine", False: "ThreadSyncEngine"}[speedups]
    if speedups and journal_module.fast.load("_syncer") is None:
        expected = "ThreadSyncEngine"  # not built here: the Python thread runs
    assert type(writer._engine).__name__ == expected
    assert writer.compactions >= 1
    await writer.close()
    records, _ = parse_journal((tmp_path / "journal").read_bytes())
    # the last snapshot (the stand-in state: RECORDS[3]), then the whole bursts after it
    tail = records[1:]
    assert records[0] == RECORDS[3]
    assert tail == [RECORDS[i % 4] for i in range(20)] * (len(tail) // 20)
