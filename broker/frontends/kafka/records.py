"""Kafka record batches v2 ("magic 2"), sans-IO: decode and validate what producers send,
encode what Fetch answers.

Layout (61-byte header, then the records section, compressed as a whole when the codec bits
say so): baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8 = 2, crc u32,
attributes i16 (bits 0-2 codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd; bit 3 timestamp
type; bit 4 transactional; bit 5 control), lastOffsetDelta i32, baseTimestamp i64,
maxTimestamp i64, producerId i64, producerEpoch i16, baseSequence i32, recordCount i32.
CRC-32C (Castagnoli, the ``crc32c`` wheel) covers attributes to the end; baseOffset and
partitionLeaderEpoch are outside it. A record: varint length, attributes i8, varlong
timestampDelta, varint offsetDelta, varint key length + key (-1 null), varint value length +
value (-1 null), varint header count, each header a varint-length UTF-8 key and a
varint-length value (-1 null).

Magic 0 and 1 (message sets of Kafka < 0.11) are refused with UNSUPPORTED_FOR_MESSAGE_FORMAT:
no client that speaks Produce >= 3 sends them. Snappy comes raw (librdkafka) or in xerial
framing (the Java client); both are read. Decompressed sizes are capped (``max_size``): gzip
and snappy before inflating, lz4 and zstd after (cramjam has no bound for them).

A record's key, value and headers become a stored message in the store's codec
(``wharf.store.codec.kafka_records``, which owns ``Header``); this wire codec stays here: the
compiled converter (store/fast/_kafka_convert.c) parses a records section itself.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import cramjam
import crc32c
from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.wire import DecodeError
from wharf.store.codec.kafka_records import Header

__all__ = ["HEADER_SIZE", "Batch", "Record", "decode_batches", "encode_batch", "iter_batches"]

HEADER_SIZE = 61
CODEC_MASK = 0x07
TIMESTAMP_TYPE = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL = b"\x82SNAPPY\x00"
_HEAD = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes, in order
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class Record:
    offset_delta: int
    timestamp: int  # ms (base timestamp + delta)
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass(slots=True)
class Batch:
    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]
    count: int = 0  # the header's recordCount (= len(records) once decoded)
    # the uncompressed records section, kept by decode_batches(lazy=True) until decode_records
    section: bytes | memoryview | None = None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def last_sequence(self) -> int:
        """The sequence of the batch's last record (sequences wrap at 2**31)."""
        return (self.base_sequence + self.count - 1) % (1 << 31)

    def decode_records(self) -> None:
        """Decode the records section a lazy ``decode_batches`` kept (raising what it would
        have raised)."""
        if self.section is not None:
            self.records = _decode_records(self.section, self.count, self.base_timestamp)
            self.section = None


def _corrupt(message: str) -> KafkaError:
    return KafkaError(Code.CORRUPT_MESSAGE, message)


def decode_batches(
    data: bytes | memoryview, max_size: int = 64 << 20, *, lazy: bool = False
) -> list[Batch]:
    """Every batch of a Produce partition's ``records``, validated (CRC, magic, counts,
    lengths); raises ``KafkaError`` (CORRUPT_MESSAGE, UNSUPPORTED_FOR_MESSAGE_FORMAT,
    UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD) naming what is wrong. ``lazy``: as
    ``iter_batches``."""
    return list(iter_batches(data, max_size, lazy=lazy))


def iter_batches(
    data: bytes | memoryview, max_size: int = 64 << 20, *, lazy: bool = False
) -> Iterator[Batch]:
    """``decode_batches`` one batch at a time (a batch's errors are raised when it is
    reached). ``lazy``: its records are not decoded, the batch keeps its (decompressed)
    records section for the compiled converter (fast.py) or ``Batch.decode_records``: done
    before the next batch is read, the errors come in ``decode_batches``' order."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < 17:
            raise _corrupt(f"{end - pos} bytes left: too short for a batch header")
        (length,) = _I32.unpack_from(view, pos + 8)
        magic = view[pos + 16]
        if magic in (0, 1):
            raise KafkaError(
                Code.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"message format v{magic} (magic {magic}) is not supported: send record "
                "batches v2 (Kafka >= 0.11 clients)",
            )
        if magic != 2:
            raise _corrupt(f"unknown magic {magic}")
        if length < HEADER_SIZE - 12 or pos + 12 + length > end:
            raise _corrupt(f"batch length {length} does not fit the {end - pos} bytes left")
        yield _decode_one(view[pos : pos + 12 + length], max_size, lazy)
        pos += 12 + length


def _decode_one(view: memoryview, max_size: int, lazy: bool = False) -> Batch:
    (
        base_offset,
        _length,
        _epoch,
        _magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) = _HEAD.unpack_from(view, 0)
    if crc32c.crc32c(view[21:]) != crc:
        raise _corrupt("record batch CRC-32C does not match")
    if count < 0 or count > len(view):
        raise _corrupt(f"record count {count}")
    codec = attributes & CODEC_MASK
    section: bytes | memoryview = view[HEADER_SIZE:]
    if codec:
        section = _decompress(codec, bytes(section), max_size)
    records = [] if lazy else _decode_records(section, count, base_timestamp)
    return Batch(
        base_offset,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records,
        count,
        section if lazy else None,
    )


def _decompress(codec: int, data: bytes, max_size: int) -> bytes:
    try:
        if codec == 1:
            inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header, auto-detected
            out = inflater.decompress(data, max_size + 1)
            if len(out) > max_size:
                raise KafkaError(Code.RECORD_LIST_TOO_LARGE, f"gzip inflates beyond {max_size}")
            return out
        if codec == 2:
            return _snappy(data, max_size)
        if codec == 3:
            out = bytes(cramjam.lz4.decompress(data))
        elif codec == 4:
            out = bytes(cramjam.zstd.decompress(data))
        else:
            raise KafkaError(Code.UNSUPPORTED_COMPRESSION_TYPE, f"compression codec {codec}")
    except KafkaError:
        raise
    except Exception as exc:  # cramjam / zlib errors: a body that does not inflate
        raise _corrupt(f"{CODECS.get(codec, codec)} records do not decompress: {exc}") from None
    if len(out) > max_size:
        raise KafkaError(Code.RECORD_LIST_TOO_LARGE, f"records inflate beyond {max_size}")
    return out


def _snappy(data: bytes, max_size: int) -> bytes:
    if not data.startswith(_XERIAL):
        if cramjam.snappy.decompress_raw_len(data) > max_size:
            raise KafkaError(Code.RECORD_LIST_TOO_LARGE, f"snappy inflates beyond {max_size}")
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic (8), version (4), compatible version (4)
    while pos < len(data):
        if pos + 4 > len(data):
            raise _corrupt("xerial snappy block header is truncated")
        (size,) = _I32.unpack_from(data, pos)
        block = data[pos + 4 : pos + 4 + size]
        if size < 0 or len(block) != size:
            raise _corrupt("xerial snappy block is truncated")
        if len(out) + cramjam.snappy.decompress_raw_len(block) > max_size:
            raise KafkaError(Code.RECORD_LIST_TOO_LARGE, f"snappy inflates beyond {max_size}")
        out += bytes(cramjam.snappy.decompress_raw(block))
        pos += 4 + size
    return bytes(out)


def _vint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos``: (value, position after it). Inlined byte loop: the
    records section is the hot path of Produce (~6 of these per record)."""
    byte = buf[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    result, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = buf[pos]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos + 1
        shift += 7
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")


def _decode_records(data: bytes | memoryview, count: int, base_timestamp: int) -> list[Record]:
    buf = bytes(data)
    end = len(buf)
    pos = 0
    records: list[Record] = []
    vint = _vint
    # One-byte varints (values -64..63: attributes' neighbours, small deltas, null and short
    # keys, header counts) decoded inline: a call per field was half of this loop's time.
    try:
        for _ in range(count):
            length, pos = vint(buf, pos)
            stop = pos + length
            if length < 1 or stop > end:
                raise _corrupt(f"record length {length} with {end - pos} bytes left")
            byte = buf[pos + 1]  # (after the unused attributes byte)
            if byte < 0x80:
                delta, pos = (byte >> 1) ^ -(byte & 1), pos + 2
            else:
                delta, pos = vint(buf, pos + 1)
            byte = buf[pos]
            if byte < 0x80:
                offset_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                offset_delta, pos = vint(buf, pos)
            byte = buf[pos]
            if byte < 0x80:
                size, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                size, pos = vint(buf, pos)
            key = None
            if size >= 0:
                key, pos = buf[pos : pos + size], pos + size
            size, pos = vint(buf, pos)
            value = None
            if size >= 0:
                value, pos = buf[pos : pos + size], pos + size
            count_h = buf[pos]
            if count_h == 0:
                pos += 1
                headers: list[Header] = []
            else:
                headers = []
                count_h, pos = vint(buf, pos)
                if count_h < 0 or count_h > stop - pos:
                    raise _corrupt(f"header count {count_h}")
                for _ in range(count_h):
                    size, pos = vint(buf, pos)
                    if size < 0:
                        raise KafkaError(Code.INVALID_RECORD, "a header key is null")
                    name, pos = buf[pos : pos + size], pos + size
                    size, pos = vint(buf, pos)
                    header_value = None
                    if size >= 0:
                        header_value, pos = buf[pos : pos + size], pos + size
                    try:
                        headers.append((name.decode(), header_value))
                    except UnicodeDecodeError:
                        raise KafkaError(Code.INVALID_RECORD, "a header key is not UTF-8") from None
            if pos != stop:
                raise _corrupt(f"record fields end at {pos}, its length says {stop}")
            records.append(Record(offset_delta, base_timestamp + delta, key, value, headers))
    except (IndexError, DecodeError) as exc:
        raise _corrupt(f"records do not decode: {exc}") from None
    if pos != end:
        raise _corrupt(f"{end - pos} bytes after the batch's {count} records")
    return records


def _varint(value: int) -> bytes:
    """``value`` as a zig-zag varint."""
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# The varints of 0..16383 (two bytes at most), looked up: timestamp and offset deltas and the
# lengths of keys, values and records are nearly always there; a Python varint loop per field
# was a third of a Fetch's CPU (tests/bench/kafka.py).
_SMALL = 1 << 14
_VARINTS = [_varint(v) for v in range(_SMALL)]
_NULL = _varint(-1)


def encode_records(records: list[Record], base_timestamp: int) -> bytes:
    """The records section (uncompressed)."""
    parts: list[bytes] = []
    add, extend = parts.append, parts.extend
    table, varint = _VARINTS, _varint
    for rec in records:
        delta, offset_delta, key, value = (
            rec.timestamp - base_timestamp,
            rec.offset_delta,
            rec.key,
            rec.value,
        )
        fields = [
            b"\x00",  # attributes
            table[delta] if 0 <= delta < _SMALL else varint(delta),
            table[offset_delta] if 0 <= offset_delta < _SMALL else varint(offset_delta),
        ]
        for data in (key, value):
            if data is None:
                fields.append(_NULL)
            else:
                size = len(data)
                fields += (table[size] if size < _SMALL else varint(size), data)
        headers = rec.headers
        if headers:
            fields.append(table[len(headers)] if len(headers) < _SMALL else varint(len(headers)))
            for name, data in headers:
                raw = name.encode()
                fields += (table[len(raw)] if len(raw) < _SMALL else varint(len(raw)), raw)
                if data is None:
                    fields.append(_NULL)
                else:
                    size = len(data)
                    fields += (table[size] if size < _SMALL else varint(size), data)
        else:
            fields.append(b"\x00")  # no headers
        length = sum(map(len, fields))
        add(table[length] if length < _SMALL else varint(length))
        extend(fields)
    return b"".join(parts)


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.compress(data))
    if codec == 4:
        return bytes(cramjam.zstd.compress(data))
    return data


def encode_empty_batch(base_offset: int, next_offset: int) -> bytes:
    """A batch of no records spanning [base_offset, next_offset): what Kafka's cleaner leaves
    where it removed every record of a batch, and what a consumer takes to move its position
    to ``next_offset`` (Java's ``nextOffset()``, librdkafka alike). Answered for a compacted
    queue's gap that runs to its end (store/read/kept.py), where no record follows to carry
    the position past it."""
    head = bytearray(HEADER_SIZE)
    _HEAD.pack_into(head, 0, base_offset, HEADER_SIZE - 12, -1, 2, 0, 0,
                    next_offset - 1 - base_offset, -1, -1, -1, -1, -1, 0)  # fmt: skip
    struct.pack_into(">I", head, 17, crc32c.crc32c(bytes(head[21:])))
    return bytes(head)


def encode_batch(
    records: list[Record],
    base_offset: int = 0,
    *,
    codec: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    attributes: int = 0,
) -> bytes:
    """One batch of ``records`` (offset deltas and timestamps as given; none empty)."""
    base_timestamp = min(rec.timestamp for rec in records)
    max_timestamp = max(rec.timestamp for rec in records)
    section = _compress(codec, encode_records(records, base_timestamp))
    head = bytearray(HEADER_SIZE)
    _HEAD.pack_into(
        head,
        0,
        base_offset,
        HEADER_SIZE - 12 + len(section),
        -1,  # partitionLeaderEpoch: unknown (no leader epochs here)
        2,
        0,
        (attributes & ~CODEC_MASK) | codec,
        records[-1].offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(records),
    )
    crc = crc32c.crc32c(bytes(head[21:]) + section)
    struct.pack_into(">I", head, 17, crc)
    return bytes(head) + section
