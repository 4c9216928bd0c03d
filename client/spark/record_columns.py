"""The raw records of one ``raw_records`` pull reply -> the ``wharf`` source's columns, per reply.

The per-row path (``wharf.client.records`` messages, one attribute read per column and row:
a properties regex each for ``tags``, ``keys`` and ``msgId``) costs ~10 us a row; here one
reply (<= 1024 records) is decoded in vectorized passes over its bytes:

1. the record starts are walked once (one TOTALSIZE read per record), then the header fields
   the columns need are gathered in one numpy fancy-index through the structured dtype
   derived from ``wharf.store.codec.layout.RECORD_FIELDS`` (``wharf.store.fast.layout_dtypes``);
   every field length is checked for all records at once;
2. the tails (topic, properties) are joined and split into ``name\\x01value`` pairs with
   ``wharf.store.fast.dispatch_properties.PropertyPairs`` (the store's dispatch decoder);
   TAGS, KEYS and UNIQ_KEY are found by their first bytes, the last pair of a name winning;
3. only the Python objects Spark receives are built: one slice per body (compressed bodies
   decompressed), one decode per tags / msgId value, one split per KEYS value.

The output equals the per-row path's on the same records (tests/spark/test_record_columns.py
compares them): exact-tag filtering, the range end, tags ``""`` and keys ``()`` when absent,
msgId ``""`` without UNIQ_KEY, invalid UTF-8 replaced. Anything the array checks refuse
(a malformed record) returns None: the caller takes the per-row path, which raises its
precise error.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np
from wharf.client.compression import decompress
from wharf.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    RECORD_FIELDS,
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SYSFLAG_COMPRESSED,
    TOTAL_SIZE,
)
from wharf.store.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.fast.dispatch_properties import PAD, PropertyPairs
from wharf.store.fast.layout_dtypes import columns

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
    columns: dict[str, list[Any]]


def decode_reply_columns(
    buf: bytes,
    start: int,
    end: int,
    names: Collection[str],
    tags: frozenset[str] | None,
    end_offset: int,
) -> ReplyColumns | None:
    """Columns ``names`` (of offset, body, tags, keys, properties, msgId, bornTimestamp,
    storeTimestamp; timestamps in microseconds) of the records in ``buf[start:end]`` whose
    exact tag is in ``tags`` (None: all) and whose queue offset is below ``end_offset``.
    None when a record is malformed (the per-row path raises its error)."""
    positions = _walk(buf, start, end)
    if positions is None:
        return None
    count = len(positions)
    if not count:
        return ReplyColumns(0, None, {})
    pos = np.array(positions, dtype=np.int64)
    view = np.frombuffer(buf, np.uint8)
    try:
        header = view[pos[:, None] + _HEADER_BYTES].view(_HEADER)[:, 0]
    finally:
        del view
    total = header["total"].astype(np.int64)
    body_len = header["body"].astype(np.int64)
    body_start = pos + RECORD_HEADER_SIZE
    body_end = body_start + body_len
    rec_end = pos + total
    ok = (header["magic"] == MESSAGE_MAGIC_CODE) & (body_len >= 0) & (body_end + 3 <= rec_end)
    if np.count_nonzero(ok) != count:
        return None
    # Tail of each record (TOPICLENGTH, TOPIC, PROPERTIESLENGTH, PROPERTIES), back to back.
    body_end_list = body_end.tolist()
    rec_end_list = rec_end.tolist()
    tail = b"".join([buf[a:b] for a, b in zip(body_end_list, rec_end_list, strict=True)])
    lengths = rec_end - body_end
    t_start = np.zeros(count, dtype=np.int64)
    lengths[:-1].cumsum(out=t_start[1:])
    t_end = t_start + lengths
    data = np.zeros(len(tail) + PAD, dtype=np.uint8)
    data[: len(tail)] = np.frombuffer(tail, np.uint8)
    props = t_start + 3 + data[t_start].astype(np.int64)
    props_len = data[props - 2].astype(np.int64) << 8 | data[props - 1]
    if np.count_nonzero((props <= t_end) & (props + props_len == t_end)) != count:
        return None
    pairs = PropertyPairs(data, t_start, props, t_end)

    want = set(names)
    tags_values: list[str] | None = None
    keep: np.ndarray | None = None
    if tags is not None or "tags" in want:
        tags_values = _values(tail, pairs, _TAGS, count, "", first=False)
    if tags is not None:
        assert tags_values is not None
        keep = np.fromiter((t in tags for t in tags_values), dtype=bool, count=count)
    queue_offsets = header["queue_offset"].astype(np.int64)
    kept = queue_offsets if keep is None else queue_offsets[keep]
    first_offset = int(kept[0]) if len(kept) else None
    in_range = queue_offsets < end_offset
    keep = in_range if keep is None else keep & in_range
    rows = int(np.count_nonzero(keep))
    if rows == 0:
        return ReplyColumns(0, first_offset, {})
    selected: np.ndarray | None = None if rows == count else keep.nonzero()[0]

    def pick(values: list[Any]) -> list[Any]:
        return values if selected is None else [values[i] for i in selected.tolist()]

    def pick_array(values: np.ndarray) -> list[int]:
        return (values if selected is None else values[selected]).tolist()

    out: dict[str, list[Any]] = {}
    if "offset" in want:
        out["offset"] = pick_array(queue_offsets)
    if "bornTimestamp" in want:
        out["bornTimestamp"] = pick_array(header["born_ts"].astype(np.int64) * 1000)
    if "storeTimestamp" in want:
        out["storeTimestamp"] = pick_array(header["store_ts"].astype(np.int64) * 1000)
    if "body" in want:
        out["body"] = _bodies(buf, body_start, body_end, header["sys_flag"], selected)
    if "tags" in want:
        assert tags_values is not None
        out["tags"] = pick(tags_values)
    if "keys" in want:
        texts = _values(tail, pairs, _KEYS, count, "", first=False)
        out["keys"] = pick([tuple(t.split(KEY_SEPARATOR)) if t else () for t in texts])
    if "msgId" in want:
        out["msgId"] = pick(_values(tail, pairs, _UNIQ_KEY, count, "", first=True))
    if "properties" in want:
        out["properties"] = _properties(tail, props, t_end, selected)
    return ReplyColumns(rows, first_offset, out)


def _walk(buf: bytes, start: int, end: int) -> list[int] | None:
    """Record starts in ``buf[start:end]``; None if the sizes do not chain to ``end``."""
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


def _values(
    tail: bytes, pairs: PropertyPairs, name: bytes, count: int, default: str, first: bool
) -> list[str]:
    """Per record, the value of its LAST ``name`` pair (as the per-row regex finds it);
    with ``first``, a pair that opens the properties wins (the msgId fast path)."""
    found = _matches(pairs, name)
    records = pairs.records[found]
    if first and len(found):
        # Pairs are in tail order; a record's opening pair is the first pair of its record.
        opening = np.ones(len(found), dtype=bool)
        opening[1:] = records[1:] != records[:-1]
        is_first_pair = np.zeros(len(pairs.starts), dtype=bool)
        is_first_pair[0] = True
        is_first_pair[1:] = pairs.records[1:] != pairs.records[:-1]
        opening &= is_first_pair[found]
    last = np.ones(len(found), dtype=bool)
    last[:-1] = records[1:] != records[:-1]
    n = len(name) + 1
    starts = pairs.starts[found] + n
    ends = pairs.ends[found]
    if first and len(found):
        # Records with an opening pair take it; the others their last pair.
        has_opening = np.zeros(count, dtype=bool)
        has_opening[records[opening]] = True
        chosen = opening | (last & ~has_opening[records])
    else:
        chosen = last
    rec = records[chosen].tolist()
    a_list = starts[chosen].tolist()
    b_list = ends[chosen].tolist()
    if len(rec) == count:  # every record has the property: the usual case
        return [_text(tail[a:b]) for a, b in zip(a_list, b_list, strict=True)]
    out = [default] * count
    for r, a, b in zip(rec, a_list, b_list, strict=True):
        out[r] = _text(tail[a:b])
    return out


def _text(raw: bytes) -> str:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("utf-8", "replace")


def _bodies(
    buf: bytes,
    body_start: np.ndarray,
    body_end: np.ndarray,
    sys_flags: np.ndarray,
    selected: np.ndarray | None,
) -> list[bytes]:
    compressed = (sys_flags & SYSFLAG_COMPRESSED) != 0
    if selected is not None:
        body_start, body_end, compressed = (
            body_start[selected],
            body_end[selected],
            compressed[selected],
        )
    bodies = [buf[a:b] for a, b in zip(body_start.tolist(), body_end.tolist(), strict=True)]
    for i in compressed.nonzero()[0].tolist():
        bodies[i] = decompress(bodies[i], True)
    return bodies


def _properties(
    tail: bytes, props: np.ndarray, t_end: np.ndarray, selected: np.ndarray | None
) -> list[dict[str, str]]:
    """User properties per record (KEYS, TAGS, UNIQ_KEY left out), as the per-row path."""
    if selected is not None:
        props, t_end = props[selected], t_end[selected]
    out: list[dict[str, str]] = []
    for a, b in zip(props.tolist(), t_end.tolist(), strict=True):
        found: dict[str, str] = {}
        for pair in tail[a:b].decode("utf-8", "replace").split("\x02"):
            if pair:
                name, _, value = pair.partition("\x01")
                found[name] = value
        out.append({k: v for k, v in found.items() if k not in _HIDDEN})
    return out
