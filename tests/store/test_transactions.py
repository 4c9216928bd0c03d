"""Half messages (wharf.store.services.transactions) through the real store: invisible until
committed, committed or rolled back exactly once (retries and repeats write nothing), across a
restart and a lost checkpoint; check-back bookkeeping and discards."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from wharf.store.errors import InvalidMessageError
from wharf.store.message_store import MessageStore
from wharf.store.services.transactions import COMMITTED, RESOLVED, ROLLED_BACK

from tests.store.helpers import msg, small_config
from tests.store.hooked import hooked_store

TOPIC = "Orders"


def half(body: str, uniq: str, **props: str):  # type: ignore[no-untyped-def]
    return msg(body, uniq=uniq, TRAN_MSG="true", **props)


async def bodies(store: MessageStore) -> list[bytes]:
    assert await store.wait_dispatched()
    return [m.body for m in store.get_messages(TOPIC, 1, 0, 100).messages]


async def test_commit_makes_a_half_visible_once_and_rollback_never(store: MessageStore) -> None:
    a = (await store.put(TOPIC, 1, [half("a", "A")])).append.first_queue_offset
    b = (await store.put(TOPIC, 1, [half("b", "B")])).append.first_queue_offset
    assert (a, b) == (0, 1)  # half-queue offsets: the transaction ids
    assert await bodies(store) == []  # consumers see no half message
    assert store.transactions.stats()["half_messages"] == 2

    assert await store.transactions.end(a, "A", commit=True) == COMMITTED
    assert await store.transactions.end(a, "A", commit=True) == COMMITTED  # a retry: no copy
    assert await store.transactions.end(a, "A", commit=False) == COMMITTED  # too late
    assert await store.transactions.end(b, "B", commit=False) == ROLLED_BACK
    assert await store.transactions.end(b, "B", commit=True) == ROLLED_BACK  # never undone
    assert await bodies(store) == [b"a"]
    copy = store.get_messages(TOPIC, 1, 0, 1).messages[0]
    assert copy.unique_id == "A" and "TRAN_MSG" not in copy.properties
    assert store.transactions.stats() == {
        "half_messages": 0, "commits_total": 1, "rollbacks_total": 1, "checks_total": 0,
        "discards_total": 0,
    }  # fmt: skip


async def test_unknown_or_mismatched_transactions_and_mixed_batches_are_refused(
    store: MessageStore,
) -> None:
    offset = (await store.put(TOPIC, 1, [half("a", "A")])).append.first_queue_offset
    with pytest.raises(InvalidMessageError):
        await store.transactions.end(offset, "not-A", commit=True)
    with pytest.raises(InvalidMessageError):
        await store.transactions.end(offset, "A", commit=True, topic="Other")
    with pytest.raises(InvalidMessageError):
        await store.transactions.end(99, "A", commit=True)
    with pytest.raises(InvalidMessageError):
        await store.put(TOPIC, 1, [half("x", "X"), msg("y")])
    assert await bodies(store) == []


async def test_resolutions_and_open_halves_survive_restarts_and_a_lost_checkpoint(
    tmp_path: Path,
) -> None:
    store = hooked_store(small_config(tmp_path / "store"))
    await store.start()
    await store.put(TOPIC, 1, [half("committed", "C")])
    await store.put(TOPIC, 1, [half("open", "O")])
    await store.put(TOPIC, 1, [half("rolled back", "R")])
    await store.transactions.end(0, "C", commit=True)
    await store.transactions.end(2, "R", commit=False)
    checkpoint = store.insides.paths.transaction_checkpoint_file
    await store.shutdown()
    for path in (checkpoint, checkpoint.with_name(checkpoint.name + ".bak")):
        path.unlink()  # as if the broker died before writing it: the commit log says it all

    store = hooked_store(small_config(tmp_path / "store"))
    await store.start()
    try:
        assert store.transactions.stats()["half_messages"] == 1
        assert await store.transactions.end(0, "C", commit=True) == RESOLVED  # no 2nd copy
        assert await store.transactions.end(2, "R", commit=True) == RESOLVED  # not resurrected
        assert await bodies(store) == [b"committed"]
        assert await store.transactions.end(1, "O", commit=True) == COMMITTED
        assert await bodies(store) == [b"committed", b"open"]
    finally:
        await store.shutdown()


async def test_check_back_bookkeeping_immunity_and_discard(store: MessageStore) -> None:
    await store.put(TOPIC, 1, [half("plain", "P")])
    await store.put(TOPIC, 1, [half("immune", "I", CHECK_IMMUNITY_TIME_IN_SECONDS="60")])
    assert await store.wait_dispatched()
    tx = store.transactions
    now = int(time.time() * 1000)
    assert tx.due_for_check(now, timeout_ms=6000, interval_ms=30_000) == []  # too young
    later = now + 7000
    assert tx.due_for_check(later, 6000, 30_000) == [0]  # the immune one waits 60 s
    assert tx.checked(0, later) == 1
    assert tx.due_for_check(later + 1000, 6000, 30_000) == []  # checked 1 s ago
    assert tx.due_for_check(later + 30_000, 6000, 30_000) == [0]
    assert tx.due_for_check(now + 61_000, 6000, 30_000) == [0, 1]
    assert tx.half(1) is not None and tx.half(1).body == b"immune"  # type: ignore[union-attr]
    await tx.discard(0)
    assert tx.half(0) is None
    assert await tx.end(0, "P", commit=True) == ROLLED_BACK  # discarded: never delivered
    assert await bodies(store) == []
    assert tx.stats()["discards_total"] == 1 and tx.stats()["checks_total"] == 1


async def test_a_batch_end_commits_in_order_rolls_back_the_rest_and_is_repeatable(
    store: MessageStore, tmp_path: Path
) -> None:
    """The Spark sink's commit: ranges of one writer's halves committed (one append per
    destination run), its other open halves rolled back, other writers untouched."""
    tx = store.transactions
    chunk1 = [half(f"r{i}", f"spark-w.0.0.{i}") for i in range(3)]
    chunk2 = [half(f"r{i}", f"spark-w.0.0.{i}") for i in range(3, 5)]
    await store.put(TOPIC, 1, chunk1)  # ids 0..2
    await store.put(TOPIC, 2, chunk2)  # ids 3..4, another queue
    await store.put(TOPIC, 1, [half("failed attempt", "spark-w.0.0.0")])  # id 5
    await store.put(TOPIC, 1, [half("other writer", "spark-w2.0.0.0")])  # id 6
    with pytest.raises(InvalidMessageError, match="not one of"):  # not this writer's: no write
        await tx.end_batch([0, 6], True, "spark-w.0.")
    with pytest.raises(InvalidMessageError, match="unknown"):
        await tx.end_batch([0, 99], True, "spark-w.0.")
    with pytest.raises(InvalidMessageError, match="prefix"):
        await tx.end_batch([0], True, "")
    with pytest.raises(InvalidMessageError, match="not of"):  # bounded to the writer's topics
        await tx.end_batch([0], True, "spark-w.0.", topics={"Other"})
    assert await bodies(store) == []

    counts = await tx.end_batch([0, 1, 2, 3, 4], True, "spark-w.0.", rest=True)
    assert counts == {"committed": 5, "rolled_back": 1, "resolved_before": 0}
    assert await bodies(store) == [b"r0", b"r1", b"r2"]
    assert [m.body for m in store.get_messages(TOPIC, 2, 0, 10).messages] == [b"r3", b"r4"]
    assert sorted(tx.open) == [6]  # the other writer's half is still open
    again = await tx.end_batch([0, 1, 2, 3, 4], True, "spark-w.0.", rest=True)
    assert again == {"committed": 0, "rolled_back": 0, "resolved_before": 5}
    assert await bodies(store) == [b"r0", b"r1", b"r2"]  # no second copy

    aborted = await tx.end_batch([], False, "spark-w2.0.", rest=True)
    assert aborted == {"committed": 0, "rolled_back": 1, "resolved_before": 0}
    assert tx.stats()["half_messages"] == 0
