"""The store on powerfs (tests/fault/powerfs.py): which fsync makes what durable (issue 36).

A writer subprocess (``python -m tests.fault.test_store_power_cut ...``) runs a MessageStore
with SYNC_FLUSH and small files on the mount and records every acknowledged put in a file off
the mount; it is SIGKILLed, the mount is cut (a power loss), and the store is reopened here,
in-process, as after a reboot (a new boot id: the page cache is gone). Each test checks one
durability rule and fails without it. Skips where FUSE cannot be mounted, as test_powerfs.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from wharf.store import paths as store_paths
from wharf.store.config import SYNC_FLUSH
from wharf.store.log import mapped_file
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.message_store import MessageStore
from wharf.store.model import PutStatus

from tests.fault.power_campaign import fsync_dir
from tests.fault.powerfs import PowerFS
from tests.store.helpers import msg, small_config

REPO_ROOT = Path(__file__).resolve().parents[2]
QUEUES = 4
SEGMENT = 16 * 1024  # ~15 messages of 1 KiB a segment: every test crosses rolls


def store_config(root: Path, flush: str = SYNC_FLUSH) -> object:
    return small_config(
        root,
        flush_disk_type=flush,
        mapped_file_size_commit_log=SEGMENT,
        # Only the writer's explicit thorough flush moves the checkpoint's logics fields.
        flush_interval_consume_queue=3_600_000,
        flush_consume_queue_thorough_interval=3_600_000,
        # ASYNC_FLUSH: nothing is synced while the writer runs (a kill leaves it all dirty).
        flush_interval_commit_log=3_600_000,
        flush_commit_log_thorough_interval=3_600_000,
    )


def body(i: int) -> bytes:
    return f"m{i:04d}-".encode() + bytes([65 + i % 26]) * 1000


# --- the writer (subprocess) ------------------------------------------------------------------


async def _writer_main(
    root: str,
    ack_path: str,
    count: int,
    flush_at: int,
    clean: bool,
    flush: str,
    journal: bool,
    unsynced: int = 0,
) -> None:
    if unsynced:
        _hold_commit_log_syncs_on_request()  # before the store picks its sync engine
    store = MessageStore(store_config(Path(root), flush), disk_usage=lambda path: 0.5)  # type: ignore[arg-type]
    await store.start()
    ack = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(**fields: object) -> None:
        os.write(ack, (json.dumps(fields) + "\n").encode())

    if unsynced:
        await _read_while_unsynced(store, count, unsynced, note)
        return

    for i in range(count):
        if i == flush_at:
            assert await store.wait_dispatched()
            await store.insides.queue_flush_service.flush_all()  # thorough: the checkpoint moves
            index = sorted(os.listdir(Path(root) / "index"))
            note(flushed=store.insides.checkpoint.logics_offset, index=index)
        result = await store.put("T", i % QUEUES, [msg(body(i), keys=f"k{i}")])
        if result.status is PutStatus.PUT_OK:
            note(i=i, queue=result.append.queue_id, offset=result.append.first_queue_offset)
    if journal:  # the positions journal records every queue's state (as it does each second)
        assert await store.wait_dispatched()
        flusher = store.insides.queue_flush_service
        assert flusher.journal is not None
        await flusher.journal.record(lambda: flusher.dispatch_position()[0])
    if clean:
        await store.shutdown()
    note(done=True)
    await asyncio.sleep(3600)  # SIGKILLed here


_SYNCS_HELD = threading.Event()


def _hold_commit_log_syncs_on_request() -> None:
    """From ``_SYNCS_HELD`` on, a commit log fdatasync never returns (the machine loses power
    first). The seam is patched before the store starts: it then syncs in a Python thread."""
    real = mapped_file.fdatasync

    def held(fd: int) -> None:
        if _SYNCS_HELD.is_set() and "/commitlog/" in os.readlink(f"/proc/self/fd/{fd}"):
            threading.Event().wait()
        real(fd)

    mapped_file.fdatasync = held


async def _read_while_unsynced(
    store: MessageStore, count: int, unsynced: int, note: Callable[..., None]
) -> None:
    """``count`` acknowledged puts, then ``unsynced`` more appended while the commit log's
    fdatasync never returns (the power cut comes first), while a consumer long-polls every
    queue: each message it is handed is noted (``read``) before the kill."""
    for i in range(count):
        result = await store.put("T", i % QUEUES, [msg(body(i))])
        assert result.status is PutStatus.PUT_OK
        note(i=i, queue=result.append.queue_id, offset=result.append.first_queue_offset)
    _SYNCS_HELD.set()
    # Appended, never synced: each put waits (the writer is killed first).
    pending = [asyncio.ensure_future(store.put("T", (count + j) % QUEUES, [msg(body(count + j))]))
               for j in range(unsynced)]  # fmt: skip
    deadline = time.monotonic() + 1.0
    positions = {q: 0 for q in range(QUEUES)}
    while time.monotonic() < deadline:  # a consumer pulling right then
        for queue in range(QUEUES):
            result = store.get_messages("T", queue, positions[queue], 32)
            for m in result.messages:
                note(read=m.body.decode()[:5], queue=queue, offset=m.queue_offset)
            positions[queue] = result.next_begin_offset
        await asyncio.sleep(0.01)
    assert not any(p.done() for p in pending)
    note(done=True)
    await asyncio.sleep(3600)  # SIGKILLed here


def run_writer(
    fs: PowerFS,
    tmp_path: Path,
    count: int,
    flush_at: int = -1,
    clean: bool = False,
    fresh: bool = True,
    flush: str = SYNC_FLUSH,
    cut: bool = True,
    journal: bool = False,
    unsynced: int = 0,
) -> tuple[Path, list[dict[str, object]]]:
    """Run the writer on a new store on the mount (``fresh=False``: on the one there) until
    it is done, SIGKILL it, cut (``cut=False``: a process crash only). Returns the store root
    and the writer's notes of this run."""
    root = fs.mountpoint / "store"
    if fresh:
        root.mkdir()
        fsync_dir(fs.mountpoint)  # the root is the test's: durable from the start
    acks = tmp_path / "acks.jsonl"
    acks.unlink(missing_ok=True)
    args = [str(root), str(acks), str(count), str(flush_at), "1" if clean else "0", flush]
    args += ["1" if journal else "0", str(unsynced)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fault.test_store_power_cut", *args],
        cwd=REPO_ROOT,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (acks.exists() and b'"done"' in acks.read_bytes()):
            if proc.poll() is not None:
                raise AssertionError(f"the writer died: {proc.stderr.read().decode()[-3000:]}")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the writer did not finish in time"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()  # type: ignore[union-attr]
    if cut:
        fs.cut()
    notes = [json.loads(line) for line in acks.read_text().splitlines()]
    return root, notes


@pytest.fixture
def new_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reopen happens after a reboot: the page cache of the writer's run is gone."""
    monkeypatch.setattr(store_paths, "current_boot_id_blocking", lambda: "after-the-power-cut")


async def reopen_and_check(
    root: Path, notes: list[dict[str, object]], flush: str = SYNC_FLUSH
) -> MessageStore:
    """Start the store again; every acknowledged message must be readable by its queue
    offset. Returns the started store (the caller shuts it down)."""
    store = MessageStore(store_config(root, flush), disk_usage=lambda path: 0.5)  # type: ignore[arg-type]
    await store.start()
    lost = []
    for note in notes:
        if "i" not in note:
            continue
        result = store.get_messages("T", int(note["queue"]), int(note["offset"]), 1)  # type: ignore[call-overload]
        got = result.messages[0].body if result.messages else None
        if got != body(int(note["i"])):  # type: ignore[call-overload]
            lost.append(note["i"])
    if lost:
        await store.shutdown()
        raise AssertionError(f"{len(lost)} acknowledged messages lost after the cut: {lost}")
    return store


# --- tests ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("new_boot")
async def test_sync_flush_acknowledged_messages_survive_a_power_cut_across_segment_rolls(
    fs: PowerFS, tmp_path: Path
) -> None:
    """Segment names (commitlog/ fsynced after the link) and the store's directories."""
    root, notes = run_writer(fs, tmp_path, count=60)
    assert sum("i" in note for note in notes) == 60
    segments = sorted(os.listdir(root / "commitlog"))
    assert len(segments) >= 4, segments  # 60 KiB of records in 16 KiB segments: rolls
    # Sizes too: those created ahead (never synced) are not 0 bytes (fsync after fallocate).
    sizes = {name: (root / "commitlog" / name).stat().st_size for name in segments}
    assert set(sizes.values()) == {SEGMENT}, sizes
    store = await reopen_and_check(root, notes)
    try:
        assert store.recovered is not None and store.recovered.abnormal
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
@pytest.mark.parametrize("clean", [False, True], ids=["killed", "clean-shutdown"])
async def test_the_abort_marker_survives_a_power_cut_and_so_does_its_removal(
    fs: PowerFS, tmp_path: Path, clean: bool
) -> None:
    """A killed store leaves ``abort`` durable (recovery: abnormal); a clean shutdown's removal
    of it is durable too (recovery: normal)."""
    root, notes = run_writer(fs, tmp_path, count=5, clean=clean)
    assert (root / "abort").exists() is not clean
    store = await reopen_and_check(root, notes)
    try:
        assert store.recovered is not None
        assert store.recovered.abnormal is not clean
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
async def test_queue_and_index_files_and_the_checkpoint_the_flush_vouched_for_survive(
    fs: PowerFS, tmp_path: Path
) -> None:
    """The thorough queue flush makes the names of the queue and index files (and their
    directories) durable before the checkpoint moves past their units; the checkpoint's first
    creation is durable. Recovery re-dispatches only from the checkpoint's logics offset."""
    root, notes = run_writer(fs, tmp_path, count=60, flush_at=40)
    flushed = next(note for note in notes if "flushed" in note)
    assert int(flushed["flushed"]) > 0  # type: ignore[call-overload]
    checkpoint = StoreCheckpoint(str(root / "checkpoint"))
    checkpoint.load_blocking()
    assert checkpoint.valid, "the checkpoint file was lost with the cut"
    assert checkpoint.logics_offset == flushed["flushed"]
    # 10 units a queue before the flush, 16 units a queue file: files and directories exist.
    for queue in range(QUEUES):
        assert os.listdir(root / "consumequeue" / "T" / str(queue)), queue
    index_files = flushed["index"]
    assert index_files, "the writer had index files"
    missing = [name for name in index_files if not (root / "index" / name).exists()]  # type: ignore[attr-defined]
    assert not missing, f"index files lost with the cut: {missing}"
    store = await reopen_and_check(root, notes)
    try:
        recovered = store.recovered
        assert recovered is not None and recovered.abnormal and not recovered.page_cache_survived
        assert recovered.redispatch_from == flushed["flushed"]
        for i in (0, 39):  # units below the checkpoint: not re-dispatched, found by key
            found = store.query_messages("T", f"k{i}", 10, 0, 2**62)
            assert [m.body for m in found] == [body(i)], i
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
async def test_segments_created_ahead_and_never_synced_do_not_stop_the_restart(
    fs: PowerFS, tmp_path: Path
) -> None:
    """A power cut gives back, at the end of the log, segments whose name was durable but not
    their size: 0 bytes, or short (created ahead, never synced). Recovery drops them."""
    root, notes = run_writer(fs, tmp_path, count=20)
    commitlog = root / "commitlog"
    last = max(int(name) for name in os.listdir(commitlog))
    (commitlog / f"{last + SEGMENT:020d}").write_bytes(b"")
    (commitlog / f"{last + 2 * SEGMENT:020d}").write_bytes(bytes(4096))
    fsync_dir(commitlog)  # names durable; the data and sizes never synced: lost at the cut
    fs.cut()
    assert (commitlog / f"{last + 2 * SEGMENT:020d}").stat().st_size == 0
    store = await reopen_and_check(root, notes)
    try:
        assert store.recovered is not None and store.recovered.abnormal
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
async def test_queue_units_a_recovery_dropped_stay_dropped_across_a_power_cut(
    fs: PowerFS, tmp_path: Path
) -> None:
    """Recovery drops the queue units and index entries past the log's valid end (a torn tail; a replica's
    divergent tail, truncated before it rejoins: the fault campaign found this). Those drops
    must be durable before records are appended past that end: otherwise a power cut brings
    the old units back, the re-dispatch from the checkpoint skips the offsets they hold, and
    each points at a record that is not its message (a read fails or returns another one)."""
    root, _ = run_writer(fs, tmp_path, count=40, clean=True)  # log and units all durable
    commitlog = root / "commitlog"
    segments = sorted(os.listdir(commitlog))
    assert len(segments) >= 3, segments
    for name in segments[1:]:  # the log ends in its first segment now (durably)
        os.unlink(commitlog / name)
    fsync_dir(commitlog)
    # The writer again on that store: recovery drops every unit past the first segment, then
    # 20 new records are appended where the dropped ones were; SIGKILL, cut.
    root, notes = run_writer(fs, tmp_path, count=20, fresh=False)
    assert sum("i" in note for note in notes) == 20
    store = await reopen_and_check(root, notes)
    try:  # the index entries recovery dropped stayed dropped: each key finds its message
        for i in range(20):  # (and the first run's message of that key, if the log kept it)
            found = [m.body for m in store.query_messages("T", f"k{i}", 10, 0, 2**62)]
            assert body(i) in found and set(found) == {body(i)}, (i, len(found))
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
async def test_what_a_recovery_after_a_kill_kept_survives_a_later_power_cut(
    fs: PowerFS, tmp_path: Path
) -> None:
    """After a kill -9 the records past the last sync sit in the page cache only; recovery
    keeps them and its flushed offset vouches for them (a replica announces its end as
    durable, readers see them). So recovery syncs them: a power cut after the restart must
    not take them (the fault campaign's kill -9 then power cut of one replica). Without the
    sync the restart after the cut failed: the checkpoint vouched for records the cut took."""
    root, notes = run_writer(fs, tmp_path, count=40, flush="ASYNC_FLUSH", cut=False)
    assert sum("i" in note for note in notes) == 40
    unsynced = fs.pending()["unsynced_files"]
    assert any("/commitlog/" in line for line in unsynced), unsynced  # the kill left them dirty
    # The restart (same boot: a process crash), SIGKILLed again at once, then the power cut.
    run_writer(fs, tmp_path, count=0, fresh=False, flush="ASYNC_FLUSH")
    store = await reopen_and_check(root, notes, flush="ASYNC_FLUSH")
    await store.shutdown()


async def test_units_a_restart_after_a_kill_took_as_flushed_survive_its_clean_shutdown(
    fs: PowerFS, tmp_path: Path
) -> None:
    """A process crash leaves queue units and index entries in the page cache only; the next
    start loads them as flushed. Its clean shutdown must sync them before its positions
    snapshot vouches for them and the abort marker goes: after a power cut the start after
    trusts that snapshot (a normal recovery re-dispatches nothing). The fault campaign (seed
    7) found this: a replica's truncation restart (a clean shutdown) cut by a power loss, the
    queue's first 336 units lost, the next start writing past the hole into a short file.
    Without the sync here: 36 of the 40 acknowledged messages unreadable, their units gone."""
    # A thorough flush after 4 messages: the files and their names durable, the later units
    # and entries not; the positions journal records them all (the restart re-dispatches
    # nothing); kill -9.
    root, notes = run_writer(fs, tmp_path, count=40, flush_at=4, cut=False, journal=True)
    unsynced = fs.pending()["unsynced_files"]
    assert any("/consumequeue/T/0/" in line for line in unsynced), unsynced
    assert any("/index/" in line for line in unsynced), unsynced
    run_writer(fs, tmp_path, count=0, fresh=False, clean=True)  # restart, clean stop, cut
    store = await reopen_and_check(root, notes)
    try:
        assert store.recovered is not None and not store.recovered.abnormal
        for i in range(40):  # the index entries too
            found = [m.body for m in store.query_messages("T", f"k{i}", 10, 0, 2**62)]
            assert found == [body(i)], (i, len(found))
    finally:
        await store.shutdown()


@pytest.mark.usefixtures("new_boot")
async def test_a_consumer_never_reads_a_record_a_power_cut_takes_back(
    fs: PowerFS, tmp_path: Path
) -> None:
    """Committed reads on one SYNC_FLUSH broker (issue 63): records appended but not yet
    synced are not handed to a consumer pulling right then; after the power cut every record
    it was handed is still at its offset. (Dispatch stops at the flushed offset: remove that
    bound in ``CommitLogSource.dispatch_limit`` and the consumer reads the three records the
    cut takes back.)"""
    root, notes = run_writer(fs, tmp_path, count=12, unsynced=3)
    reads = [note for note in notes if "read" in note]
    assert len(reads) == 12  # every acknowledged record was read, and nothing else
    store = await reopen_and_check(root, notes)
    try:
        for note in reads:
            result = store.get_messages("T", int(note["queue"]), int(note["offset"]), 1)  # type: ignore[call-overload]
            assert result.messages, f"read {note}, gone after the power cut"
            assert result.messages[0].body.decode()[:5] == note["read"]
        assert sum(store.get_max_offset("T", q) for q in range(QUEUES)) == 12
    finally:
        await store.shutdown()


if __name__ == "__main__":
    asyncio.run(
        _writer_main(
            sys.argv[1],
            sys.argv[2],
            int(sys.argv[3]),
            int(sys.argv[4]),
            sys.argv[5] == "1",
            sys.argv[6],
            sys.argv[7] == "1",
            int(sys.argv[8]),
        )
    )
