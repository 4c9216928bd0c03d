"""Delivery at any time (wharf.store.services.timer) through the real store: timed messages are
invisible until due, delivered once, in time order across restarts, crashes (the checkpoint
left behind) and recalls; bad timer properties are refused."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from wharf.store.codec.properties import TIMER_TOPIC
from wharf.store.errors import DiskFullError, InvalidMessageError, StoreShutDownError
from wharf.store.message_store import MessageStore

from tests.store.helpers import msg, small_config
from tests.store.hooked import hooked_store

TOPIC = "Timed"


def at(delay_s: float) -> str:
    return str(int((time.time() + delay_s) * 1000))


def bodies(store: MessageStore, queue_id: int = 0) -> list[bytes]:
    return [m.body for m in store.get_messages(TOPIC, queue_id, 0, 1000).messages]


async def wait_for(predicate, timeout_s: float = 5.0) -> float:  # type: ignore[no-untyped-def]
    """Seconds it took for ``predicate()`` to hold (fails the test after ``timeout_s``)."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, "timed out"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_a_timed_message_is_invisible_until_due_then_delivered_once(
    store: MessageStore,
) -> None:
    deliver_ms = int(at(1.5))
    result = await store.put(TOPIC, 2, [msg("later", uniq="T1", TIMER_DELIVER_MS=str(deliver_ms))])
    assert result.append.first_queue_offset == 0  # the timer queue's offset
    await store.put(TOPIC, 2, [msg("now")])
    assert await store.wait_dispatched()
    assert bodies(store, 2) == [b"now"]
    await wait_for(lambda: len(bodies(store, 2)) == 2)
    delivered_at = time.time() * 1000
    assert delivered_at >= deliver_ms - 500  # never more than 0.5 s early
    assert delivered_at <= deliver_ms + 1000 + 1000  # within timerPrecisionMs + 1 s
    copy = store.get_messages(TOPIC, 2, 1, 1).messages[0]
    assert copy.body == b"later" and copy.unique_id == "T1"
    assert copy.properties["TIMER_QUEUE_OFFSET"] == "0"
    await asyncio.sleep(0.3)
    assert bodies(store, 2) == [b"now", b"later"]
    assert store.timer.stats()["pending"] == 0


async def test_due_times_are_stored_at_once_and_bad_ones_refused(
    store: MessageStore,
) -> None:
    await store.put(TOPIC, 0, [msg("past", TIMER_DELIVER_MS=at(-60))])
    assert await store.wait_dispatched()
    assert bodies(store) == [b"past"]
    assert store.get_max_offset(TIMER_TOPIC, 0) == 0
    for bad in ([msg("c", TIMER_DELIVER_MS="soon")],
                [msg("d", TIMER_DELIVER_MS=at(4 * 24 * 3600))]):  # fmt: skip
        with pytest.raises(InvalidMessageError):
            await store.put(TOPIC, 0, bad)
    # A batch may mix times (the SDK batches concurrent timed sends): each keeps its own.
    mixed = [msg("m2", TIMER_DELIVER_MS=at(2)), msg("m1", TIMER_DELIVER_MS=at(1)), msg("m0")]
    await store.put(TOPIC, 3, mixed)
    await wait_for(lambda: bodies(store, 3) == [b"m0"])
    await wait_for(lambda: bodies(store, 3) == [b"m0", b"m1", b"m2"], timeout_s=5)
    delayed = await store.put(TOPIC, 0, [msg("e", TIMER_DELAY_SEC="2")])
    assert delayed.append.first_queue_offset == 3  # TIMER_DELAY_SEC: in the timer too
    await wait_for(lambda: store.timer.stats()["pending"] == 1)


async def test_past_and_negative_times_beside_a_later_one_are_delivered_at_once(
    store: MessageStore,
) -> None:
    """A batch that must wait in the timer (one time ahead) holds past times too, even before
    1970 (a client's negative timestamp): they are due now, never dropped as unreadable."""
    batch = [
        msg("ahead", TIMER_DELIVER_MS=at(1)),
        msg("past", TIMER_DELIVER_MS=at(-60)),
        msg("negative", TIMER_DELIVER_MS="-7748001"),
    ]
    await store.put(TOPIC, 1, batch)
    await wait_for(lambda: sorted(bodies(store, 1)) == [b"negative", b"past"])
    await wait_for(lambda: sorted(bodies(store, 1)) == [b"ahead", b"negative", b"past"])
    assert store.timer.stats()["pending"] == 0


async def test_timers_come_out_in_time_order_and_a_thousand_due_together_in_send_order(
    store: MessageStore,
) -> None:
    soon = int(at(1.2))
    for offset_ms in (900, 300, 600):
        await store.put(TOPIC, 1, [msg(f"t{offset_ms}", TIMER_DELIVER_MS=str(soon + offset_ms))])
    same = str(soon + 1200)
    for i in range(1000):
        store.append(TOPIC, 0, [msg(f"bulk{i}", TIMER_DELIVER_MS=same)])
    await wait_for(lambda: len(bodies(store, 0)) == 1000, timeout_s=10)
    assert bodies(store, 1) == [b"t300", b"t600", b"t900"]
    # Due together: delivered in many puts (4 KiB each with these small segments), in order.
    assert bodies(store, 0) == [f"bulk{i}".encode() for i in range(1000)]


async def test_pending_timers_survive_a_restart_and_recalled_ones_never_come(
    tmp_path: Path,
) -> None:
    store = hooked_store(small_config(tmp_path / "store"))
    await store.start()
    keep = await store.put(TOPIC, 0, [msg("keep", uniq="K", TIMER_DELIVER_MS=at(2))])
    drop = await store.put(TOPIC, 0, [msg("drop", uniq="D", TIMER_DELIVER_MS=at(2))])
    assert await store.wait_dispatched()
    await store.timer.cancel(drop.append.first_queue_offset, "D")
    with pytest.raises(InvalidMessageError):  # twice, or a wrong id: nothing to recall
        await store.timer.cancel(drop.append.first_queue_offset, "D")
    with pytest.raises(InvalidMessageError):
        await store.timer.cancel(keep.append.first_queue_offset, "not-K")
    await store.shutdown()

    store = hooked_store(small_config(tmp_path / "store"))
    await store.start()
    try:
        assert store.timer.stats()["pending"] == 1
        await wait_for(lambda: bodies(store) == [b"keep"], timeout_s=5)
        await asyncio.sleep(0.5)
        assert bodies(store) == [b"keep"]
    finally:
        await store.shutdown()


async def test_a_delivery_the_checkpoint_missed_is_not_repeated(tmp_path: Path) -> None:
    """A crash right after deliveries leaves a checkpoint that does not list them; start-up
    finds their copies in the commit log instead. Here the checkpoint is lost altogether."""
    store = hooked_store(small_config(tmp_path / "store"))
    await store.start()
    await store.put(TOPIC, 0, [msg("once", TIMER_DELIVER_MS=at(1.1))])
    await store.put(TOPIC, 0, [msg("later", TIMER_DELIVER_MS=at(30))])
    await wait_for(lambda: bodies(store) == [b"once"])
    checkpoint = store.insides.paths.timer_checkpoint_file
    await store.shutdown()
    for path in (checkpoint, checkpoint.with_name(checkpoint.name + ".bak")):
        path.unlink(missing_ok=True)

    again = hooked_store(small_config(tmp_path / "store"))
    await again.start()
    try:
        assert again.timer.stats()["pending"] == 1  # "later" only
        await asyncio.sleep(1.0)
        assert bodies(again) == [b"once"]
    finally:
        await again.shutdown()


@pytest.mark.parametrize(
    ("refusal", "level"),
    [
        (StoreShutDownError("the store is stopping: writes are refused"), logging.INFO),
        (DiskFullError("disk full: appending failed"), logging.WARNING),
    ],
)
async def test_a_refused_delivery_keeps_its_timer_and_a_stop_is_no_warning(
    store: MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    refusal: Exception,
    level: int,
) -> None:
    """A timer due while the store stops stays pending for the next start (the restart test
    above) and says so at INFO: a WARNING at every normal shutdown that met a due timer read
    as a fault. A refusal that is one (disk full) stays a WARNING, once per episode."""
    refused: list[str] = []

    async def refuse(topic: str, queue_id: int, messages: object) -> None:
        refused.append(topic)
        raise refusal

    await store.put(TOPIC, 0, [msg("due", uniq="R", TIMER_DELIVER_MS=at(0.2))])
    assert await store.wait_dispatched()
    monkeypatch.setattr(store.timer.host, "put", refuse)
    caplog.set_level(logging.INFO, logger="wharf.store.services.timer")
    await wait_for(lambda: len(refused) >= 2, timeout_s=5)  # refused, then retried
    paused = [r for r in caplog.records if "timer delivery paused" in r.getMessage()]
    assert [r.levelno for r in paused] == [level]  # one line for the episode
    assert str(refusal) in paused[0].getMessage()
    assert store.timer.stats()["pending"] == 1
    assert bodies(store) == []
