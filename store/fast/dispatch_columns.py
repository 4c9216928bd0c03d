"""Columnar dispatch decode: the records of one CommitLog segment -> the arrays dispatch needs.

``decode_dispatches`` builds a DispatchRequest and a properties dict per record: about 3 us of
a 1 KiB record's ~7 us dispatch. Dispatch only needs a few header fields, the topic, the TAGS
hash, the DELAY level of scheduled messages and the index keys (UNIQ_KEY, KEYS split on
spaces), so a chunk is decoded as numpy columns instead:

1. headers: the fields dispatch reads are gathered from the buffer (zero-copy view) into one
   big-endian structured array;
   the field lengths are checked for the whole chunk at once (any record that fails goes to
   the reference decoder, which raises its precise CorruptRecordError);
2. the tail of each record (topic, properties length, properties) is joined into one blob;
   properties are split into pairs at their \\x02 separators with array arithmetic and
   TAGS / KEYS / UNIQ_KEY / DELAY are found by their first bytes (``dispatch_properties``);
3. TAGS and index keys are hashed from the blob in vectorized passes (``index_hash``);
   non-ASCII values take the reference hash over their UTF-8-with-replacement text.

The result is exactly what ``columns_from_requests(decode_dispatches(...))`` gives (tests
compare the two on random records), which is the path for small chunks and recovery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import cast

import numpy as np
from wharf.store.codec.dispatch import DispatchRequest, decode_dispatches
from wharf.store.codec.hashes import index_key_hash, java_string_hash
from wharf.store.codec.layout import MESSAGE_MAGIC_CODE, RECORD_FIELDS
from wharf.store.codec.properties import SCHEDULE_TOPIC
from wharf.store.codec.records import ReadableBuffer
from wharf.store.fast import load
from wharf.store.fast.dispatch_properties import (
    PropertyPairs,
    index_keys,
    prefix_hash,
    tags_codes,
)
from wharf.store.fast.index_hash import SegmentHashes, index_key_hashes
from wharf.store.fast.layout_dtypes import columns
from wharf.store.fast.record_tails import RecordTails, gather_record_tails

# The compiled properties pass (store/fast/_log_scan.c ``scan_properties``); None: numpy's.
_compiled = load("_log_scan")

# The header fields dispatch reads (wharf.store.codec.layout.RECORD_FIELDS), gathered into
# 36-byte rows.
_HEADER, _HEADER_BYTES = columns(
    RECORD_FIELDS,
    {
        "TOTAL_SIZE": "total",
        "MAGIC": "magic",
        "QUEUE_ID": "queue_id",
        "QUEUE_OFFSET": "queue_offset",
        "SYS_FLAG": "sys_flag",
        "STORE_TIMESTAMP": "store_ts",
        "BODY_LENGTH": "body",
    },
)


@dataclass(slots=True, eq=False)
class DispatchColumns:
    """One chunk of records, one array element per record (int64), in log order."""

    offsets: np.ndarray  # commit log offset
    sizes: np.ndarray  # TOTALSIZE
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sys_flags: np.ndarray
    store_timestamps: np.ndarray
    topic_ids: np.ndarray  # index into ``topics``
    topics: list[str]
    tags_codes: np.ndarray  # Java hash of TAGS, 0 without TAGS
    delay_texts: dict[int, str]  # record -> DELAY value, for SCHEDULE_TOPIC records only
    key_records: np.ndarray  # per index key (entry order: UNIQ_KEY, then KEYS): its record
    key_hashes: np.ndarray  # per index key: indexKeyHash of "topic#key"

    def __len__(self) -> int:
        return len(self.offsets)


def decode_dispatch_columns(
    buf: ReadableBuffer, positions: Sequence[int], base_offset: int
) -> DispatchColumns:
    """The records at ``positions`` of ``buf`` (``base_offset`` = commit log offset of
    ``buf[0]``) as columns. CorruptRecordError exactly when ``decode_dispatches`` raises."""
    count = len(positions)
    pos = np.fromiter(positions, np.int64, count)
    gathered = gather_record_tails(buf, pos, _HEADER, _HEADER_BYTES)
    if gathered is None:
        return _reference(buf, positions, base_offset)
    header, total, rec_start = gathered.header, gathered.total, gathered.starts
    # ``_topics`` reads a topic one byte after its given start: a V2 record's TOPICLENGTH is
    # two bytes, so its start is given one byte on (a chunk of V1 records: one compare).
    wide = header["magic"] != MESSAGE_MAGIC_CODE
    topic_at = rec_start + wide if wide.any() else rec_start
    topic_ids, topics, prefixes = _topics(gathered.tail, topic_at, gathered.props - topic_at - 3)
    if topics is None:
        return _reference(buf, positions, base_offset)  # a non-ASCII topic: corrupt
    delay_texts: dict[int, str] = {}
    if prefixes is not None and SCHEDULE_TOPIC not in topics:
        codes, key_records, key_hashes = _scan_properties(gathered, topic_ids, topics, prefixes)
    else:
        codes, key_records, key_hashes = _numpy_properties(gathered, topic_ids, topics, delay_texts)
    return DispatchColumns(
        pos + base_offset,
        total,
        header["queue_id"].astype(np.int64),
        header["queue_offset"].astype(np.int64),
        header["sys_flag"].astype(np.int64),
        header["store_ts"].astype(np.int64),
        topic_ids,
        topics,
        codes,
        delay_texts,
        key_records,
        key_hashes,
    )


def _numpy_properties(
    gathered: RecordTails, topic_ids: np.ndarray, topics: list[str], delay_texts: dict[int, str]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TAGS codes and index keys by array passes (``dispatch_properties``), and the DELAY
    values of scheduled records into ``delay_texts``."""
    tail, data = gathered.tail, gathered.data
    hashes = SegmentHashes(data)
    check_ascii = not tail.isascii()
    pairs = PropertyPairs(data, gathered.starts, gathered.props, gathered.ends)
    codes = tags_codes(tail, pairs, hashes, len(topic_ids), check_ascii)
    if SCHEDULE_TOPIC in topics:
        delay_rows, delay_start, delay_end = pairs.last(b"DELAY")
        schedule = topics.index(SCHEDULE_TOPIC)
        for row in (topic_ids == schedule).nonzero()[0].tolist():
            delay_texts[row] = ""
        for row, a, b in zip(
            delay_rows.tolist(), delay_start.tolist(), delay_end.tolist(), strict=True
        ):
            if row in delay_texts:
                delay_texts[row] = tail[a:b].decode("utf-8", "replace")
    key_records, key_hashes = index_keys(data, tail, pairs, hashes, topic_ids, topics, check_ascii)
    return codes, key_records, key_hashes


def _scan_properties(
    gathered: RecordTails, topic_ids: np.ndarray, topics: list[str], prefixes: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """TAGS codes and index keys by the compiled pass (``_log_scan.scan_properties``; the
    numpy twin is ``dispatch_properties``): ~0.2 us a 1 KiB record less. ``prefixes``: each
    topic's ``prefix_hash``. Values with non-ASCII bytes come back listed, hashed here by the
    reference over their UTF-16 text."""
    tags, rows, hashes, odd = _compiled.scan_properties(  # type: ignore[union-attr]
        gathered.data, gathered.starts, gathered.props, gathered.ends, topic_ids,
        np.array(prefixes, dtype=np.int64),
    )  # fmt: skip
    codes = np.frombuffer(tags, np.int64)
    key_records = np.frombuffer(rows, np.int64)
    key_hashes = np.frombuffer(hashes, np.int64)
    tail = gathered.tail
    for kind, index, a, b in odd:
        text = tail[a:b].decode("utf-8", "replace")
        if kind == 0:
            codes[index] = java_string_hash(text)
        else:
            topic = topics[topic_ids[key_records[index]]]
            key_hashes[index] = index_key_hash(f"{topic}#{text}")
    return codes, key_records, key_hashes


def _reference(buf: ReadableBuffer, positions: Sequence[int], base_offset: int) -> DispatchColumns:
    """Anything the array checks do not accept: the reference decoder decodes it the same way
    or raises its precise error."""
    return columns_from_requests(decode_dispatches(buf, positions, base_offset))


# A topic's raw bytes (as records hold it) -> its text and ``prefix_hash``, bounded (emptied
# when full). One entry for both: a chunk's distinct topics (~64 at 256 topics) were looked up
# in two caches, each entry cold in a daemon holding 45,000 queues, and each list checked for
# a miss with ``None in`` (a compare of every item with None).
_TOPICS: dict[bytes, tuple[str, int]] = {}
_TEXT = itemgetter(0)
_PREFIX = itemgetter(1)


def _topic_entry(raw: bytes) -> tuple[str, int] | None:
    entry = _TOPICS.get(raw)
    if entry is None:
        if not raw.isascii():
            return None
        if len(_TOPICS) >= 4096:
            _TOPICS.clear()
        text = raw.decode("ascii")
        entry = _TOPICS[raw] = (text, prefix_hash(text))
    return entry


def _topic_text(raw: bytes) -> str | None:
    entry = _topic_entry(raw)
    return None if entry is None else entry[0]


def _topics(
    tail: bytes, rec_start: np.ndarray, topic_len: np.ndarray
) -> tuple[np.ndarray, list[str] | None, list[int] | None]:
    """Per record, an index into the chunk's list of distinct topics, that list (None: a
    non-ASCII topic) and, compiled, each topic's ``prefix_hash`` (for ``scan_properties``).
    Records come in runs of one topic (a send batch each; a whole chunk for one topic), so only
    the first record of each run is looked up (a lookup per record cost ~0.4 us a message with
    256 topics' batches in a chunk); compiled, the runs' lookups too (``_log_scan.topic_ids``)."""
    if _compiled is not None:
        ids_array, distinct = _compiled.topic_ids(tail, rec_start, topic_len)
        entries = list(map(_TOPICS.get, distinct))  # known ones without a call each
        if not all(entries):  # (an entry is a 2-tuple: a miss is the only false item)
            entries = [_topic_entry(raw) for raw in distinct]
            if not all(entries):
                return np.zeros(0, dtype=np.int64), None, None
        found = cast("list[tuple[str, int]]", entries)
        topics = list(map(_TEXT, found))
        return np.frombuffer(ids_array, np.int64), topics, list(map(_PREFIX, found))
    firsts = _topic_runs_numpy(tail, rec_start, topic_len)
    ids: dict[bytes, int] = {}
    run_ids = [
        ids.setdefault(tail[a + 1 : a + 1 + n], len(ids))
        for a, n in zip(rec_start[firsts].tolist(), topic_len[firsts].tolist(), strict=True)
    ]
    topics = [_topic_text(raw) for raw in ids]
    if None in topics:
        return np.zeros(0, dtype=np.int64), None, None
    if len(ids) == 1:
        return np.zeros(len(rec_start), dtype=np.int64), topics, None  # type: ignore[return-value]
    runs = np.diff(firsts, append=len(rec_start))
    topic_ids = np.repeat(np.array(run_ids, dtype=np.int64), runs)
    return topic_ids, topics, None  # type: ignore[return-value]


def _topic_runs_numpy(tail: bytes, rec_start: np.ndarray, topic_len: np.ndarray) -> np.ndarray:
    """With a dict a run, the twin of ``_log_scan.topic_ids``: the records whose topic differs
    from the one before, from one gather of every topic's bytes (shorter names zero-padded)."""
    width = int(topic_len.max())
    data = np.frombuffer(tail, np.uint8)
    lanes = np.arange(width)
    index = np.minimum(rec_start[:, None] + 1 + lanes, len(data) - 1)
    names = np.where(lanes < topic_len[:, None], data[index], 0)
    change = np.ones(len(rec_start), dtype=bool)
    change[1:] = (topic_len[1:] != topic_len[:-1]) | (names[1:] != names[:-1]).any(axis=1)
    return np.flatnonzero(change)


def columns_from_requests(requests: Sequence[DispatchRequest]) -> DispatchColumns:
    """The same columns from decoded requests (small chunks, recovery, tests)."""
    ids: dict[str, int] = {}
    topic_ids = [ids.setdefault(req.topic, len(ids)) for req in requests]
    key_records: list[int] = []
    keys: list[str] = []
    delay_texts: dict[int, str] = {}
    for row, req in enumerate(requests):
        if req.uniq_key:
            key_records.append(row)
            keys.append(f"{req.topic}#{req.uniq_key}")
        for key in req.keys:
            key_records.append(row)
            keys.append(f"{req.topic}#{key}")
        if req.topic == SCHEDULE_TOPIC:
            delay_texts[row] = req.properties.get("DELAY", "")

    def column(name: str) -> np.ndarray:
        return np.array([getattr(req, name) for req in requests], dtype=np.int64)

    return DispatchColumns(
        column("commit_log_offset"),
        column("size"),
        column("queue_id"),
        column("queue_offset"),
        column("sys_flag"),
        column("store_timestamp"),
        np.array(topic_ids, dtype=np.int64),
        list(ids),
        np.array([java_string_hash(r.tags) if r.tags else 0 for r in requests], dtype=np.int64),
        delay_texts,
        np.array(key_records, dtype=np.int64),
        np.array(index_key_hashes(keys), dtype=np.int64),
    )
