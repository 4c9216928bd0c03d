"""Wharf's on-disk layouts, defined once: THE spec. Byte-compatible with Apache RocketMQ 4.x
(big-endian). Sans-IO and numpy-free (the SDK imports it); no I/O, only constants, precompiled
``struct.Struct`` objects, field tables and import-time asserts.

Every other module derives what it needs from here: the codec's structs, the numpy structured
dtypes of ``wharf.store.fast`` (``wharf.store.fast.layout_dtypes``), the single-field reads of
the pull paths (``OFFSET_*``). The C accelerators carry a copy in ``store/fast/_format.h``, and
tests/store/test_compiled_format.py checks every value of it against this module.

CommitLog message record (RocketMQ's MessageVersion V1, magic 0xDAA320A7, and V2, magic
0xDAA320AB: the same record but for a two-byte TOPICLENGTH)::

    offset size field                     (RECORD_FIELDS name)
         0    4 TOTALSIZE                 TOTAL_SIZE       whole record, bytes
         4    4 MAGICCODE                 MAGIC            0xDAA320A7 message (V1) /
                                                           0xDAA320AB message (V2) /
                                                           0xCBD43194 blank
         8    4 BODYCRC                   BODY_CRC         zlib.crc32(body) & 0x7FFFFFFF
        12    4 QUEUEID                   QUEUE_ID
        16    4 FLAG                      FLAG
        20    8 QUEUEOFFSET               QUEUE_OFFSET     logical offset in the ConsumeQueue
        28    8 PHYSICALOFFSET            PHYSICAL_OFFSET  offset of this record in the CommitLog
        36    4 SYSFLAG                   SYS_FLAG         0x1 compressed, 0x2 multi tags, 0x4/0x8/0xC tx
        40    8 BORNTIMESTAMP             BORN_TIMESTAMP   ms
        48    8 BORNHOST                  BORN_HOST        ipv4 (4) + port (4)
        56    8 STORETIMESTAMP            STORE_TIMESTAMP  ms
        64    8 STOREHOST                 STORE_HOST       ipv4 (4) + port (4)
        72    4 RECONSUMETIMES            RECONSUME_TIMES
        76    8 PREPAREDTRANSACTIONOFFSET PREPARED_TRANSACTION_OFFSET
        84    4 BODYLENGTH, then BODY     BODY_LENGTH
         .  1|2 TOPICLENGTH, then TOPIC     V1: 1 byte, 1..127; V2: 2 bytes (big-endian),
                                                128..249 (ascii)
         .    2 PROPERTIESLENGTH, then PROPERTIES  "k\\x01v\\x02k\\x01v\\x02" (utf-8)

    TOTALSIZE = 88 + BODYLENGTH + (1|2) + TOPICLENGTH + 2 + PROPERTIESLENGTH  (checked on decode)

The version is a record's own (its MAGICCODE): one log holds both. A topic of up to 127 bytes
is always written V1 (byte-identical to RocketMQ 4.x, whose clients know only V1: remoting
refuses to hand them V2 records); a longer one (Kafka allows 249 characters) always V2, as
RocketMQ 5 writes it (MessageVersion.MESSAGE_VERSION_V2). Decoders take V1 on their fast path
and V2 on the branch a V1 magic mismatch already takes.

A record never spans segments: when it does not fit the rest of a segment the tail gets a blank
record (TOTALSIZE = bytes left, MAGICCODE = 0xCBD43194; at least 8 bytes) and the record starts
the next segment. Bytes after the last record of the last segment are zeros (preallocated file):
a TOTALSIZE of 0 means "no more data".

ConsumeQueue unit (20 bytes): commitLogOffset q | size i | tagsCode q.

IndexFile: header (40 bytes) beginTimestamp q | endTimestamp q | beginPhyOffset q |
endPhyOffset q | hashSlotCount i | indexCount i; then slots (4 bytes: index of the newest entry
for the hash, 0 = empty); then entries (20 bytes) keyHash i | phyOffset q | timeDiff i (seconds
since beginTimestamp) | prevIndex i (previous entry in the slot's chain, 0 = none).

Checkpoint (RocketMQ StoreCheckpoint, a 4 KiB file, 56 bytes used)::

     0  8 physicMsgTimestamp    store time of the last commit log record known flushed (ms)
     8  8 logicsMsgTimestamp    store time of the last record whose ConsumeQueue unit is flushed
    16  8 indexMsgTimestamp     store time of the last record whose index entries are flushed
    24  8 masterFlushedOffset   RocketMQ 5 field, kept 0 (no replication in Wharf)
    32  8 confirmPhyOffset      RocketMQ 5 field, kept 0
    40  8 physicOffset          Wharf: commit log offset known flushed (all bytes below it)
    48  8 logicsOffset          Wharf: commit log offset whose dispatch is flushed in the queues

Offsets make abnormal recovery start exactly at the right segment (timestamps stay for RocketMQ
tooling and for files written without the Wharf fields: those read as 0).

Offset message id (16 bytes -> 32 upper-case hex chars): STOREHOST ip (4) | port i (4) |
commitLogOffset q (8), as RocketMQ's MessageDecoder.createMessageId (see ``codec.ids``).

Segment files are named by their start offset, 20 digits zero-padded.

Pop journal (``<root>/pop/journal``, ``wharf.store.pop.journal``): an 8-byte file magic
``WPOPJNL1``, then records, each one a state change of a consumer group's pop state::

    offset size field                     (POP_RECORD_FIELDS name)
         0    4 LENGTH                    LENGTH        whole record: 52 + GROUPLEN + TOPICLEN
         4    4 CRC                       CRC           zlib.crc32 of bytes 8..LENGTH (unsigned)
         8    1 TYPE                      TYPE          1 POP, 2 ACK, 3 CHANGE, 4 DONE, 5 RESET
         9    1 GROUPLEN                  GROUP_LENGTH  1..255
        10    1 TOPICLEN                  TOPIC_LENGTH  1..249 (unsigned)
        11    1 RESERVED                  RESERVED      0
        12    4 QUEUEID                   QUEUE_ID
        16    8 QUEUEOFFSET               QUEUE_OFFSET  the message's ConsumeQueue offset
        24    8 COUNT                     COUNT         DONE: offsets [QUEUEOFFSET, +COUNT); else 1
        32    8 VISIBLEAT                 VISIBLE_AT    POP, CHANGE: ms since the epoch; else 0
        40    8 NONCE                     NONCE         POP, CHANGE: the new handle's; ACK: the
                                                        acked handle's; DONE, RESET: 0
        48    4 ATTEMPT                   ATTEMPT       POP: delivery attempt (1, 2, ...); else 0
        52    . GROUP (ascii), then TOPIC (ascii)

RESET forgets the state of (group, topic, queue) (a deleted topic or group): it starts over
empty (QUEUEOFFSET 0, the other fields 0). A record that does not parse whole (LENGTH out of range or past the end, CRC mismatch) ends the
valid data: recovery drops it and everything after it (a torn tail: never answered).

Kept log of a compacted queue (``<root>/compaction/<topic>/<queueId>/``,
``wharf.store.retention.kept_log``): generation ``N`` is two files, ``<N:020d>.log`` (the kept
records back to back, each exactly as the commit log stored it: the message record above,
QUEUEOFFSET intact, PHYSICALOFFSET its old place in the commit log) and ``<N:020d>.idx`` (one
28-byte entry per kept record, in queue-offset order: the dense offset index)::

    offset size field            (KEPT_ENTRY_FIELDS name)
         0    8 QUEUEOFFSET      QUEUE_OFFSET     the record's ConsumeQueue offset
         8    8 POSITION         POSITION         where it starts in <N>.log
        16    4 SIZE             SIZE             its TOTALSIZE
        20    8 STORETIMESTAMP   STORE_TIMESTAMP  ms (retention by time, tombstone age)

``CURRENT`` (52 bytes) names the live generation; a new one is swapped in by writing
``CURRENT.tmp``, fsync, rename over ``CURRENT``, fsync of the directory::

     0  8 MAGIC        MAGIC        b"WKEPTCU1"
     8  8 GENERATION   GENERATION   N (0: no generation files, nothing kept yet)
    16  8 BASE         BASE         the queue's log start offset as the kept log last saw it
    24  8 CLEANED_TO   CLEANED_TO   the kept log answers for queue offsets [BASE, CLEANED_TO)
    32  8 RECORDS      RECORDS      entries in <N>.idx (its size is RECORDS * 28)
    40  8 LOG_BYTES    LOG_BYTES    size of <N>.log
    48  4 CRC          CRC          zlib.crc32 of bytes 0..48

A CURRENT that does not parse or fails its CRC is refused (the queue is not served below its
consume queue's minimum until repaired): it was written whole and renamed, so a bad one is
damage, not a crash.
"""

from __future__ import annotations

import struct
from typing import NamedTuple


class Field(NamedTuple):
    """One fixed-size field of a layout: its byte offset, size and ``struct`` code."""

    name: str
    offset: int
    size: int
    code: str


def _fields(*named_codes: tuple[str, str]) -> tuple[Field, ...]:
    """Offsets and sizes follow from the codes (big-endian, no padding between fields)."""
    fields: list[Field] = []
    offset = 0
    for name, code in named_codes:
        size = struct.calcsize(">" + code)
        fields.append(Field(name, offset, size, code))
        offset += size
    return tuple(fields)


def struct_of(fields: tuple[Field, ...]) -> struct.Struct:
    """The big-endian ``struct.Struct`` of a field table (all its fields, in order)."""
    return struct.Struct(">" + "".join(field.code for field in fields))


# --- Magic codes -------------------------------------------------------------------------------
MESSAGE_MAGIC_CODE = 0xDAA320A7  # V1: one-byte TOPICLENGTH
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB  # V2: two-byte TOPICLENGTH (RocketMQ 5's, for long topics)
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

# --- sysFlag bits (MessageSysFlag) -------------------------------------------------------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC

# --- Limits --------------------------------------------------------------------------------------
MAX_TOPIC_LENGTH = 249  # Kafka's limit; longer than MAX_TOPIC_LENGTH_V1: a V2 record
MAX_TOPIC_LENGTH_V1 = 127  # TOPICLENGTH is a signed byte in V1 (RocketMQ's)
MAX_PROPERTIES_LENGTH = 32767  # PROPERTIESLENGTH is a signed short in RocketMQ

# --- CommitLog record header: the 15 fixed fields, TOTALSIZE..BODYLENGTH = 88 bytes ------------
RECORD_FIELDS = _fields(
    ("TOTAL_SIZE", "i"), ("MAGIC", "I"), ("BODY_CRC", "i"), ("QUEUE_ID", "i"), ("FLAG", "i"),
    ("QUEUE_OFFSET", "q"), ("PHYSICAL_OFFSET", "q"), ("SYS_FLAG", "i"),
    ("BORN_TIMESTAMP", "q"), ("BORN_HOST", "8s"), ("STORE_TIMESTAMP", "q"), ("STORE_HOST", "8s"),
    ("RECONSUME_TIMES", "i"), ("PREPARED_TRANSACTION_OFFSET", "q"), ("BODY_LENGTH", "i"),
)  # fmt: skip
RECORD_FIELD = {field.name: field for field in RECORD_FIELDS}
RECORD_HEADER = struct_of(RECORD_FIELDS)
RECORD_HEADER_SIZE = 88
# The fixed part of a record with an empty body, topic and properties (V1; V2's is one more).
RECORD_FIXED_SIZE = RECORD_HEADER_SIZE + 1 + 2
RECORD_FIXED_SIZE_V2 = RECORD_HEADER_SIZE + 2 + 2

# Field offsets, for readers that need one field only (a literal offset anywhere else is a bug).
OFFSET_TOTAL_SIZE = RECORD_FIELD["TOTAL_SIZE"].offset
OFFSET_MAGIC = RECORD_FIELD["MAGIC"].offset
OFFSET_BODY_CRC = RECORD_FIELD["BODY_CRC"].offset
OFFSET_QUEUE_ID = RECORD_FIELD["QUEUE_ID"].offset
OFFSET_FLAG = RECORD_FIELD["FLAG"].offset
OFFSET_QUEUE_OFFSET = RECORD_FIELD["QUEUE_OFFSET"].offset
OFFSET_PHYSICAL_OFFSET = RECORD_FIELD["PHYSICAL_OFFSET"].offset
OFFSET_SYS_FLAG = RECORD_FIELD["SYS_FLAG"].offset
OFFSET_BORN_TIMESTAMP = RECORD_FIELD["BORN_TIMESTAMP"].offset
OFFSET_BORN_HOST = RECORD_FIELD["BORN_HOST"].offset
OFFSET_STORE_TIMESTAMP = RECORD_FIELD["STORE_TIMESTAMP"].offset
OFFSET_STORE_HOST = RECORD_FIELD["STORE_HOST"].offset
OFFSET_RECONSUME_TIMES = RECORD_FIELD["RECONSUME_TIMES"].offset
OFFSET_PREPARED_TRANSACTION_OFFSET = RECORD_FIELD["PREPARED_TRANSACTION_OFFSET"].offset
OFFSET_BODY_LENGTH = RECORD_FIELD["BODY_LENGTH"].offset
# SYSFLAG is a big-endian int: its low byte (the compressed bit) is its last.
OFFSET_SYS_FLAG_LOW_BYTE = OFFSET_SYS_FLAG + RECORD_FIELD["SYS_FLAG"].size - 1


def topic_length_bytes(length: int) -> bytes:
    """TOPICLENGTH of a topic of ``length`` bytes as its record version writes it: one byte up
    to MAX_TOPIC_LENGTH_V1 (V1), two beyond (V2); ``record_magic`` gives the matching magic."""
    return (
        TOPIC_LENGTH.pack(length) if length <= MAX_TOPIC_LENGTH_V1 else TOPIC_LENGTH_V2.pack(length)
    )


def record_magic(topic_length: int) -> int:
    """MAGICCODE of a record whose topic is ``topic_length`` bytes (V1 up to 127, else V2)."""
    return MESSAGE_MAGIC_CODE if topic_length <= MAX_TOPIC_LENGTH_V1 else MESSAGE_MAGIC_CODE_V2


def partial_struct(names: tuple[str, ...]) -> struct.Struct:
    """A struct over the whole record header that unpacks only the fields ``names`` (in header
    order; the others are pad bytes), e.g. ``(TOTAL_SIZE, MAGIC, BODY_LENGTH)`` -> ``>iI76xi``:
    one unpack of what a reader needs is ~3x cheaper than the whole header's."""
    wanted = set(names)
    unknown = wanted - RECORD_FIELD.keys()
    if unknown:
        raise ValueError(f"not record header fields: {sorted(unknown)}")
    if [f.name for f in RECORD_FIELDS if f.name in wanted] != list(names):
        raise ValueError(f"fields {names} are not in header order")
    codes: list[str] = []
    pad = 0
    for field in RECORD_FIELDS:
        if field.name in wanted:
            if pad:
                codes.append(f"{pad}x")
                pad = 0
            codes.append(field.code)
        else:
            pad += field.size
    if pad:
        codes.append(f"{pad}x")
    return struct.Struct(">" + "".join(codes))


# TOTALSIZE i | MAGIC I: the end-of-segment blank marker (the rest of the tail is left as is).
BLANK_HEADER = struct_of(RECORD_FIELDS[:2])
TOPIC_LENGTH = struct.Struct(">B")
TOPIC_LENGTH_V2 = struct.Struct(">H")
PROPERTIES_LENGTH = struct.Struct(">h")
TOTAL_SIZE = struct.Struct(">i")
MAGIC = struct.Struct(">I")
STORE_TIMESTAMP = struct.Struct(">q")

# --- ConsumeQueue unit: commitLogOffset q | size i | tagsCode q  = 20 bytes ----------------------
CQ_UNIT_FIELDS = _fields(("COMMIT_LOG_OFFSET", "q"), ("SIZE", "i"), ("TAGS_CODE", "q"))
CQ_UNIT = struct_of(CQ_UNIT_FIELDS)
CQ_STORE_UNIT_SIZE = 20

# --- IndexFile ----------------------------------------------------------------------------------
INDEX_HEADER_FIELDS = _fields(
    ("BEGIN_TIMESTAMP", "q"), ("END_TIMESTAMP", "q"), ("BEGIN_PHY_OFFSET", "q"),
    ("END_PHY_OFFSET", "q"), ("HASH_SLOT_COUNT", "i"), ("INDEX_COUNT", "i"),
)  # fmt: skip
INDEX_HEADER = struct_of(INDEX_HEADER_FIELDS)
INDEX_HEADER_SIZE = 40
INDEX_SLOT = struct.Struct(">i")
INDEX_HASH_SLOT_SIZE = 4
INDEX_ENTRY_FIELDS = _fields(
    ("KEY_HASH", "i"), ("PHY_OFFSET", "q"), ("TIME_DIFF", "i"), ("PREV_INDEX", "i")
)
INDEX_ENTRY = struct_of(INDEX_ENTRY_FIELDS)
INDEX_ENTRY_SIZE = 20

# --- Checkpoint (7 longs of a 4 KiB file, see the diagram above) -------------------------------
CHECKPOINT = struct.Struct(">qqqqqqq")
CHECKPOINT_FILE_SIZE = 4096

# --- Offset message id: storeHost ip (4) | port i (4) | commitLogOffset q (8) -> 32 hex chars ----
OFFSET_MSG_ID = struct.Struct(">4siq")
OFFSET_MSG_ID_HEX_LENGTH = 32

# --- Pop journal (see the diagram above) -------------------------------------------------------
POP_JOURNAL_MAGIC = b"WPOPJNL1"
POP_RECORD_FIELDS = _fields(
    ("LENGTH", "i"), ("CRC", "I"), ("TYPE", "B"), ("GROUP_LENGTH", "B"), ("TOPIC_LENGTH", "B"),
    ("RESERVED", "B"), ("QUEUE_ID", "i"), ("QUEUE_OFFSET", "q"), ("COUNT", "q"),
    ("VISIBLE_AT", "q"), ("NONCE", "Q"), ("ATTEMPT", "i"),
)  # fmt: skip
POP_RECORD_HEADER = struct_of(POP_RECORD_FIELDS)
POP_RECORD_HEADER_SIZE = 52
POP_RECORD_CRC_START = 8  # the CRC covers the record from TYPE on
POP_RECORD_MAX_SIZE = POP_RECORD_HEADER_SIZE + 255 + MAX_TOPIC_LENGTH
POP_RECORD_POP = 1
POP_RECORD_ACK = 2
POP_RECORD_CHANGE = 3
POP_RECORD_DONE = 4
POP_RECORD_RESET = 5

# --- Kept log of a compacted queue (wharf.store.retention.kept_log) ------------------------------
KEPT_ENTRY_FIELDS = _fields(
    ("QUEUE_OFFSET", "q"), ("POSITION", "q"), ("SIZE", "i"), ("STORE_TIMESTAMP", "q")
)
KEPT_ENTRY = struct_of(KEPT_ENTRY_FIELDS)
KEPT_ENTRY_SIZE = 28
KEPT_CURRENT_MAGIC = b"WKEPTCU1"
KEPT_CURRENT_FIELDS = _fields(
    ("MAGIC", "8s"),
    ("GENERATION", "q"),
    ("BASE", "q"),
    ("CLEANED_TO", "q"),
    ("RECORDS", "q"),
    ("LOG_BYTES", "q"),
    ("CRC", "I"),
)
KEPT_CURRENT = struct_of(KEPT_CURRENT_FIELDS)
KEPT_CURRENT_SIZE = 52
KEPT_CURRENT_CRC_END = 48  # the CRC covers the fields before it


# --- Segment files -------------------------------------------------------------------------------
SEGMENT_NAME_DIGITS = 20


def segment_file_name(start_offset: int) -> str:
    """Commit log / ConsumeQueue segment name: the start offset, 20 digits zero-padded."""
    if start_offset < 0:
        raise ValueError(f"negative segment start offset {start_offset}")
    return f"{start_offset:020d}"


def parse_segment_file_name(name: str) -> int:
    """Inverse of ``segment_file_name``; ValueError for anything that is not 20 digits."""
    if len(name) != SEGMENT_NAME_DIGITS or not name.isdigit():
        raise ValueError(f"{name!r} is not a segment file name (20 digits)")
    return int(name)


assert RECORD_HEADER.format == ">iIiiiqqiq8sq8siqi"  # RocketMQ's MessageDecoder order
assert RECORD_HEADER.size == RECORD_HEADER_SIZE == sum(f.size for f in RECORD_FIELDS)
assert len(RECORD_FIELDS) == 15
assert BLANK_HEADER.size == END_FILE_MIN_BLANK_LENGTH
assert MAX_TOPIC_LENGTH_V1 < MAX_TOPIC_LENGTH <= 255  # the pop journal's TOPICLEN is one byte
assert RECORD_FIXED_SIZE + TOPIC_LENGTH_V2.size - TOPIC_LENGTH.size == RECORD_FIXED_SIZE_V2
assert CQ_UNIT.size == CQ_STORE_UNIT_SIZE
assert INDEX_HEADER.size == INDEX_HEADER_SIZE
assert INDEX_SLOT.size == INDEX_HASH_SLOT_SIZE
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE
assert CHECKPOINT.size == 56 <= CHECKPOINT_FILE_SIZE
assert OFFSET_MSG_ID.size * 2 == OFFSET_MSG_ID_HEX_LENGTH
assert POP_RECORD_HEADER.size == POP_RECORD_HEADER_SIZE == sum(f.size for f in POP_RECORD_FIELDS)
assert {f.name: f.offset for f in POP_RECORD_FIELDS}["TYPE"] == POP_RECORD_CRC_START
assert len(POP_JOURNAL_MAGIC) == 8
assert KEPT_ENTRY.size == KEPT_ENTRY_SIZE == sum(f.size for f in KEPT_ENTRY_FIELDS)
assert KEPT_CURRENT.size == KEPT_CURRENT_SIZE == KEPT_CURRENT_CRC_END + 4
assert len(KEPT_CURRENT_MAGIC) == 8
