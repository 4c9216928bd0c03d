# Stub of the compiled module built from _record_encoder.c (twins of
# wharf.store.codec.send_records.encode_record, of the offset message ids of
# wharf.store.codec.ids, and of its counter formatting); loaded through
# ``load("_record_encoder")``.
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from typing_extensions import Buffer

_T = TypeVar("_T")

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

def encode_bare_records(
    tail: Buffer,
    bodies: Sequence[bytes],
    unique_ids: Sequence[str],
    born_timestamp_ms: int,
    crc32: Callable[[Buffer], int] | None,
    /,
) -> list[bytes]: ...
def send_results(
    result_type: type[_T],
    status: Any,
    unique_ids: Sequence[str],
    records: Sequence[bytes],
    first_commit_log_offset: int,
    host_prefix: str,
    queue_id: int,
    first_queue_offset: int,
    topic: str,
    /,
) -> list[_T]: ...
def column_results(
    result_type: type[_T],
    status: Any,
    host_prefix: str,
    queue_ids: list[int],
    first_queue_offsets: list[int],
    first_commit_log_offsets: list[int],
    topics: list[str],
    batches: list[list[Any]],
    /,
) -> list[list[_T]]: ...
def columns_payload(batches: list[list[Any]], /) -> tuple[bytes, int, list[bytes]]: ...
def counter_ids(head: str, start: int, count: int, /) -> list[str]: ...
