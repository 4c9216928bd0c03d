"""Metadata at scale (issue 33): the persist's serialization runs in the writer thread, one
change appends a journal record instead of rewriting the snapshot, and a load replays the
journal (a torn tail or a kill -9 mid-write loses nothing that was persisted)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from wharf.broker.meta import persist
from wharf.broker.meta.groups import SubscriptionGroup, SubscriptionGroupManager
from wharf.broker.meta.offsets import ConsumerOffsetManager
from wharf.broker.meta.persist import journal_of, load_json_blocking, write_text_atomic_blocking
from wharf.broker.meta.persister import MetadataPersister
from wharf.broker.meta.topics import TopicConfig, TopicConfigManager

ROOT = Path(__file__).resolve().parents[2]


def _offsets(keys: int, queues: int = 4) -> ConsumerOffsetManager:
    offsets = ConsumerOffsetManager()
    for i in range(keys):
        for q in range(queues):
            offsets.commit(f"g{i % 1000}", f"t{i}", q, i * 10 + q)
    return offsets


def _host(directory: Path, *managers: Any) -> MetadataPersister:
    """The broker's metadata persister over these tables."""
    return MetadataPersister(directory, managers, 5.0)


def _persist(manager: Any, path: Path) -> None:
    write_text_atomic_blocking(path, manager.capture())


def _reloaded(path: Path) -> ConsumerOffsetManager:
    again = ConsumerOffsetManager()
    again.load(load_json_blocking(path))
    return again


async def test_a_persist_at_scale_serializes_in_the_writer_thread_not_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topics = TopicConfigManager(default_queue_nums=4, auto_create=True)
    for i in range(25_000):
        topics.create(f"topic-{i:05d}", 4, 4, 6, {})
    groups = SubscriptionGroupManager(auto_create=True, default_retry_max_times=16)
    for i in range(1_000):
        groups.put(SubscriptionGroup(f"group-{i}"))
    offsets = _offsets(2_000)
    threads: dict[str, set[int]] = {
        name: set() for name in ("_fragment", "_snapshot_text", "_record_text", "entry")
    }

    def spy(name: str, real: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            threads[name].add(threading.get_ident())
            return real(*args, **kwargs)

        return wrapper

    for name in ("_fragment", "_snapshot_text", "_record_text"):  # the JSON text's makers
        monkeypatch.setattr(persist, name, spy(name, getattr(persist, name)))
    monkeypatch.setattr(TopicConfig, "to_json", spy("entry", TopicConfig.to_json))
    monkeypatch.setattr(topics.journal, "_entry_json", spy("entry", topics.journal._entry_json))
    broker = _host(tmp_path / "config", topics, groups, offsets)
    loop_thread = threading.get_ident()

    await broker.persist()  # first write: the three snapshots
    topics.replace(TopicConfig("topic-00007", 4, 4, 4, {}))
    offsets.commit("g1", "t1", 0, 999)
    await broker.persist()  # then journal records

    assert all(threads.values()), threads
    for name, seen in threads.items():
        assert loop_thread not in seen, f"{name} ran on the event loop"
    data = load_json_blocking(tmp_path / "config" / "topics.json")
    assert data is not None and data["topicConfigTable"]["topic-00007"]["perm"] == 4


async def test_the_loop_keeps_answering_while_a_large_snapshot_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The snapshot's write is held in the thread (a mock that waits for the loop): the loop
    runs other callbacks meanwhile, which it could not if the persist blocked it."""
    offsets = _offsets(25_000)
    release = threading.Event()
    real = persist.TableJournal._write_snapshot

    def held(self: persist.TableJournal, *args: Any) -> None:
        assert release.wait(10), "the loop never got to release the writer"
        real(self, *args)

    monkeypatch.setattr(persist.TableJournal, "_write_snapshot", held)
    task = asyncio.create_task(_host(tmp_path, offsets).persist())
    for _ in range(5):  # the loop turns while the writer thread holds the snapshot
        await asyncio.sleep(0.01)
    assert not task.done()
    release.set()
    await task
    assert _reloaded(tmp_path / "consumerOffset.json").table == offsets.table


def test_one_offset_commit_appends_a_record_instead_of_rewriting_the_snapshot(
    tmp_path: Path,
) -> None:
    offsets = _offsets(25_000)  # 100,000 offsets
    path = tmp_path / "consumerOffset.json"
    _persist(offsets, path)
    snapshot = path.stat()
    assert snapshot.st_size > 1_000_000
    journal = offsets.journal
    before = journal.bytes_written

    offsets.commit("g3", "t3", 2, 123_456)
    _persist(offsets, path)

    written = journal.bytes_written - before
    assert 0 < written < 100  # one (topic, group) entry, not 100,000 offsets
    assert journal.snapshots_written == 1
    assert path.stat().st_mtime_ns == snapshot.st_mtime_ns and path.stat().st_ino == snapshot.st_ino
    assert journal_of(path).read_bytes().count(b"\n") == 2  # the header and the record
    _persist(offsets, path)  # nothing changed: nothing written
    assert journal.bytes_written - before == written
    assert _reloaded(path).query("g3", "t3", 2) == 123_456
    # The snapshot alone stays RocketMQ's layout (what RocketMQ or an older Wharf would read).
    assert json.loads(path.read_text())["offsetTable"]["t3@g3"] == {
        "0": 30,
        "1": 31,
        "2": 32,
        "3": 33,
    }


def test_a_snapshot_is_the_text_dumps_makes(tmp_path: Path) -> None:
    topics = TopicConfigManager(default_queue_nums=4, auto_create=True)
    path = tmp_path / "topics.json"
    _persist(topics, path)  # empty
    assert path.read_text() == persist.dumps(topics.to_json())
    topics.create("b-2", 4, 4, 6, {"message.type": "FIFO", "k": '\u2603 "q"\n'})
    topics.create("a", 1, 2, 4, {})
    _persist(topics, path)  # a journal record
    assert load_json_blocking(path) == json.loads(persist.dumps(topics.to_json()))
    other = tmp_path / "other" / "topics.json"
    _persist(topics, other)  # another file: a snapshot
    assert other.read_text() == persist.dumps(topics.to_json())
    offsets = _offsets(30)
    _persist(offsets, tmp_path / "consumerOffset.json")
    assert (tmp_path / "consumerOffset.json").read_text() == persist.dumps(offsets.to_json())


def test_topic_and_group_changes_and_deletions_replay_from_the_journal(tmp_path: Path) -> None:
    topics = TopicConfigManager(default_queue_nums=4, auto_create=True)
    groups = SubscriptionGroupManager(auto_create=True, default_retry_max_times=16)
    offsets = ConsumerOffsetManager()
    for i in range(10):
        topics.create(f"t{i}", 4, 4, 6, {})
        groups.put(SubscriptionGroup(f"g{i}"))
        offsets.commit(f"g{i}", f"t{i}", 0, i)
    for manager in (topics, groups, offsets):
        _persist(manager, tmp_path / manager.FILE_NAME)
    topics.delete("t3")
    offsets.remove_topic("t3")
    groups.delete("g4")
    topics.create("new", 2, 2, 6, {"message.type": "FIFO"})
    groups.put(SubscriptionGroup("g5", retry_max_times=3))
    for manager in (topics, groups, offsets):
        _persist(manager, tmp_path / manager.FILE_NAME)
        assert manager.journal.snapshots_written == 1

    topics2 = TopicConfigManager(4, auto_create=False)
    topics2.load(load_json_blocking(tmp_path / topics.FILE_NAME))
    groups2 = SubscriptionGroupManager(auto_create=False, default_retry_max_times=16)
    groups2.load(load_json_blocking(tmp_path / groups.FILE_NAME))
    assert topics2.table == topics.table and "t3" not in topics2.table
    assert topics2.version == topics.version
    assert groups2.table == groups.table and groups2.get("g5").retry_max_times == 3  # type: ignore[union-attr]
    assert groups2.version == groups.version
    assert _reloaded(tmp_path / offsets.FILE_NAME).table == offsets.table


def test_a_torn_or_corrupt_journal_tail_is_dropped_and_compacted_away(tmp_path: Path) -> None:
    offsets = _offsets(100)
    path = tmp_path / "consumerOffset.json"
    _persist(offsets, path)
    offsets.commit("g1", "t1", 0, 1_000)
    _persist(offsets, path)
    offsets.commit("g2", "t2", 0, 2_000)
    _persist(offsets, path)
    journal = journal_of(path)
    whole = journal.read_bytes()
    assert whole.count(b"\n") == 3  # the header (the snapshot's CRC) and two records

    for tail in (
        b'1234abcd {"t":"offsetTable","s":{"t1@g1":{"0":5',  # cut mid-record, no newline
        b"deadbeef " + json.dumps({"t": "offsetTable", "s": {"t1@g1": {"0": 5}}}).encode() + b"\n",
        b"\x00" * 64,  # a block the file system extended but never wrote
    ):
        journal.write_bytes(whole + tail)
        again = _reloaded(path)
        assert again.query("g1", "t1", 0) == 1_000 and again.query("g2", "t2", 0) == 2_000
        assert again.table == offsets.table

    # The first write after a (re)start replaces snapshot and journal: no garbage stays in
    # front of the records that follow.
    again.commit("g9", "t9", 0, 9_000)
    _persist(again, path)
    assert journal.read_bytes().count(b"\n") == 1  # a new snapshot: the header alone
    again.commit("g9", "t9", 1, 9_001)
    _persist(again, path)
    assert _reloaded(path).table == again.table


def test_a_crash_between_the_snapshot_and_the_journal_reset_loads_the_same_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction writes the new snapshot, then empties the journal: a crash in between
    leaves records older than the snapshot, which a load replays harmlessly."""
    monkeypatch.setattr(persist, "JOURNAL_MIN_BYTES", 300)
    monkeypatch.setattr(persist, "JOURNAL_SNAPSHOT_RATIO", 0)
    offsets = _offsets(5)
    path = tmp_path / "consumerOffset.json"
    _persist(offsets, path)
    for n in range(1, 4):  # under the limit: journal records
        offsets.commit("g1", "t1", 0, n)
        if n == 2:
            offsets.remove_group("g3")
        _persist(offsets, path)
    assert offsets.journal.snapshots_written == 1
    stale_journal = journal_of(path).read_bytes()
    real = persist.write_bytes_atomic_blocking

    def crash_at_the_reset(target: Path, data: bytes, **kwargs: Any) -> None:
        if target == journal_of(path):
            raise OSError(errno.EIO, "crashed")
        real(target, data, **kwargs)

    monkeypatch.setattr(persist, "write_bytes_atomic_blocking", crash_at_the_reset)
    for n in range(4, 12):  # the journal outgrows the limit: a new snapshot
        offsets.commit("g1", "t1", 0, n)
        offsets.commit("g2", "t2", 1, n)
        try:
            _persist(offsets, path)
        except OSError:
            break
    assert journal_of(path).read_bytes().startswith(stale_journal)
    assert json.loads(path.read_text())["offsetTable"]["t1@g1"]["0"] == n
    assert _reloaded(path).table == offsets.table


def test_a_failed_append_leaves_no_torn_record_and_is_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = _offsets(10)
    path = tmp_path / "consumerOffset.json"
    _persist(offsets, path)
    offsets.commit("g1", "t1", 0, 111)
    _persist(offsets, path)
    size = journal_of(path).stat().st_size
    real_write = os.write

    def half_then_full(fd: int, data: Any) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    offsets.commit("g2", "t2", 0, 222)
    monkeypatch.setattr(persist.os, "write", half_then_full)
    with pytest.raises(OSError):
        _persist(offsets, path)
    monkeypatch.setattr(persist.os, "write", real_write)
    assert journal_of(path).stat().st_size == size  # cut back: no torn record
    assert _reloaded(path).query("g2", "t2", 0) == 20  # the commit of 222 is not persisted yet
    offsets.commit("g3", "t3", 0, 333)
    _persist(offsets, path)  # retries the failed batch (and compacts)
    again = _reloaded(path)
    assert again.query("g2", "t2", 0) == 222 and again.query("g3", "t3", 0) == 333
    assert again.table == offsets.table


def test_a_replica_load_writes_only_what_differs_from_the_files(tmp_path: Path) -> None:
    """A replica replaces its tables wholesale with the master's (clear + load): the next
    persist compares them with what the files hold and journals the difference."""
    offsets = _offsets(2_000)
    path = tmp_path / "consumerOffset.json"
    _persist(offsets, path)
    shipped = offsets.to_json()
    shipped["offsetTable"]["t5@g5"]["1"] = 5_555
    del shipped["offsetTable"]["t6@g6"]
    before = offsets.journal.bytes_written
    offsets.table.clear()
    offsets.load(json.loads(json.dumps(shipped)))
    _persist(offsets, path)
    assert offsets.journal.snapshots_written == 1
    assert offsets.journal.bytes_written - before < 200
    again = _reloaded(path)
    assert again.query("g5", "t5", 1) == 5_555 and again.query("g6", "t6", 0) == -1
    assert again.table == offsets.table


CRASHER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from wharf.broker.meta.offsets import ConsumerOffsetManager
    from wharf.broker.meta.persist import write_text_atomic_blocking

    path = Path(sys.argv[1])
    offsets = ConsumerOffsetManager()
    for i in range(5_000):
        offsets.commit(f"g{i % 50}", f"t{i}", 0, 0)
    n = 0
    while True:
        n += 1
        for i in range(0, 5_000, 7):
            offsets.commit(f"g{i % 50}", f"t{i}", 0, n)
        write_text_atomic_blocking(path, offsets.capture())
        print(n, flush=True)  # persisted: n must survive a kill from here on
    """
)


def test_kill_9_while_persisting_keeps_every_persisted_offset(tmp_path: Path) -> None:
    path = tmp_path / "config" / "consumerOffset.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for kill_after in (3, 40, 400):  # lines seen before the kill: early, and mid-compactions
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASHER, str(path)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert proc.stdout is not None
        persisted = 0
        for line in proc.stdout:
            persisted = int(line)
            if persisted >= kill_after:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert persisted >= kill_after, "the writer died before the kill"
        again = _reloaded(path)
        # Every offset of the last persisted round survived; a later one may have too.
        got = {again.query(f"g{i % 50}", f"t{i}", 0) for i in range(0, 5_000, 7)}
        assert min(got) >= persisted, (kill_after, persisted, min(got))
        assert len(got) == 1  # a round's record is whole or dropped, never half replayed
