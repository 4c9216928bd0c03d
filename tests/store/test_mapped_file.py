"""MappedFile and MappedFileQueue: positions, copies out, flush seam, truncation, deletion."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import pytest
from wharf.store.codec.layout import segment_file_name
from wharf.store.log import mapped_file as mf_module
from wharf.store.log.mapped_file import MappedFile
from wharf.store.log.mapped_file_queue import MappedFileQueue, create_segment_blocking

from tests.store.helpers import mapped_bytes

MIB = 1 << 20

SIZE = 8192


def test_created_segment_is_preallocated_and_named_by_offset(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 3 * SIZE, SIZE, warm=True)
    try:
        assert mapped.file_name == "00000000000000024576"
        assert os.path.getsize(mapped.path) == SIZE
        assert os.stat(mapped.path).st_blocks * 512 >= SIZE  # blocks allocated, not sparse
        assert sorted(os.listdir(tmp_path)) == ["00000000000000024576"]  # no temp name left
        assert (mapped.wrote_position, mapped.committed_position, mapped.flushed_position) == (
            0,
            0,
            0,
        )
    finally:
        mapped.close()


def test_creating_an_existing_segment_fails_without_touching_it(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    mapped.append(b"precious")
    with pytest.raises(FileExistsError):
        create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    assert mapped.read(0, 8) == b"precious"
    assert sorted(os.listdir(tmp_path)) == [segment_file_name(0)]
    mapped.close()


def test_append_read_copies_and_positions(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    assert mapped.append(b"abc", store_timestamp=7) == 0
    assert mapped.append(b"defg") == 3
    assert mapped.wrote_position == 7 and mapped.store_timestamp == 7
    data = mapped.read(1, 5)
    assert data == b"bcdef" and isinstance(data, bytes)
    assert mapped.read(5, 3) is None  # beyond the written data
    with pytest.raises(ValueError):
        mapped.append(b"x" * SIZE)
    mapped.close()  # would raise BufferError if a view of the map were alive
    assert mapped.closed


def test_flush_uses_fdatasync_and_honours_least_pages(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(mf_module, "fdatasync", lambda fd: calls.append(fd))
    mapped = create_segment_blocking(str(tmp_path), 0, 4 * 4096, warm=False)
    mapped.append(b"x" * 100)
    assert mapped.flush_blocking(least_pages=2) == 0 and calls == []  # not enough dirty pages
    assert mapped.flush_blocking(least_pages=0) == 100 and len(calls) == 1
    assert mapped.flush_blocking() == 100 and len(calls) == 1  # nothing new: no sync
    mapped.append(b"y" * 9000)
    assert mapped.flush_blocking(least_pages=2) == 9100 and len(calls) == 2
    mapped.close()


def test_data_survives_reopen(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), SIZE, SIZE, warm=False)
    mapped.append(b"persisted")
    mapped.flush_blocking()
    mapped.close()
    again = MappedFile.open_blocking(mapped.path, SIZE)
    assert again.file_from_offset == SIZE
    assert again.wrote_position == SIZE  # recovery moves it back
    assert again.read(0, 9) == b"persisted"
    again.close()


def test_open_refuses_a_segment_of_the_wrong_size(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    mapped.close()
    with pytest.raises(ValueError, match="segment size"):
        MappedFile.open_blocking(mapped.path, 2 * SIZE)


def test_zero_range_clears_bytes(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    mapped.append(b"\xff" * SIZE)
    mapped.zero_range_blocking(100, SIZE)
    assert mapped.read_unchecked(0, 100) == b"\xff" * 100
    assert mapped.read_unchecked(100, SIZE - 100) == bytes(SIZE - 100)
    mapped.close()


def test_transient_buffer_is_invisible_until_committed(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    mapped.attach_write_buffer(bytearray(SIZE))
    mapped.append(b"buffered")
    assert mapped.read(0, 8) is None and mapped.read_unchecked(0, 8) == bytes(8)
    with pytest.raises(RuntimeError, match="uncommitted"):
        mapped.detach_write_buffer()
    assert mapped.commit_blocking() == 8
    assert mapped.read(0, 8) == b"buffered"
    assert mapped.detach_write_buffer() is not None
    mapped.close()


def test_released_pages_leave_the_map_and_keep_their_data(tmp_path):
    page = os.sysconf("SC_PAGE_SIZE")
    mapped = create_segment_blocking(str(tmp_path), 0, 16 * page, warm=False)
    data = os.urandom(16 * page)
    mapped.append(data)  # in the page cache, dirty, not synced
    assert mapped.read(0, len(data)) == data  # read through the map: every page mapped
    assert mapped_bytes(mapped.path) == 16 * page
    mapped.release_pages(page + 100, 12 * page + 5)  # the whole pages inside: 2 to 11
    assert mapped_bytes(mapped.path) == 6 * page
    assert mapped.read(0, len(data)) == data  # faulted back in, unchanged
    mapped.release_pages(0, 16 * page)
    assert mapped_bytes(mapped.path) == 0
    mapped.flush_blocking()  # the released dirty pages are written back all the same
    with open(mapped.path, "rb") as file:
        assert file.read() == data
    mapped.close()
    mapped.release_pages(0, 16 * page)  # a segment closed meanwhile: nothing to release


# --- the queue -----------------------------------------------------------------------------------


def make_queue(tmp_path, count):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    for _ in range(count):
        mapped = queue.roll()
        mapped.append(b"z" * 100)
    return queue


def test_roll_find_and_offsets(tmp_path):
    queue = make_queue(tmp_path, 3)
    assert [m.file_from_offset for m in queue.files] == [0, SIZE, 2 * SIZE]
    assert queue.find(SIZE + 5) is queue.files[1]
    assert queue.find(3 * SIZE) is None and queue.find(-1) is None
    assert queue.min_offset == 0 and queue.max_offset == 2 * SIZE + 100
    assert queue.sync_creations == 3  # no preallocation service attached
    queue.close()


def test_load_opens_segments_in_order_and_refuses_gaps(tmp_path):
    make_queue(tmp_path, 3).close()
    (tmp_path / "not-a-segment.txt").write_text("x")
    (tmp_path / f"{segment_file_name(3 * SIZE)}.alloc-1").write_bytes(b"")  # crash leftover
    loaded = MappedFileQueue(str(tmp_path), SIZE)
    loaded.load_blocking()
    assert [m.file_from_offset for m in loaded.files] == [0, SIZE, 2 * SIZE]
    assert not any(".alloc" in name for name in os.listdir(tmp_path))
    loaded.close()
    os.unlink(tmp_path / segment_file_name(SIZE))
    with pytest.raises(ValueError, match="not contiguous"):
        MappedFileQueue(str(tmp_path), SIZE).load_blocking()


def test_truncate_zeroes_the_tail_and_deletes_later_segments(tmp_path):
    queue = make_queue(tmp_path, 3)
    queue.truncate_blocking(SIZE + 40)
    assert [m.file_from_offset for m in queue.files] == [0, SIZE]
    assert queue.max_offset == SIZE + 40
    assert queue.files[1].read_unchecked(40, 60) == bytes(60)
    assert sorted(os.listdir(tmp_path)) == [segment_file_name(0), segment_file_name(SIZE)]
    queue.close()


def test_delete_expired_keeps_last_and_unflushed(tmp_path):
    queue = make_queue(tmp_path, 4)
    old = 1_000_000
    for mapped in queue.files:
        os.utime(mapped.path, (old, old))
    now_ms = (old + 3600) * 1000
    queue.flushed_where = 2 * SIZE  # segments 0 and 1 are flushed
    assert queue.delete_expired_blocking(60_000, 0, force=False, max_batch=10, now_ms=now_ms) == 2
    assert queue.min_offset == 2 * SIZE
    queue.flushed_where = 4 * SIZE
    assert queue.delete_expired_blocking(10**9, 0, force=False, max_batch=10, now_ms=now_ms) == 0
    assert queue.delete_expired_blocking(10**9, 0, force=True, max_batch=10, now_ms=now_ms) == 1
    assert [m.file_from_offset for m in queue.files] == [3 * SIZE]  # the last one stays
    queue.close()


def test_read_racing_a_deletion_gets_none_not_an_error(tmp_path):
    mapped = create_segment_blocking(str(tmp_path), 0, SIZE, warm=False)
    mapped.append(b"soon gone")
    mapped.destroy_blocking()
    assert mapped.read(0, 9) is None
    assert mapped.read_unchecked(0, 9) == b""
    assert not os.path.exists(mapped.path)


async def test_roll_does_not_wait_for_an_in_flight_preallocation_and_does_not_race_it(
    tmp_path, monkeypatch
):
    # P2 fix: the roll used to block the event loop until the preallocation thread finished
    # (up to ~0.6 s of prefault). Now it creates the segment itself, without prefault, and the
    # thread's copy loses the link race cleanly.
    import asyncio
    import threading
    import time

    from wharf.store.log import allocate as allocate_service

    gate = threading.Event()
    real_create = allocate_service.create_segment_blocking

    def slow_create(*args):
        gate.wait(5)
        return real_create(*args)

    monkeypatch.setattr(allocate_service, "create_segment_blocking", slow_create)
    queue = MappedFileQueue(str(tmp_path), SIZE)
    service = allocate_service.AllocateMappedFileService(queue)
    service.start()
    try:
        service.request_after(-SIZE)  # asks for segments 0 and SIZE
        for _ in range(100):
            if service._inflight:
                break
            await asyncio.sleep(0.01)
        assert 0 in service._inflight
        started = time.monotonic()
        first = queue.roll()  # the gate is closed: waiting would take 5 s
        assert time.monotonic() - started < 2.0
        assert first.file_from_offset == 0
        assert service.late_takes == 1 and queue.sync_creations == 1
        first.append(b"kept")
        gate.set()
        for _ in range(200):
            if service.idle:
                break
            await asyncio.sleep(0.01)
        assert service.idle
        second = queue.roll()  # preallocated meanwhile: taken without a creation
        assert second.file_from_offset == SIZE and queue.sync_creations == 1
        # segment 0's preallocation lost the link and was dropped; SIZE and 2*SIZE were made
        assert service.created == 2 and 0 not in service._ready
        assert queue.files[0] is first and first.read(0, 4) == b"kept"
    finally:
        gate.set()
        await service.stop()
        queue.close()
    assert sorted(os.listdir(tmp_path)) == [segment_file_name(0), segment_file_name(SIZE)]


async def test_roll_takes_the_preallocated_segment_when_the_thread_linked_it_first(
    tmp_path, monkeypatch
):
    import asyncio

    from wharf.store.log import allocate as allocate_service

    queue = MappedFileQueue(str(tmp_path), SIZE)
    service = allocate_service.AllocateMappedFileService(queue)
    service.start()
    try:
        service.request_after(-SIZE)
        for _ in range(200):
            if service.idle:
                break
            await asyncio.sleep(0.01)
        ready = service._ready.pop(0)
        # Simulate the race: the thread linked segment 0 but has not returned yet.
        done = service._pool.submit(lambda: ready)
        done.result()
        service._inflight[0] = done
        real_done = done.done
        monkeypatch.setattr(done, "done", lambda: False)  # take() sees it in flight
        mapped = queue.roll()  # the synchronous creation loses the link: claim the thread's
        monkeypatch.setattr(done, "done", real_done)
        assert mapped is ready and queue.sync_creations == 1
        assert 0 not in service._inflight
    finally:
        await service.stop()
        queue.close()
    assert segment_file_name(0) in os.listdir(tmp_path)
    assert not [name for name in os.listdir(tmp_path) if ".alloc" in name]


def test_the_start_up_read_ahead_follows_the_writer_a_window_ahead(tmp_path, monkeypatch):
    """Only the pages within READ_AHEAD_BYTES past the writer are read, as it moves; pages it
    passed are skipped; a full segment or a cancel ends the thread."""
    monkeypatch.setattr(mf_module, "READ_AHEAD_BYTES", 2 * MIB)
    monkeypatch.setattr(mf_module, "READ_AHEAD_POLL_S", 0.01)
    path = tmp_path / "segment"
    path.write_bytes(bytes(8 * MIB))
    read: list[int] = []
    real_preadv = os.preadv

    def preadv(fd, buffers, pos):
        read.append(pos)
        return real_preadv(fd, buffers, pos)

    monkeypatch.setattr(os, "preadv", preadv)
    with open(path, "rb") as f:
        segment = SimpleNamespace(fileno=f.fileno, file_size=8 * MIB, wrote_position=0)
        cancel = threading.Event()
        thread = threading.Thread(
            target=mf_module.prefault_segment_blocking, args=(segment, cancel)
        )
        thread.start()

        def settles_at(chunks: list[int]) -> None:
            deadline = time.monotonic() + 10
            while read != chunks:
                assert time.monotonic() < deadline, read
                time.sleep(0.01)
            time.sleep(0.05)  # several polls later: nothing more read
            assert read == chunks

        settles_at([0, MIB])  # the window ahead of a writer at 0
        segment.wrote_position = 5 * MIB + 100  # 2-5 MiB passed: never read
        settles_at([0, MIB, 5 * MIB + 100, 6 * MIB + 100])
        segment.wrote_position = 8 * MIB  # full: the thread ends
        thread.join(5)
        assert not thread.is_alive()

        read.clear()
        segment.wrote_position = 0
        cancel.set()  # a stop before it began: nothing read
        mf_module.prefault_segment_blocking(segment, cancel)
        assert read == []
