"""Power loss on a plain filesystem (the FUSE model is in tests/fault/test_store_power_cut.py):
what a cut gives back at the end of each log (files named durably, sized never) and the
bookkeeping of directories whose new entries still need an fsync (issue 36)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from wharf.store.config import StoreConfig
from wharf.store.index.index_file import IndexFile
from wharf.store.index.index_files import IndexService
from wharf.store.log.commit_log import CommitLog
from wharf.store.message_store import MessageStore
from wharf.store.model import MessageInput
from wharf.store.paths import (
    DirectorySyncs,
    make_dirs_blocking,
    read_abort_marker_blocking,
    remove_abort_marker_blocking,
    write_abort_marker_blocking,
)
from wharf.store.queue.consume_queue import ConsumeQueue

from tests.store.helpers import msg, small_config

SEGMENT = 4096


def _log(root: Path) -> CommitLog:
    log = CommitLog(StoreConfig(store_path_root_dir=str(root), mapped_file_size_commit_log=SEGMENT))
    log.load_blocking()
    return log


def _write(root: Path, count: int) -> int:
    """``count`` records of ~300 bytes across segments; returns the end offset."""
    log = _log(root)
    log.recover_blocking(abnormal=False)
    end = 0
    for i in range(count):
        end = log.append("T", 0, i, [MessageInput(b"x%04d" % i * 60)], 1000 + i).end_offset
    log.queue.flush_blocking()
    log.close()  # as after kill -9
    return end


def _segment(root: Path, offset: int) -> Path:
    return root / "commitlog" / f"{offset:020d}"


def test_empty_and_short_zero_segments_at_the_end_of_the_log_are_dropped(tmp_path, caplog):
    end = _write(tmp_path, 30)
    last = max(int(p.name) for p in (tmp_path / "commitlog").iterdir())
    _segment(tmp_path, last + SEGMENT).write_bytes(b"")  # named durably, size never synced
    _segment(tmp_path, last + 2 * SEGMENT).write_bytes(bytes(1000))
    log = _log(tmp_path)
    assert log.recover_blocking(abnormal=True) == end
    assert not _segment(tmp_path, last + 2 * SEGMENT).exists()
    assert "never synced" in caplog.text
    log.close()


def test_a_short_segment_in_the_middle_of_the_log_is_refused(tmp_path):
    _write(tmp_path, 30)
    os.truncate(_segment(tmp_path, SEGMENT), 0)
    with pytest.raises(ValueError, match="damaged in the middle"):
        _log(tmp_path)


def test_a_short_segment_holding_data_at_the_end_is_refused(tmp_path):
    _write(tmp_path, 30)
    last = max(int(p.name) for p in (tmp_path / "commitlog").iterdir())
    os.truncate(_segment(tmp_path, last), 100)  # a record's bytes: damage, not a preallocation
    with pytest.raises(ValueError, match="is 100 bytes"):
        _log(tmp_path)


def test_several_short_zero_consume_queue_files_at_the_end_are_dropped(tmp_path):
    queue = ConsumeQueue("T", 0, tmp_path, 7 * 20)
    queue.append_units(0, [(i * 100, 100, 0) for i in range(10)])
    queue.close()
    (tmp_path / f"{2 * 140:020d}").write_bytes(b"")  # created ahead, never sized
    (tmp_path / f"{3 * 140:020d}").write_bytes(bytes(40))
    queue = ConsumeQueue.load_blocking("T", 0, tmp_path, 7 * 20)
    assert queue.max_offset == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{0:020d}", f"{140:020d}"]


def test_several_short_index_files_at_the_end_are_dropped(tmp_path):
    service = IndexService.load_blocking(tmp_path, 8, 16)
    service.put_entries_blocking([(i, 100 + i, 1000) for i in range(20)])  # two files
    assert len(service.files) == 2
    service.close()
    expected = IndexFile.file_size(8, 16)
    for name in ("29990101000000000", "29990101000000001"):
        (tmp_path / name).write_bytes(bytes(min(expected - 1, 100)))
    service = IndexService.load_blocking(tmp_path, 8, 16)
    assert len(service.files) == 2
    service.close()


async def test_new_queue_and_index_files_wait_for_the_thorough_flush(tmp_path):
    store = MessageStore(small_config(tmp_path, flush_interval_consume_queue=3_600_000))
    await store.start()
    try:
        await store.put("T", 3, [msg("a", keys="k")] * 20)  # 2 queue files, index files
        assert await store.wait_dispatched()
        queues = store.insides.queues.dir_syncs
        root = tmp_path / "consumequeue"
        assert all(d in queues for d in (root / "T" / "3", root / "T", root))
        assert store.insides.index is not None and len(store.insides.index.dir_syncs) == 1
        await store.insides.queue_flush_service.flush(4096)  # a partial pass drains nothing
        assert len(queues) == 3
        await store.insides.queue_flush_service.flush_all()
        assert len(queues) == 0 and len(store.insides.index.dir_syncs) == 0
    finally:
        await store.shutdown()


def test_directory_syncs_skip_deleted_directories(tmp_path):
    syncs = DirectorySyncs()
    syncs.add(tmp_path, tmp_path / "gone")
    assert syncs.sync_blocking() == 2 and len(syncs) == 0


def test_make_dirs_reports_what_it_created(tmp_path):
    assert make_dirs_blocking(tmp_path / "a" / "b") == [
        str(tmp_path / "a"),
        str(tmp_path / "a" / "b"),
    ]
    assert make_dirs_blocking(tmp_path / "a" / "b") == []


def test_the_abort_marker_round_trip(tmp_path):
    marker = tmp_path / "abort"
    write_abort_marker_blocking(marker)
    assert read_abort_marker_blocking(marker)[0]
    remove_abort_marker_blocking(marker)
    remove_abort_marker_blocking(marker)  # idempotent
    assert read_abort_marker_blocking(marker) == (False, False)
