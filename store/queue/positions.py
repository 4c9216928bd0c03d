"""The positions journal: every ConsumeQueue's files and positions, so a start builds the queue
table without opening a queue file, after a clean shutdown and after a process crash.

Why: a start that opens each queue's newest file to find where its data ends costs a listing,
an open and a read per queue: 6-8 s for 100,000 queues on this VM after a kill -9 (4 threads,
2026-11-24), 62 s cold after a machine crash. The journal holds what those reads would find.

Records (``<root>/consumequeue.positions``): a ``SNAPSHOT`` of every queue first, then
``CHANGES`` (the queues whose state moved since the last record: ``QueueLinks.changed`` plus
the dirty ones) and ``REMOVED`` (topics deleted), each with the dispatch position ``D`` taken
before its queues were captured on the event loop. A state captured after ``D`` holds every
unit of the records before ``D``, so recovery resumes re-dispatch at the last record's ``D``:
units after it are rewritten (identical) or skipped by offset, queues created since are
re-created. ``ConsumeQueueTable`` captures (on the loop, in chunks), this module frames and
writes (in a thread).

Trust (``store.recovery``):

- after a clean shutdown: the shutdown's snapshot (written atomically and fsynced) is exact;
- after a process crash (same boot: the page cache survived, so every record written before
  the crash is readable, fsynced or not): snapshot + changes, up to the first torn record
  (cut off before anything is appended); a queue whose first file is gone (retention deleted
  it after the last record) or whose topic directory was removed is read from its files;
- after a machine crash (power loss), or when the file is missing, foreign or damaged: not at
  all; every queue's files are read, and a fresh snapshot is written at the end of recovery.
  So is one after any recovery that dropped units (a torn log tail, a replica's truncation):
  a journal must never describe units past the log's end.

Layout (little-endian)::

    header:  magic "WCQP" | version u16 | queue file size u64
    record:  payload length u32 | CRC32 (zlib) of the payload u32 | payload
    payload: kind u8 | dispatch position u64 | count u32 | count items
      SNAPSHOT / CHANGES item: topic length u8 | topic (UTF-8) | queue id u32 |
          first file start u64 | file count u32 | min pos u64 | write pos u64 |
          max physical offset u64 | min physical offset i64 (-1: unknown)
      REMOVED item: topic length u8 | topic

~55 bytes a queue: 5.5 MB for 100,000 queues in a snapshot. A snapshot is rewritten (a new
file, renamed over the old) when the changes after it outgrow it twice over, so the file stays
under ~3x one snapshot whatever the traffic.
"""

from __future__ import annotations

import logging
import os
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from wharf.store.paths import fsync_dir_blocking, write_bytes_atomic_blocking
from wharf.store.queue.consume_queue import QueueSummary

log = logging.getLogger(__name__)

MAGIC = b"WCQP"
VERSION = 1
SNAPSHOT, CHANGES, REMOVED = 0, 1, 2
_HEADER = struct.Struct("<4sHQ")
_RECORD = struct.Struct("<II")
_PAYLOAD = struct.Struct("<BQI")
_ENTRY = struct.Struct("<IQIQQQq")

Entry = tuple[str, int, QueueSummary]


def encode_entries(entries: Iterable[Entry]) -> tuple[bytes, int]:
    """The items of a SNAPSHOT or CHANGES record, and their count."""
    parts = []
    pack = _ENTRY.pack
    for topic, queue_id, summary in entries:
        name = topic.encode()
        parts.append(bytes((len(name),)) + name + pack(queue_id, *summary))
    return b"".join(parts), len(parts)


def encode_topics(topics: Iterable[str]) -> tuple[bytes, int]:
    """The items of a REMOVED record, and their count."""
    parts = [bytes((len(name),)) + name for name in (t.encode() for t in topics)]
    return b"".join(parts), len(parts)


def record(kind: int, position: int, items: bytes, count: int) -> bytes:
    payload = _PAYLOAD.pack(kind, position, count) + items
    return _RECORD.pack(len(payload), zlib.crc32(payload)) + payload


def header(file_size: int) -> bytes:
    return _HEADER.pack(MAGIC, VERSION, file_size)


@dataclass
class Loaded:
    """What a positions file holds: each topic's queues (last state recorded), the dispatch
    position of the last good record, and where that record ends (a torn tail starts there)."""

    topics: dict[str, dict[int, QueueSummary]] = field(default_factory=dict)
    position: int = 0
    snapshot_length: int = 0  # bytes up to the end of the snapshot
    good_length: int = 0
    torn: bool = False

    def entries(self) -> list[Entry]:
        return [(t, q, s) for t, queues in self.topics.items() for q, s in queues.items()]


def decode(data: bytes, file_size: int) -> Loaded:
    """The file's content, or ValueError if it cannot be trusted at all (no header, another
    layout or queue file size, no snapshot first). Records after a torn or damaged one are
    ignored (``torn``): they were being written when the process died."""
    if len(data) < _HEADER.size:
        raise ValueError("too short")
    magic, version, size = _HEADER.unpack_from(data, 0)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a version {VERSION} positions file")
    if size != file_size:
        raise ValueError(f"written for queue files of {size} bytes, not {file_size}")
    loaded = Loaded()
    pos = _HEADER.size
    view = memoryview(data)
    first = True
    while pos < len(data):
        if pos + _RECORD.size > len(data):
            loaded.torn = True
            break
        length, crc = _RECORD.unpack_from(data, pos)
        start = pos + _RECORD.size
        if start + length > len(data) or zlib.crc32(view[start : start + length]) != crc:
            loaded.torn = True
            break
        kind, position, count = _PAYLOAD.unpack_from(data, start)
        if first and kind != SNAPSHOT:
            raise ValueError("the first record is not a snapshot")
        first = False
        _apply(loaded.topics, data, start + _PAYLOAD.size, kind, count)
        loaded.position = position
        pos = loaded.good_length = start + length
        if kind == SNAPSHOT:
            loaded.snapshot_length = pos
    if first:
        raise ValueError("no snapshot")
    return loaded


def _apply(
    topics: dict[str, dict[int, QueueSummary]], data: bytes, pos: int, kind: int, count: int
) -> None:
    if kind == SNAPSHOT:
        topics.clear()
    for _ in range(count):
        length = data[pos]
        topic = data[pos + 1 : pos + 1 + length].decode()
        pos += 1 + length
        if kind == REMOVED:
            topics.pop(topic, None)
            continue
        queue_id, *rest = _ENTRY.unpack_from(data, pos)
        pos += _ENTRY.size
        topics.setdefault(topic, {})[queue_id] = tuple(rest)  # type: ignore[assignment]


def read_blocking(path: Path, file_size: int) -> Loaded | None:
    """The journal, or None when there is none or it cannot be trusted."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode(data, file_size)
    except (ValueError, struct.error, UnicodeDecodeError, IndexError) as exc:
        log.warning("ignoring consume queue positions %s (%s): reading every queue", path, exc)
        return None


def cut_torn_tail_blocking(path: Path, loaded: Loaded) -> None:
    """Cut a torn last record off, so records appended next are read after the good ones."""
    if loaded.torn:
        os.truncate(path, loaded.good_length)


def write_snapshot_blocking(
    path: Path, file_size: int, position: int, items: bytes, count: int
) -> int:
    """A new file holding one snapshot, renamed over the old one (fsynced, the directory
    too: a clean shutdown's is the next start's truth). Returns its size."""
    data = header(file_size) + record(SNAPSHOT, position, items, count)
    write_bytes_atomic_blocking(path, data)
    return len(data)


def append_blocking(path: Path, data: bytes) -> None:
    """One record at the end (one write: O_APPEND keeps it whole against other appends). Not
    fsynced: records are trusted only after a process crash, when the page cache survived."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def remove_blocking(path: Path) -> None:
    """Forget the journal (a shutdown that could not flush every queue): the next start reads
    the files."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir_blocking(path.parent)
