"""The compiled Kafka record converter (``_convert.c``): one C call per record batch each way,
where the Python path spent microseconds per record.

Why: at 1 KiB records the per-record Python conversion was most of the Kafka front end's
broker CPU (tests/bench/kafka.py, 100,000 records, 8 partitions, before this module): Produce
18.5 us a record against 12.1 for the SDK's send_batch, Fetch 12.9 against 3.3 for the SDK's
pulls. Under cProfile 94% of a Produce was decoding records and building send-batch records
(records._decode_records, convert.record_body_properties, send_records.encode_record), 98% of a
Fetch the store's StoredMessage decode plus to_record_fields and encode_records.

- ``send_records``: a batch's records section -> the send-batch records the store appends
  (convert.py's mapping), or None;
- ``fetch_batch``: the store's raw records -> one record batch v2 with its CRC-32C, or None;
  a COMPRESSED body is inflated by the core's ``bodies.inflate`` (the Python path's
  ``plain_body``), called from C for that record only: an uncompressed record pays one flag
  test.

None means "take the Python path", which then gives the result or the exact error: the C code
handles the common case only (plain headers, canonical base64 keys, UTF-8 properties without
repeated names) and never has to reproduce an error. ``compiled`` is None when the install did
not build the extension (no compiler: it is optional in pyproject.toml) or when
``WHARF_NO_SPEEDUPS`` is set, as for ``wharf.store.fast.load`` (which the front end may not
import: the import-linter contract "front ends: the store stays behind the core").
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import crc32c
from wharf.broker.core.bodies import inflate
from wharf.broker.core.validate import SYSTEM_PROPERTY_NAMES
from wharf.store.codec.records import _crc32

__all__ = ["compiled", "fetch_batch", "load", "send_records"]


def load() -> ModuleType | None:
    """``wharf.broker.frontends.kafka._convert`` configured, or None (not built, or disabled)."""
    if os.environ.get("WHARF_NO_SPEEDUPS"):
        return None
    try:
        module = importlib.import_module("wharf.broker.frontends.kafka._convert")
    except ImportError:  # no compiler at install time: the Python path
        return None
    module.configure(sorted(SYSTEM_PROPERTY_NAMES))
    return module


compiled = load()


def send_records(
    section: bytes | memoryview,
    count: int,
    base_timestamp: int,
    tail: bytes,
    ids: list[str],
    now_ms: int,
    max_body: int,
    mark: str | None,
) -> tuple[bytes, list[int]] | None:
    """(send-batch records, body sizes) of a batch's uncompressed records section, or None
    (also when not compiled)."""
    if compiled is None:
        return None
    result: tuple[bytes, list[int]] | None = compiled.produce_records(
        section, count, base_timestamp, tail, ids, now_ms, max_body, mark, _crc32
    )
    return result


def fetch_batch(records: bytes, count: int) -> bytes | None:
    """One record batch v2 of ``count`` whole stored records, or None (also when not
    compiled)."""
    if compiled is None:
        return None
    batch: bytes | None = compiled.fetch_batch(records, count, crc32c.crc32c, inflate)
    return batch
