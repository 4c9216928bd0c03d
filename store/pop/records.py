"""Pop journal records: encode, and parse a journal's bytes (sans-IO).

The byte layout is defined in ``wharf.store.codec.layout`` (``POP_RECORD_FIELDS``, diagram in
its docstring); this module only packs and unpacks it.

Parsing policy: records are read in order from just after the file magic; the first one that
does not parse whole (LENGTH out of [52, 556] -- TOPICLEN is one unsigned byte, up to 249 -- or
past the end of the data, GROUPLEN/TOPICLEN not adding up to LENGTH, an unknown TYPE, a CRC mismatch) ends the valid data. ``parse_journal``
reports where, so recovery can drop the torn tail. A damaged record in the middle of the file
also ends it there (the records after it are lost: the CRC cannot tell a torn tail from media
corruption); that is logged by the caller with the number of bytes dropped.
"""

from __future__ import annotations

import functools
import zlib
from typing import NamedTuple

from wharf.store.codec.layout import (
    POP_JOURNAL_MAGIC,
    POP_RECORD_ACK,
    POP_RECORD_CHANGE,
    POP_RECORD_CRC_START,
    POP_RECORD_DONE,
    POP_RECORD_HEADER,
    POP_RECORD_HEADER_SIZE,
    POP_RECORD_MAX_SIZE,
    POP_RECORD_POP,
    POP_RECORD_RESET,
)

KINDS = frozenset(
    {POP_RECORD_POP, POP_RECORD_ACK, POP_RECORD_CHANGE, POP_RECORD_DONE, POP_RECORD_RESET}
)


class PopRecord(NamedTuple):
    """One journal record (field meanings in the layout's diagram)."""

    kind: int
    group: str
    topic: str
    queue_id: int
    queue_offset: int
    span: int = 1  # COUNT: DONE covers offsets [queue_offset, queue_offset + span)
    visible_at: int = 0
    nonce: int = 0
    attempt: int = 0


@functools.lru_cache(maxsize=4096)  # a few (group, topic) pairs: every record repeats one
def _names(group: str, topic: str) -> tuple[bytes, int, int]:
    """GROUP then TOPIC as the record holds them, and their lengths."""
    group_bytes, topic_bytes = group.encode("ascii"), topic.encode("ascii")
    return group_bytes + topic_bytes, len(group_bytes), len(topic_bytes)


def encode_record(record: PopRecord) -> bytes:
    """The record's bytes. Group and topic are ASCII (checked by the service before)."""
    names, group_len, topic_len = _names(record.group, record.topic)
    length = POP_RECORD_HEADER_SIZE + group_len + topic_len
    header = POP_RECORD_HEADER.pack(
        length,
        0,
        record.kind,
        group_len,
        topic_len,
        0,
        record.queue_id,
        record.queue_offset,
        record.span,
        record.visible_at,
        record.nonce,
        record.attempt,
    )
    body = header[POP_RECORD_CRC_START:] + names
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return header[:4] + crc.to_bytes(4, "big") + body


def parse_journal(data: bytes | memoryview) -> tuple[list[PopRecord], int]:
    """The records of a whole journal file and the end of its valid data (a byte position:
    ``len(data)`` when nothing is torn). An empty file or a lone magic has no records; a file
    that does not start with the magic raises ValueError (not a pop journal)."""
    magic_size = len(POP_JOURNAL_MAGIC)
    if len(data) < magic_size:
        if bytes(data) != POP_JOURNAL_MAGIC[: len(data)]:
            raise ValueError("not a pop journal (bad magic)")
        return [], 0  # created, magic not written whole: nothing in it
    if bytes(data[:magic_size]) != POP_JOURNAL_MAGIC:
        raise ValueError("not a pop journal (bad magic)")
    records: list[PopRecord] = []
    position = magic_size
    end = len(data)
    unpack = POP_RECORD_HEADER.unpack_from
    while position + POP_RECORD_HEADER_SIZE <= end:
        (length, crc, kind, group_len, topic_len, _reserved, queue_id, queue_offset, count,
         visible_at, nonce, attempt) = unpack(data, position)  # fmt: skip
        if (
            length < POP_RECORD_HEADER_SIZE
            or length > POP_RECORD_MAX_SIZE
            or position + length > end
            or length != POP_RECORD_HEADER_SIZE + group_len + topic_len
            or kind not in KINDS
            or zlib.crc32(data[position + POP_RECORD_CRC_START : position + length]) & 0xFFFFFFFF
            != crc
        ):
            break
        names = position + POP_RECORD_HEADER_SIZE
        group = bytes(data[names : names + group_len]).decode("ascii", "replace")
        topic = bytes(data[names + group_len : names + group_len + topic_len]).decode(
            "ascii", "replace"
        )
        records.append(
            PopRecord(kind, group, topic, queue_id, queue_offset, count, visible_at, nonce, attempt)
        )
        position += length
    return records, position
