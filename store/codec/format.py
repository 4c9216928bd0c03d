"""Wharf's on-disk formats, defined once. Byte-compatible with Apache RocketMQ 4.x (big-endian).

This module holds every layout of the store -- CommitLog message record and blank (end-of-file)
marker, ConsumeQueue unit, IndexFile header/slot/entry, checkpoint, offset message id -- as
precompiled ``struct.Struct`` objects with byte diagrams here, sizes asserted at import, plus the
sans-IO codec (bytes in, values out) that the CommitLog, recovery, dispatch and the Spark offline
scanner all use. No I/O in this module.

CommitLog message record (v1, magic 0xDAA320A7)::

    offset size field
         0    4 TOTALSIZE           whole record, bytes
         4    4 MAGICCODE           0xDAA320A7 (message) / 0xCBD43194 (blank: end of segment)
         8    4 BODYCRC             zlib.crc32(body) & 0x7FFFFFFF (as RocketMQ's UtilAll.crc32)
        12    4 QUEUEID
        16    4 FLAG
        20    8 QUEUEOFFSET         logical offset in the ConsumeQueue
        28    8 PHYSICALOFFSET      offset of this record in the CommitLog
        36    4 SYSFLAG             0x1 compressed, 0x2 multi tags, 0x4/0x8/0xC transaction bits
        40    8 BORNTIMESTAMP       ms
        48    8 BORNHOST            ipv4 (4) + port (4)
        56    8 STORETIMESTAMP      ms
        64    8 STOREHOST           ipv4 (4) + port (4)
        72    4 RECONSUMETIMES
        76    8 PREPAREDTRANSACTIONOFFSET
        84    4 BODYLENGTH, then BODY
         .    1 TOPICLENGTH, then TOPIC (ascii, <= 127 bytes)
         .    2 PROPERTIESLENGTH, then PROPERTIES  "k\\x01v\\x02k\\x01v\\x02" (utf-8)

    TOTALSIZE = 88 + BODYLENGTH + 1 + TOPICLENGTH + 2 + PROPERTIESLENGTH  (checked on decode)

A record never spans segments: when it does not fit the rest of a segment the tail gets a blank
record (TOTALSIZE = bytes left, MAGICCODE = 0xCBD43194; at least 8 bytes) and the record starts
the next segment. Bytes after the last record of the last segment are zeros (preallocated file):
a TOTALSIZE of 0 means "no more data".

Names other modules import (stable):

- Layouts: ``RECORD_HEADER`` (88 bytes, TOTALSIZE..BODYLENGTH), ``BLANK_HEADER`` (8 bytes),
  ``TOPIC_LENGTH`` (1), ``PROPERTIES_LENGTH`` (2), ``CQ_UNIT`` (20), ``INDEX_HEADER`` (40),
  ``INDEX_SLOT`` (4), ``INDEX_ENTRY`` (20), ``CHECKPOINT`` (56 used of a 4 KiB file),
  ``OFFSET_MSG_ID`` (16 raw bytes / 32 hex chars).
- Encoding: ``encode_batch`` -> ``EncodedBatch``; ``encode_blank``; ``properties_to_string`` /
  ``string_to_properties``; ``encode_host`` / ``decode_host``; ``validate_topic``.
- Decoding: ``decode_record`` -> ``StoredMessage`` (``decode_records``: many records of one
  buffer, the read path's batch form); ``decode_dispatch`` -> ``DispatchRequest``;
  ``check_record`` -> a size > 0, or ``RECORD_END`` / ``RECORD_BLANK`` / ``RECORD_CORRUPT``;
  ``read_total_size``.
- Hashes and ids: ``java_string_hash`` (tags code), ``index_key_hash`` (IndexFile slot hash),
  ``create_offset_msg_id`` / ``decode_offset_msg_id``.
- Files: ``segment_file_name`` / ``parse_segment_file_name`` (20-digit start offsets),
  ``CHECKPOINT_FILE_SIZE``.
"""

from __future__ import annotations

import functools
import mmap
import re
import socket
import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import NamedTuple, TypeAlias

from wharf.store.errors import CorruptRecordError, InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage

try:  # zlib-ng's crc32 is the same CRC-32, ~3x faster on 1 KiB bodies (PCLMUL)
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - the stdlib one is correct, only slower
    from zlib import crc32 as _crc32

# Anything the decoders accept: bytes, or an mmap scanned in place (recovery).
ReadableBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

# --- Magic codes -------------------------------------------------------------------------------
MESSAGE_MAGIC_CODE = 0xDAA320A7
BLANK_MAGIC_CODE = 0xCBD43194
END_FILE_MIN_BLANK_LENGTH = 4 + 4

# --- sysFlag bits (MessageSysFlag) -------------------------------------------------------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC

# --- Property names (MessageConst) and separators ----------------------------------------------
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "  # several KEYS are joined by a space, as RocketMQ does

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_PRODUCER_GROUP = "PGROUP"

# --- Reserved topics ---------------------------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# --- Limits --------------------------------------------------------------------------------------
MAX_TOPIC_LENGTH = 127
MAX_PROPERTIES_LENGTH = 32767  # PROPERTIESLENGTH is a signed short in RocketMQ
TOPIC_PATTERN = re.compile(r"[%a-zA-Z0-9_-]{1,127}")

# --- CommitLog record --------------------------------------------------------------------------
# TOTALSIZE i | MAGIC I | BODYCRC i | QUEUEID i | FLAG i | QUEUEOFFSET q | PHYSICALOFFSET q |
# SYSFLAG i | BORNTIMESTAMP q | BORNHOST 8s | STORETIMESTAMP q | STOREHOST 8s |
# RECONSUMETIMES i | PREPAREDTRANSACTIONOFFSET q | BODYLENGTH i            = 88 bytes
RECORD_HEADER = struct.Struct(">iIiiiqqiq8sq8siqi")
RECORD_HEADER_SIZE = 88
# The fixed part of a record with an empty body, topic and properties.
RECORD_FIXED_SIZE = RECORD_HEADER_SIZE + 1 + 2
# TOTALSIZE i | MAGIC I: the end-of-segment blank marker (the rest of the tail is left as is).
BLANK_HEADER = struct.Struct(">iI")
TOPIC_LENGTH = struct.Struct(">B")
PROPERTIES_LENGTH = struct.Struct(">h")
TOTAL_SIZE = struct.Struct(">i")
# PROPERTIESLENGTH for every legal length, precomputed: indexing beats packing per message.
_PROPERTIES_LENGTH_BYTES = tuple(n.to_bytes(2, "big") for n in range(32768))
MAGIC = struct.Struct(">I")
# Field offsets used by readers that need one field only.
OFFSET_MAGIC = 4
OFFSET_BODY_CRC = 8
OFFSET_QUEUE_OFFSET = 20
OFFSET_PHYSICAL_OFFSET = 28
OFFSET_STORE_TIMESTAMP = 56
STORE_TIMESTAMP = struct.Struct(">q")

# check_record results other than a positive record size.
RECORD_END = 0  # TOTALSIZE 0: zeros, no more data in this segment
RECORD_BLANK = -1  # end-of-segment blank marker: continue in the next segment
RECORD_CORRUPT = -2  # bad magic / size / CRC / torn record

# --- ConsumeQueue unit: commitLogOffset q | size i | tagsCode q  = 20 bytes ----------------------
CQ_UNIT = struct.Struct(">qiq")
CQ_STORE_UNIT_SIZE = 20

# --- IndexFile ----------------------------------------------------------------------------------
# header: beginTimestamp q | endTimestamp q | beginPhyOffset q | endPhyOffset q |
#         hashSlotCount i | indexCount i                                     = 40 bytes
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_HEADER_SIZE = 40
# slot: index of the newest entry for this hash (0 = empty)                 = 4 bytes
INDEX_SLOT = struct.Struct(">i")
INDEX_HASH_SLOT_SIZE = 4
# entry: keyHash i | phyOffset q | timeDiff i (seconds since beginTimestamp) |
#        prevIndex i (previous entry in the slot's chain, 0 = none)          = 20 bytes
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_SIZE = 20

# --- Checkpoint (RocketMQ StoreCheckpoint, a 4 KiB file) ---------------------------------------
#     0  8 physicMsgTimestamp    store time of the last commit log record known flushed (ms)
#     8  8 logicsMsgTimestamp    store time of the last record whose ConsumeQueue unit is flushed
#    16  8 indexMsgTimestamp     store time of the last record whose index entries are flushed
#    24  8 masterFlushedOffset   RocketMQ 5 field, kept 0 (no replication in Wharf)
#    32  8 confirmPhyOffset      RocketMQ 5 field, kept 0
#    40  8 physicOffset          Wharf: commit log offset known flushed (all bytes below it)
#    48  8 logicsOffset          Wharf: commit log offset whose dispatch is flushed in the queues
# Offsets make abnormal recovery start exactly at the right segment (timestamps stay for
# RocketMQ tooling and for files written without the Wharf fields: those read as 0).
CHECKPOINT = struct.Struct(">qqqqqqq")
CHECKPOINT_FILE_SIZE = 4096

# --- Offset message id: storeHost ip (4) | port i (4) | commitLogOffset q (8) -> 32 hex chars ----
OFFSET_MSG_ID = struct.Struct(">4siq")
OFFSET_MSG_ID_HEX_LENGTH = 32

# --- Segment files -------------------------------------------------------------------------------
SEGMENT_NAME_DIGITS = 20

assert RECORD_HEADER.size == RECORD_HEADER_SIZE
assert BLANK_HEADER.size == END_FILE_MIN_BLANK_LENGTH
assert CQ_UNIT.size == CQ_STORE_UNIT_SIZE
assert INDEX_HEADER.size == INDEX_HEADER_SIZE
assert INDEX_SLOT.size == INDEX_HASH_SLOT_SIZE
assert INDEX_ENTRY.size == INDEX_ENTRY_SIZE
assert CHECKPOINT.size == 56 <= CHECKPOINT_FILE_SIZE
assert OFFSET_MSG_ID.size * 2 == OFFSET_MSG_ID_HEX_LENGTH


# ================================================================================================
# Hosts, ids, file names
# ================================================================================================


@functools.lru_cache(maxsize=4096)
def encode_host(host: str) -> bytes:
    """``"ipv4:port"`` -> 8 bytes (ip 4 + port as a big-endian int 4). InvalidMessageError if not."""
    ip, sep, port_text = host.rpartition(":")
    try:
        if not sep:
            raise ValueError("missing ':port'")
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ValueError("port out of range")
        if ip.count(".") != 3:
            raise ValueError("not a dotted ipv4 address")
        return socket.inet_aton(ip) + port.to_bytes(4, "big")
    except (OSError, ValueError) as exc:
        raise InvalidMessageError(f"host {host!r} is not 'ipv4:port' ({exc})") from None


@functools.lru_cache(maxsize=4096)
def _born_host_bytes(host: str) -> bytes:
    """Born hosts come from peer addresses (maybe ipv6): the v1 record only holds ipv4, so
    anything else is stored as 0.0.0.0 with the port when there is one, rather than refusing
    the message."""
    try:
        return encode_host(host)
    except InvalidMessageError:
        _, _, port_text = host.rpartition(":")
        port = int(port_text) if port_text.isdigit() and int(port_text) <= 65535 else 0
        return b"\0\0\0\0" + port.to_bytes(4, "big")


@functools.lru_cache(maxsize=4096)
def decode_host(raw: bytes) -> str:
    """8 bytes -> ``"ipv4:port"``."""
    return f"{socket.inet_ntoa(raw[:4])}:{int.from_bytes(raw[4:8], 'big')}"


def create_offset_msg_id(store_host: str, offset: int) -> str:
    """The broker's offset message id: 32 upper-case hex chars = ip(4) + port(4) + offset(8)."""
    raw = encode_host(store_host)
    return (raw + offset.to_bytes(8, "big", signed=True)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int]:
    """Inverse of ``create_offset_msg_id`` -> (``"ip:port"``, commit log offset)."""
    if len(msg_id) != OFFSET_MSG_ID_HEX_LENGTH:
        raise InvalidMessageError(
            f"offset message id must be {OFFSET_MSG_ID_HEX_LENGTH} hex chars, got {len(msg_id)}"
        )
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise InvalidMessageError(f"offset message id {msg_id!r} is not hex") from None
    ip, port, offset = OFFSET_MSG_ID.unpack(raw)
    if offset < 0 or port < 0:
        raise InvalidMessageError(f"offset message id {msg_id!r} holds a negative offset/port")
    return f"{socket.inet_ntoa(ip)}:{port}", offset


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


# ================================================================================================
# Hashes
# ================================================================================================


@functools.lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int: the
    ConsumeQueue tagsCode of a tag."""
    units = s.encode("ascii") if s.isascii() else _utf16_units(s)
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _utf16_units(s: str) -> list[int]:
    raw = s.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(key.hashCode())``, 0 for Integer.MIN_VALUE (as RocketMQ's
    ``IndexFile.indexKeyHashMethod``)."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)


# ================================================================================================
# Properties
# ================================================================================================


def properties_to_string(properties: dict[str, str]) -> str:
    """``{"k": "v"}`` -> ``"k\\x01v\\x02"`` (every pair terminated, as RocketMQ writes them)."""
    if not properties:
        return ""
    return "\x02".join(map("\x01".join, properties.items())) + "\x02"


def string_to_properties(text: str) -> dict[str, str]:
    """Inverse of ``properties_to_string``; tolerant of a missing final separator."""
    result: dict[str, str] = {}
    for pair in text.split("\x02"):
        if pair:
            name, _, value = pair.partition("\x01")
            result[name] = value
    return result


def _has_separator(text: str) -> bool:
    return "\x01" in text or "\x02" in text


def validate_topic(topic: str) -> bytes:
    """Return the topic's ascii bytes or raise InvalidMessageError."""
    if not isinstance(topic, str):
        raise InvalidMessageError(f"topic must be a string, got {type(topic).__name__}")
    return _topic_bytes(topic)


@functools.lru_cache(maxsize=4096)  # topics repeat; the regex costs ~0.5 us per batch
def _topic_bytes(topic: str) -> bytes:
    if TOPIC_PATTERN.fullmatch(topic) is None:
        raise InvalidMessageError(
            f"topic {topic!r} is invalid: use 1-{MAX_TOPIC_LENGTH} characters of [%a-zA-Z0-9_-]"
        )
    return topic.encode("ascii")


# ================================================================================================
# Encoding
# ================================================================================================


class EncodedBatch(NamedTuple):
    """A batch encoded for one commit log position: ``data`` goes to ``offsets[0]`` verbatim."""

    data: bytes
    offsets: list[int]  # physical offset of each record
    sizes: list[int]  # size of each record


def encode_batch(
    topic: str,
    queue_id: int,
    first_queue_offset: int,
    messages: Sequence[MessageInput],
    start_offset: int,
    store_timestamp: int,
    store_host: str,
    max_message_size: int,
) -> EncodedBatch:
    """Encode ``messages`` as consecutive records starting at commit log ``start_offset`` with
    queue offsets ``first_queue_offset, +1, ...``. Validates everything first-to-last before
    returning; raises InvalidMessageError (nothing is returned, so nothing can be written)."""
    if not messages:
        raise InvalidMessageError("a batch needs at least one message")
    if not 0 <= queue_id <= 0x7FFFFFFF:
        raise InvalidMessageError(f"queue id {queue_id} must be a non-negative int32")
    topic_bytes = validate_topic(topic)
    tail_topic = TOPIC_LENGTH.pack(len(topic_bytes)) + topic_bytes
    store_host_bytes = encode_host(store_host)
    fixed = RECORD_FIXED_SIZE + len(topic_bytes)

    pack = RECORD_HEADER.pack
    crc32 = _crc32
    born_host_bytes = _born_host_bytes
    props_len_bytes = _PROPERTIES_LENGTH_BYTES
    magic = MESSAGE_MAGIC_CODE

    # Hot path (~2.5 us/msg for 1 KiB, GUIDE.md): one pack, one crc, properties encoded once
    # and validated by counting separators, five parts per record joined once per batch.
    parts: list[bytes] = []
    extend = parts.extend
    sizes: list[int] = []
    add_size = sizes.append
    offset = start_offset
    queue_offset = first_queue_offset
    last_host: str | None = None
    host_bytes = b""
    for msg in messages:
        body = msg.body
        body_len = len(body)
        if not 0 < body_len <= max_message_size:
            raise _bad_body(body_len, max_message_size, queue_offset - first_queue_offset)
        props = msg.properties
        if props:
            try:
                props_bytes = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()
            except UnicodeEncodeError as exc:
                raise InvalidMessageError(
                    f"a property is not valid unicode text ({exc.reason})"
                ) from None
            n = len(props)
            if (
                props_bytes.count(1) != n
                or props_bytes.count(2) != n
                or len(props_bytes) > MAX_PROPERTIES_LENGTH
            ):
                raise _bad_properties(props, len(props_bytes))
        else:
            props_bytes = b""
        total = fixed + body_len + len(props_bytes)
        host = msg.born_host
        if host is not last_host:  # a batch usually has one born host
            last_host = host
            host_bytes = born_host_bytes(host)
        extend(
            (
                pack(
                    total,
                    magic,
                    crc32(body) & 0x7FFFFFFF,
                    queue_id,
                    msg.flag,
                    queue_offset,
                    offset,
                    msg.sys_flag,
                    msg.born_timestamp or store_timestamp,
                    host_bytes,
                    store_timestamp,
                    store_host_bytes,
                    msg.reconsume_times,
                    msg.prepared_transaction_offset,
                    body_len,
                ),
                body,
                tail_topic,
                props_len_bytes[len(props_bytes)],
                props_bytes,
            )
        )
        add_size(total)
        offset += total
        queue_offset += 1
    offsets = list(accumulate(sizes[:-1], initial=start_offset))
    return EncodedBatch(b"".join(parts), offsets, sizes)


def _bad_properties(properties: dict[str, str], encoded_length: int) -> InvalidMessageError:
    for k, v in properties.items():
        if _has_separator(str(k)) or _has_separator(str(v)):
            return InvalidMessageError(
                f"property {k!r} contains a reserved separator character (\\x01 or \\x02) "
                "in its name or value"
            )
    return InvalidMessageError(
        f"properties encode to {encoded_length} bytes; the limit is {MAX_PROPERTIES_LENGTH} "
        "(shorten keys/tags/user properties)"
    )


def _bad_body(body_len: int, max_message_size: int, index: int) -> InvalidMessageError:
    if body_len == 0:
        return InvalidMessageError(f"message #{index} of the batch has an empty body")
    return InvalidMessageError(
        f"message #{index} body is {body_len} bytes; the limit (maxMessageSize) is "
        f"{max_message_size} bytes"
    )


def encode_blank(length: int) -> bytes:
    """The end-of-segment marker for a tail of ``length`` bytes (only its 8-byte header; the
    caller leaves the rest of the tail as is)."""
    if length < END_FILE_MIN_BLANK_LENGTH:
        raise ValueError(f"blank tail of {length} bytes is below {END_FILE_MIN_BLANK_LENGTH}")
    return BLANK_HEADER.pack(length, BLANK_MAGIC_CODE)


# ================================================================================================
# Decoding
# ================================================================================================


class DispatchRequest:
    """What the ReputService needs from one record (no body copy)."""

    __slots__ = (
        "born_timestamp",
        "commit_log_offset",
        "keys",
        "prepared_transaction_offset",
        "properties",
        "queue_id",
        "queue_offset",
        "size",
        "store_timestamp",
        "sys_flag",
        "tags",
        "topic",
        "uniq_key",
    )

    def __init__(
        self,
        commit_log_offset: int,
        size: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        store_timestamp: int,
        sys_flag: int,
        tags: str,
        keys: list[str],
        uniq_key: str,
        properties: dict[str, str],
        prepared_transaction_offset: int,
        born_timestamp: int,
    ) -> None:
        self.commit_log_offset = commit_log_offset
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.sys_flag = sys_flag
        self.tags = tags
        self.keys = keys
        self.uniq_key = uniq_key
        self.properties = properties
        self.prepared_transaction_offset = prepared_transaction_offset
        self.born_timestamp = born_timestamp

    def __repr__(self) -> str:
        return (
            f"DispatchRequest(offset={self.commit_log_offset}, size={self.size}, "
            f"topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset})"
        )


def read_total_size(buf: ReadableBuffer, pos: int) -> int:
    """TOTALSIZE of the record at ``pos`` (0 past the written data)."""
    return TOTAL_SIZE.unpack_from(buf, pos)[0]


def check_record(
    buf: ReadableBuffer,
    pos: int,
    check_crc: bool = True,
    expected_offset: int | None = None,
) -> int:
    """Validate the record at ``buf[pos:]`` for recovery. Returns its size (> 0), or
    ``RECORD_END`` (zeros or fewer than 4 bytes left), ``RECORD_BLANK`` (end-of-segment
    marker) or ``RECORD_CORRUPT`` (bad magic, impossible sizes, torn, CRC mismatch, or a
    PHYSICALOFFSET other than ``expected_offset`` when that is given).

    What it cannot see (RocketMQ's format: the CRC covers the body only): a flipped bit in
    QUEUEID, FLAG, QUEUEOFFSET, SYSFLAG, timestamps, hosts, RECONSUMETIMES,
    PREPAREDTRANSACTIONOFFSET, or inside the topic/properties text. Zeroed (torn) tails are
    caught."""
    remaining = len(buf) - pos
    if remaining < RECORD_HEADER_SIZE:  # only a blank marker or the end fits here
        if remaining < 4 or TOTAL_SIZE.unpack_from(buf, pos)[0] == 0:
            return RECORD_END
        if remaining >= 8 and BLANK_HEADER.unpack_from(buf, pos) == (remaining, BLANK_MAGIC_CODE):
            return RECORD_BLANK
        return RECORD_CORRUPT
    # One unpack for everything (recovery walks millions of records: ~2 us each).
    fields = _unpack_header(buf, pos)
    total = fields[0]
    if total == 0:
        return RECORD_END
    magic = fields[1]
    if magic == BLANK_MAGIC_CODE:
        return RECORD_BLANK if END_FILE_MIN_BLANK_LENGTH <= total <= remaining else RECORD_CORRUPT
    if magic != MESSAGE_MAGIC_CODE or total < RECORD_FIXED_SIZE + 1 or total > remaining:
        return RECORD_CORRUPT
    if expected_offset is not None and fields[6] != expected_offset:
        return RECORD_CORRUPT
    body_len = fields[14]
    if body_len <= 0 or RECORD_HEADER_SIZE + body_len + 3 > total:
        return RECORD_CORRUPT
    end = pos + total
    topic_pos = pos + RECORD_HEADER_SIZE + body_len
    topic_len = buf[topic_pos]
    props_pos = topic_pos + 1 + topic_len
    if props_pos + 2 > end:
        return RECORD_CORRUPT
    props_len = buf[props_pos] << 8 | buf[props_pos + 1]
    if props_len > MAX_PROPERTIES_LENGTH or props_pos + 2 + props_len != end:
        return RECORD_CORRUPT
    # BODYCRC covers the body only. A torn write that zeroed the record's last bytes is still
    # caught: topics never hold \x00 and properties always end with the \x02 separator.
    if topic_len == 0 or buf[props_pos - 1] == 0 or (props_len and buf[end - 1] != 2):
        return RECORD_CORRUPT
    if check_crc:
        body_pos = pos + RECORD_HEADER_SIZE
        if _crc32(buf[body_pos : body_pos + body_len]) & 0x7FFFFFFF != fields[2]:
            return RECORD_CORRUPT
    return total


def _layout(buf: ReadableBuffer, pos: int) -> tuple[tuple, str, int, int]:
    """Header fields, topic, properties start and end; CorruptRecordError when the sizes do
    not add up (decoding never reads past the record nor the buffer)."""
    try:
        fields = _unpack_header(buf, pos)
    except struct.error as exc:
        raise CorruptRecordError(pos, f"truncated record header ({exc})") from None
    if fields[1] != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(pos, f"magic 0x{fields[1]:08X} is not a message record")
    end = pos + fields[0]
    topic_pos = pos + RECORD_HEADER_SIZE + fields[14]
    if fields[14] < 0 or topic_pos + 3 > end or end > len(buf):
        raise CorruptRecordError(pos, "field lengths do not add up to TOTALSIZE")
    props_pos = topic_pos + 1 + buf[topic_pos]
    if props_pos + 2 > end or props_pos + 2 + (buf[props_pos] << 8 | buf[props_pos + 1]) != end:
        raise CorruptRecordError(pos, "field lengths do not add up to TOTALSIZE")
    raw_topic = buf[topic_pos + 1 : props_pos]
    try:
        topic = _decode_topic(raw_topic if type(raw_topic) is bytes else bytes(raw_topic))
    except UnicodeDecodeError:
        raise CorruptRecordError(pos, "topic is not ascii") from None
    return fields, topic, props_pos + 2, end


_unpack_header = RECORD_HEADER.unpack_from


@functools.lru_cache(maxsize=4096)
def _decode_topic(raw: bytes) -> str:
    return raw.decode("ascii")


def _decode_properties(buf: ReadableBuffer, start: int, end: int) -> dict[str, str]:
    if start == end:
        return {}
    raw = buf[start:end]
    text = raw.decode("utf-8", "replace") if type(raw) is bytes else str(raw, "utf-8", "replace")
    result: dict[str, str] = {}
    for pair in text.split("\x02"):
        if pair:
            name, _, value = pair.partition("\x01")
            result[name] = value
    return result


def decode_record(
    buf: ReadableBuffer, pos: int = 0, base_offset: int | None = None
) -> StoredMessage:
    """Decode the message record at ``buf[pos:]`` into a StoredMessage (bytes copied out, so
    it is safe on an mmap). ``commit_log_offset`` is the PHYSICALOFFSET field unless
    ``base_offset`` (the commit log offset of ``buf[0]``) is given. CorruptRecordError if the
    record is not a well-formed message (CRC is not checked here: see ``check_record``)."""
    fields, topic, props_pos, end = _layout(buf, pos)
    body_pos = pos + RECORD_HEADER_SIZE
    body = buf[body_pos : body_pos + fields[14]]
    return StoredMessage(
        topic,
        fields[3],
        fields[5],
        fields[6] if base_offset is None else base_offset + pos,
        fields[0],
        body if type(body) is bytes else bytes(body),
        _decode_properties(buf, props_pos, end),
        fields[4],
        fields[7],
        fields[2],
        fields[8],
        decode_host(fields[9]),
        fields[10],
        decode_host(fields[11]),
        fields[12],
        fields[13],
    )


# Small caches for the batch decoder: topics and hosts repeat across records.
_TOPICS: dict[bytes, str] = {}
_HOSTS: dict[bytes, str] = {}
_DECODE_CACHE_MAX = 4096


def decode_records(
    buf: ReadableBuffer, positions: Iterable[int], base_offset: int
) -> list[StoredMessage]:
    """``decode_record`` for many records of one buffer (the read path's batch form; same
    result and same CorruptRecordError): one header unpack per record, the lengths checked
    with plain arithmetic, topics and hosts from small dicts, properties parsed straight from
    their slice. ``base_offset`` is the commit log offset of ``buf[0]``. Any record the quick
    checks do not accept goes through ``decode_record`` (which decodes or raises)."""
    if not isinstance(buf, bytes | mmap.mmap):
        buf = bytes(buf)  # slices of these would be unhashable views: cache keys need bytes
    unpack = _unpack_header
    new_message = StoredMessage
    topics, hosts = _TOPICS, _HOSTS
    size = len(buf)
    messages: list[StoredMessage] = []
    append = messages.append
    for pos in positions:
        try:
            (total, magic, crc, queue_id, flag, queue_offset, _, sys_flag, born_ts, born_host,
             store_ts, store_host, reconsume, prepared, body_len) = unpack(buf, pos)  # fmt: skip
        except struct.error:
            append(decode_record(buf, pos, base_offset))  # raises the precise error
            continue
        body_end = pos + RECORD_HEADER_SIZE + body_len
        end = pos + total
        if magic != MESSAGE_MAGIC_CODE or body_len < 0 or end > size or body_end + 3 > end:
            append(decode_record(buf, pos, base_offset))
            continue
        props_pos = body_end + 3 + buf[body_end]
        if props_pos > end or props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) != end:
            append(decode_record(buf, pos, base_offset))
            continue
        raw_topic = buf[body_end + 1 : props_pos - 2]
        topic = topics.get(raw_topic)  # type: ignore[call-overload]
        if topic is None:
            topic = _cached(topics, bytes(raw_topic), pos, _topic_text)
        born = hosts.get(born_host)
        if born is None:
            born = _cached(hosts, born_host, pos, decode_host)
        stored = hosts.get(store_host)
        if stored is None:
            stored = _cached(hosts, store_host, pos, decode_host)
        properties: dict[str, str] = {}
        if props_pos < end:  # string_to_properties, inlined: this is half of a decode
            for pair in str(buf[props_pos:end], "utf-8", "replace").split("\x02"):
                if pair:
                    name, _, value = pair.partition("\x01")
                    properties[name] = value
        append(
            new_message(
                topic,
                queue_id,
                queue_offset,
                base_offset + pos,
                total,
                buf[pos + RECORD_HEADER_SIZE : body_end],
                properties,
                flag,
                sys_flag,
                crc,
                born_ts,
                born,
                store_ts,
                stored,
                reconsume,
                prepared,
            )
        )
    return messages


def _topic_text(raw: bytes) -> str:
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("topic is not ascii") from None


def _cached(cache: dict[bytes, str], raw: bytes, pos: int, decode: Callable[[bytes], str]) -> str:
    try:
        text = decode(raw)
    except ValueError as exc:
        raise CorruptRecordError(pos, str(exc)) from None
    if len(cache) >= _DECODE_CACHE_MAX:
        cache.clear()
    cache[raw] = text
    return text


def decode_dispatches(
    buf: ReadableBuffer, positions: Iterable[int], base_offset: int
) -> list[DispatchRequest]:
    """``decode_dispatch`` for many records of one buffer (the ReputService's batch form; same
    result and same CorruptRecordError), in one loop as ``decode_records``: one header unpack,
    the lengths checked with plain arithmetic, the topic from a dict, the properties parsed
    inline. Any record the quick checks do not accept goes through ``decode_dispatch``."""
    if not isinstance(buf, bytes | mmap.mmap):
        buf = bytes(buf)  # slices of these would be unhashable views: cache keys need bytes
    unpack = _unpack_header
    new_request = DispatchRequest
    topics = _TOPICS
    size = len(buf)
    requests: list[DispatchRequest] = []
    append = requests.append
    for pos in positions:
        try:
            (total, magic, _, queue_id, _, queue_offset, _, sys_flag, born_ts, _, store_ts, _, _,
             prepared, body_len) = unpack(buf, pos)  # fmt: skip
        except struct.error:
            append(decode_dispatch(buf, pos, base_offset))  # raises the precise error
            continue
        body_end = pos + RECORD_HEADER_SIZE + body_len
        end = pos + total
        if magic != MESSAGE_MAGIC_CODE or body_len < 0 or end > size or body_end + 3 > end:
            append(decode_dispatch(buf, pos, base_offset))
            continue
        props_pos = body_end + 3 + buf[body_end]
        if props_pos > end or props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) != end:
            append(decode_dispatch(buf, pos, base_offset))
            continue
        raw_topic = buf[body_end + 1 : props_pos - 2]
        topic = topics.get(raw_topic)  # type: ignore[call-overload]
        if topic is None:
            topic = _cached(topics, bytes(raw_topic), pos, _topic_text)
        properties: dict[str, str] = {}
        if props_pos < end:
            for pair in str(buf[props_pos:end], "utf-8", "replace").split("\x02"):
                if pair:
                    name, _, value = pair.partition("\x01")
                    properties[name] = value
        get = properties.get
        keys_text = get(PROPERTY_KEYS)
        if keys_text:
            keys = keys_text.split(KEY_SEPARATOR)
            if "" in keys:  # doubled or edge separators
                keys = [k for k in keys if k]
        else:
            keys = []
        append(
            new_request(
                base_offset + pos,
                total,
                topic,
                queue_id,
                queue_offset,
                store_ts,
                sys_flag,
                get(PROPERTY_TAGS, ""),
                keys,
                get(PROPERTY_UNIQ_KEY, ""),
                properties,
                prepared,
                born_ts,
            )
        )
    return requests


def decode_dispatch(
    buf: ReadableBuffer, pos: int = 0, base_offset: int | None = None
) -> DispatchRequest:
    """Decode what dispatch needs from the record at ``buf[pos:]`` (no body copy)."""
    fields, topic, props_pos, end = _layout(buf, pos)
    props = _decode_properties(buf, props_pos, end)
    get = props.get
    keys_text = get(PROPERTY_KEYS)
    if keys_text:
        keys = keys_text.split(KEY_SEPARATOR)
        if "" in keys:  # doubled or edge separators
            keys = [k for k in keys if k]
    else:
        keys = []
    return DispatchRequest(
        fields[6] if base_offset is None else base_offset + pos,
        fields[0],
        topic,
        fields[3],
        fields[5],
        fields[10],
        fields[7],
        get(PROPERTY_TAGS, ""),
        keys,
        get(PROPERTY_UNIQ_KEY, ""),
        props,
        fields[13],
        fields[8],
    )
