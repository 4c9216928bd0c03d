# Stub of the compiled module built from _log_scan.c (the twin of store/log/reader.py's
# _scan_python); loaded through ``wharf.store.fast.load("_log_scan")``.
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

def scan(
    buf: Buffer, pos: int, limit: int, max_count: int, budget: int, any_before: bool, /
) -> tuple[list[int], int, int, int, int]:
    """(positions, new_pos, status, magic, total); status 0 stopped, 1 blank, 2 corrupt."""

def gather_tails(buf: Buffer, positions: Buffer, pad: int, /) -> tuple[bytearray, bytes] | None:
    """(tails back to back + pad zeros, int64 columns starts|ends|props) or None (refused)."""

def scan_properties(
    data: Buffer,
    starts: Buffer,
    props: Buffer,
    ends: Buffer,
    topic_ids: Buffer,
    prefixes: Buffer,
    /,
) -> tuple[bytearray, bytes, bytearray, list[tuple[int, int, int, int]]]:
    """(TAGS codes, key records, key hashes: int64 columns; values with non-ASCII bytes)."""

def topic_ids(
    data: Buffer, starts: Buffer, topic_lengths: Buffer, /
) -> tuple[bytearray, list[bytes]]:
    """(per record an int64 index into the distinct topics, the distinct topics' bytes)."""

def append_runs(
    queues: dict[tuple[str, int], object],
    keys: list[tuple[str, int]],
    firsts: list[int],
    bounds: list[int],
    ends: list[int],
    data: Buffer,
    room: int,
    tail_max: int,
    advanced: dict[tuple[str, int], int],
    /,
) -> tuple[list[int], int]:
    """(indexes of the runs left for the Python loop, tail bytes added)."""

def put_index_entries(
    mm: Buffer,
    slot_num: int,
    entries_pos: int,
    first_number: int,
    begin_timestamp: int,
    hashes: Buffer,
    offsets: Buffer,
    stamps: Buffer,
    /,
) -> int:
    """Entries first_number... written in log order, their slots updated; slots newly used."""

class QueueState:
    """ConsumeQueue's base: the state ``append_runs`` reads and moves, in the object."""

    files: list[QueueFileState]
    _tail: bytearray | None
    _write_pos: int
    _file_pos: int
    max_physical_offset: int

class QueueFileState:
    """ConsumeQueueFile's base: the fields ``append_runs`` reads."""

    start: int
    size: int
    allocated: int
    fd: int

def choose_runs(
    units: Buffer, max_count: int, max_bytes: int, log_min: int, codes: frozenset[int] | None, /
) -> tuple[list[tuple[int, int, int, int]], bytes, int, bool]:
    """(runs (log offset, bytes, first, count), chosen sizes int32, units scanned,
    removed_first)."""

def check_run(chunk: Buffer, sizes: Buffer, first: int, count: int, /) -> int:
    """Body bytes of the run's records, or -1 when a record disagrees with its unit."""
