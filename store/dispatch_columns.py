"""Columnar dispatch decode: the records of one CommitLog segment -> the arrays dispatch needs.

``decode_dispatches`` builds a DispatchRequest and a properties dict per record: about 3 us of
a 1 KiB record's ~7 us dispatch. Dispatch only needs a few header fields, the topic, the TAGS
hash, the DELAY level of scheduled messages and the index keys (UNIQ_KEY, KEYS split on
spaces), so a chunk is decoded as numpy columns instead:

1. headers: the 88-byte headers are joined and read as one big-endian structured array;
   the field lengths are checked for the whole chunk at once (any record that fails goes to
   the reference decoder, which raises its precise CorruptRecordError);
2. the tail of each record (topic, properties length, properties) is joined into one blob;
   properties are split into pairs at their \\x02 separators with array arithmetic;
3. a pair is TAGS / KEYS / UNIQ_KEY / DELAY when its first bytes are the name followed by
   \\x01 (or are exactly the name: ``"KEYS"`` alone sets KEYS to ""). Names and values
   cannot contain \\x02, so a pair boundary is exact; the last pair of a name wins, as in
   the reference dict;
4. TAGS and index keys are hashed from the blob in vectorized passes (``index_hash``);
   non-ASCII values take the reference hash over their UTF-8-with-replacement text.

The result is exactly what ``columns_from_requests(decode_dispatches(...))`` gives (tests
compare the two on random records), which is the path for small chunks and recovery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from store.format import (
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER_SIZE,
    SCHEDULE_TOPIC,
    DispatchRequest,
    ReadableBuffer,
    decode_dispatches,
    index_key_hash,
    java_string_hash,
)
from store.index_hash import SegmentHashes, _power_tables, abs_index_hash, index_key_hashes

# The header bytes dispatch reads (RECORD_HEADER in format.py), gathered into 36-byte rows:
# TOTALSIZE, MAGICCODE, QUEUEID, QUEUEOFFSET, SYSFLAG, STORETIMESTAMP, BODYLENGTH.
_HEADER_BYTES = np.r_[0:8, 12:16, 20:28, 36:40, 56:64, 84:88]
_HEADER = np.dtype(
    [
        ("total", ">i4"),
        ("magic", ">u4"),
        ("queue_id", ">i4"),
        ("queue_offset", ">i8"),
        ("sys_flag", ">i4"),
        ("store_ts", ">i8"),
        ("body", ">i4"),
    ]
)
assert _HEADER.itemsize == len(_HEADER_BYTES)
_INT32 = 0x100000000


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
    if int(np.maximum.reduce(pos)) + RECORD_HEADER_SIZE > len(buf):
        return _reference(buf, positions, base_offset)  # a truncated header
    view = np.frombuffer(buf, np.uint8)  # zero-copy; the gather below copies
    try:
        header = view[pos[:, None] + _HEADER_BYTES].view(_HEADER)[:, 0]
    finally:
        del view  # release the buffer export: the segment map must stay closable
    total = header["total"].astype(np.int64)
    body_end = pos + RECORD_HEADER_SIZE + header["body"]
    end = pos + total
    ok = (header["magic"] == MESSAGE_MAGIC_CODE) & (header["body"] >= 0)
    ok &= (end <= len(buf)) & (body_end + 3 <= end)
    if np.count_nonzero(ok) != count:
        return _reference(buf, positions, base_offset)
    # Tail of each record: TOPICLENGTH, TOPIC, PROPERTIESLENGTH, PROPERTIES.
    tail = b"".join([buf[a:b] for a, b in zip(body_end.tolist(), end.tolist(), strict=True)])
    lengths = end - body_end
    rec_start = np.zeros(count, dtype=np.int64)
    lengths[:-1].cumsum(out=rec_start[1:])
    rec_end = rec_start + lengths
    data = np.zeros(len(tail) + _PAD, dtype=np.uint8)
    data[: len(tail)] = np.frombuffer(tail, np.uint8)
    topic_len = data[rec_start].astype(np.int64)
    props = rec_start + 3 + topic_len
    props_len = data[props - 2].astype(np.int64) << 8 | data[props - 1]
    if np.count_nonzero((props <= rec_end) & (props + props_len == rec_end)) != count:
        return _reference(buf, positions, base_offset)
    topic_ids, topics = _topics(tail, rec_start, topic_len)
    if topics is None:
        return _reference(buf, positions, base_offset)  # a non-ASCII topic: corrupt
    hashes = SegmentHashes(data)
    check_ascii = not tail.isascii()
    pairs = _Pairs(data, rec_start, props, rec_end)
    tags_codes = _tags_codes(tail, pairs, hashes, count, check_ascii)
    delay_texts: dict[int, str] = {}
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
    key_records, key_hashes = _index_keys(data, tail, pairs, hashes, topic_ids, topics, check_ascii)
    return DispatchColumns(
        pos + base_offset,
        total,
        header["queue_id"].astype(np.int64),
        header["queue_offset"].astype(np.int64),
        header["sys_flag"].astype(np.int64),
        header["store_ts"].astype(np.int64),
        topic_ids,
        topics,
        tags_codes,
        delay_texts,
        key_records,
        key_hashes,
    )


def _reference(buf: ReadableBuffer, positions: Sequence[int], base_offset: int) -> DispatchColumns:
    """Anything the array checks do not accept: the reference decoder decodes it the same way
    or raises its precise error."""
    return columns_from_requests(decode_dispatches(buf, positions, base_offset))


_TOPIC_CACHE: dict[bytes, str] = {}


def _topic_text(raw: bytes) -> str | None:
    text = _TOPIC_CACHE.get(raw)
    if text is None:
        if not raw.isascii():
            return None
        if len(_TOPIC_CACHE) >= 4096:
            _TOPIC_CACHE.clear()
        text = _TOPIC_CACHE[raw] = raw.decode("ascii")
    return text


def _topics(
    tail: bytes, rec_start: np.ndarray, topic_len: np.ndarray
) -> tuple[np.ndarray, list[str] | None]:
    """Per record, an index into the chunk's list of distinct topics."""
    first_len = int(topic_len[0])
    first = tail[1 : 1 + first_len]
    if (topic_len == first_len).all():
        data = np.frombuffer(tail, np.uint8)
        names = data[rec_start[:, None] + 1 + np.arange(first_len)]
        if names.tobytes() == first * len(rec_start):  # one topic: the usual chunk
            text = _topic_text(first)
            return np.zeros(len(rec_start), dtype=np.int64), None if text is None else [text]
    ids: dict[bytes, int] = {}
    topic_ids = [
        ids.setdefault(tail[a + 1 : a + 1 + n], len(ids))
        for a, n in zip(rec_start.tolist(), topic_len.tolist(), strict=True)
    ]
    topics = [_topic_text(raw) for raw in ids]
    if None in topics:
        return np.zeros(0, dtype=np.int64), None
    return np.array(topic_ids, dtype=np.int64), topics  # type: ignore[return-value]


_PAD = 9  # zeros after the tail: the 8-byte name words and the byte after them stay in bounds


class _Pairs:
    """The properties of every record split into ``name\\x01value`` pairs (tail positions).

    ``data`` is a writable copy of the tail: each record's TOPICLENGTH byte and last
    PROPERTIESLENGTH byte are overwritten with the \\x02 separator (and the other length byte
    with 0), so the pairs of all records are simply the runs between consecutive \\x02 bytes,
    and a last pair without its final \\x02 still ends at its record's end. Runs that are not
    inside a record's properties (topics, empty runs) are dropped."""

    def __init__(
        self, data: np.ndarray, rec_start: np.ndarray, props: np.ndarray, rec_end: np.ndarray
    ) -> None:
        data[rec_start] = 2
        data[props - 2] = 0
        data[props - 1] = 2
        data[rec_end[-1]] = 2
        seps = (data == 2).nonzero()[0]
        starts, ends = seps[:-1] + 1, seps[1:]
        records = props.searchsorted(starts, side="right") - 1
        # A run is a pair if it starts inside its record's properties and is not empty.
        keep = (records >= 0) & (ends > starts)  # (the first record's topic: record -1)
        keep = (keep & (starts < rec_end[records])).nonzero()[0]
        self.data = data
        self.starts, self.ends, self.records = starts[keep], ends[keep], records[keep]
        self.lengths = self.ends - self.starts
        # The first 8 bytes of each pair as one big-endian integer: a name test is a compare.
        self.words = data[self.starts[:, None] + _EIGHT].view(">u8")[:, 0]
        self._first4 = self.words >> np.uint64(32)
        fifth = (self.words >> np.uint64(24)) & np.uint64(0xFF)
        # A 4-letter name ends the pair or is followed by \\x01 (TAGS, KEYS).
        self._ends4 = (self.lengths == 4) | ((self.lengths > 4) & (fifth == 1))

    def last(self, name: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(records, value starts, value ends) of the last ``name`` pair of each record that
        has one. A pair is ``name`` when it starts with ``name\\x01`` or is just ``name``."""
        n = len(name)
        code = int.from_bytes(name, "big")
        if n == 4:
            match = (self._first4 == code) & self._ends4
        else:
            match = (self.words >> np.uint64(64 - 8 * n)) == code
            if n < 8:
                after = (self.words >> np.uint64(56 - 8 * n)) & np.uint64(0xFF)
            else:
                after = self.data[self.starts + 8]
            match &= (self.lengths == n) | ((self.lengths > n) & (after == 1))
        found = match.nonzero()[0]
        records = self.records[found]
        repeated = records[1:] == records[:-1]
        if np.count_nonzero(repeated):  # pairs are in tail order: the last one wins
            last = np.ones(len(found), dtype=bool)
            last[:-1] = ~repeated
            found, records = found[last], records[last]
        ends = self.ends[found]
        return records, np.minimum(self.starts[found] + (n + 1), ends), ends


_EIGHT = np.arange(8)


def _tags_codes(
    tail: bytes,
    pairs: _Pairs,
    hashes: SegmentHashes,
    count: int,
    check_ascii: bool,
) -> np.ndarray:
    rows, starts, ends = pairs.last(b"TAGS")
    codes = np.zeros(count, dtype=np.int64)
    codes[rows] = hashes(starts, ends).view(np.int32)  # Java's int: signed
    if check_ascii:
        for i in (~hashes.ascii(starts, ends)).nonzero()[0].tolist():
            text = tail[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
            codes[rows[i]] = java_string_hash(text)
    return codes


def _index_keys(
    data: np.ndarray,
    tail: bytes,
    pairs: _Pairs,
    hashes: SegmentHashes,
    topic_ids: np.ndarray,
    topics: list[str],
    check_ascii: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Records and hashes of the index keys, in the reference's entry order: per record the
    UNIQ_KEY, then each KEYS token (split on spaces, empty tokens dropped)."""
    rows, starts, ends = pairs.last(b"UNIQ_KEY")
    keys_rows, keys_starts, keys_ends = pairs.last(b"KEYS")
    if len(keys_rows):
        spaces = (data == 0x20).nonzero()[0]
        if len(spaces):
            owner = keys_starts.searchsorted(spaces, side="right") - 1
            spaces = spaces[(owner >= 0) & (spaces < keys_ends[owner])]
        if len(spaces):
            token_starts = np.concatenate((keys_starts, spaces + 1))
            token_starts.sort()
            token_ends = np.concatenate((spaces, keys_ends))
            token_ends.sort()
            token_rows = keys_rows[keys_starts.searchsorted(token_starts, side="right") - 1]
        else:
            token_starts, token_ends, token_rows = keys_starts, keys_ends, keys_rows
        # Per record: UNIQ_KEY first, then the tokens in order (both lists are sorted).
        order = np.concatenate((rows * 2, token_rows * 2 + 1)).argsort(kind="stable")
        rows = np.concatenate((rows, token_rows))[order]
        starts = np.concatenate((starts, token_starts))[order]
        ends = np.concatenate((ends, token_ends))[order]
    keep = ends > starts
    if np.count_nonzero(keep) != len(keep):
        rows, starts, ends = rows[keep], starts[keep], ends[keep]
    if not len(rows):
        return rows, np.zeros(0, dtype=np.int64)
    # h("topic#" + key) = h("topic#") * 31^len(key) + h(key)   (mod 2^32)
    if len(topics) == 1:
        prefix = np.uint32(_prefix_hash(topics[0]))
    else:
        prefix = np.array([_prefix_hash(t) for t in topics], dtype=np.uint32)[topic_ids[rows]]
    lengths = ends - starts
    powers, _ = _power_tables(int(np.maximum.reduce(lengths)) + 1)
    full = prefix * powers[lengths] + hashes(starts, ends)
    result = abs_index_hash(full)
    if check_ascii:
        for i in (~hashes.ascii(starts, ends)).nonzero()[0].tolist():
            key = tail[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
            result[i] = index_key_hash(f"{topics[topic_ids[rows[i]]]}#{key}")
    return rows, result


_PREFIX_HASHES: dict[str, int] = {}


def _prefix_hash(topic: str) -> int:
    """hashCode of ``topic#`` as uint32 (topics are ASCII)."""
    h = _PREFIX_HASHES.get(topic)
    if h is None:
        h = java_string_hash(topic + "#") % _INT32
        if len(_PREFIX_HASHES) < 4096:
            _PREFIX_HASHES[topic] = h
    return h


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
