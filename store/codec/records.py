"""Records of the CommitLog: encode a batch, check one (recovery), decode one or many (reads).
The layout is ``wharf.store.codec.layout``'s; this module is its sans-IO codec (bytes in,
values out), shared by the CommitLog, recovery, the read path and the Spark offline scanner.
No I/O, numpy-free.

- Encoding: ``encode_batch`` -> ``EncodedBatch``; ``encode_blank`` (end-of-segment marker).
- Checking: ``check_record`` -> a size > 0, or ``RECORD_END`` / ``RECORD_BLANK`` /
  ``RECORD_CORRUPT``; ``read_total_size``.
- Decoding: ``decode_record`` -> ``StoredMessage``; ``decode_records`` (many records of one
  buffer, the read path's batch form; a V2 record, a topic over 127 bytes, takes
  ``decode_record`` from its loop, as anything its V1 checks do not accept). ``wharf.store.codec.dispatch`` decodes what dispatch
  needs with the same helpers.
"""

from __future__ import annotations

import functools
import mmap
import struct
from collections.abc import Callable, Iterable, Sequence
from itertools import accumulate
from typing import NamedTuple, TypeAlias

from wharf.store.codec.hosts import born_host_bytes, decode_host, encode_host
from wharf.store.codec.layout import (
    BLANK_HEADER,
    BLANK_MAGIC_CODE,
    END_FILE_MIN_BLANK_LENGTH,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    TOTAL_SIZE,
    record_magic,
    topic_length_bytes,
)
from wharf.store.codec.properties import has_separator, string_to_properties, validate_topic
from wharf.store.errors import CorruptRecordError, InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage

try:  # zlib-ng's crc32 is the same CRC-32, ~3x faster on 1 KiB bodies (PCLMUL)
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - the stdlib one is correct, only slower
    from zlib import crc32 as _crc32

# Anything the decoders accept: bytes, or an mmap scanned in place (recovery).
ReadableBuffer: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

# PROPERTIESLENGTH for every legal length, precomputed: indexing beats packing per message.
_PROPERTIES_LENGTH_BYTES = tuple(n.to_bytes(2, "big") for n in range(MAX_PROPERTIES_LENGTH + 1))

# check_record results other than a positive record size.
RECORD_END = 0  # TOTALSIZE 0: zeros, no more data in this segment
RECORD_BLANK = -1  # end-of-segment blank marker: continue in the next segment
RECORD_CORRUPT = -2  # bad magic / size / CRC / torn record


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
    tail_topic, host_raw, fixed, magic = _batch_constants(messages, topic, queue_id, store_host)
    pack, crc32 = RECORD_HEADER.pack, _crc32
    host_bytes_of, props_len_bytes = born_host_bytes, _PROPERTIES_LENGTH_BYTES

    # Hot path (~2.5 us/msg for 1 KiB, GUIDE.md): one pack, one crc, properties encoded once
    # and validated by counting separators, five parts per record joined once per batch.
    parts: list[bytes] = []
    sizes: list[int] = []
    extend, add_size = parts.extend, sizes.append
    offset, queue_offset = start_offset, first_queue_offset
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
                raise _bad_unicode(exc) from None
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
            host_bytes = host_bytes_of(host)
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
                    host_raw,
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


def _batch_constants(
    messages: Sequence[MessageInput], topic: str, queue_id: int, store_host: str
) -> tuple[bytes, bytes, int, int]:
    """``encode_batch``'s checks of the batch as a whole and what every record of it shares:
    (the topic as the record's tail writes it, the store host's bytes, the fixed size, the
    magic: V1 for a topic of up to 127 bytes, else V2 with its two-byte TOPICLENGTH)."""
    if not messages:
        raise InvalidMessageError("a batch needs at least one message")
    if not 0 <= queue_id <= 0x7FFFFFFF:
        raise InvalidMessageError(f"queue id {queue_id} must be a non-negative int32")
    topic_bytes = validate_topic(topic)
    tail_topic = topic_length_bytes(len(topic_bytes)) + topic_bytes
    fixed = RECORD_FIXED_SIZE - 1 + len(tail_topic)
    return tail_topic, encode_host(store_host), fixed, record_magic(len(topic_bytes))


def _bad_unicode(exc: UnicodeEncodeError) -> InvalidMessageError:
    return InvalidMessageError(f"a property is not valid unicode text ({exc.reason})")


def _bad_properties(properties: dict[str, str], encoded_length: int) -> InvalidMessageError:
    for k, v in properties.items():
        if has_separator(str(k)) or has_separator(str(v)):
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
    if magic == MESSAGE_MAGIC_CODE:
        wide = 0
    elif magic == MESSAGE_MAGIC_CODE_V2:
        wide = 1  # a two-byte TOPICLENGTH
    else:
        return RECORD_CORRUPT
    if total < RECORD_FIXED_SIZE + wide + 1 or total > remaining:
        return RECORD_CORRUPT
    if expected_offset is not None and fields[6] != expected_offset:
        return RECORD_CORRUPT
    body_len = fields[14]
    if body_len <= 0 or RECORD_HEADER_SIZE + body_len + 3 + wide > total:
        return RECORD_CORRUPT
    end = pos + total
    topic_pos = pos + RECORD_HEADER_SIZE + body_len
    topic_len = buf[topic_pos] << 8 | buf[topic_pos + 1] if wide else buf[topic_pos]
    props_pos = topic_pos + 1 + wide + topic_len
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
    magic = fields[1]
    if magic == MESSAGE_MAGIC_CODE:
        wide = 0
    elif magic == MESSAGE_MAGIC_CODE_V2:
        wide = 1  # a two-byte TOPICLENGTH
    else:
        raise CorruptRecordError(pos, f"magic 0x{magic:08X} is not a message record")
    end = pos + fields[0]
    topic_pos = pos + RECORD_HEADER_SIZE + fields[14]
    if fields[14] < 0 or topic_pos + 3 + wide > end or end > len(buf):
        raise CorruptRecordError(pos, "field lengths do not add up to TOTALSIZE")
    topic_len = buf[topic_pos] << 8 | buf[topic_pos + 1] if wide else buf[topic_pos]
    topic_pos += wide
    props_pos = topic_pos + 1 + topic_len
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
    return string_to_properties(text)


def record_properties(buf: ReadableBuffer, pos: int = 0) -> dict[str, str]:
    """The properties of the message record at ``buf[pos:]`` and nothing else decoded (a
    broker-side property filter on raw records); CorruptRecordError as ``decode_record``."""
    _, _, start, end = _layout(buf, pos)
    return _decode_properties(buf, start, end)


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
