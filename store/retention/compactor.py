"""One compaction pass of one queue (Kafka's LogCleaner ``cleanSegments`` idea, run over a
kept log and a consume queue's dirty range instead of segments).

1. **Offset map** over the dirty range ``[cleaned_to, end)``: key digest -> the key's latest
   offset there. The map is bounded (``OffsetMap``): when it is full the pass stops at that
   record, and the new generation covers only up to it (``cleaned_to`` moves that far); the
   next pass goes on from there, as Kafka's cleaner does when its map fills. So a queue with
   more keys than memory is compacted in several passes, never with more memory.
2. **Copy** into a new generation: the old kept log's records, then the dirty range's. A
   record stays when its key's latest offset is its own (an old kept record whose key is not in
   this pass's map stays: its later versions, if any, lie past this pass), and a tombstone
   (null value) stays until it is older than ``delete_horizon_ms`` (``now -
   delete.retention.ms``). **A tombstone's age counts from its store timestamp** (the time the
   broker stored it, in every record), whichever pass first saw it: a tombstone first cleaned
   long after it was stored goes at that first pass if it is already that old. Kafka since
   KIP-534 (3.1) counts from the first cleaning that saw it instead (it writes that pass's time
   + delete.retention.ms into the batch as its delete horizon), because its segments have no
   better clock (before, the segment's mtime, which every cleaning reset); Wharf has the store
   time, so a consumer that reads the topic from the start within delete.retention.ms of a
   delete always sees its tombstone, and none outlives that by more than a pass. A pass
   reports the oldest tombstone it kept (``PassStats.oldest_tombstone_ms``): the service runs
   a pass for it once it is due, with nothing dirty too. Records without a key are
   dropped, as Kafka's cleaner drops them; records below the log start offset (``base``: topic
   retention, DeleteRecords) are dropped too.
3. **Swap**: ``GenerationWriter.install_blocking`` (crash rule in ``kept_log.py``).

Everything here runs in the compactor thread: records come from ``dirty`` (the service reads
them on the loop, in chunks) and the kept log's own files; I/O is paced by ``Pacer``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from wharf.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    OFFSET_BODY_LENGTH,
    OFFSET_MAGIC,
    OFFSET_QUEUE_OFFSET,
    OFFSET_STORE_TIMESTAMP,
    RECORD_HEADER_SIZE,
    STORE_TIMESTAMP,
    TOTAL_SIZE,
)
from wharf.store.codec.properties import (
    KAFKA_KEY_PROPERTY,
    KAFKA_VALUE_PROPERTY,
    PROPERTY_KEYS,
    compaction_key,
    is_tombstone,
)
from wharf.store.codec.records import record_properties
from wharf.store.retention.kept_log import GenerationWriter, KeptLog, KeptState

# A map entry's cost in this Python process, measured with tracemalloc over 200,000 entries:
# 134 bytes (the dict with its int offsets 84, the 16-byte digest as a bytes object 49), ~156
# while the dict doubles: priced at 160. The default 32 MiB holds 209,715 keys.
MAP_ENTRY_BYTES = 160
# A pass hands the GIL over every 64 records (~0.3-0.6 ms of its work): Python switches
# threads only every 5 ms otherwise (sys.getswitchinterval), and each such wait of the event
# loop lands on a produce's latency.
YIELD_EVERY = 63  # a mask: every 64th record
DIGEST_BYTES = 16  # Kafka's cleaner hashes keys with MD5 (16 bytes) too: collisions ~2^-64
# A stored message is V1 or V2 (store/codec/layout.py); their magics differ in the last byte.
_MAGIC_LAST_BYTE = OFFSET_MAGIC + 3
_V2_LAST_BYTE = MESSAGE_MAGIC_CODE_V2 & 0xFF
assert MESSAGE_MAGIC_CODE & 0xFF != _V2_LAST_BYTE
# Records of the dirty range: (queue offset, store timestamp, record bytes) in offset order.
Chunk = list[tuple[int, int, bytes]]
# (from offset, up to offset) -> (the next records, the offset after what was looked at): a
# chunk may be empty where units were blank; the pass ends when the offset stops moving.
DirtyReader = Callable[[int, int], tuple[Chunk, int]]
_QUEUE_OFFSET = STORE_TIMESTAMP  # both ">q"
_BODY_LENGTH = TOTAL_SIZE  # both ">i"


class Stopped(Exception):
    """The store is stopping: the pass gives up (its files removed, the old log stays)."""


@dataclass(slots=True)
class PassStats:
    read_records: int = 0
    read_bytes: int = 0
    kept_records: int = 0
    kept_bytes: int = 0
    removed_tombstones: int = 0
    oldest_tombstone_ms: int = -1  # the store time of the oldest tombstone kept (-1: none)
    map_keys: int = 0
    map_full: bool = False
    cpu_seconds: float = 0.0  # the pass thread's own CPU time (loop hops not included)


class OffsetMap:
    """Key digest -> latest offset, at most ``capacity`` keys (``map_bytes`` / 160)."""

    def __init__(self, map_bytes: int) -> None:
        self.capacity = max(map_bytes // MAP_ENTRY_BYTES, 1)
        self._latest: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._latest)

    def put(self, digest: bytes, offset: int) -> bool:
        """False (nothing stored) when the key is new and the map is full."""
        latest = self._latest
        if digest not in latest and len(latest) >= self.capacity:
            return False
        latest[digest] = offset
        return True

    def get(self, digest: bytes) -> int | None:
        return self._latest.get(digest)


class Pacer:
    """Bounds the pass's I/O rate (``bytes_per_second``; 0 = unbounded) and hands the GIL to
    the event loop between chunks; raises ``Stopped`` once ``stopping()``."""

    def __init__(self, bytes_per_second: int, stopping: Callable[[], bool]) -> None:
        self.rate = bytes_per_second
        self.stopping = stopping
        self._start = time.monotonic()
        self._bytes = 0

    def account(self, nbytes: int) -> None:
        if self.stopping():
            raise Stopped
        self._bytes += nbytes
        wait = self._bytes / self.rate - (time.monotonic() - self._start) if self.rate else 0.0
        time.sleep(max(wait, 0.0005))  # 0.5 ms at least: a turn for the loop's waiters


def digest_of(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=DIGEST_BYTES).digest()


def key_of_properties(record: bytes, pos: int = 0) -> tuple[bytes | None, bool]:
    """(compaction key, tombstone) through the decoded properties: the reference."""
    props = record_properties(record, pos)
    return compaction_key(props), is_tombstone(props)


_KEYS = PROPERTY_KEYS.encode() + b"\x01"
_KAFKA_KEY = KAFKA_KEY_PROPERTY.encode() + b"\x01"
_KAFKA_VALUE = KAFKA_VALUE_PROPERTY.encode() + b"\x01"
_KAFKA_PREFIX = b"__KAFKA_"
assert _KAFKA_KEY.startswith(_KAFKA_PREFIX) and _KAFKA_VALUE.startswith(_KAFKA_PREFIX)


def _value(props: bytes, needle: bytes) -> bytes | None:
    """The last ``name\x01value`` of ``props`` (a dict keeps the last), found by bytes
    search: names and values hold no separator, so ``\x02name\x01`` can only be a pair's
    start."""
    at = props.rfind(b"\x02" + needle)
    if at >= 0:
        start = at + 1 + len(needle)
    elif props.startswith(needle):
        start = len(needle)
    else:
        return None
    end = props.find(b"\x02", start)
    return props[start : end if end >= 0 else len(props)]


def key_of(record: bytes, pos: int = 0) -> tuple[bytes | None, bool]:
    """``key_of_properties`` without decoding the properties into a dict: byte searches in the
    PROPERTIES section, one for a record without Kafka's markers (a pass reads each dirty
    record twice). Same answer (tests/store/test_compaction.py, hypothesis)."""
    body = _BODY_LENGTH.unpack_from(record, pos + OFFSET_BODY_LENGTH)[0]
    topic_at = pos + RECORD_HEADER_SIZE + body
    if record[pos + _MAGIC_LAST_BYTE] != _V2_LAST_BYTE:
        props_at = topic_at + 1 + record[topic_at]
    else:  # a V2 record (a topic over 127 bytes): a two-byte TOPICLENGTH
        props_at = topic_at + 2 + (record[topic_at] << 8 | record[topic_at + 1])
    length = record[props_at] << 8 | record[props_at + 1]
    props = record[props_at + 2 : props_at + 2 + length]
    if _KAFKA_PREFIX not in props:  # a RocketMQ record, or a Kafka one with a plain key and value
        keys = _value(props, _KEYS)
        return (keys or None), False
    tombstone = _value(props, _KAFKA_VALUE) == b"null"
    packed = _value(props, _KAFKA_KEY)
    if packed is not None:
        if not packed.isascii():  # what b64decode of the text refuses (compaction_key)
            return packed, tombstone
        try:
            return base64.b64decode(packed), tombstone
        except (binascii.Error, ValueError):
            return packed, tombstone
    keys = _value(props, _KEYS)
    return (keys or None), tombstone


def split_records(data: bytes) -> Chunk:
    """Whole stored records back to back -> (queue offset, store timestamp, record)."""
    out: Chunk = []
    pos, end = 0, len(data)
    while pos < end:
        size = TOTAL_SIZE.unpack_from(data, pos)[0]
        offset = _QUEUE_OFFSET.unpack_from(data, pos + OFFSET_QUEUE_OFFSET)[0]
        stamp = STORE_TIMESTAMP.unpack_from(data, pos + OFFSET_STORE_TIMESTAMP)[0]
        out.append((offset, stamp, data[pos : pos + size]))
        pos += size
    return out


def _dirty(dirty: DirtyReader, start: int, end: int, pacer: Pacer) -> Iterator[Chunk]:
    offset = start
    while offset < end:
        chunk, after = dirty(offset, end)
        chunk = [r for r in chunk if r[0] < end]
        pacer.account(sum(len(r[2]) for r in chunk))
        yield chunk
        if after <= offset:
            return
        offset = after


def build_map(
    dirty: DirtyReader, start: int, end: int, offsets: OffsetMap, pacer: Pacer, stats: PassStats
) -> int:
    """Fill ``offsets`` over [start, end); returns where the pass must stop (``end``, or the
    first record whose key found the map full)."""
    for chunk in _dirty(dirty, start, end, pacer):
        for n, (offset, _, record) in enumerate(chunk):
            if not n & YIELD_EVERY:
                time.sleep(0)  # the GIL to the loop (YIELD_EVERY)
            stats.read_records += 1
            stats.read_bytes += len(record)
            key, _ = key_of(record)
            if key is not None and not offsets.put(digest_of(key), offset):
                stats.map_full = True
                return offset
    return end


def _dropped(stats: PassStats, stamp: int, delete_horizon_ms: int) -> bool:
    """A tombstone stored at ``stamp``: dropped when stored before the horizon (counted),
    else kept (the oldest kept noted)."""
    if stamp < delete_horizon_ms:
        stats.removed_tombstones += 1
        return True
    if stats.oldest_tombstone_ms < 0 or stamp < stats.oldest_tombstone_ms:
        stats.oldest_tombstone_ms = stamp
    return False


def compact_blocking(
    kept: KeptLog | None,
    directory: Path,
    base: int,
    cleaned_to: int,
    end: int,
    dirty: DirtyReader,
    *,
    delete_horizon_ms: int,
    map_bytes: int,
    pacer: Pacer,
    fail: Callable[[str], None] | None = None,
) -> tuple[KeptState, PassStats]:
    """One pass (module docs): the new generation installed, and what the pass did."""
    stats = PassStats()
    cpu = time.thread_time()
    offsets = OffsetMap(map_bytes)
    start = max(cleaned_to, base)
    stop = build_map(dirty, start, end, offsets, pacer, stats)
    stats.map_keys = len(offsets)
    generation = (kept.state.generation if kept is not None else 0) + 1
    writer = GenerationWriter(directory, generation, *(() if fail is None else (fail,)))
    try:
        if kept is not None:
            for entries, data in kept.scan():
                pacer.account(len(data))
                first = entries[0][1]
                for n, (offset, position, size, stamp) in enumerate(entries):
                    if not n & YIELD_EVERY:
                        time.sleep(0)
                    if offset < base:
                        continue
                    key, tombstone = key_of(data, position - first)
                    if key is None or offsets.get(digest_of(key)) is not None:
                        continue
                    if tombstone and _dropped(stats, stamp, delete_horizon_ms):
                        continue
                    writer.add(offset, data[position - first : position - first + size], stamp)
        for chunk in _dirty(dirty, start, stop, pacer):
            for n, (offset, stamp, record) in enumerate(chunk):
                if not n & YIELD_EVERY:
                    time.sleep(0)
                key, tombstone = key_of(record)
                if key is None or offsets.get(digest_of(key)) != offset:
                    continue
                if tombstone and _dropped(stats, stamp, delete_horizon_ms):
                    continue
                writer.add(offset, record, stamp)
        state = writer.install_blocking(base, max(stop, start))
    except BaseException:
        writer.abort_blocking()
        raise
    stats.kept_records, stats.kept_bytes = writer.records, writer.log_bytes
    stats.cpu_seconds = time.thread_time() - cpu
    return state, stats
