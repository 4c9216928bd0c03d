"""The ConsumeQueue summary: every queue's files and positions, written at a clean shutdown so
the next start builds the queue table without opening a queue file.

Why: a start that opens each queue's newest file to find where its data ends costs a descriptor
and ~20 reads per queue: seconds at 100,000 queues. After a clean shutdown nothing in those
files moved since they were last flushed, so their positions can be written down once.

Trust: only after a clean shutdown (no ``abort`` file), only with this layout's magic, version,
the same ConsumeQueue file size and a matching CRC; the file is deleted as soon as it is read,
so a later crash never starts from it (recovery then reads each queue's files, bounded to one
descriptor at a time). Anything else falls back to that read.

Layout (little-endian; ``<root>/consumequeue.summary``)::

    magic "WCQS" | version u16 | queue file size u64 | queue count u32
    per queue: topic length u8 | topic (UTF-8) | queue id u32 | first file start u64 |
               file count u32 | min pos u64 | write pos u64 | max physical offset u64 |
               min physical offset i64 (-1: unknown)
    CRC32 (zlib) of everything before it, u32

~55 bytes a queue: 5.5 MB for 100,000 queues, written once per shutdown.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from wharf.store.paths import fsync_dir_blocking, write_bytes_atomic_blocking
from wharf.store.queue.consume_queue import QueueSummary

log = logging.getLogger(__name__)

MAGIC = b"WCQS"
VERSION = 1
_HEADER = struct.Struct("<4sHQI")
_ENTRY = struct.Struct("<IQIQQQq")
_CRC = struct.Struct("<I")

Entry = tuple[str, int, QueueSummary]


def encode(file_size: int, entries: Iterable[Entry]) -> bytes:
    body = bytearray()
    count = 0
    for topic, queue_id, summary in entries:
        name = topic.encode()
        body += bytes((len(name),)) + name + _ENTRY.pack(queue_id, *summary)
        count += 1
    data = _HEADER.pack(MAGIC, VERSION, file_size, count) + body
    return data + _CRC.pack(zlib.crc32(data))


def decode(data: bytes, file_size: int) -> Iterator[Entry]:
    """The entries, or ValueError if the file is not a summary this store can trust."""
    if len(data) < _HEADER.size + _CRC.size:
        raise ValueError("too short")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: -_CRC.size]) != crc:
        raise ValueError("CRC mismatch")
    magic, version, size, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a version {VERSION} summary")
    if size != file_size:
        raise ValueError(f"written for queue files of {size} bytes, not {file_size}")
    pos = _HEADER.size
    for _ in range(count):
        length = data[pos]
        topic = data[pos + 1 : pos + 1 + length].decode()
        pos += 1 + length
        queue_id, *rest = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        yield topic, queue_id, tuple(rest)  # type: ignore[misc]


def write_blocking(path: Path, file_size: int, entries: Iterable[Entry]) -> None:
    write_bytes_atomic_blocking(path, encode(file_size, entries))


def take_blocking(path: Path, file_size: int) -> list[Entry] | None:
    """Read and delete the summary; None when there is none or it cannot be trusted."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    path.unlink()
    fsync_dir_blocking(path.parent)  # a power cut must not bring a stale summary back
    try:
        return list(decode(data, file_size))
    except (ValueError, struct.error, UnicodeDecodeError, IndexError) as exc:
        log.warning(
            "ignoring consume queue summary %s (%s): reading every queue instead", path, exc
        )
        return None
