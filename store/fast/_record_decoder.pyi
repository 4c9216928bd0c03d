# Stub of the compiled module built from _record_decoder.c (the twin of the pure-Python loop in
# wharf.client.records.parse_records); loaded through ``wharf.store.fast.load("_record_decoder")``.
from typing import TypeVar

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

_T = TypeVar("_T")

def walk(cls: type[_T], buf: bytes, start: int, end: int, /) -> list[_T]:
    """The records of buf[start:end] as cls instances; ValueError(offset, reason) if malformed."""
