"""powerfs (tests/fault/powerfs.py): each durability rule on its own, then the broker on it.

Every test mounts a fresh powerfs; it skips (with the reason) where FUSE cannot be mounted:
no /dev/fuse, no libfuse 3, no mfusepy, or a mount refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import mmap
import os
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fault.power_campaign import fsync_dir
from tests.fault.powerfs import PowerFS

if TYPE_CHECKING:
    from tests.fault.conftest import Mount
    from tests.harness import Daemons


@pytest.fixture
def mnt(fs: PowerFS) -> Path:
    return fs.mountpoint


def write_file(path: Path, data: bytes, sync: str | None = None) -> None:
    """Write ``data`` as the whole file; ``sync``: None, "fsync" or "fdatasync"."""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


def durable_file(path: Path, data: bytes) -> None:
    """A file whose data and directory entry are both durable."""
    write_file(path, data, "fsync")
    fsync_dir(path.parent)


def pwrite(path: Path, data: bytes, offset: int, sync: str | None = None) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, offset)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


# ---- file data ----------------------------------------------------------------------------


def test_an_unsynced_write_is_seen_until_a_cut_then_lost(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"durable!")
    pwrite(mnt / "f", b"VOLATILE-AND-LONGER", 0)
    assert (mnt / "f").read_bytes() == b"VOLATILE-AND-LONGER"
    fs.cut()
    assert (mnt / "f").read_bytes() == b"durable!"


@pytest.mark.parametrize("sync", ["fsync", "fdatasync"])
def test_a_synced_write_is_kept(fs: PowerFS, mnt: Path, sync: str) -> None:
    durable_file(mnt / "f", b"durable!")
    pwrite(mnt / "f", b"SYNCED", 4, sync)
    pwrite(mnt / "f", b"lost", 20)  # after the sync: not durable
    fs.cut()
    assert (mnt / "f").read_bytes() == b"duraSYNCED"


def test_a_large_write_across_chunks_is_kept_whole(fs: PowerFS, mnt: Path) -> None:
    data = os.urandom(300_000)
    durable_file(mnt / "f", data)
    pwrite(mnt / "f", b"x" * 50_000, 10_000, "fdatasync")
    pwrite(mnt / "f", b"y" * 70_000, 100_000)
    fs.cut()
    assert (mnt / "f").read_bytes() == data[:10_000] + b"x" * 50_000 + data[60_000:]


# ---- directory entries --------------------------------------------------------------------


def test_a_new_file_fsynced_without_its_directory_is_gone(fs: PowerFS, mnt: Path) -> None:
    write_file(mnt / "new", b"data", "fsync")
    assert (mnt / "new").read_bytes() == b"data"
    fs.cut()
    assert not (mnt / "new").exists()
    assert os.listdir(mnt) == []


def test_a_new_file_with_its_directory_fsynced_is_kept(fs: PowerFS, mnt: Path) -> None:
    write_file(mnt / "new", b"data", "fsync")
    fsync_dir(mnt)
    fs.cut()
    assert (mnt / "new").read_bytes() == b"data"


def test_a_durable_entry_without_synced_data_is_an_empty_file(fs: PowerFS, mnt: Path) -> None:
    write_file(mnt / "new", b"never synced")
    fsync_dir(mnt)
    fs.cut()
    assert (mnt / "new").read_bytes() == b""


def test_a_new_directory_needs_a_directory_fsync(fs: PowerFS, mnt: Path) -> None:
    (mnt / "kept").mkdir()
    durable_file(mnt / "kept" / "f", b"1")  # fsync of kept: its entries and its own creation
    (mnt / "gone").mkdir()
    write_file(mnt / "gone" / "f", b"2", "fsync")  # no directory fsync at all
    fs.cut()
    assert sorted(os.listdir(mnt)) == ["kept"]
    assert (mnt / "kept" / "f").read_bytes() == b"1"


def test_a_directory_fsync_commits_only_what_its_entries_need(fs: PowerFS, mnt: Path) -> None:
    (mnt / "a").mkdir()
    (mnt / "b").mkdir()
    fsync_dir(mnt)
    write_file(mnt / "a" / "x", b"x", "fsync")
    write_file(mnt / "b" / "y", b"y", "fsync")
    write_file(mnt / "top", b"t", "fsync")
    fsync_dir(mnt / "b")  # not a's entries, not the root's
    fs.cut()
    assert sorted(os.listdir(mnt)) == ["a", "b"]
    assert os.listdir(mnt / "a") == []
    assert (mnt / "b" / "y").read_bytes() == b"y"


def test_a_rename_not_made_durable_is_undone(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "a", b"A")
    durable_file(mnt / "b", b"B")
    os.rename(mnt / "a", mnt / "c")
    os.rename(mnt / "b", mnt / "c")  # replaces c
    fs.cut()
    assert sorted(os.listdir(mnt)) == ["a", "b"]
    assert (mnt / "a").read_bytes() == b"A"
    assert (mnt / "b").read_bytes() == b"B"


def test_a_rename_made_durable_by_a_directory_fsync_is_kept(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "config", b"old")
    write_file(mnt / "config.tmp", b"new", "fsync")  # the atomic-replace idiom
    os.rename(mnt / "config.tmp", mnt / "config")
    fsync_dir(mnt)
    fs.cut()
    assert os.listdir(mnt) == ["config"]
    assert (mnt / "config").read_bytes() == b"new"


def test_a_rename_across_directories_is_committed_by_either_directory(
    fs: PowerFS, mnt: Path
) -> None:
    (mnt / "src").mkdir()
    (mnt / "dst").mkdir()
    fsync_dir(mnt)
    durable_file(mnt / "src" / "f", b"F")
    os.rename(mnt / "src" / "f", mnt / "dst" / "f")
    fsync_dir(mnt / "dst")  # the journal commits the rename whole: never in both, never lost
    fs.cut()
    assert os.listdir(mnt / "src") == []
    assert (mnt / "dst" / "f").read_bytes() == b"F"


@pytest.mark.parametrize("durable", [False, True])
def test_a_hard_link_publish_is_undone_unless_made_durable(
    fs: PowerFS, mnt: Path, durable: bool
) -> None:
    # The store's segment creation: a temporary name, link(tmp, final), unlink(tmp).
    write_file(mnt / "seg.alloc", b"S" * 1000, "fsync")
    os.link(mnt / "seg.alloc", mnt / "seg")
    assert (mnt / "seg").stat().st_nlink == 2
    os.unlink(mnt / "seg.alloc")
    if durable:
        fsync_dir(mnt)
    fs.cut()
    assert os.listdir(mnt) == (["seg"] if durable else [])
    if durable:
        assert (mnt / "seg").read_bytes() == b"S" * 1000
        assert (mnt / "seg").stat().st_nlink == 1


@pytest.mark.parametrize("durable", [False, True])
def test_an_unlink_is_undone_unless_made_durable(fs: PowerFS, mnt: Path, durable: bool) -> None:
    durable_file(mnt / "f", b"F")
    os.unlink(mnt / "f")
    if durable:
        fsync_dir(mnt)
    fs.cut()
    assert (mnt / "f").exists() is not durable
    if not durable:
        assert (mnt / "f").read_bytes() == b"F"


def test_an_unlinked_open_file_stays_readable_and_writable(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"0123456789")
    fd = os.open(mnt / "f", os.O_RDWR)
    try:
        os.unlink(mnt / "f")
        fsync_dir(mnt)  # the unlink is durable; the open file lives on
        os.pwrite(fd, b"ab", 0)
        os.ftruncate(fd, 6)
        os.fsync(fd)
        assert os.pread(fd, 100, 0) == b"ab2345"
    finally:
        os.close(fd)
    fs.cut()
    assert os.listdir(mnt) == []


# ---- size changes -------------------------------------------------------------------------


def test_a_truncate_not_synced_is_undone(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"0123456789")
    os.truncate(mnt / "f", 3)
    assert (mnt / "f").read_bytes() == b"012"
    fs.cut()
    assert (mnt / "f").read_bytes() == b"0123456789"


def test_an_ftruncate_not_synced_is_undone_and_a_synced_one_kept(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"0123456789")
    durable_file(mnt / "g", b"0123456789")
    for name, sync in (("f", False), ("g", True)):
        fd = os.open(mnt / name, os.O_RDWR)
        try:
            os.ftruncate(fd, 4)
            os.ftruncate(fd, 8)  # grows again: the cut-off bytes read as zeros
            assert os.pread(fd, 100, 0) == b"0123\0\0\0\0"
            if sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)
    fs.cut()
    assert (mnt / "f").read_bytes() == b"0123456789"
    assert (mnt / "g").read_bytes() == b"0123\0\0\0\0"


def test_a_posix_fallocated_size_not_synced_is_undone(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"head")
    durable_file(mnt / "g", b"head")
    for name, sync in (("f", False), ("g", True)):
        fd = os.open(mnt / name, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, 1 << 20)
            assert os.fstat(fd).st_size == 1 << 20
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    fs.cut()
    assert (mnt / "f").read_bytes() == b"head"
    assert (mnt / "g").stat().st_size == 1 << 20
    assert (mnt / "g").read_bytes()[:8] == b"head\0\0\0\0"


# ---- memory maps --------------------------------------------------------------------------


@pytest.mark.parametrize("sync", ["msync", "fsync", None])
def test_writes_through_a_shared_map(fs: PowerFS, mnt: Path, sync: str | None) -> None:
    size = 256 * 1024
    write_file(mnt / "idx", bytes(size), "fsync")
    fsync_dir(mnt)
    fd = os.open(mnt / "idx", os.O_RDWR)
    try:
        with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as view:
            view[0:5] = b"first"
            view[size - 4 : size] = b"last"
            view[100_000:100_003] = b"mid"
            if sync == "msync":
                view.flush()  # msync(MS_SYNC): pages written back, then the fsync op
            elif sync == "fsync":
                os.fsync(fd)
            view[5:10] = b"after"  # never synced
            assert view[0:10] == b"firstafter"
        # munmap wrote the dirty pages back to the layer: readable, not durable
        assert os.pread(fd, 10, 0) == b"firstafter"
    finally:
        os.close(fd)
    fs.cut()
    data = (mnt / "idx").read_bytes()
    assert len(data) == size
    if sync is None:
        assert data == bytes(size)
    else:
        assert data[0:10] == b"first\0\0\0\0\0"
        assert data[100_000:100_003] == b"mid"
        assert data[size - 4 :] == b"last"


# ---- the cut itself -----------------------------------------------------------------------


def test_a_handle_opened_before_a_cut_fails_with_eio(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"F")
    fd = os.open(mnt / "f", os.O_RDWR)
    try:
        fs.cut()
        with pytest.raises(OSError) as info:
            os.pwrite(fd, b"late", 0)
        assert info.value.errno == errno.EIO
    finally:
        os.close(fd)
    assert (mnt / "f").read_bytes() == b"F"


def test_sigusr1_cuts(fs: PowerFS, mnt: Path) -> None:
    durable_file(mnt / "f", b"F")
    write_file(mnt / "g", b"G")
    assert fs.proc is not None
    os.kill(fs.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while fs.stats()["cuts"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.listdir(mnt) == ["f"]


def test_a_restarted_daemon_serves_the_durable_state(tmp_path: Path, mount: Mount) -> None:
    fs = mount()
    try:
        durable_file(fs.mountpoint / "kept", b"K")
        write_file(fs.mountpoint / "pending", b"P", "fsync")
        assert fs.proc is not None
        fs.proc.kill()  # the daemon dies with its memory: like a cut
        fs.proc.wait()
    finally:
        fs.stop()
    fs = mount()
    try:
        assert os.listdir(fs.mountpoint) == ["kept"]
        assert (fs.mountpoint / "kept").read_bytes() == b"K"
        write_file(fs.mountpoint / "at-unmount", b"U")
    finally:
        fs.stop()  # a clean unmount commits what is pending
    assert sorted(p.name for p in (tmp_path / "backing").iterdir() if p.name != ".powerfs") == [
        "at-unmount",
        "kept",
    ]


# ---- the broker on it ---------------------------------------------------------------------


async def _send(endpoint: str, count: int) -> dict[tuple[int, int], bytes]:
    from wharf.client import Producer

    acked: dict[tuple[int, int], bytes] = {}
    async with Producer(endpoint) as producer:
        for i in range(count):
            body = f"powerfs-{i:04d}-".encode() + bytes([65 + i % 26]) * 8000  # 2 segments
            result = await producer.send("T", body)
            acked[(result.queue_id, result.queue_offset)] = body
    return acked


async def _read(
    endpoint: str, queues: set[int], upto: dict[int, int]
) -> dict[tuple[int, int], bytes]:
    from wharf.client import PullConsumer
    from wharf.client.route import MessageQueue

    found: dict[tuple[int, int], bytes] = {}
    async with PullConsumer(endpoint, "powerfs-check") as consumer:
        for queue in sorted(queues):
            offset = 0
            while offset <= upto[queue]:
                result = await consumer.pull(MessageQueue("T", queue), offset, max_wait_ms=0)
                if not result.messages:
                    break
                for message in result.messages:
                    found[(queue, message.queue_offset)] = message.body
                offset = result.next_begin_offset
    return found


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_broker_keeps_every_acknowledged_message_across_a_power_cut(
    daemons: Daemons, tmp_path: Path, mount: Mount
) -> None:
    fs = mount(backing_sync=True)
    try:
        store = fs.mountpoint / "store"
        store.mkdir()
        fsync_dir(fs.mountpoint)
        root = tmp_path / "broker"  # config and log off the mount, the store on it
        root.mkdir()
        (root / "store").symlink_to(store)
        settings = {
            "flushDiskType": "SYNC_FLUSH",
            "mappedFileSizeCommitLog": 1024 * 1024,
            "maxMessageSize": 256 * 1024,
        }
        broker = daemons.broker(root, settings=settings)
        try:
            acked = asyncio.run(_send(broker.endpoint, 200))
        finally:
            broker.kill()  # SIGKILL, and waits: the maps' dirty pages are written back by then
            pending = fs.pending()
            fs.cut()
        try:
            broker.start()
        except RuntimeError as exc:
            pytest.fail(f"the broker did not restart after the cut: {exc}\n{broker.log()[-4000:]}")
        try:
            queues = {q for q, _ in acked}
            upto = {q: max(o for qq, o in acked if qq == q) for q in queues}
            found = asyncio.run(_read(broker.endpoint, queues, upto))
        finally:
            broker.stop()
        lost = sorted(key for key in acked if found.get(key) != acked[key])
        assert not lost, (
            f"{len(lost)} of {len(acked)} acknowledged messages lost or changed after the cut "
            f"(queue, offset): {lost[:20]}; the cut dropped: {pending}"
        )
    finally:
        with contextlib.suppress(Exception):
            fs.stop()
