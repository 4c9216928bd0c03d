"""Queue files through a bounded cache: open descriptors never exceed the capacity whatever
the number of queues and no queue file is mapped, a closed file reads and writes the same bytes
when opened again, a sync of a closed file works, and a limit met gives ResourceLimitError (the
positions journal that rebuilds the table without opening a file: test_queue_positions.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from pathlib import Path

import pytest
from wharf.store.errors import ResourceLimitError
from wharf.store.queue import file_cache
from wharf.store.queue.consume_queue import ConsumeQueue, ConsumeQueueFile
from wharf.store.queue.file_cache import QueueFileCache
from wharf.store.queue.table import ConsumeQueueTable

FILE = 20 * 8  # eight units a file


def _open_here() -> tuple[int, int]:
    """(descriptors, maps) of this process on consume queue files."""
    fds = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed meanwhile
            fds += "consumequeue" in os.readlink(f"/proc/self/fd/{name}")
    with open("/proc/self/maps") as maps:
        return fds, sum("consumequeue" in line for line in maps)


def _units(queue_id: int, count: int, base: int = 0) -> list[tuple[int, int, int]]:
    return [(base + (queue_id * 1000 + i) * 100, 100, queue_id) for i in range(count)]


def test_descriptors_stay_within_the_capacity_and_every_queue_reads_back(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE, QueueFileCache(16))
    try:
        for queue_id in range(200):  # 200 queues x 3 files (20 units of 8 a file)
            table.find_or_create("T", queue_id).append_units(0, _units(queue_id, 20))
            assert len(table.cache) <= 16
        fds, maps = _open_here()
        assert fds <= 16 and maps == 0
        assert table.file_count == 600
        for queue_id in range(200):
            queue = table.find("T", queue_id)
            assert queue is not None
            assert list(queue.read_units(0, 30)) == _units(queue_id, 20)
            assert queue.get_unit(19) == _units(queue_id, 20)[19]
        # The oldest queue was closed long ago: it takes more units where it stopped.
        first = table.find("T", 0)
        assert first is not None and first.open_files == 0
        first.append_units(20, _units(0, 5, base=10_000_000))
        assert first.max_offset == 25
        assert list(first.read_units(20, 5)) == _units(0, 5, base=10_000_000)
        assert table.cache.closes > 0 and len(table.cache) <= 16
    finally:
        table.close()
    assert _open_here() == (0, 0)


def test_a_sync_of_a_closed_file_uses_its_own_descriptor(tmp_path: Path) -> None:
    cache = QueueFileCache(16)
    queue = ConsumeQueue("T", 0, tmp_path / "consumequeue" / "T" / "0", FILE, cache)
    queue.append_units(0, _units(0, 20))
    cache.close()  # nothing of it open any more
    assert queue.open_files == 0 and queue.unflushed_bytes == 400
    synced: list[int] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real(fd)

    os.fdatasync = spy  # type: ignore[assignment]
    try:
        assert queue.flush_blocking() == 400
    finally:
        os.fdatasync = real  # type: ignore[assignment]
    assert synced == [os.stat(f.path).st_ino for f in queue.files]
    assert queue.unflushed_bytes == 0


class _Refusing(ConsumeQueueFile):
    """A file whose opening fails as a process at its limits would."""

    __slots__ = ()
    errors: list[int] = []

    def open_now(self) -> int:
        if _Refusing.errors:
            raise OSError(_Refusing.errors.pop(0), "limit")
        return super().open_now()


def test_a_limit_closes_half_the_cache_and_then_gives_a_clear_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = QueueFileCache(64)
    paths = []
    for i in range(41):
        path = str(tmp_path / f"{i:020d}")
        ConsumeQueueFile.create_blocking(path, 0, FILE)
        paths.append(path)
    files = [ConsumeQueueFile(p, 0, FILE) for p in paths[:40]]
    for file in files:
        cache.fd(file)
    assert len(cache) == 40
    # EMFILE once: the cache closes half its files and opens this one on the second try.
    _Refusing.errors = [errno.EMFILE]
    refusing = _Refusing(paths[40], 0, FILE)
    assert cache.fd(refusing) == refusing.fd >= 0
    assert len(cache) == 20 and cache.limit == 20 and cache.exhaustions == 1
    assert [f.fd >= 0 for f in files] == [False] * 21 + [True] * 19  # the newest stay
    cache.forget(refusing)
    # ENFILE twice: closing more does not help, a clear error.
    _Refusing.errors = [errno.ENFILE, errno.ENFILE]
    with pytest.raises(ResourceLimitError, match=r"open-file limit \(ulimit -n\)"):
        cache.fd(refusing)
    assert refusing.fd == -1
    assert cache.exhaustions == 1  # the same episode: one warning
    assert sum("met a limit" in r.getMessage() for r in caplog.records) == 1
    # Other errors are not limits: they propagate as they are.
    _Refusing.errors = [errno.EACCES]
    with pytest.raises(PermissionError):
        cache.fd(refusing)
    cache.close()


def test_the_capacity_is_a_quarter_of_the_open_file_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_cache.resource, "getrlimit", lambda _: (256, 1024))
    assert file_cache.default_capacity(2048) == 64
    monkeypatch.setattr(file_cache.resource, "getrlimit", lambda _: (1_000_000, 1_000_000))
    assert file_cache.default_capacity(2048) == 2048


@pytest.mark.parametrize("count", [1, 203, 204, 205, 700, 1000])
def test_reading_a_queue_s_files_finds_its_end_in_the_first_block_or_beyond(
    tmp_path: Path, count: int
) -> None:
    directory = tmp_path / "consumequeue" / "T" / "0"
    queue = ConsumeQueue("T", 0, directory, 20 * 1000, QueueFileCache(16))
    queue.append_units(0, _units(0, count))
    queue.close()
    loaded = ConsumeQueue.load_blocking("T", 0, directory, 20 * 1000, QueueFileCache(16))
    assert loaded.max_offset == count
    last = _units(0, count)[-1]
    assert loaded.max_physical_offset == last[0] + last[1]
    assert loaded.summary()[5] == 0  # the first unit's commit log offset, read in passing
    assert list(loaded.read_units(count - 1, 5)) == [last]
    loaded.close()


def test_syncs_in_a_thread_never_touch_a_descriptor_the_loop_closes(tmp_path: Path) -> None:
    """A flush thread syncs while the writer appends to 300 queues through 16 descriptors, so
    the loop closes and reopens files all the time (a closed number is reused at once): every
    queue still holds exactly its own units and every sync hit a queue file."""
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE, QueueFileCache(16))
    synced_paths: list[str] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        synced_paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    stop = threading.Event()

    wrong: list[str] = []

    def flusher() -> None:
        while not stop.is_set():
            for queue in table:
                before = len(synced_paths)
                queue.flush_blocking()
                own = {os.path.realpath(f.path) for f in queue.files}
                wrong.extend(p for p in synced_paths[before:] if p not in own)

    os.fdatasync = spy  # type: ignore[assignment]
    thread = threading.Thread(target=flusher)
    thread.start()
    try:
        for round_ in range(5):
            for queue_id in range(300):
                units = _units(queue_id, 4, base=round_ * 100_000_000)
                table.find_or_create("T", queue_id).append_units(round_ * 4, units)
                other = table.find("T", (queue_id * 7) % 300)
                if other is not None:
                    other.read_unit_bytes(0, 4)  # reads reopen other files meanwhile
    finally:
        stop.set()
        thread.join()
        os.fdatasync = real  # type: ignore[assignment]
    assert synced_paths and not wrong  # each sync hit a file of the queue it synced
    for queue_id in range(300):
        queue = table.find("T", queue_id)
        assert queue is not None
        expected = [u for r in range(5) for u in _units(queue_id, 4, base=r * 100_000_000)]
        assert list(queue.read_units(0, 100)) == expected
    table.close()


def test_only_queues_written_since_their_last_flush_are_visited(tmp_path: Path) -> None:
    table = ConsumeQueueTable(tmp_path / "consumequeue", FILE, QueueFileCache(16))
    for queue_id in range(100):
        table.find_or_create("T", queue_id).append_units(0, _units(queue_id, 1))
    everything = table.unflushed(0)
    assert len(everything) == 100
    for queue in everything:
        queue.flush_blocking()
    table.flushed(everything)
    assert table.unflushed(0) == []
    busy = [table.find_or_create("T", q) for q in (3, 50, 99)]
    for queue in busy:
        queue.append_units(1, _units(queue.queue_id, 300)[1:])  # 299 units: 5,980 bytes
    table.find_or_create("T", 7).append_units(1, _units(7, 2)[1:])  # 20 bytes
    assert set(table.unflushed(2 * 4096)) == set()
    assert set(table.unflushed(4096)) == set(busy)
    assert len(table.unflushed(0)) == 4
    table.flushed(busy)  # not flushed: still unflushed, still visited
    assert len(table.unflushed(0)) == 4
    table.remove_topic("T")
    assert table.unflushed(0) == []
    table.close()
