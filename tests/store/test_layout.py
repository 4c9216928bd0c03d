"""Everything that reads record fields derives from wharf.store.codec.layout's field tables: the
partial structs of the pull paths and the producer, and the numpy dtypes of the fast paths.
Each derived form is pinned to the literal it replaced and checked against RECORD_HEADER."""

from __future__ import annotations

import random
import struct
import subprocess
import sys

import numpy as np
import pytest
import wharf.store.fast as fast
from wharf.store.codec import layout
from wharf.store.codec.send_records import _SENT_HEADER
from wharf.store.dispatch import dispatcher
from wharf.store.fast import dispatch_columns, index_batch, record_check
from wharf.store.read import get_raw


def _random_header(seed: int) -> bytes:
    return random.Random(seed).randbytes(layout.RECORD_HEADER_SIZE)


def test_partial_structs_are_the_literals_they_replaced() -> None:
    walk = layout.partial_struct(("TOTAL_SIZE", "MAGIC", "BODY_LENGTH"))
    assert walk.format == ">iI76xi" == get_raw._SIZE_MAGIC_BODY.format
    assert _SENT_HEADER.format == ">iIi4xi16xiq36xi"


@pytest.mark.parametrize("seed", range(5))
def test_a_partial_struct_reads_what_the_whole_header_reads(seed: int) -> None:
    header = _random_header(seed)
    whole = dict(
        zip(
            [f.name for f in layout.RECORD_FIELDS], layout.RECORD_HEADER.unpack(header), strict=True
        )
    )
    names = ("MAGIC", "QUEUE_OFFSET", "STORE_HOST", "BODY_LENGTH")
    assert layout.partial_struct(names).unpack(header) == tuple(whole[n] for n in names)
    for field in layout.RECORD_FIELDS:  # and the single-field offsets
        value = struct.unpack_from(
            ">" + field.code, header, getattr(layout, f"OFFSET_{field.name}")
        )
        assert value[0] == whole[field.name]


def test_partial_struct_refuses_unknown_or_unordered_fields() -> None:
    with pytest.raises(ValueError, match="not record header fields"):
        layout.partial_struct(("TOTAL_SIZE", "TOPIC"))
    with pytest.raises(ValueError, match="header order"):
        layout.partial_struct(("BODY_LENGTH", "MAGIC"))


@pytest.mark.parametrize("seed", range(5))
def test_numpy_header_columns_read_what_the_struct_reads(seed: int) -> None:
    header = _random_header(seed)
    whole = layout.RECORD_HEADER.unpack(header)
    buf = np.frombuffer(header, np.uint8)
    full = buf[record_check._HEADER_LANES].view(record_check._HEADER)[0]
    as_python = [v if isinstance(v, bytes) else int(v) for v in full.tolist()]
    assert as_python == list(whole)
    chosen = buf[dispatch_columns._HEADER_BYTES].view(dispatch_columns._HEADER)[0]
    # total, magic, queue_id, queue_offset, sys_flag, store_ts, body: fields 0 1 3 5 7 10 14
    assert [int(v) for v in chosen.tolist()] == [whole[i] for i in (0, 1, 3, 5, 7, 10, 14)]


def test_dispatch_gathers_the_bytes_it_did() -> None:
    assert (np.r_[0:8, 12:16, 20:28, 36:40, 56:64, 84:88] == dispatch_columns._HEADER_BYTES).all()


def test_queue_unit_and_index_entry_dtypes_are_the_structs() -> None:
    unit = np.array([(4096, 1234, -77)], dtype=dispatcher._CQ_UNITS)
    assert unit.tobytes() == layout.CQ_UNIT.pack(4096, 1234, -77)
    entry = np.array([(-5, 1 << 40, 3600, 9)], dtype=index_batch._ENTRY_DTYPE)
    assert entry.tobytes() == layout.INDEX_ENTRY.pack(-5, 1 << 40, 3600, 9)


# ------------------------------------------------------------------------------ the one loader
def test_load_returns_the_built_module() -> None:
    module = fast.load("_log_scan")
    assert module is not None and callable(module.scan)


def test_load_honours_no_speedups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WHARF_NO_SPEEDUPS", "1")
    assert all(fast.load(name) is None for name in fast.COMPILED)


def test_load_gives_none_for_a_module_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_built(name: str) -> None:
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(fast.importlib, "import_module", not_built)
    assert fast.load("_record_check") is None


def test_load_refuses_an_unknown_name() -> None:
    with pytest.raises(ValueError, match="not a compiled accelerator"):
        fast.load("numpy")


def test_the_speedups_are_off_in_a_process_with_no_speedups() -> None:
    code = (
        "import sys, wharf.store.fast; assert 'numpy' not in sys.modules;"
        "import wharf.client.ids as i, wharf.client.record_encoder as e, wharf.store.log.reader as r;"
        "import wharf.store.fast.record_check as c;"
        "print(i._counter_ids, e._encode_bare_records, e._send_results, r._compiled, c._compiled)"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], env={"WHARF_NO_SPEEDUPS": "1", "PATH": ""},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert run.stdout.split() == ["None"] * 5
