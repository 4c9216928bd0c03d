"""The compiled accelerators carry the record layout in store/fast/_format.h: it must be
store/codec/format.py's, byte for byte (a drift would write or accept wrong records)."""

from __future__ import annotations

import importlib
import struct

import pytest
from wharf.store import codec as fmt

# RECORD_HEADER (store.format) field by field, with its struct codes: offsets follow from them.
_FIELDS = [
    ("TOTALSIZE", "i"), ("MAGIC", "I"), ("BODY_CRC", "i"), ("QUEUE_ID", "i"), ("FLAG", "i"),
    ("QUEUE_OFFSET", "q"), ("PHYSICAL_OFFSET", "q"), ("SYS_FLAG", "i"),
    ("BORN_TIMESTAMP", "q"), ("BORN_HOST", "8s"), ("STORE_TIMESTAMP", "q"),
    ("STORE_HOST", "8s"), ("RECONSUME", "i"), ("PREPARED", "q"), ("BODY_LENGTH", "i"),
]  # fmt: skip


def header_offsets() -> dict[str, int]:
    codes = [code for _, code in _FIELDS]
    assert ">" + "".join(codes) == fmt.RECORD_HEADER.format  # the table above is format.py's
    return {name: struct.calcsize(">" + "".join(codes[:i])) for i, (name, _) in enumerate(_FIELDS)}


@pytest.mark.parametrize(
    "module",
    [
        "wharf.store.fast._record_encoder",
        "wharf.store.fast._record_check",
        "wharf.store.fast._log_scan",
    ],
)
def test_compiled_layout_is_store_formats(module: str) -> None:
    compiled = importlib.import_module(module)  # built by `pip install -e .`
    assert compiled.RECORD_HEADER_SIZE == fmt.RECORD_HEADER_SIZE
    assert compiled.RECORD_FIXED_SIZE == fmt.RECORD_FIXED_SIZE
    assert compiled.MESSAGE_MAGIC_CODE == fmt.MESSAGE_MAGIC_CODE
    assert compiled.BLANK_MAGIC_CODE == fmt.BLANK_MAGIC_CODE
    assert compiled.MAX_PROPERTIES_LENGTH == fmt.MAX_PROPERTIES_LENGTH
    offsets = header_offsets()
    for name, offset in offsets.items():
        if hasattr(compiled, f"OFF_{name}"):
            assert getattr(compiled, f"OFF_{name}") == offset, name
    assert compiled.OFF_MAGIC == fmt.OFFSET_MAGIC
    assert compiled.OFF_STORE_TIMESTAMP == fmt.OFFSET_STORE_TIMESTAMP
