"""IndexFile key hashes for a whole dispatch chunk in one vectorized pass.

RocketMQ's keyHash is ``abs(String.hashCode())`` of ``topic#key`` (0 for Integer.MIN_VALUE):
the polynomial sum(c_i * 31^(n-1-i)) mod 2^32 over UTF-16 code units. A Python loop per
character cost 10-15 % of the broker's CPU under load (every message has a 32-hex UNIQ_KEY),
so keys of one length are stacked into a matrix of code units and multiplied by the vector of
powers of 31 in uint32, whose arithmetic wraps mod 2^32 exactly as Java's int does. Keys with
non-ASCII characters (their UTF-16 length differs from their UTF-8 length) take the reference
``index_key_hash``: rare, and correctness there matters more than speed.
"""

from __future__ import annotations

from operator import itemgetter, mul

import numpy as np
from wharf.store.codec.hashes import index_key_hash

_INT_MIN = -0x80000000
_MASK32 = 0xFFFFFFFF
_POWERS: dict[int, np.ndarray] = {}
_POWER_LISTS: dict[int, list[int]] = {}
# numpy's fixed cost per call (~60 us) beats the per-key loop from about 20 keys (measured).
VECTORIZE_FROM = 24


def _powers(n: int) -> np.ndarray:
    """(31^(n-1), ..., 31, 1) mod 2^32 as uint32, cached per key length."""
    powers = _POWERS.get(n)
    if powers is None:
        values = [1] * n
        for i in range(n - 2, -1, -1):
            values[i] = values[i + 1] * 31 & 0xFFFFFFFF
        powers = _POWERS[n] = np.array(values, dtype=np.uint32)
    return powers


def _small_hash(key: str) -> int:
    """One key: the polynomial summed by ``map(mul)`` in C (ASCII), else the reference."""
    raw = key.encode()
    n = len(raw)
    if n != len(key):
        return index_key_hash(key)
    powers = _POWER_LISTS.get(n)
    if powers is None:
        powers = _POWER_LISTS[n] = _powers(n).tolist()
    h = sum(map(mul, raw, powers)) & _MASK32
    if h & 0x80000000:
        h = 0x100000000 - h  # abs of the negative int32
    return 0 if h == 0x80000000 else h


def index_key_hashes(keys: list[str]) -> list[int]:
    """``[index_key_hash(k) for k in keys]``, vectorized per key length."""
    count = len(keys)
    if count < VECTORIZE_FROM:
        return [_small_hash(key) for key in keys]
    length_list = list(map(len, keys))
    lengths = np.array(length_list, dtype=np.int64)
    hashes = np.empty(count, dtype=np.uint32)
    for n in set(length_list):  # (np.unique is ~100x slower here: a hash table per call)
        where = np.flatnonzero(lengths == n)
        picked = where.tolist()
        group = itemgetter(*picked)(keys) if len(picked) > 1 else (keys[picked[0]],)
        text = "".join(group)
        if text.isascii():
            units = np.frombuffer(text.encode("ascii"), dtype=np.uint8).reshape(len(picked), n)
            hashes[where] = units.astype(np.uint32) @ _powers(n)
        else:
            # Already abs'd (0 <= h < 2^31): the abs below leaves it unchanged.
            hashes[where] = [index_key_hash(key) for key in group]
    signed = hashes.view(np.int32)
    result = np.abs(signed)  # int32 min stays negative under abs: RocketMQ maps it to 0
    result[signed == _INT_MIN] = 0
    return result.tolist()


# 31 is odd, so it has an inverse mod 2^32: the hash of any segment is a difference of two
# prefix sums, scaled (see ``SegmentHashes``).
_INV31 = pow(31, -1, 1 << 32)
_POW_TABLE = np.ones(1, dtype=np.uint32)  # 31^i mod 2^32
_INV_TABLE = np.ones(1, dtype=np.uint32)  # 31^-i mod 2^32


def power_table(n: int) -> np.ndarray:
    """31^i mod 2^32 for i < n (uint32)."""
    return _power_tables(n)[0]


def _power_tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(31^i, 31^-i) mod 2^32 for i < n (uint32), grown on demand and kept. A running
    product in uint32 wraps mod 2^32, so ``cumprod`` computes the powers exactly."""
    global _POW_TABLE, _INV_TABLE
    if len(_POW_TABLE) < n:
        size = max(n, 2 * len(_POW_TABLE))
        powers = np.ones(size, dtype=np.uint32)
        inverses = np.ones(size, dtype=np.uint32)
        np.cumprod(np.full(size - 1, 31, dtype=np.uint32), dtype=np.uint32, out=powers[1:])
        np.cumprod(np.full(size - 1, _INV31, dtype=np.uint32), dtype=np.uint32, out=inverses[1:])
        _POW_TABLE, _INV_TABLE = powers, inverses
    return _POW_TABLE, _INV_TABLE


class SegmentHashes:
    """Java's hashCode polynomial of any byte segments of one buffer, without a loop per
    segment or per length: with ``S[i] = sum(c_j * 31^-j for j < i)`` (mod 2^32),
    ``hash(data[a:b]) = 31^(b-1) * (S[b] - S[a])``. uint32 arithmetic wraps mod 2^32 as
    Java's int does. Exact for ASCII segments only (Java hashes UTF-16 units): callers check
    ``ascii`` and hash the others with the reference."""

    def __init__(self, data: np.ndarray) -> None:
        powers, inverses = _power_tables(len(data) + 1)
        self._powers = powers
        self._sums = np.zeros(len(data) + 1, dtype=np.uint32)
        np.cumsum(data * inverses[: len(data)], dtype=np.uint32, out=self._sums[1:])
        self._data = data
        self._high: np.ndarray | None = None

    def __call__(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """uint32 hashCode of each ``data[start:end]`` (0 for empty segments)."""
        return self._powers[ends - 1] * (self._sums[ends] - self._sums[starts])

    def ascii(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Per segment: True if every byte is below 0x80."""
        if self._high is None:
            self._high = np.zeros(len(self._data) + 1, dtype=np.int64)
            np.cumsum(self._data >= 0x80, out=self._high[1:])
        return self._high[ends] == self._high[starts]


def abs_index_hash(h: np.ndarray) -> np.ndarray:
    """RocketMQ's indexKeyHashMethod on uint32 hashCodes: abs of the int32, 0 for MIN."""
    signed = h.astype(np.uint32).view(np.int32).astype(np.int64)
    result = np.abs(signed)
    result[signed == _INT_MIN] = 0
    return result
