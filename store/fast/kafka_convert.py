"""The compiled Kafka record converter (``_kafka_convert.c``): one C call per record batch each
way, where the Python path (``wharf.store.codec.kafka_records`` with the Kafka front end's
record batch codec) spent microseconds per record.

Why: at 1 KiB records the per-record Python conversion was most of the Kafka front end's
broker CPU (tests/bench/kafka.py, 100,000 records, 8 partitions, before the converter): Produce
18.5 us a record against 12.1 for the SDK's send_batch, Fetch 12.9 against 3.3 for the SDK's
pulls. Under cProfile 94% of a Produce was decoding records and building send-batch records
(records._decode_records, kafka_records.record_body_properties, send_records.encode_record),
98% of a Fetch the store's StoredMessage decode plus to_record_fields and encode_records.

- ``send_records``: a batch's records section -> the send-batch records the store appends
  (``kafka_records``' mapping), or None;
- ``fetch_batch``: the store's raw records -> one record batch v2 with its CRC-32C, or None;
  a COMPRESSED body is inflated by the codec's ``bodies.inflate`` (the Python path's
  ``plain_body``), called from C for that record only: an uncompressed record pays one flag
  test.

None means "take the Python path", which then gives the result or the exact error: the C code
handles the common case only (plain headers, canonical base64 keys, UTF-8 properties without
repeated names) and never has to reproduce an error. ``compiled`` is None when the install did
not build the extension or when ``WHARF_NO_SPEEDUPS`` is set: ``wharf.store.fast.load``
decides, as for every other accelerator.

The Kafka front end may not import ``wharf.store.fast`` (the import-linter contract "front
ends: the store stays behind the core"): it reaches these through the store's lazy exports
``wharf.store.kafka_send_records``, ``kafka_fetch_batch`` and ``kafka_compiled`` (this module
is imported on their first use). The body CRC-32 (the codec's zlib or zlib-ng ``crc32``) is
passed to C from here, so no private name of the codec leaves the store.
"""

from __future__ import annotations

from types import ModuleType

import crc32c
from wharf.store.codec.bodies import inflate
from wharf.store.codec.properties import SYSTEM_PROPERTY_NAMES
from wharf.store.codec.records import _crc32
from wharf.store.fast import load

__all__ = ["compiled", "configured", "fetch_batch", "is_compiled", "send_records"]


def configured() -> ModuleType | None:
    """``wharf.store.fast._kafka_convert`` told the system property names, or None (not
    built, or disabled)."""
    module = load("_kafka_convert")
    if module is not None:
        module.configure(sorted(SYSTEM_PROPERTY_NAMES))
    return module


compiled = configured()


def is_compiled() -> bool:
    """Whether ``send_records`` and ``fetch_batch`` may answer (else they answer None)."""
    return compiled is not None


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
