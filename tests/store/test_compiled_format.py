"""The compiled accelerators carry the record layout in store/fast/_format.h: it must be
wharf.store.codec.layout's, byte for byte (a drift would write or accept wrong records). Both the
header's text (every #define) and what each built module exports are checked."""

from __future__ import annotations

import importlib
import re
import struct
from pathlib import Path

import pytest
from wharf.store.codec import layout
from wharf.store.codec.properties import PROPERTY_SEPARATOR
from wharf.store.queue.consume_queue import BLANK_UNIT_SIZE

_HEADER_FILE = Path(layout.__file__).parent.parent / "fast" / "_format.h"
_COMPILED = [
    "wharf.store.fast._record_encoder",
    "wharf.store.fast._record_check",
    "wharf.store.fast._log_scan",
    "wharf.store.fast._record_decoder",
    "wharf.store.fast._kafka_convert",
]

# Every constant _format.h defines, with the layout value it must equal.
_EXPECTED = {
    "RECORD_HEADER_SIZE": layout.RECORD_HEADER_SIZE,
    "RECORD_FIXED_SIZE": layout.RECORD_FIXED_SIZE,
    "BLANK_HEADER_SIZE": layout.BLANK_HEADER.size,
    "RECORD_FIXED_SIZE_V2": layout.RECORD_FIXED_SIZE_V2,
    "MESSAGE_MAGIC_CODE": layout.MESSAGE_MAGIC_CODE,
    "MESSAGE_MAGIC_CODE_V2": layout.MESSAGE_MAGIC_CODE_V2,
    "MAX_TOPIC_LENGTH_V1": layout.MAX_TOPIC_LENGTH_V1,
    "BLANK_MAGIC_CODE": layout.BLANK_MAGIC_CODE,
    "MAX_PROPERTIES_LENGTH": layout.MAX_PROPERTIES_LENGTH,
    "PROPERTY_SEPARATOR": ord(PROPERTY_SEPARATOR),
    "SYSFLAG_COMPRESSED": layout.SYSFLAG_COMPRESSED,
    "CQ_STORE_UNIT_SIZE": layout.CQ_STORE_UNIT_SIZE,
    **{f"CQ_OFF_{field.name}": field.offset for field in layout.CQ_UNIT_FIELDS},
    "CQ_BLANK_UNIT_SIZE": BLANK_UNIT_SIZE,
    **{f"OFF_{field.name}": field.offset for field in layout.RECORD_FIELDS},
    "INDEX_HEADER_SIZE": layout.INDEX_HEADER_SIZE,
    "INDEX_HASH_SLOT_SIZE": layout.INDEX_HASH_SLOT_SIZE,
    "INDEX_ENTRY_SIZE": layout.INDEX_ENTRY_SIZE,
    **{f"INDEX_OFF_{field.name}": field.offset for field in layout.INDEX_ENTRY_FIELDS},
}


def _header_defines() -> dict[str, int]:
    """``#define NAME value`` lines of _format.h, values evaluated (they are C integer
    expressions of literals and earlier names)."""
    defines: dict[str, int] = {}
    for name, text in re.findall(
        r"^#define (\w+) (.+?)\s*(?:/\*.*)?$", _HEADER_FILE.read_text(), re.M
    ):
        if name == "WHARF_FORMAT_H":
            continue
        expression = re.sub(r"\b(0x[0-9A-Fa-f]+|\d+)u\b", r"\1", text)
        defines[name] = eval(expression, {}, dict(defines))
    return defines


def test_field_table_is_the_record_header() -> None:
    # The 15 fields, contiguous, make RECORD_HEADER (RocketMQ's MessageDecoder order).
    codes = [field.code for field in layout.RECORD_FIELDS]
    assert ">" + "".join(codes) == layout.RECORD_HEADER.format == ">iIiiiqqiq8sq8siqi"
    for i, field in enumerate(layout.RECORD_FIELDS):
        assert field.offset == struct.calcsize(">" + "".join(codes[:i])), field.name
        assert field.size == struct.calcsize(">" + field.code)
        assert getattr(layout, f"OFFSET_{field.name}") == field.offset
    assert len(layout.RECORD_FIELDS) == 15


def test_header_file_defines_exactly_the_layout() -> None:
    assert _header_defines() == _EXPECTED


@pytest.mark.parametrize("module", _COMPILED)
def test_compiled_layout_is_the_codec_layout(module: str) -> None:
    compiled = importlib.import_module(module)  # built by `pip install -e .`
    exported = {name: getattr(compiled, name) for name in dir(compiled) if name.isupper()}
    assert exported == _EXPECTED
    assert compiled.OFF_MAGIC == layout.OFFSET_MAGIC
    assert compiled.OFF_STORE_TIMESTAMP == layout.OFFSET_STORE_TIMESTAMP
