"""The compiled commit-log walk of the dispatch (store/fast/_log_scan.c) against its Python
fallback: same positions, same stop, same corrupt-header report, for any start, limit, count
and byte budget, over valid logs, blank-ended segments and damaged bytes."""

from __future__ import annotations

import wharf.store.log.reader as reader
from hypothesis import given, settings
from hypothesis import strategies as st
from wharf.store.codec.records import encode_blank
from wharf.store.model import MessageInput

from tests.store.test_record_batch import client_batch


def test_the_compiled_scan_is_built_and_used() -> None:
    assert reader._compiled is not None  # `pip install -e .` builds it (pyproject ext-modules)


@settings(max_examples=300, deadline=None)
@given(
    bodies=st.lists(st.binary(min_size=1, max_size=700), min_size=1, max_size=30),
    blank=st.booleans(),
    damage=st.one_of(st.none(), st.tuples(st.integers(0, 10**6), st.integers(0, 255))),
    start_at=st.integers(0, 40),
    cut=st.integers(0, 10**6),
    max_count=st.integers(1, 40),
    budget=st.integers(0, 30_000),
    any_before=st.booleans(),
)
def test_compiled_scan_agrees_with_python(
    bodies: list[bytes],
    blank: bool,
    damage: tuple[int, int] | None,
    start_at: int,
    cut: int,
    max_count: int,
    budget: int,
    any_before: bool,
) -> None:
    # every third record a V2 one (a 200-byte topic): the log mixes both versions
    records = [
        client_batch("T" if i % 3 else "L" * 200, [MessageInput(body, {})])
        for i, body in enumerate(bodies)
    ]
    log = bytearray(b"".join(records))
    if blank:
        log += encode_blank(64)
    if damage is not None:
        log[damage[0] % len(log)] = damage[1]
    starts = [sum(len(r) for r in records[:i]) for i in range(len(records))]
    pos = starts[start_at % len(starts)]
    limit = cut % (len(log) + 1)
    args = (bytes(log), pos, limit, max_count, budget, any_before)
    compiled = reader._scan_compiled(*args)
    python = reader._scan_python(*args)
    assert compiled == python
    whole = damage is None and not blank and limit == len(log) and max_count >= len(starts)
    if whole and (budget >= len(log) or not any_before):  # room for all, or at least one
        assert compiled[0][0] == pos
