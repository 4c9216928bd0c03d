"""``write_many``: several queues' record batches appended together (one commit
log write when they fit the segment), each with its own queue offsets and its own error; across
a segment end, one append each. Read back, every record is where its result says, with the
offsets and bodies of a batch appended alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path

import pytest
from wharf.store.errors import InvalidMessageError
from wharf.store.message_store import MessageStore

from tests.store.helpers import records, small_config


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    s = MessageStore(small_config(tmp_path, mapped_file_size_commit_log=64 * 1024))
    await s.start()
    yield s
    await s.shutdown()


async def test_batches_of_many_queues_land_in_one_write_with_their_own_offsets(
    store: MessageStore,
) -> None:
    store.write("A", 0, records("A", "a0"), "10.0.0.1:5")  # A/0 starts at 1
    writes_before = store.insides.commit_log.messages_put_total
    results = store.write_many(
        [
            ("A", 0, records("A", "a1", "a2")),
            ("B", 1, records("B", "b0")),
            ("A", 0, records("A", "a3")),  # the same queue again: after the first batch
            ("C", 2, records("Other", "x")),  # records of another topic: refused alone
            ("D", 3, records("D", "d0", "d1", "d2")),
        ],
        "10.0.0.1:5",
    )
    assert list(results.errors) == [3]
    assert isinstance(results.errors[3], InvalidMessageError)
    assert results.queue_ids == [0, 1, 0, -1, 3]
    assert results.first_queue_offsets == [1, 0, 3, 0, 0]
    assert results.counts == [2, 1, 1, 0, 3]
    assert results.stored == 7
    appended = [results.appended(i) for i in (0, 1, 2, 4)]
    assert [(r.topic, r.queue_id, r.first_queue_offset) for r in appended] == [
        ("A", 0, 1),
        ("B", 1, 0),
        ("A", 0, 3),
        ("D", 3, 0),
    ]
    assert [r.offsets[0] for r in appended] == [results.first_offsets[i] for i in (0, 1, 2, 4)]
    # Contiguous, in order: each batch ends where the next begins.
    for before, after in pairwise(appended):
        assert before.end_offset == after.offsets[0]
        assert sum(before.sizes) == before.end_offset - before.offsets[0]
    assert results.end_offset == appended[-1].end_offset
    assert results.sizes.tolist() == [size for r in appended for size in r.sizes]
    assert store.insides.commit_log.messages_put_total == writes_before + 7
    assert await store.wait_dispatched()
    got = store.get_messages("A", 0, 0, 10).messages
    assert [(m.queue_offset, m.body) for m in got] == [(0, b"a0"), (1, b"a1"), (2, b"a2"),
                                                       (3, b"a3")]  # fmt: skip
    assert [m.commit_log_offset for m in got[1:]] == appended[0].offsets + appended[2].offsets
    assert all(m.properties.get("k") == "v" and m.born_host == "10.0.0.1:5" for m in got)
    assert [m.body for m in store.get_messages("D", 3, 0, 10).messages] == [b"d0", b"d1", b"d2"]
    assert store.get_max_offset("C", 2) == 0
    # The next append continues each queue's offsets.
    assert store.write("A", 0, records("A", "a4"), "x:1").appended.first_queue_offset == 4


async def test_batches_that_do_not_fit_the_segment_together_are_appended_one_by_one(
    store: MessageStore,
) -> None:
    big = "z" * 9000
    for i in range(6):  # ~54 KB of the 64 KiB segment
        store.write("F", 0, records("F", f"{i}{big}"), "x:1")
    results = store.write_many([("G", 0, records("G", f"g{i}{big}")) for i in range(3)], "x:1")
    assert not results.errors
    assert results.counts == [1, 1, 1]
    starts = results.first_offsets
    assert [results.appended(i).offsets[0] for i in range(3)] == starts
    assert starts[-1] >= 64 * 1024  # a new segment was opened on the way
    assert await store.wait_dispatched()
    got = store.get_messages("G", 0, 0, 10).messages
    assert [m.body[:2] for m in got] == [b"g0", b"g1", b"g2"]
    assert [m.queue_offset for m in got] == [0, 1, 2]


async def test_a_request_blob_written_as_columns_lands_where_write_many_puts_it(
    store: MessageStore,
) -> None:
    store.write("A", 0, records("A", "a0"), "10.0.0.1:5")
    batches = [
        ("A", 0, records("A", "a1", "a2")),
        ("B", 1, records("B", "b0")),
        ("A", 0, records("A", "a3")),  # the same queue again: after the first batch
    ]
    many = store.write_columns(
        [topic for topic, _, _ in batches],
        [queue_id for _, queue_id, _ in batches],
        b"".join(data for _, _, data in batches),
        [len(data) for _, _, data in batches],
        "10.0.0.1:5",
    )
    assert not many.errors
    assert (many.queue_ids, many.first_queue_offsets, many.counts) == (
        [0, 1, 0],
        [1, 0, 3],
        [2, 1, 1],
    )
    appended = [many.appended(i) for i in range(3)]
    for before, after in pairwise(appended):
        assert before.end_offset == after.offsets[0]
    assert many.end_offset == appended[-1].end_offset
    assert await store.wait_dispatched()
    got = store.get_messages("A", 0, 0, 10).messages
    assert [(m.queue_offset, m.body) for m in got] == [(0, b"a0"), (1, b"a1"), (2, b"a2"),
                                                       (3, b"a3")]  # fmt: skip
    assert [m.commit_log_offset for m in got[1:]] == appended[0].offsets + appended[2].offsets
    assert all(m.born_host == "10.0.0.1:5" for m in got)
    # A bad batch in the blob: checked batch by batch, the error its own.
    mixed = [records("C", "c0"), records("Other", "x"), records("E", "e0")]
    written = store.write_columns(["C", "D", "E"], [0, 0, 0], b"".join(mixed),
                                  [len(d) for d in mixed], "x:1")  # fmt: skip
    assert list(written.errors) == [1] and isinstance(written.errors[1], InvalidMessageError)
    assert written.counts == [1, 0, 1] and written.queue_ids == [0, -1, 0]
    assert await store.wait_dispatched()
    assert [m.body for m in store.get_messages("E", 0, 0, 10).messages] == [b"e0"]
    assert store.get_max_offset("D", 0) == 0
    # Distinct queues (the usual request): each batch after its queue's last.
    again = [records("A", "a4"), records("E", "e1", "e2")]
    written = store.write_columns(["A", "E"], [0, 0], b"".join(again), [len(d) for d in again],
                                  "x:1")  # fmt: skip
    assert (written.first_queue_offsets, written.counts) == ([4, 1], [1, 2])
    assert await store.wait_dispatched()
    assert [m.body for m in store.get_messages("E", 0, 0, 10).messages] == [b"e0", b"e1", b"e2"]
