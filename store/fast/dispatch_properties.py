"""The properties of a chunk of records as ``name\\x01value`` pairs, and what dispatch takes
from them: TAGS hash codes and index keys (columnar, for ``wharf.store.fast.dispatch_columns``).

All positions are in one ``tail`` buffer: each record's TOPICLENGTH, TOPIC, PROPERTIESLENGTH
and PROPERTIES, records back to back. Names and values cannot contain the \\x02 separator, so
a pair's first bytes say exactly which property it is; the last pair of a name wins, as in
the reference's properties dict.
"""

from __future__ import annotations

import numpy as np
from wharf.store.codec.hashes import index_key_hash, java_string_hash
from wharf.store.fast.index_hash import SegmentHashes, abs_index_hash, power_table

_INT32 = 0x100000000


# Zeros the caller appends to the tail: the 8-byte name words and the byte after them stay in
# bounds.
PAD = 9


class PropertyPairs:
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


def tags_codes(
    tail: bytes,
    pairs: PropertyPairs,
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


def index_keys(
    data: np.ndarray,
    tail: bytes,
    pairs: PropertyPairs,
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
        prefix = np.uint32(prefix_hash(topics[0]))
    else:
        prefix = np.array(prefix_hashes(topics), dtype=np.uint32)[topic_ids[rows]]
    lengths = ends - starts
    powers = power_table(int(np.maximum.reduce(lengths)) + 1)
    full = prefix * powers[lengths] + hashes(starts, ends)
    result = abs_index_hash(full)
    if check_ascii:
        for i in (~hashes.ascii(starts, ends)).nonzero()[0].tolist():
            key = tail[int(starts[i]) : int(ends[i])].decode("utf-8", "replace")
            result[i] = index_key_hash(f"{topics[topic_ids[rows[i]]]}#{key}")
    return rows, result


_PREFIX_HASHES: dict[str, int] = {}


def prefix_hash(topic: str) -> int:
    """hashCode of ``topic#`` as uint32 (topics are ASCII)."""
    h = _PREFIX_HASHES.get(topic)
    if h is None:
        h = java_string_hash(topic + "#") % _INT32
        if len(_PREFIX_HASHES) < 4096:
            _PREFIX_HASHES[topic] = h
    return h


def prefix_hashes(topics: list[str]) -> list[int]:
    """``prefix_hash`` of each topic: the known ones looked up without a call each (a chunk
    at 256 topics holds ~64 batches' topics)."""
    found = list(map(_PREFIX_HASHES.get, topics))
    if None in found:
        return [prefix_hash(topic) for topic in topics]
    return found  # type: ignore[return-value]  # no None in it
