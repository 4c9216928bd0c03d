"""Commit log recovery: find the start point, walk and validate records, truncate the rest.

The failure policy is written down in ``store/log/commit_log.py``'s docstring; this module carries
it out. Runs in a thread (``CommitLog.recover_blocking``), before anything is served.
"""

from __future__ import annotations

import logging

from wharf.store.codec.layout import OFFSET_STORE_TIMESTAMP, STORE_TIMESTAMP
from wharf.store.codec.records import RECORD_BLANK, RECORD_CORRUPT, RECORD_END, check_record
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.log.mapped_file import MappedFile
from wharf.store.log.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)

NORMAL_RECOVERY_SEGMENTS = 3  # RocketMQ recoverNormally starts from the third-to-last file


def recover_queue_blocking(
    queue: MappedFileQueue,
    abnormal: bool,
    checkpoint: StoreCheckpoint | None,
    check_crc: bool,
) -> int:
    """Validate from the start point, truncate after the last valid record (zeroing the rest
    of its segment, deleting later ones) and return that offset: the log's valid end."""
    files = queue.files
    if not files:
        return 0
    file_size = queue.file_size
    index, pos = _recovery_start(queue, abnormal, checkpoint)
    log.info(
        "commit log %s recovery from offset %d (%s restart, CRC %s)",
        queue.store_path,
        files[index].file_from_offset + pos,
        "abnormal" if abnormal else "normal",
        "on" if check_crc else "off",
    )
    while True:
        mapped = files[index]
        raw = mapped.raw
        base = mapped.file_from_offset
        result = check_record(raw, pos, check_crc, base + pos)
        while result > 0:
            pos += result
            result = check_record(raw, pos, check_crc, base + pos)
        if result == RECORD_BLANK and index + 1 < len(files):
            index, pos = index + 1, 0
            continue
        if result == RECORD_BLANK:
            end = base + file_size
        else:
            end = base + pos
            if result == RECORD_CORRUPT:
                log.error(
                    "commit log: invalid record at offset %d (torn write or corruption); "
                    "treating it as the end of valid data and truncating there",
                    end,
                )
        break
    if result == RECORD_END and pos < file_size and index + 1 < len(files):
        if _only_empty_after(files, index):
            log.info(
                "commit log: removing %d empty preallocated segment(s) after the data end %d",
                len(files) - index - 1,
                end,
            )
        else:
            log.warning("commit log: data ends at %d inside a segment that is not the last", end)
    queue.truncate_blocking(end)
    if checkpoint is not None and checkpoint.physic_offset > end:
        checkpoint.physic_offset = end
    return end


def _recovery_start(
    queue: MappedFileQueue, abnormal: bool, checkpoint: StoreCheckpoint | None
) -> tuple[int, int]:
    """(segment index, position) to validate from."""
    files = queue.files
    if checkpoint is not None and checkpoint.valid and checkpoint.physic_offset > 0:
        start = _checkpoint_start(queue, checkpoint.physic_offset)
        if start is not None:
            return start
    if not abnormal:
        return max(0, len(files) - NORMAL_RECOVERY_SEGMENTS), 0
    # RocketMQ's isMappedFileMatchedRecover: the newest segment whose first record is older
    # than what the checkpoint says was flushed everywhere.
    low = checkpoint.min_timestamp if checkpoint is not None else 0
    for index in range(len(files) - 1, -1, -1):
        first_ts = STORE_TIMESTAMP.unpack_from(files[index].raw, OFFSET_STORE_TIMESTAMP)[0]
        if 0 < first_ts <= low:
            return index, 0
    return 0, 0


def _checkpoint_start(queue: MappedFileQueue, offset: int) -> tuple[int, int] | None:
    """Start exactly at the checkpoint's flushed offset if a record (or the end) is there."""
    files = queue.files
    file_size = queue.file_size
    first = files[0].file_from_offset
    if offset < first:
        return None  # retention removed it: everything left is newer, validate it all
    index = (offset - first) // file_size
    if index >= len(files):
        if offset == files[-1].file_from_offset + file_size:
            return len(files) - 1, file_size
        log.warning("checkpoint offset %d is beyond the last segment: ignoring it", offset)
        return None
    mapped = files[index]
    pos = offset - mapped.file_from_offset
    result = check_record(mapped.raw, pos, True, offset)
    if result > 0 or result == RECORD_BLANK:
        return index, pos
    # The end of data, in the last segment or followed only by empty segments (preallocated
    # ahead of the writer and left by a crash): nothing after it to validate.
    if result == RECORD_END and _only_empty_after(files, index):
        return index, pos
    log.warning("checkpoint offset %d is not at a valid record: validating more", offset)
    return None


def _only_empty_after(files: list[MappedFile], index: int) -> bool:
    """Every segment after ``index`` is empty (starts with zeros): preallocated, never written.
    A record always starts a segment that holds data, so the first header tells."""
    return all(check_record(mapped.raw, 0, False) == RECORD_END for mapped in files[index + 1 :])
