"""Pop consumption (wharf.store.pop) against the real store on a tmp dir: pop / ack /
change-invisible / expiry / attempts / DLQ / FIFO / filters / restart / wake-ups. Time is
injected through ``now`` (ms) except in the long-poll tests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from wharf.store.codec.layout import POP_JOURNAL_MAGIC
from wharf.store.errors import InvalidMessageError, InvalidReceiptHandleError
from wharf.store.message_store import MessageStore
from wharf.store.pop import MESSAGE_GROUP_PROPERTY
from wharf.store.pop import journal as journal_module
from wharf.store.pop.handles import parse_handle
from wharf.store.read.filter import parse_tag_expression

from tests.store.helpers import msg, small_config

T0 = 1_800_000_000_000  # the injected clock's start (ms)
G, TOPIC = "cg", "Pop"


async def fill(store: MessageStore, queue_id: int, bodies: list[str], **props: str) -> None:
    await store.put(TOPIC, queue_id, [msg(b, **props) for b in bodies])
    assert await store.wait_dispatched()


def bodies(found: list) -> list[bytes]:
    return [p.message.body for p in found]


async def test_pop_hides_messages_until_invisible_time_then_redelivers_with_attempt_2(
    store: MessageStore,
) -> None:
    await fill(store, 0, ["a", "b", "c"])
    first = await store.pop.pop(G, TOPIC, batch=2, invisible_ms=10_000, now=T0)
    assert bodies(first) == [b"a", b"b"]
    assert [p.attempt for p in first] == [1, 1]
    assert all(p.receipt_handle.isascii() for p in first)
    assert len({p.receipt_handle for p in first}) == 2
    # in flight: only c is visible; then nothing
    assert bodies(await store.pop.pop(G, TOPIC, now=T0 + 1)) == [b"c"]
    assert await store.pop.pop(G, TOPIC, now=T0 + 9_999) == []
    # a and b expire at T0 + 10 s; c at T0 + 1 + 10 s
    again = await store.pop.pop(G, TOPIC, invisible_ms=10_000, now=T0 + 10_000)
    assert bodies(again) == [b"a", b"b"]
    assert [p.attempt for p in again] == [2, 2]
    assert {p.receipt_handle for p in again}.isdisjoint(p.receipt_handle for p in first)


async def test_ack_finishes_and_stale_or_forged_handles_are_rejected(store: MessageStore) -> None:
    await fill(store, 0, ["a", "b"])
    a, b = await store.pop.pop(G, TOPIC, invisible_ms=1_000, now=T0)
    await store.pop.ack(G, TOPIC, a.receipt_handle)
    with pytest.raises(InvalidReceiptHandleError):
        await store.pop.ack(G, TOPIC, a.receipt_handle)  # twice
    later = await store.pop.pop(G, TOPIC, invisible_ms=1_000, now=T0 + 5_000)
    assert bodies(later) == [b"b"]  # a never again
    with pytest.raises(InvalidReceiptHandleError):
        await store.pop.ack(G, TOPIC, b.receipt_handle)  # stale: redelivered since
    handle = parse_handle(later[0].receipt_handle)
    for forged in (
        "nonsense",
        "",
        f"{handle.queue_id}.{handle.queue_offset}.{(handle.nonce ^ 1):016x}",
        f"{handle.queue_id}.{handle.queue_offset + 5}.{handle.nonce:016x}",
        later[0].receipt_handle + " ",
        "0.0." + "f" * 17,
    ):
        with pytest.raises(InvalidReceiptHandleError):
            await store.pop.ack(G, TOPIC, forged)
    with pytest.raises(InvalidReceiptHandleError):  # another group or topic
        await store.pop.ack("other", TOPIC, later[0].receipt_handle)
    await store.pop.ack(G, TOPIC, later[0].receipt_handle)
    assert await store.pop.pop(G, TOPIC, now=T0 + 100_000) == []


async def test_ack_after_expiry_is_accepted_until_the_message_is_handed_out_again(
    store: MessageStore,
) -> None:
    await fill(store, 0, ["a"])
    (a,) = await store.pop.pop(G, TOPIC, invisible_ms=1_000, now=T0)
    await store.pop.ack(G, TOPIC, a.receipt_handle)  # (the clock passed T0 + 1 s meanwhile)
    assert await store.pop.pop(G, TOPIC, now=T0 + 60_000) == []


async def test_change_invisible_counts_from_the_call_and_returns_the_new_handle(
    store: MessageStore,
) -> None:
    await fill(store, 0, ["a"])
    (a,) = await store.pop.pop(G, TOPIC, invisible_ms=1_000, now=T0)
    new = await store.pop.change_invisible(G, TOPIC, a.receipt_handle, 5_000, now=T0 + 500)
    assert new != a.receipt_handle and new.isascii()
    with pytest.raises(InvalidReceiptHandleError):
        await store.pop.change_invisible(G, TOPIC, a.receipt_handle, 5_000, now=T0 + 600)
    assert await store.pop.pop(G, TOPIC, now=T0 + 5_499) == []
    (again,) = await store.pop.pop(G, TOPIC, now=T0 + 5_500)
    assert again.attempt == 2  # a change does not count as a delivery
    with pytest.raises(InvalidReceiptHandleError):
        await store.pop.ack(G, TOPIC, new)  # redelivered since
    # shortening works too, and the new handle acks
    newer = await store.pop.change_invisible(G, TOPIC, again.receipt_handle, 1, now=T0 + 5_600)
    await store.pop.ack(G, TOPIC, newer)
    assert await store.pop.pop(G, TOPIC, now=T0 + 10_000) == []


async def test_after_max_attempts_the_message_goes_to_the_dlq_once(store: MessageStore) -> None:
    await fill(store, 0, ["poison", "ok"], uniq="ID1")
    now = T0
    attempts = []
    for _ in range(3):
        got = await store.pop.pop(G, TOPIC, batch=1, invisible_ms=1_000, max_attempts=3, now=now)
        assert bodies(got) == [b"poison"]
        attempts.append(got[0].attempt)
        now += 1_000
    assert attempts == [1, 2, 3]
    # the 4th would be attempt 4 > 3: dead-lettered, and "ok" comes instead
    got = await store.pop.pop(G, TOPIC, batch=1, invisible_ms=1_000, max_attempts=3, now=now)
    assert bodies(got) == [b"ok"]
    assert await store.wait_dispatched()
    dlq = store.get_messages("%DLQ%cg", 0, 0, 10)
    assert [m.body for m in dlq.messages] == [b"poison"]
    copy = dlq.messages[0]
    assert copy.properties["DLQ_ORIGIN_TOPIC"] == TOPIC
    assert copy.properties["DLQ_ORIGIN_MESSAGE_ID"] == "ID1"
    assert copy.reconsume_times == 3
    await store.pop.ack(G, TOPIC, got[0].receipt_handle)
    assert await store.pop.pop(G, TOPIC, max_attempts=3, now=now + 100_000) == []
    assert len(store.get_messages("%DLQ%cg", 0, 0, 10).messages) == 1
    assert store.pop.stats()["dead_lettered_total"] == 1


async def test_dead_letter_forwards_a_live_delivery_at_once_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    await fill(store, 0, ["give-up", "next"], uniq="ID9")
    got = await store.pop.pop(G, TOPIC, batch=1, invisible_ms=60_000, now=T0)
    handle = got[0].receipt_handle
    with pytest.raises(InvalidReceiptHandleError):  # a forged one changes nothing
        await store.pop.dead_letter(G, TOPIC, "0.0.00000000000000ff")
    await store.pop.dead_letter(G, TOPIC, handle)
    with pytest.raises(InvalidReceiptHandleError):  # the delivery is over
        await store.pop.ack(G, TOPIC, handle)
    with pytest.raises(InvalidReceiptHandleError):
        await store.pop.dead_letter(G, TOPIC, handle)
    assert await store.wait_dispatched()
    dlq = store.get_messages("%DLQ%cg", 0, 0, 10).messages
    assert [m.body for m in dlq] == [b"give-up"] and dlq[0].reconsume_times == 1
    assert dlq[0].properties["DLQ_ORIGIN_MESSAGE_ID"] == "ID9"
    await store.shutdown()

    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    try:  # journaled: after a restart it neither comes back nor is copied again
        later = await store.pop.pop(G, TOPIC, batch=10, now=T0 + 3_600_000)
        assert bodies(later) == [b"next"]
        assert len(store.get_messages("%DLQ%cg", 0, 0, 10).messages) == 1
    finally:
        await store.shutdown()


async def test_pop_takes_from_every_queue_of_the_topic_and_only_listed_queues(
    store: MessageStore,
) -> None:
    for queue_id in range(4):
        await fill(store, queue_id, [f"q{queue_id}"])
    assert sorted(bodies(await store.pop.pop(G, TOPIC, [2], now=T0))) == [b"q2"]
    rest = await store.pop.pop(G, TOPIC, None, now=T0)
    assert sorted(bodies(rest)) == [b"q0", b"q1", b"q3"]
    assert {p.message.queue_id for p in rest} == {0, 1, 3}


async def test_groups_are_independent_and_tag_filters_finish_non_matching(
    store: MessageStore,
) -> None:
    await store.put(TOPIC, 0, [msg("x1", tags="x"), msg("y1", tags="y"), msg("x2", tags="x")])
    assert await store.wait_dispatched()
    only_x = await store.pop.pop("gx", TOPIC, tag_filter=parse_tag_expression("x"), now=T0)
    assert bodies(only_x) == [b"x1", b"x2"]
    everything = await store.pop.pop("gall", TOPIC, now=T0)
    assert bodies(everything) == [b"x1", b"y1", b"x2"]
    for p in only_x:
        await store.pop.ack("gx", TOPIC, p.receipt_handle)
    state = store.pop.state.queues[("gx", TOPIC, 0)]
    assert state.pop_offset == 3 and not state.in_flight and not state.acked


async def test_fifo_hands_out_one_message_per_message_group_at_a_time(
    store: MessageStore,
) -> None:
    sent = [("A", "a1"), ("A", "a2"), ("B", "b1"), ("A", "a3"), ("B", "b2"), ("", "n1")]
    await store.put(TOPIC, 0, [msg(body, **{MESSAGE_GROUP_PROPERTY: g}) for g, body in sent])
    assert await store.wait_dispatched()
    first = await store.pop.pop(G, TOPIC, fifo=True, invisible_ms=1_000, now=T0)
    assert bodies(first) == [b"a1", b"b1", b"n1"]
    assert await store.pop.pop(G, TOPIC, fifo=True, now=T0 + 1) == []
    _, b1, n1 = first
    await store.pop.ack(G, TOPIC, b1.receipt_handle)
    await store.pop.ack(G, TOPIC, n1.receipt_handle)
    assert bodies(await store.pop.pop(G, TOPIC, fifo=True, invisible_ms=1_000, now=T0 + 2)) == [
        b"b2"
    ]
    # a1 expires: it is redelivered first (attempt 2); a2 still waits behind it
    again = await store.pop.pop(G, TOPIC, fifo=True, invisible_ms=1_000, now=T0 + 1_000)
    assert bodies(again) == [b"a1"] and again[0].attempt == 2
    await store.pop.ack(G, TOPIC, again[0].receipt_handle)
    assert bodies(await store.pop.pop(G, TOPIC, fifo=True, now=T0 + 1_001)) == [b"a2"]
    # the same messages without fifo all flow at once
    assert len(await store.pop.pop("plain", TOPIC, now=T0)) == 6


async def test_fifo_order_survives_a_restart(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    await store.put(TOPIC, 0, [msg(b, **{MESSAGE_GROUP_PROPERTY: "A"}) for b in ("a1", "a2", "a3")])
    assert await store.wait_dispatched()
    (a1,) = await store.pop.pop(G, TOPIC, fifo=True, invisible_ms=1_000, now=T0)
    await store.shutdown()
    store = MessageStore(config)
    await store.start()
    try:
        # a1 is still in flight after the restart (message group read again): a2 waits
        assert await store.pop.pop(G, TOPIC, fifo=True, now=T0 + 10) == []
        await store.pop.ack(G, TOPIC, a1.receipt_handle)  # its handle survived
        assert bodies(await store.pop.pop(G, TOPIC, fifo=True, now=T0 + 20)) == [b"a2"]
    finally:
        await store.shutdown()


async def test_restart_keeps_acks_in_flight_entries_and_attempts(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    await store.put(TOPIC, 0, [msg(f"m{i}") for i in range(6)])
    assert await store.wait_dispatched()
    got = await store.pop.pop(G, TOPIC, invisible_ms=30_000, now=T0)
    assert len(got) == 6
    for p in got[::2]:
        await store.pop.ack(G, TOPIC, p.receipt_handle)
    await store.shutdown()

    store = MessageStore(config)
    await store.start()
    try:
        assert store.pop.stats()["replayed_records"] >= 9
        # invisible time kept across the restart (wall-clock visible_at journaled)
        assert await store.pop.pop(G, TOPIC, now=T0 + 29_999) == []
        back = await store.pop.pop(G, TOPIC, invisible_ms=30_000, now=T0 + 30_000)
        assert bodies(back) == [b"m1", b"m3", b"m5"]
        assert [p.attempt for p in back] == [2, 2, 2]
    finally:
        await store.shutdown()


async def test_torn_journal_tail_is_dropped_at_start(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    await fill(store, 0, ["a", "b"])
    a, _ = await store.pop.pop(G, TOPIC, invisible_ms=30_000, now=T0)
    await store.pop.ack(G, TOPIC, a.receipt_handle)
    await store.shutdown()
    journal = store.insides.paths.pop_journal_file
    whole = journal.read_bytes()
    journal.write_bytes(whole + whole[8:40])  # a torn record after the last whole one
    store = MessageStore(config)
    await store.start()
    try:
        assert journal.stat().st_size == len(whole)
        assert bodies(await store.pop.pop(G, TOPIC, now=T0 + 30_000)) == [b"b"]
    finally:
        await store.shutdown()


async def test_journal_compaction_keeps_the_state(tmp_path: Path) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    store.pop._writer.compact_bytes = 2_000  # type: ignore[union-attr]
    store.pop._writer._compact_after = 2_000  # type: ignore[union-attr]
    await fill(store, 0, [f"m{i}" for i in range(60)])
    now = T0
    for _ in range(10):  # many records: pops, changes, acks
        got = await store.pop.pop(G, TOPIC, batch=6, invisible_ms=1_000, now=now)
        for p in got[:3]:
            await store.pop.ack(G, TOPIC, p.receipt_handle)
        for p in got[3:]:
            await store.pop.change_invisible(G, TOPIC, p.receipt_handle, 100_000, now=now)
        now += 10
    stats = store.pop.stats()
    assert stats["journal_compactions"] >= 1
    before = store.pop.state.queues[(G, TOPIC, 0)]
    expected = (before.pop_offset, dict(before.in_flight), set(before.acked))
    await store.shutdown()
    assert store.insides.paths.pop_journal_file.read_bytes().startswith(POP_JOURNAL_MAGIC)
    assert store.insides.paths.pop_journal_file.stat().st_size < 5_000
    store = MessageStore(config)
    await store.start()
    try:
        after = store.pop.state.queues[(G, TOPIC, 0)]
        got = (after.pop_offset, after.in_flight, after.acked)
        assert got[0] == expected[0] and got[2] == expected[2]
        assert {o: (e.visible_at_ms, e.attempt, e.nonce) for o, e in got[1].items()} == {
            o: (e.visible_at_ms, e.attempt, e.nonce) for o, e in expected[1].items()
        }
    finally:
        await store.shutdown()


async def test_bad_arguments_are_refused_with_invalid_message(store: MessageStore) -> None:
    for kwargs in (
        {"batch": 0},
        {"invisible_ms": 0},
        {"max_attempts": 0},
        {"queue_ids": [-1]},
    ):
        with pytest.raises(InvalidMessageError):
            await store.pop.pop(G, TOPIC, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessageError):
        await store.pop.pop("bad group!", TOPIC)
    with pytest.raises(InvalidMessageError):
        await store.pop.pop(G, "bad topic!")
    await fill(store, 0, ["a"])
    (a,) = await store.pop.pop(G, TOPIC, now=T0)
    with pytest.raises(InvalidMessageError):
        await store.pop.change_invisible(G, TOPIC, a.receipt_handle, 0)


async def test_pop_wait_is_woken_by_an_arrival(store: MessageStore) -> None:
    waiting = asyncio.create_task(store.pop.pop_wait(G, TOPIC, None, timeout_ms=20_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    started = time.monotonic()
    await store.put(TOPIC, 1, [msg("late")])
    got = await asyncio.wait_for(waiting, 10)
    assert bodies(got) == [b"late"]
    assert time.monotonic() - started < 5.0  # woken, not timed out (bounds for a busy box)


async def test_pop_wait_is_woken_by_the_next_expiry_and_times_out(store: MessageStore) -> None:
    await fill(store, 0, ["a"])
    started = time.monotonic()  # before the pop: its invisible time counts from its clock
    (a,) = await store.pop.pop(G, TOPIC, invisible_ms=300)
    got = await store.pop.pop_wait(G, TOPIC, None, invisible_ms=60_000, timeout_ms=20_000)
    elapsed = time.monotonic() - started
    assert bodies(got) == [b"a"] and got[0].attempt == 2
    assert 0.28 < elapsed < 10  # the expiry woke it, not the 20 s deadline
    started = time.monotonic()
    assert await store.pop.pop_wait(G, TOPIC, None, timeout_ms=200) == []
    assert 0.19 < time.monotonic() - started < 10
    assert store.pop.stats()["waiting"] == 0
    del a


async def test_pop_wait_in_fifo_is_woken_by_the_ack_that_frees_the_group(
    store: MessageStore,
) -> None:
    await store.put(TOPIC, 0, [msg(b, **{MESSAGE_GROUP_PROPERTY: "A"}) for b in ("a1", "a2")])
    assert await store.wait_dispatched()
    (a1,) = await store.pop.pop(G, TOPIC, fifo=True, invisible_ms=60_000)
    waiting = asyncio.create_task(store.pop.pop_wait(G, TOPIC, None, fifo=True, timeout_ms=5_000))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await store.pop.ack(G, TOPIC, a1.receipt_handle)
    assert bodies(await asyncio.wait_for(waiting, 4)) == [b"a2"]


async def test_shutdown_answers_waiting_pops(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "store"))
    await store.start()
    waiting = asyncio.create_task(store.pop.pop_wait(G, TOPIC, None, timeout_ms=10_000))
    await asyncio.sleep(0.05)
    await store.shutdown()
    assert await asyncio.wait_for(waiting, 2) == []


async def test_a_long_poll_scans_past_its_read_budget_instead_of_waiting(
    store: MessageStore,
) -> None:
    # FIFO: 300 messages of a busy group, then one of a free group
    for start in range(0, 300, 100):  # (small test segments: batches of 100)
        busy = [msg(f"a{i}", **{MESSAGE_GROUP_PROPERTY: "A"}) for i in range(start, start + 100)]
        await store.put(TOPIC, 0, busy)
    await store.put(TOPIC, 0, [msg("b1", **{MESSAGE_GROUP_PROPERTY: "B"})])
    assert await store.wait_dispatched()
    assert bodies(await store.pop.pop(G, TOPIC, fifo=True, batch=1)) == [b"a0"]
    assert await store.pop.pop(G, TOPIC, fifo=True, batch=1) == []  # budget: 4 reads
    started = time.monotonic()
    got = await store.pop.pop_wait(G, TOPIC, None, fifo=True, batch=1, timeout_ms=20_000)
    assert bodies(got) == [b"b1"] and time.monotonic() - started < 10
    # a selective tag filter behind a long run of other tags
    for start in range(0, 5_000, 100):
        await store.put("Tags", 0, [msg(f"x{i}", tags="x") for i in range(start, start + 100)])
    await store.put("Tags", 0, [msg("y", tags="y")])
    assert await store.wait_dispatched()
    only_y = parse_tag_expression("y")
    assert await store.pop.pop(G, "Tags", tag_filter=only_y) == []
    started = time.monotonic()
    got = await store.pop.pop_wait(G, "Tags", None, only_y, timeout_ms=20_000)
    assert bodies(got) == [b"y"] and time.monotonic() - started < 10


async def test_a_deleted_topic_forgets_its_pop_state_and_a_recreated_one_starts_over(
    tmp_path: Path,
) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    try:
        await fill(store, 0, ["old1", "old2"])
        (old1, _) = await store.pop.pop(G, TOPIC, now=T0)
        await store.pop.ack(G, TOPIC, old1.receipt_handle)
        await store.delete_topics([TOPIC])
        assert not [k for k in store.pop.state.queues if k[1] == TOPIC]
        with pytest.raises(InvalidReceiptHandleError):
            await store.pop.ack(G, TOPIC, old1.receipt_handle)
        await fill(store, 0, ["new1"])
        assert bodies(await store.pop.pop(G, TOPIC, now=T0)) == [b"new1"]
        assert store.pop.forget(groups=[G]) == 1
    finally:
        await store.shutdown()
    store = MessageStore(config)
    await store.start()
    try:  # the RESET records were journaled: nothing comes back
        assert not store.pop.state.queues
    finally:
        await store.shutdown()


async def test_a_group_starts_at_its_committed_offset_and_reports_its_progress(
    store: MessageStore, committed: dict[tuple[str, str, int], int]
) -> None:
    """The broker's committed offset is the floor of a group's pop (what another master
    finished before a failover, or an operator's reset forward); ``progress()`` is what the
    broker commits: every offset below it finished, nothing in flight counted."""
    await fill(store, 0, ["a", "b", "c", "d", "e"])
    committed[("cg", TOPIC, 0)] = 2  # ConsumerLink.committed of the ``store`` fixture reads it
    first = await store.pop.pop(G, TOPIC, batch=2, invisible_ms=10_000, now=T0)
    assert bodies(first) == [b"c", b"d"]  # not a and b: finished elsewhere
    assert bodies(await store.pop.pop("other", TOPIC, batch=1, now=T0)) == [b"a"]  # its own floor
    await store.pop.ack(G, TOPIC, first[1].receipt_handle)  # d: c is still in flight
    progress = {(g, t, q): offset for g, t, q, offset in store.pop.progress()}
    assert progress[(G, TOPIC, 0)] == 2 and progress[("other", TOPIC, 0)] == 0
    await store.pop.ack(G, TOPIC, first[0].receipt_handle)
    assert (G, TOPIC, 0, 4) in set(store.pop.progress())
    committed[(G, TOPIC, 0)] = 5  # moved forward past e (an operator's reset)
    assert await store.pop.pop(G, TOPIC, now=T0 + 1) == []


def _count_journal_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the pop journal's os.write bursts from now on."""
    writes: list[int] = []
    real = journal_module._write_all_blocking

    def counted(fd: int, data: bytes | bytearray) -> None:
        writes.append(len(data))
        real(fd, data)

    monkeypatch.setattr(journal_module, "_write_all_blocking", counted)
    return writes


async def test_acks_arriving_together_are_journaled_in_one_write_and_one_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = small_config(tmp_path / "store")
    store = MessageStore(config)
    await store.start()
    try:
        await fill(store, 0, [f"m{i}" for i in range(16)])
        got = await store.pop.pop(G, TOPIC, batch=16, invisible_ms=30_000, now=T0)
        assert len(got) == 16
        syncs = store.pop.stats()["journal_syncs"]
        writes = _count_journal_writes(monkeypatch)
        # 12 concurrent acks (separate calls, one loop iteration), then one ack_many of 4
        await asyncio.gather(*(store.pop.ack(G, TOPIC, p.receipt_handle) for p in got[:12]))
        assert len(writes) == 1 and store.pop.stats()["journal_syncs"] == syncs + 1
        outcomes = await store.pop.ack_many(G, TOPIC, [p.receipt_handle for p in got[12:]])
        assert outcomes == [None] * 4
        assert len(writes) == 2 and store.pop.stats()["journal_syncs"] == syncs + 2
        assert writes[0] == 3 * writes[1]  # every ACK record in its burst's one write
    finally:
        await store.shutdown()
    store = MessageStore(config)
    await store.start()
    try:  # every ack durable: nothing comes back once the invisible time has passed
        assert await store.pop.pop(G, TOPIC, batch=32, now=T0 + 3_600_000) == []
    finally:
        await store.shutdown()


async def test_ack_many_answers_each_handle_and_syncs_once(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(store, 0, ["a", "b", "c"])
    a, b, c = await store.pop.pop(G, TOPIC, batch=3, invisible_ms=10_000, now=T0)
    await store.pop.ack(G, TOPIC, b.receipt_handle)
    writes = _count_journal_writes(monkeypatch)
    syncs = store.pop.stats()["journal_syncs"]
    outcomes = await store.pop.ack_many(
        G, TOPIC, [a.receipt_handle, b.receipt_handle, "forged", c.receipt_handle, a.receipt_handle]
    )
    assert [type(o) for o in outcomes] == [
        type(None),
        InvalidReceiptHandleError,  # acked before
        InvalidReceiptHandleError,  # malformed
        type(None),
        InvalidReceiptHandleError,  # twice in one call: the second is stale
    ]
    assert len(writes) == 1 and store.pop.stats()["journal_syncs"] == syncs + 1
    assert await store.pop.pop(G, TOPIC, now=T0 + 3_600_000) == []
    # nothing valid: nothing written, no sync waited for
    assert await store.pop.ack_many(G, TOPIC, [a.receipt_handle]) != [None]
    assert len(writes) == 1


async def test_a_receive_that_finds_messages_at_once_registers_no_waiter(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a receive that must wait costs a waiter (which every arrival and expiry of the
    topic then visits); one that is woken still gets its message."""
    wakeups = store.pop._wakeups
    registered = []
    real = wakeups.register
    waits = asyncio.Event()

    def counting(*args: object) -> object:
        registered.append(args)
        waits.set()
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(wakeups, "register", counting)
    await fill(store, 0, ["a"])
    assert bodies(await store.pop.pop_wait(G, TOPIC, timeout_ms=5_000)) == [b"a"]
    assert registered == []
    waiting = asyncio.ensure_future(store.pop.pop_wait(G, TOPIC, timeout_ms=20_000))
    await asyncio.wait_for(waits.wait(), 10)
    await fill(store, 1, ["b"])
    assert bodies(await asyncio.wait_for(waiting, 10)) == [b"b"]
    assert len(registered) == 1 and store.pop.stats()["waiting"] == 0


async def test_a_new_queue_is_popped_from_at_once(store: MessageStore) -> None:
    """Each pop lists the topic's queues afresh (from the table's per-topic index): a message
    on a queue created after the last pop is delivered by the next one."""
    await fill(store, 0, ["a"])
    assert bodies(await store.pop.pop(G, TOPIC, now=T0)) == [b"a"]
    assert await store.pop.pop(G, TOPIC, now=T0) == []
    await fill(store, 5, ["b"])  # queue 5 is new
    assert bodies(await store.pop.pop(G, TOPIC, now=T0)) == [b"b"]
