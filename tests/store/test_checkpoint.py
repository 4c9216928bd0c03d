"""StoreCheckpoint: the 4 KiB file, its CRC, and what a missing or damaged one means."""

from __future__ import annotations

import os
from pathlib import Path

from wharf.store.codec.layout import CHECKPOINT, CHECKPOINT_FILE_SIZE
from wharf.store.log.checkpoint import StoreCheckpoint


def test_round_trip_through_a_4k_file(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 10, 20, 30
    cp.physic_offset, cp.logics_offset = 4096, 2048
    cp.flush_blocking()
    assert os.path.getsize(path) == CHECKPOINT_FILE_SIZE
    loaded = StoreCheckpoint(path)
    loaded.load_blocking()
    assert loaded.existed and loaded.valid
    assert (
        loaded.physic_msg_timestamp,
        loaded.logics_msg_timestamp,
        loaded.index_msg_timestamp,
    ) == (10, 20, 30)
    assert (loaded.physic_offset, loaded.logics_offset) == (4096, 2048)


def test_timestamps_sit_where_rocketmq_reads_them(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_msg_timestamp, cp.logics_msg_timestamp, cp.index_msg_timestamp = 1, 2, 3
    cp.flush_blocking()
    raw = Path(path).read_bytes()
    assert [int.from_bytes(raw[i : i + 8], "big") for i in (0, 8, 16)] == [1, 2, 3]


def test_missing_checkpoint_loads_as_zeros(tmp_path):
    cp = StoreCheckpoint(str(tmp_path / "nope"))
    cp.load_blocking()
    assert not cp.existed and not cp.valid
    assert (cp.physic_offset, cp.physic_msg_timestamp, cp.min_timestamp) == (0, 0, 0)


def test_rocketmq_file_without_crc_keeps_timestamps_and_drops_offsets(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(CHECKPOINT.pack(5000, 6000, 7000, 0, 0, 999, 999) + bytes(4096 - 56))
    cp = StoreCheckpoint(str(path))
    cp.load_blocking()
    assert cp.existed and not cp.valid
    assert (cp.physic_msg_timestamp, cp.logics_msg_timestamp) == (5000, 6000)
    assert (cp.physic_offset, cp.logics_offset) == (0, 0)
    assert cp.min_timestamp == 2000  # the older one minus 3 s slack


def test_damaged_checkpoint_is_not_trusted(tmp_path):
    path = str(tmp_path / "checkpoint")
    cp = StoreCheckpoint(path)
    cp.physic_offset = 123456
    cp.flush_blocking()
    raw = bytearray(Path(path).read_bytes())
    raw[44] ^= 0xFF  # inside physic_offset
    Path(path).write_bytes(raw)
    loaded = StoreCheckpoint(path)
    loaded.load_blocking()
    assert not loaded.valid and loaded.physic_offset == 0


def test_truncated_checkpoint_is_ignored(tmp_path):
    path = tmp_path / "checkpoint"
    path.write_bytes(b"\x01" * 20)
    cp = StoreCheckpoint(str(path))
    cp.load_blocking()
    assert cp.existed and not cp.valid and cp.physic_msg_timestamp == 0
