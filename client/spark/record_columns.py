"""The raw records of one ``raw_records`` pull reply -> the ``wharf`` source's columns, per reply.

The per-row path (``wharf.client.records`` messages, one attribute read per column and row:
a properties regex each for ``tags``, ``keys`` and ``msgId``) costs ~3.5-5 us a 1 KiB row into
an Arrow batch; here one reply (<= 1024 records) is decoded in vectorized passes over its
bytes, ~1.5-2 us a row (2-core VM, 2026-11-23):

1. the record starts are walked once (one TOTALSIZE read per record: the store log reader's
   compiled walk ``wharf.store.fast._log_scan`` when built), then the header fields
   the columns need are gathered in one numpy fancy-index through the structured dtype
   derived from ``wharf.store.codec.layout.RECORD_FIELDS`` (``wharf.store.fast.layout_dtypes``);
   every field length is checked for all records at once;
2. the tails (topic, properties) are joined and split into ``name\\x01value`` pairs with
   ``wharf.store.fast.dispatch_properties.PropertyPairs`` (the store's dispatch decoder);
   TAGS, KEYS and UNIQ_KEY are found by their first bytes, the last pair of a name winning;
3. as Arrow arrays (``arrow=True``, the default ``arrowBatches``): bodies joined once into the
   array's data, ASCII tags / msgId / KEYS values gathered from the tails with one numpy index
   and used as the string data without decoding (KEYS split at spaces with array arithmetic),
   timestamps and offsets straight from the header columns; non-ASCII values, compressed
   bodies and the properties map go through Python objects. As lists (tuples): one slice per
   body, one decode per value, one split per KEYS value.

The output equals the per-row path's on the same records (tests/spark/test_record_columns.py
compares them): exact-tag filtering, the range end, tags ``""`` and keys ``()`` when absent,
msgId ``""`` without UNIQ_KEY, invalid UTF-8 replaced. (One difference, on records no Wharf
encoder writes: with ``includeProperties`` the per-row path reads tags from the properties
dict, where a bare ``TAGS`` pair without ``\x01`` counts as an empty value; here, as without
``includeProperties``, only ``name\x01value`` pairs count.) Anything the array checks refuse
(a malformed record) returns None: the caller takes the per-row path, which raises its
precise error.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from wharf.client.compression import decompress
from wharf.store.codec.layout import (
    RECORD_FIELDS,
    RECORD_FIXED_SIZE,
    SYSFLAG_COMPRESSED,
    TOTAL_SIZE,
)
from wharf.store.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.fast import load
from wharf.store.fast.dispatch_properties import PropertyPairs
from wharf.store.fast.layout_dtypes import columns
from wharf.store.fast.record_tails import gather_record_tails

_HEADER, _HEADER_BYTES = columns(
    RECORD_FIELDS,
    {
        "TOTAL_SIZE": "total",
        "MAGIC": "magic",
        "QUEUE_OFFSET": "queue_offset",
        "SYS_FLAG": "sys_flag",
        "BORN_TIMESTAMP": "born_ts",
        "STORE_TIMESTAMP": "store_ts",
        "BODY_LENGTH": "body",
    },
)
_total_at = TOTAL_SIZE.unpack_from
# The store's compiled record walk (None: not built or disabled; the Python loop below).
_log_scan = load("_log_scan")
_SCAN_STOPPED = 0
_NO_LIMIT = 1 << 40
_HIDDEN = frozenset((PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY))
_TAGS = PROPERTY_TAGS.encode()
_KEYS = PROPERTY_KEYS.encode()
_UNIQ_KEY = PROPERTY_UNIQ_KEY.encode()


@dataclass(slots=True, eq=False)
class ReplyColumns:
    """The kept rows of one reply. ``first_offset``: queue offset of the first record that
    passed the tag filter (before the range end is applied), None if none did."""

    rows: int
    first_offset: int | None
    columns: dict[str, Any]  # lists, or Arrow arrays (``arrow=True``)


def decode_reply_columns(
    buf: bytes,
    start: int,
    end: int,
    names: Collection[str],
    tags: frozenset[str] | None,
    end_offset: int,
    arrow: bool = False,
) -> ReplyColumns | None:
    """Columns ``names`` (of offset, body, tags, keys, properties, msgId, bornTimestamp,
    storeTimestamp; timestamps in microseconds) of the records in ``buf[start:end]`` whose
    exact tag is in ``tags`` (None: all) and whose queue offset is below ``end_offset``.
    With ``arrow`` the columns are Arrow arrays of the source's Arrow schema, else lists.
    None when a record is malformed (the per-row path raises its error)."""
    positions = _walk(buf, start, end)
    if positions is None:
        return None
    count = len(positions)
    if not count:
        return ReplyColumns(0, None, {})
    pos = np.array(positions, dtype=np.int64)
    gathered = gather_record_tails(buf, pos, _HEADER, _HEADER_BYTES)
    if gathered is None:
        return None
    header, body_start, body_len = gathered.header, gathered.body_start, gathered.body_len
    tail, data, t_start, t_end, props = (
        gathered.tail, gathered.data, gathered.starts, gathered.ends, gathered.props
    )  # fmt: skip
    pairs = PropertyPairs(data, t_start, props, t_end)

    want = set(names)
    tags_span: tuple[np.ndarray, np.ndarray] | None = None
    keep: np.ndarray | None = None
    if tags is not None or "tags" in want:
        tags_span = _spans(pairs, _TAGS, count, first=False)
    if tags is not None:
        assert tags_span is not None
        texts = _texts(tail, *tags_span)
        keep = np.fromiter((t in tags for t in texts), dtype=bool, count=count)
    queue_offsets = header["queue_offset"].astype(np.int64)
    kept = queue_offsets if keep is None else queue_offsets[keep]
    first_offset = int(kept[0]) if len(kept) else None
    in_range = queue_offsets < end_offset
    keep = in_range if keep is None else keep & in_range
    rows = int(np.count_nonzero(keep))
    if rows == 0:
        return ReplyColumns(0, first_offset, {})
    selected: np.ndarray | None = None if rows == count else keep.nonzero()[0]

    def pick(values: np.ndarray) -> np.ndarray:
        return values if selected is None else values[selected]

    build = _ArrowColumns(tail) if arrow else _ListColumns(tail)
    out: dict[str, Any] = {}
    if "offset" in want:
        out["offset"] = build.longs(pick(queue_offsets))
    if "bornTimestamp" in want:
        out["bornTimestamp"] = build.micros(pick(header["born_ts"].astype(np.int64)))
    if "storeTimestamp" in want:
        out["storeTimestamp"] = build.micros(pick(header["store_ts"].astype(np.int64)))
    if "body" in want:
        compressed = (header["sys_flag"] & SYSFLAG_COMPRESSED) != 0
        out["body"] = build.bodies(buf, pick(body_start), pick(body_len), pick(compressed))
    if "tags" in want:
        assert tags_span is not None
        out["tags"] = build.texts(*(pick(a) for a in tags_span))
    if "keys" in want:
        out["keys"] = build.keys(*(pick(a) for a in _spans(pairs, _KEYS, count, first=False)))
    if "msgId" in want:
        out["msgId"] = build.texts(*(pick(a) for a in _spans(pairs, _UNIQ_KEY, count, True)))
    if "properties" in want:
        out["properties"] = build.properties(pick(props), pick(t_end))
    return ReplyColumns(rows, first_offset, out)


def _walk(buf: bytes, start: int, end: int) -> list[int] | None:
    """Record starts in ``buf[start:end]``; None if the sizes do not chain to ``end`` or a
    record is shorter than the fixed part (the compiled walk of the store's log reader when
    built, ``wharf.store.fast._log_scan``)."""
    if _log_scan is not None:
        found, reached, status, _, _ = _log_scan.scan(buf, start, end, _NO_LIMIT, _NO_LIMIT, False)
        if status != _SCAN_STOPPED or reached != end:
            return None
        if found:
            sizes = np.diff(np.array(found, dtype=np.int64), append=end)
            if int(sizes.min()) < RECORD_FIXED_SIZE:
                return None
        return found
    positions: list[int] = []
    append = positions.append
    last_header = end - RECORD_FIXED_SIZE
    pos = start
    total_at = _total_at
    while pos < end:
        if pos > last_header:
            return None
        total = total_at(buf, pos)[0]
        if total < RECORD_FIXED_SIZE:
            return None
        append(pos)
        pos += total
    return positions if pos == end else None


def _matches(pairs: PropertyPairs, name: bytes) -> np.ndarray:
    """Indices of the pairs that start with ``name\\x01`` (a name alone has no value)."""
    n = len(name)
    code = int.from_bytes(name, "big")
    if n <= 7:
        match = (pairs.words >> np.uint64(64 - 8 * n)) == code
        after = (pairs.words >> np.uint64(56 - 8 * n)) & np.uint64(0xFF)
    else:
        assert n == 8
        match = pairs.words == code
        after = pairs.data[pairs.starts + 8]
    match &= (pairs.lengths > n) & (after == 1)
    return match.nonzero()[0]


def _spans(
    pairs: PropertyPairs, name: bytes, count: int, first: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Per record, (start, length) in the tail of the value of its LAST ``name`` pair (as
    the per-row regex finds it), length 0 without one; with ``first``, a pair that opens
    the properties wins (the per-row msgId fast path)."""
    found = _matches(pairs, name)
    records = pairs.records[found]
    last = np.ones(len(found), dtype=bool)
    last[:-1] = records[1:] != records[:-1]
    chosen = last
    if first and len(found):
        # Pairs are in tail order: a record's opening pair is the first pair of its record.
        is_first_pair = np.ones(len(pairs.starts), dtype=bool)
        is_first_pair[1:] = pairs.records[1:] != pairs.records[:-1]
        opening = is_first_pair[found]
        has_opening = np.zeros(count, dtype=bool)
        has_opening[records[opening]] = True
        chosen = opening | (last & ~has_opening[records])
    starts = np.zeros(count, dtype=np.int64)
    lengths = np.zeros(count, dtype=np.int64)
    value_start = pairs.starts[found[chosen]] + len(name) + 1
    starts[records[chosen]] = value_start
    lengths[records[chosen]] = pairs.ends[found[chosen]] - value_start
    return starts, lengths


def _texts(tail: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Values as text: UTF-8, invalid bytes replaced (per value, as the per-row path)."""
    spans = zip(starts.tolist(), (starts + lengths).tolist(), strict=True)
    pieces = [tail[a:b] for a, b in spans]
    try:
        return [piece.decode() for piece in pieces]
    except UnicodeDecodeError:
        return [_text(piece) for piece in pieces]


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _split_keys(texts: list[str]) -> list[tuple[str, ...]]:
    return [tuple(t.split(KEY_SEPARATOR)) if t else () for t in texts]


def _property_dicts(tail: bytes, props: np.ndarray, t_end: np.ndarray) -> list[dict[str, str]]:
    """User properties per record (KEYS, TAGS, UNIQ_KEY left out), as the per-row path."""
    out: list[dict[str, str]] = []
    for a, b in zip(props.tolist(), t_end.tolist(), strict=True):
        found: dict[str, str] = {}
        for pair in tail[a:b].decode("utf-8", "replace").split("\x02"):
            if pair:
                name, _, value = pair.partition("\x01")
                found[name] = value
        out.append({k: v for k, v in found.items() if k not in _HIDDEN})
    return out


def _body_list(
    buf: bytes, starts: np.ndarray, lengths: np.ndarray, compressed: np.ndarray
) -> list[bytes]:
    spans = zip(starts.tolist(), (starts + lengths).tolist(), strict=True)
    bodies = [buf[a:b] for a, b in spans]
    for i in compressed.nonzero()[0].tolist():
        bodies[i] = decompress(bodies[i], True)
    return bodies


class _ListColumns:
    """Columns as Python lists (the tuple path; timestamps in microseconds)."""

    def __init__(self, tail: bytes) -> None:
        self.tail = tail

    def longs(self, values: np.ndarray) -> list[int]:
        return values.tolist()  # type: ignore[no-any-return]

    def micros(self, ms: np.ndarray) -> list[int]:
        return (ms * 1000).tolist()  # type: ignore[no-any-return]

    def bodies(
        self, buf: bytes, starts: np.ndarray, lengths: np.ndarray, compressed: np.ndarray
    ) -> list[bytes]:
        return _body_list(buf, starts, lengths, compressed)

    def texts(self, starts: np.ndarray, lengths: np.ndarray) -> list[str]:
        return _texts(self.tail, starts, lengths)

    def keys(self, starts: np.ndarray, lengths: np.ndarray) -> list[tuple[str, ...]]:
        return _split_keys(_texts(self.tail, starts, lengths))

    def properties(self, props: np.ndarray, t_end: np.ndarray) -> list[dict[str, str]]:
        return _property_dicts(self.tail, props, t_end)


_TIMESTAMP = pa.timestamp("us", tz="UTC")
_KEYS_TYPE = pa.list_(pa.string())
_PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())


def _gather(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The bytes ``source[starts[i] : starts[i] + lengths[i]]`` back to back, in one pass."""
    total = int(lengths.sum())
    offsets = np.zeros(len(lengths), dtype=np.int64)
    lengths[:-1].cumsum(out=offsets[1:])
    index = np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lengths)
    return source[index]


def _offsets(lengths: np.ndarray) -> pa.Buffer:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    lengths.cumsum(out=offsets[1:])
    return pa.py_buffer(offsets)


class _ArrowColumns:
    """Columns as Arrow arrays of the source's Arrow schema (``columns.ColumnBuffer``):
    short strings gathered from the tail in one numpy pass, bodies joined once."""

    def __init__(self, tail: bytes) -> None:
        self.tail = tail
        self._tail_bytes = np.frombuffer(tail, np.uint8)

    def longs(self, values: np.ndarray) -> pa.Array:
        return pa.array(values, type=pa.int64())

    def micros(self, ms: np.ndarray) -> pa.Array:
        return pa.array(ms * 1000, type=_TIMESTAMP)

    def bodies(
        self, buf: bytes, starts: np.ndarray, lengths: np.ndarray, compressed: np.ndarray
    ) -> pa.Array:
        if np.count_nonzero(compressed):
            return pa.array(_body_list(buf, starts, lengths, compressed), type=pa.binary())
        view = memoryview(buf)
        spans = zip(starts.tolist(), (starts + lengths).tolist(), strict=True)
        data = b"".join([view[a:b] for a, b in spans])
        return pa.Array.from_buffers(
            pa.binary(), len(lengths), [None, _offsets(lengths), pa.py_buffer(data)]
        )

    def texts(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        data = _gather(self._tail_bytes, starts, lengths)
        if np.count_nonzero(data >= 0x80):  # not ASCII: decode (and replace) value by value
            return pa.array(_texts(self.tail, starts, lengths), type=pa.string())
        return pa.Array.from_buffers(
            pa.string(), len(lengths), [None, _offsets(lengths), pa.py_buffer(data)]
        )

    def keys(self, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
        """KEYS values split at every space (``str.split(" ")``), an empty list without
        KEYS; ASCII values are split with array arithmetic."""
        data = _gather(self._tail_bytes, starts, lengths)
        if np.count_nonzero(data >= 0x80):
            return pa.array(_split_keys(_texts(self.tail, starts, lengths)), type=_KEYS_TYPE)
        spaces = (data == 0x20).nonzero()[0]
        value_ends = lengths.cumsum()
        has = lengths > 0
        # Element ends in ``data``: every space and the end of every non-empty value; with
        # the spaces removed from the child data, an end moves left by the spaces before it.
        ends = np.sort(np.concatenate([spaces, value_ends[has]]))
        child_offsets = np.zeros(len(ends) + 1, dtype=np.int32)
        child_offsets[1:] = ends - spaces.searchsorted(ends)
        child_data = data[data != 0x20]
        spaces_per_value = np.diff(spaces.searchsorted(value_ends), prepend=0)
        elements = has * (1 + spaces_per_value)
        list_offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        elements.cumsum(out=list_offsets[1:])
        child = pa.Array.from_buffers(
            pa.string(), len(ends), [None, pa.py_buffer(child_offsets), pa.py_buffer(child_data)]
        )
        return pa.ListArray.from_arrays(pa.array(list_offsets), child, type=_KEYS_TYPE)

    def properties(self, props: np.ndarray, t_end: np.ndarray) -> pa.Array:
        dicts = _property_dicts(self.tail, props, t_end)
        return pa.array([list(d.items()) for d in dicts], type=_PROPERTIES_TYPE)
