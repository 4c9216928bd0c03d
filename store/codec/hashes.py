"""The hashes stored in the queues and indexes, as RocketMQ computes them in Java: the
ConsumeQueue tagsCode (``String.hashCode()`` of the tag) and the IndexFile slot hash. Sans-IO,
numpy-free; ``wharf.store.fast.index_hash`` is the vectorized twin."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=65536)
def java_string_hash(s: str) -> int:
    """Java ``String.hashCode()`` (over UTF-16 code units), as a signed 32-bit int: the
    ConsumeQueue tagsCode of a tag."""
    units = s.encode("ascii") if s.isascii() else _utf16_units(s)
    h = 0
    for unit in units:
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _utf16_units(s: str) -> list[int]:
    raw = s.encode("utf-16-be")
    return [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]


def index_key_hash(key: str) -> int:
    """IndexFile key hash: ``abs(key.hashCode())``, 0 for Integer.MIN_VALUE (as RocketMQ's
    ``IndexFile.indexKeyHashMethod``)."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)
