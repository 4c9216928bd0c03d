"""Commit log recovery: torn tails, flipped CRC bytes, missing / damaged checkpoints, start points."""

from __future__ import annotations

import logging
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.store import codec as fmt
from wharf.store.config import StoreConfig
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.commit_log import CommitLog
from wharf.store.model import MessageInput

SEGMENT = 4096


def config(tmp_path) -> StoreConfig:
    return StoreConfig(store_path_root_dir=str(tmp_path), mapped_file_size_commit_log=SEGMENT)


def open_log(tmp_path, checkpoint: StoreCheckpoint | None = None) -> CommitLog:
    log = CommitLog(config(tmp_path), checkpoint=checkpoint)
    log.load_blocking()
    return log


def body(i: int) -> bytes:
    return (b"%05d-" % i) * 60


def write_records(tmp_path, count: int, checkpoint: StoreCheckpoint | None = None):
    log = open_log(tmp_path, checkpoint)
    log.recover_blocking(abnormal=False)
    results = [
        log.append("T", 0, i, [MessageInput(body(i), {"KEYS": f"k{i}"})], 1000 + i)
        for i in range(count)
    ]
    log.queue.flush_blocking()
    log.close()  # no shutdown: as after kill -9 (page cache kept)
    return [(r.offsets[0], r.sizes[0]) for r in results]


def segment_path(tmp_path, offset: int) -> str:
    start = offset - offset % SEGMENT
    return os.path.join(tmp_path, "commitlog", fmt.segment_file_name(start))


def patch_bytes(tmp_path, offset: int, data: bytes) -> None:
    with open(segment_path(tmp_path, offset), "r+b") as f:
        f.seek(offset % SEGMENT)
        f.write(data)


def flip_byte(tmp_path, offset: int) -> None:
    with open(segment_path(tmp_path, offset), "r+b") as f:
        f.seek(offset % SEGMENT)
        value = f.read(1)[0]
        f.seek(offset % SEGMENT)
        f.write(bytes([value ^ 0xFF]))


def recovered_bodies(log: CommitLog) -> list[bytes]:
    return [m.body for m in log.read_messages(log.min_offset, 10_000, 1 << 30)]


def test_clean_log_recovers_to_its_end(tmp_path):
    records = write_records(tmp_path, 30)
    log = open_log(tmp_path)
    end = records[-1][0] + records[-1][1]
    assert log.recover_blocking(abnormal=True) == end == log.max_offset == log.flushed_offset
    assert recovered_bodies(log) == [body(i) for i in range(30)]
    log.close()


def test_torn_tail_is_truncated_on_recovery(tmp_path, caplog):
    records = write_records(tmp_path, 12)
    last_offset, last_size = records[-1]
    # a torn write: the next record's header made it to disk, its body did not
    torn_at = last_offset + last_size
    header = fmt.RECORD_HEADER.pack(
        400, fmt.MESSAGE_MAGIC_CODE, 0, 0, 0, 12, torn_at, 0, 0, bytes(8), 0, bytes(8), 0, 0, 300
    )
    patch_bytes(tmp_path, torn_at, header)
    log = open_log(tmp_path)
    with caplog.at_level(logging.ERROR):
        end = log.recover_blocking(abnormal=True)
    assert end == torn_at
    assert any(str(torn_at) in r.getMessage() for r in caplog.records)
    assert log.read_bytes(torn_at, 8) is None  # nothing after the valid end is served
    assert log.queue.last().read_unchecked(torn_at % SEGMENT, 88) == bytes(88)  # zeroed
    # the log goes on from there
    result = log.append("T", 0, 12, [MessageInput(b"after recovery")], 5)
    assert result.offsets[0] == torn_at
    assert log.read_message(torn_at).body == b"after recovery"
    log.close()


def test_flipped_crc_byte_in_the_middle_ends_valid_data_there(tmp_path, caplog):
    records = write_records(tmp_path, 30)
    bad_offset = records[10][0]
    flip_byte(tmp_path, bad_offset + 8)  # BODYCRC of record 10
    log = open_log(tmp_path)
    with caplog.at_level(logging.ERROR):
        end = log.recover_blocking(abnormal=True)
    assert end == bad_offset
    assert recovered_bodies(log) == [body(i) for i in range(10)]
    assert any(str(bad_offset) in r.getMessage() for r in caplog.records)
    # later segments are gone, the bad segment's tail is zeros
    names = sorted(os.listdir(os.path.join(tmp_path, "commitlog")))
    assert names[-1] == fmt.segment_file_name(bad_offset - bad_offset % SEGMENT)
    assert log.read_message(records[12][0]) is None
    log.close()


def test_missing_checkpoint_after_a_crash_validates_every_segment(tmp_path):
    records = write_records(tmp_path, 40)
    assert len(os.listdir(os.path.join(tmp_path, "commitlog"))) >= 4
    bad_offset = records[2][0]
    flip_byte(tmp_path, bad_offset + 90)  # a body byte in the FIRST segment
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    checkpoint.load_blocking()
    assert not checkpoint.existed
    log = open_log(tmp_path, checkpoint)
    assert log.recover_blocking(abnormal=True, checkpoint=checkpoint) == bad_offset
    log.close()


def test_valid_checkpoint_lets_recovery_skip_flushed_segments(tmp_path):
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    records = write_records(tmp_path, 40)
    end = records[-1][0] + records[-1][1]
    checkpoint.physic_offset = records[35][0]
    checkpoint.flush_blocking()
    # damage a record BELOW the checkpoint: recovery must not even read it
    flip_byte(tmp_path, records[2][0] + 90)
    loaded = StoreCheckpoint(checkpoint.path)
    loaded.load_blocking()
    log = open_log(tmp_path, loaded)
    assert log.recover_blocking(abnormal=True, checkpoint=loaded) == end
    log.close()


def test_checkpoint_pointing_inside_a_record_is_not_trusted(tmp_path, caplog):
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    records = write_records(tmp_path, 20)
    end = records[-1][0] + records[-1][1]
    checkpoint.physic_offset = records[15][0] + 7  # CRC-valid file, wrong value
    checkpoint.flush_blocking()
    log = open_log(tmp_path, checkpoint)
    with caplog.at_level(logging.WARNING):
        assert log.recover_blocking(abnormal=True, checkpoint=checkpoint) == end
    assert any("not at a valid record" in r.getMessage() for r in caplog.records)
    assert recovered_bodies(log) == [body(i) for i in range(20)]
    log.close()


def test_checkpoint_beyond_a_torn_tail_is_lowered(tmp_path):
    checkpoint = StoreCheckpoint(os.path.join(tmp_path, "checkpoint"))
    records = write_records(tmp_path, 10)
    checkpoint.physic_offset = records[9][0]
    checkpoint.flush_blocking()
    flip_byte(tmp_path, records[9][0] + 8)
    log = open_log(tmp_path, checkpoint)
    assert log.recover_blocking(abnormal=True, checkpoint=checkpoint) == records[9][0]
    assert checkpoint.physic_offset == records[9][0]
    log.close()


def test_normal_restart_drops_empty_preallocated_segments_after_the_end(tmp_path):
    records = write_records(tmp_path, 10)
    end = records[-1][0] + records[-1][1]
    log = open_log(tmp_path)
    log.recover_blocking(abnormal=False)
    for _ in range(2):  # what an interrupted preallocation leaves behind
        log.queue.roll()
    log.close()
    log = open_log(tmp_path)
    assert log.segment_count == end // SEGMENT + 3
    assert log.recover_blocking(abnormal=False) == end
    assert log.segment_count == end // SEGMENT + 1
    assert recovered_bodies(log) == [body(i) for i in range(10)]
    log.close()


def test_recovery_of_an_empty_directory_is_offset_zero(tmp_path):
    log = open_log(tmp_path)
    assert log.recover_blocking(abnormal=True) == 0
    assert log.append("T", 0, 0, [MessageInput(b"first")], 1).offsets == [0]
    log.close()


def test_recovery_after_recovery_is_stable(tmp_path):
    records = write_records(tmp_path, 25)
    flip_byte(tmp_path, records[20][0] + 100)
    for _ in range(2):
        log = open_log(tmp_path)
        assert log.recover_blocking(abnormal=True) == records[20][0]
        log.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    count=st.integers(1, 40), damage=st.floats(0, 1), mode=st.sampled_from(["zero_tail", "flip"])
)
def test_recovery_ends_at_the_last_whole_record_before_any_damage(
    tmp_path_factory, count, damage, mode
):
    root = tmp_path_factory.mktemp("fuzz")
    records = write_records(root, count)
    data_end = records[-1][0] + records[-1][1]
    # only record bytes are damaged (not blank tails): pick a record, then a byte inside it.
    # Flips go where the format can see them: TOTALSIZE, MAGIC, BODYCRC, PHYSICALOFFSET,
    # BODYLENGTH and the body (RocketMQ's CRC covers the body only, so a flip in, say, the born
    # timestamp is undetectable by design).
    index = min(int(damage * count), count - 1)
    start, size = records[index]
    if mode == "flip":
        checked = [*range(0, 12), *range(28, 36), *range(84, 88 + len(body(index)))]
        at = start + checked[int(damage * 997) % len(checked)]
    else:
        at = start + int(damage * 997) % size
    if mode == "zero_tail":
        # a torn write: everything from `at` to the end of that segment is lost
        segment_end = at - at % SEGMENT + SEGMENT
        patch_bytes(root, at, bytes(segment_end - at))
        for offset, _ in records:  # later segments never made it either
            if offset >= segment_end:
                path = segment_path(root, offset)
                if os.path.exists(path):
                    os.unlink(path)
    else:
        flip_byte(root, at)
    log = open_log(root)
    end = log.recover_blocking(abnormal=True)
    survivors = [r for r in records if r[0] + r[1] <= end]
    assert end == (start if at < data_end else data_end)
    assert recovered_bodies(log) == [body(i) for i in range(len(survivors))]
    assert log.read_bytes(end, 8) is None
    log.close()
