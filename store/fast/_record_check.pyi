# Stub of the compiled module built from _record_check.c (the twin of the numpy
# check/patch in store/fast/record_check.py); loaded through ``load("_record_check")``.
from collections.abc import Callable

from typing_extensions import Buffer

RECORD_HEADER_SIZE: int
RECORD_FIXED_SIZE: int
BLANK_HEADER_SIZE: int
MESSAGE_MAGIC_CODE: int
MESSAGE_MAGIC_CODE_V2: int
RECORD_FIXED_SIZE_V2: int
MAX_TOPIC_LENGTH_V1: int
BLANK_MAGIC_CODE: int
MAX_PROPERTIES_LENGTH: int
PROPERTY_SEPARATOR: int
SYSFLAG_COMPRESSED: int
CQ_STORE_UNIT_SIZE: int
CQ_OFF_COMMIT_LOG_OFFSET: int
CQ_OFF_SIZE: int
CQ_OFF_TAGS_CODE: int
CQ_BLANK_UNIT_SIZE: int
INDEX_HEADER_SIZE: int
INDEX_HASH_SLOT_SIZE: int
INDEX_ENTRY_SIZE: int
INDEX_OFF_KEY_HASH: int
INDEX_OFF_PHY_OFFSET: int
INDEX_OFF_TIME_DIFF: int
INDEX_OFF_PREV_INDEX: int

def check(
    data: Buffer,
    tail: Buffer,
    max_message_size: int,
    allowed_sys_flags: int,
    crc32: Callable[[Buffer], int],
    /,
) -> bytes | tuple[int, int, int]:
    """Record starts as native int64 bytes, or (index, code, detail) of the first bad record."""

def check_many(
    data: Buffer,
    sizes: list[int],
    tails: list[bytes],
    max_message_size: int,
    allowed_sys_flags: int,
    crc32: Callable[[Buffer], int],
    /,
) -> tuple[bytes, list[int]] | tuple[int, tuple[int, int, int]]:
    """(every record's start as native int64 bytes, each batch's count), or (batch, (index,
    code, detail)) of the first bad batch's first bad record."""

def patch(
    buf: Buffer,
    starts: Buffer,
    queue_id: int,
    first_queue_offset: int,
    start_offset: int,
    born_host: Buffer,
    store_timestamp: int,
    store_host: Buffer,
    /,
) -> None:
    """Write the broker-owned header fields of checked records in ``buf`` (writable)."""

def patch_many(
    buf: Buffer,
    starts: Buffer,
    counts: list[int],
    queue_ids: list[int],
    first_queue_offsets: list[int],
    start_offset: int,
    born_host: Buffer,
    store_timestamp: int,
    store_host: Buffer,
    /,
) -> None:
    """``patch`` of several batches laid out one after another in ``buf`` (writable)."""
