"""Send batches of pre-encoded records: the producer encodes CommitLog records, the broker checks
them, fills in the fields only it knows, and appends the batch with one copy.

RocketMQ's broker re-encodes every message it receives (MessageExtEncoder); in Python that
costs microseconds per message in the broker's single event-loop thread, plus the protobuf
decode and the per-message reply. Here the client, which has a core of its own, does the
encoding, and the broker's per-record work shrinks to one header unpack, a few bounds checks
and a CRC check (the body CRC travels from the producer to the disk: end-to-end integrity).

Wire form (``SendMessageRequest.records``): whole records in the layout of :mod:`store.format`,
concatenated, each self-delimited by TOTALSIZE. The producer sets TOTALSIZE, MAGICCODE,
BODYCRC, FLAG, SYSFLAG (only the compressed bit), BORNTIMESTAMP, BODY, TOPIC and PROPERTIES;
it sends zeros in the fields the broker owns -- QUEUEID, QUEUEOFFSET, PHYSICALOFFSET,
BORNHOST (the peer address as the broker sees it), STORETIMESTAMP, STOREHOST,
RECONSUMETIMES, PREPAREDTRANSACTIONOFFSET -- and ``patch_records`` writes them at append time.
Delayed messages (a DELAY property) are not accepted in this form: they are rewritten to
SCHEDULE_TOPIC_XXXX, which the message form does.

Sans-IO and numpy-free: the SDK imports the encoder.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from store.errors import InvalidMessageError
from store.format import (
    _PROPERTIES_LENGTH_BYTES,
    MAX_PROPERTIES_LENGTH,
    MESSAGE_MAGIC_CODE,
    PROPERTY_DELAY_TIME_LEVEL,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    SYSFLAG_COMPRESSED,
    SYSFLAG_MULTI_TAGS,
    _born_host_bytes,
    _crc32,
    validate_topic,
)

# SYSFLAG bits a producer may set on a record it sends (no transaction bits before wave 2).
ALLOWED_SYS_FLAGS = SYSFLAG_COMPRESSED | SYSFLAG_MULTI_TAGS

_ZERO_HOST = bytes(8)
_pack_header = RECORD_HEADER.pack
# What the check reads of a header: TOTALSIZE, MAGICCODE, BODYCRC, SYSFLAG, RECONSUMETIMES,
# PREPAREDTRANSACTIONOFFSET, BODYLENGTH (skipping the rest: ~2x cheaper than the whole header).
_unpack_checked = struct.Struct(">iIi24xi32xiqi").unpack_from
assert struct.calcsize(">iIi24xi32xiqi") == RECORD_HEADER_SIZE
# QUEUEOFFSET q | PHYSICALOFFSET q, at byte 20 of a record.
_pack_offsets = struct.Struct(">qq").pack_into
_QUEUE_ID = struct.Struct(">i")
_QUEUE_ID_AT = 12
_QUEUE_ID_END = _QUEUE_ID_AT + _QUEUE_ID.size
_OFFSETS_AT = 20
# BORNHOST 8s | STORETIMESTAMP q | STOREHOST 8s: 24 contiguous bytes at 48, one value per batch.
_HOSTS = struct.Struct(">8sq8s")
_HOSTS_AT = 48
_HOSTS_END = _HOSTS_AT + _HOSTS.size
_DELAY_NAME = (PROPERTY_DELAY_TIME_LEVEL + "\x01").encode()


# Peer address -> BORNHOST bytes (ipv6 peers keep only their port: the v1 record holds ipv4).
born_host_bytes = _born_host_bytes


def topic_tail(topic: str) -> bytes:
    """TOPICLENGTH + TOPIC, the bytes that follow every body of ``topic`` (validated)."""
    raw = validate_topic(topic)
    return bytes((len(raw),)) + raw


def encode_record(
    tail: bytes, body: bytes, properties: bytes, flag: int = 0, sys_flag: int = 0, born_ts: int = 0
) -> bytes:
    """One record for a send batch. ``tail`` from :func:`topic_tail`; ``properties`` already in
    the ``name\\x01value\\x02`` form (the caller guarantees no separator inside names/values;
    the broker re-checks the counts)."""
    props_len = len(properties)
    if props_len > MAX_PROPERTIES_LENGTH:
        raise InvalidMessageError(
            f"properties encode to {props_len} bytes; the limit is {MAX_PROPERTIES_LENGTH}"
        )
    body_len = len(body)
    return b"".join(
        (
            _pack_header(
                RECORD_FIXED_SIZE + body_len + len(tail) - 1 + props_len,
                MESSAGE_MAGIC_CODE,
                _crc32(body) & 0x7FFFFFFF,
                0,
                flag,
                0,
                0,
                sys_flag,
                born_ts,
                _ZERO_HOST,
                0,
                _ZERO_HOST,
                0,
                0,
                body_len,
            ),
            body,
            tail,
            _PROPERTIES_LENGTH_BYTES[props_len],
            properties,
        )
    )


def check_records(data: bytes, topic: str, max_message_size: int) -> list[int]:
    """Check a send batch for ``topic``; return each record's start position in ``data``.

    Raises InvalidMessageError naming the first bad record (nothing may be written then):
    framing (TOTALSIZE, MAGICCODE, lengths adding up), body size limits, the topic, BODYCRC,
    SYSFLAG, broker-owned fields not zero where they must be, properties that do not split into
    name/value pairs, a DELAY property. Hot path of every send: ~1 us per record."""
    size = len(data)
    if not size:
        raise InvalidMessageError("records is empty: send at least one record")
    tail = topic_tail(topic)
    tail_len = len(tail)
    fixed = RECORD_HEADER_SIZE + tail_len + 2
    unpack = _unpack_checked
    crc32 = _crc32
    positions: list[int] = []
    add = positions.append
    view = memoryview(data)
    pos = 0
    index = 0
    try:
        while pos < size:
            if size - pos < RECORD_HEADER_SIZE:
                raise _bad(index, f"only {size - pos} bytes left: a record header is 88")
            total, magic, crc, sys_flag, reconsume, prepared, body_len = unpack(data, pos)
            end = pos + total
            if magic != MESSAGE_MAGIC_CODE:
                raise _bad(index, f"MAGICCODE {magic:#010x} is not {MESSAGE_MAGIC_CODE:#010x}")
            if not 0 < body_len <= max_message_size:
                raise _bad_body(index, body_len, max_message_size)
            body_end = pos + RECORD_HEADER_SIZE + body_len
            props_start = body_end + tail_len + 2
            if total < fixed + body_len or end > size:
                raise _bad(index, f"TOTALSIZE {total} does not frame the record")
            if not data.startswith(tail, body_end):
                raise _bad(index, f"its topic is not the request's topic {topic!r}")
            props_len = data[props_start - 2] << 8 | data[props_start - 1]
            if props_start + props_len != end or props_len > MAX_PROPERTIES_LENGTH:
                raise _bad(index, "TOTALSIZE does not match BODYLENGTH + topic + PROPERTIESLENGTH")
            if crc32(view[pos + RECORD_HEADER_SIZE : body_end]) & 0x7FFFFFFF != crc:
                raise _bad(index, "BODYCRC does not match the body (corrupted in transit?)")
            if sys_flag & ~ALLOWED_SYS_FLAGS or reconsume or prepared:
                raise _bad(
                    index,
                    "SYSFLAG may only carry the compressed/multi-tags bits, and "
                    "RECONSUMETIMES / PREPAREDTRANSACTIONOFFSET must be 0",
                )
            if props_len:
                pairs = data.count(2, props_start, end)
                if (
                    data[end - 1] != 2
                    or data.count(1, props_start, end) != pairs
                    or data[props_start] in (1, 2)
                ):
                    raise _bad(index, "PROPERTIES are not name\\x01value\\x02 pairs")
                delay = data.find(_DELAY_NAME, props_start, end)
                if delay == props_start or (delay > 0 and data[delay - 1] == 2):
                    raise _bad(index, "delayed messages (DELAY property) must be sent as messages")
            add(pos)
            pos = end
            index += 1
    finally:
        view.release()
    return positions


def patch_records(
    buf: bytearray,
    positions: Sequence[int],
    queue_id: int,
    first_queue_offset: int,
    start_offset: int,
    born_host: bytes,
    store_timestamp: int,
    store_host: bytes,
) -> None:
    """Fill in the broker-owned fields of checked records in ``buf`` (which will be written at
    commit log ``start_offset``): QUEUEID, QUEUEOFFSET (consecutive), PHYSICALOFFSET, BORNHOST,
    STORETIMESTAMP, STOREHOST. Done on a private copy BEFORE the copy into the segment, so a
    crash can never leave a CRC-valid record with unset offsets in the log."""
    queue_id_bytes = _QUEUE_ID.pack(queue_id)
    hosts = _HOSTS.pack(born_host, store_timestamp, store_host)
    pack_offsets = _pack_offsets
    queue_offset = first_queue_offset
    for pos in positions:
        buf[pos + _QUEUE_ID_AT : pos + _QUEUE_ID_END] = queue_id_bytes
        pack_offsets(buf, pos + _OFFSETS_AT, queue_offset, start_offset + pos)
        buf[pos + _HOSTS_AT : pos + _HOSTS_END] = hosts
        queue_offset += 1


def _bad(index: int, reason: str) -> InvalidMessageError:
    return InvalidMessageError(f"record #{index} of the batch is invalid: {reason}")


def _bad_body(index: int, body_len: int, max_message_size: int) -> InvalidMessageError:
    if body_len <= 0:
        return _bad(index, "its body is empty")
    return InvalidMessageError(
        f"record #{index} body is {body_len} bytes; the limit (maxMessageSize) is "
        f"{max_message_size} bytes"
    )
