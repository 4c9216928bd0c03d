# Stub of the compiled module built from _kafka_convert.c (the twin of the Kafka mapping in
# wharf.store.codec.kafka_records with the Kafka front end's record batch codec); loaded through
# ``wharf.store.fast.load("_kafka_convert")`` by store/fast/kafka_convert.py.
from collections.abc import Callable, Iterable

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

def produce_records(
    section: Buffer,
    count: int,
    base_timestamp: int,
    tail: Buffer,
    ids: list[str],
    now_ms: int,
    max_body: int,
    mark: str | None,
    crc: Callable[[Buffer], int] | None,
    /,
) -> tuple[bytes, list[int]] | None:
    """A v2 batch's uncompressed records section -> (send-batch records, body sizes); None:
    take the Python path."""

def fetch_batch(
    records: Buffer,
    count: int,
    crc32c: Callable[[Buffer], int],
    inflate: Callable[[memoryview], bytes],
    /,
) -> bytes | None:
    """``count`` whole stored records -> one uncompressed record batch v2; None: take the
    Python path."""

def configure(system_names: Iterable[str], /) -> None:
    """The system property names (never Kafka headers)."""
