"""The records at known positions of a buffer, gathered for the columnar decoders (the store's
dispatch, ``wharf.store.fast.dispatch_columns``, and the Spark source's per-reply decode).

One numpy fancy-index gathers each record's header through the caller's structured dtype
(``wharf.store.fast.layout_dtypes.columns`` over ``wharf.store.codec.layout.RECORD_FIELDS``;
it must name ``total``, ``magic`` and ``body``); the tails (TOPICLENGTH: one byte in a V1
record, two in V2; TOPIC, PROPERTIESLENGTH, PROPERTIES) are joined back to back into one blob, and every length is
checked for all records at once. Anything a check refuses (a truncated header, a bad magic,
lengths that do not add up) gives None: the caller takes its per-record reference path, which
raises the precise error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from wharf.store.codec.layout import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2, RECORD_HEADER_SIZE
from wharf.store.codec.records import ReadableBuffer
from wharf.store.fast import load
from wharf.store.fast.dispatch_properties import PAD

# The compiled tail gather (store/fast/_log_scan.c ``gather_tails``); None: the numpy twin.
_compiled = load("_log_scan")


@dataclass(slots=True, eq=False)
class RecordTails:
    """One element per record (int64 unless said), in the order of the positions."""

    header: np.ndarray  # the caller's structured header fields
    total: np.ndarray  # TOTALSIZE
    body_start: np.ndarray  # in the buffer
    body_len: np.ndarray
    tail: bytes  # every record's tail, back to back
    data: np.ndarray  # ``tail`` as uint8, PAD zero bytes after it (for unchecked lookahead)
    starts: np.ndarray  # each tail's start in ``tail``
    ends: np.ndarray  # each tail's end in ``tail``
    props: np.ndarray  # each record's PROPERTIES start in ``tail``


def gather_record_tails(
    buf: ReadableBuffer, pos: np.ndarray, header_dtype: np.dtype, header_bytes: np.ndarray
) -> RecordTails | None:
    """The records starting at ``pos`` (int64, at least one) of ``buf``; None when a record is
    malformed."""
    if _compiled is not None:
        # Every check of the twin below, and the tails joined, in one pass (~0.35 us a record
        # less, 512 records of 1 KiB): a refusal is the same None.
        gathered = _compiled.gather_tails(buf, pos, PAD)
        if gathered is None:
            return None
        blob, meta = gathered
        header, total, body_start, body_len = _headers(buf, pos, header_dtype, header_bytes)
        starts, ends, props = np.frombuffer(meta, np.int64).reshape(3, len(pos))
        data = np.frombuffer(blob, np.uint8)  # writable: the decoders mark separators in it
        tail = bytes(blob[: len(blob) - PAD])
        return RecordTails(header, total, body_start, body_len, tail, data, starts, ends, props)
    return _gather_numpy(buf, pos, header_dtype, header_bytes)


def _headers(
    buf: ReadableBuffer, pos: np.ndarray, header_dtype: np.dtype, header_bytes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(header fields, TOTALSIZE, body starts, body lengths) of the records at ``pos``, whose
    headers are known to fit in ``buf``."""
    view = np.frombuffer(buf, np.uint8)  # zero-copy; the gather below copies
    try:
        header = view[pos[:, None] + header_bytes].view(header_dtype)[:, 0]
    finally:
        del view  # release the buffer export: a segment's map must stay closable
    total = header["total"].astype(np.int64)
    body_len = header["body"].astype(np.int64)
    return header, total, pos + RECORD_HEADER_SIZE, body_len


def _gather_numpy(
    buf: ReadableBuffer, pos: np.ndarray, header_dtype: np.dtype, header_bytes: np.ndarray
) -> RecordTails | None:
    """The twin of ``_log_scan.gather_tails``: the checks and the join with array passes."""
    count = len(pos)
    if int(np.maximum.reduce(pos)) + RECORD_HEADER_SIZE > len(buf):
        return None  # a truncated header
    header, total, body_start, body_len = _headers(buf, pos, header_dtype, header_bytes)
    body_end = body_start + body_len
    rec_end = pos + total
    magic = header["magic"]
    wide = (magic == MESSAGE_MAGIC_CODE_V2).astype(np.int64)  # a two-byte TOPICLENGTH
    ok = ((magic == MESSAGE_MAGIC_CODE) | (wide == 1)) & (body_len >= 0)
    ok &= (rec_end <= len(buf)) & (body_end + 3 + wide <= rec_end)
    if np.count_nonzero(ok) != count:
        return None
    tail = b"".join([buf[a:b] for a, b in zip(body_end.tolist(), rec_end.tolist(), strict=True)])
    lengths = rec_end - body_end
    starts = np.zeros(count, dtype=np.int64)
    lengths[:-1].cumsum(out=starts[1:])
    ends = starts + lengths
    data = np.zeros(len(tail) + PAD, dtype=np.uint8)
    data[: len(tail)] = np.frombuffer(tail, np.uint8)
    props = starts + 3 + data[starts].astype(np.int64)
    if wide.any():  # V2: the length is two bytes, big-endian
        long_length = data[starts].astype(np.int64) << 8 | data[starts + 1]
        props = np.where(wide == 1, starts + 4 + long_length, props)
    if np.count_nonzero(props <= ends) != count:
        return None  # a damaged topic length: its properties would lie past the record
    props_len = data[props - 2].astype(np.int64) << 8 | data[props - 1]
    if np.count_nonzero(props + props_len == ends) != count:
        return None
    return RecordTails(header, total, body_start, body_len, tail, data, starts, ends, props)
