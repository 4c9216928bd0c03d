"""numpy structured dtypes of the codec's layouts, built once at import from the field tables of
``wharf.store.codec.layout`` (no field offset or size is written anywhere else).

``columns(fields, names)`` picks fields of one layout by their layout name and renames them to
short column names: it returns a packed big-endian dtype of those fields, in layout order, and
the byte positions ("lanes") that gather them from one record, so ``buf[starts[:, None] +
lanes].view(dtype)`` reads the chosen fields of many records in one fancy-index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
from wharf.store.codec.layout import Field

# struct code -> numpy type (big-endian; hosts are opaque 8-byte values).
_NUMPY_TYPES = {"i": ">i4", "I": ">u4", "q": ">i8", "8s": "V8"}


class Columns(NamedTuple):
    dtype: np.dtype
    lanes: np.ndarray  # int64 byte positions of the chosen fields, in dtype order


def columns(fields: tuple[Field, ...], names: Mapping[str, str]) -> Columns:
    """The fields named in ``names`` (layout name -> column name; in layout order)."""
    chosen = [field for field in fields if field.name in names]
    if len(chosen) != len(names) or [f.name for f in chosen] != list(names):
        raise ValueError(f"{list(names)} are not fields of this layout, in its order")
    dtype = np.dtype([(names[f.name], _NUMPY_TYPES[f.code]) for f in chosen])
    lanes = np.concatenate([np.arange(f.offset, f.offset + f.size) for f in chosen])
    assert dtype.itemsize == len(lanes)
    return Columns(dtype, lanes.astype(np.int64))


def packed(fields: tuple[Field, ...], names: Mapping[str, str]) -> np.dtype:
    """The dtype of a whole layout (every field named), e.g. a ConsumeQueue unit."""
    if len(names) != len(fields):
        raise ValueError("name every field of the layout")
    return columns(fields, names).dtype
