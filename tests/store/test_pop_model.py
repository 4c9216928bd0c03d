"""Randomized pop / ack / change-invisible / clock / restart sequences against the real store,
checked against a simple in-memory model of the pop contract (one queue, so the order of a pop
is fully specified: ascending offsets). FIFO runs check the ordering invariant instead: a
message is handed out only when every earlier message of its message group is finished, and
no two messages of one group are in flight together."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from wharf.store.errors import InvalidReceiptHandleError
from wharf.store.message_store import MessageStore
from wharf.store.pop import MESSAGE_GROUP_PROPERTY

from tests.store.helpers import msg, small_config

G, TOPIC = "mg", "Model"
MAX_ATTEMPTS = 3
T0 = 1_800_000_000_000


@dataclass
class Entry:
    visible_at: int
    attempt: int
    handle: str


@dataclass
class Model:
    count: int
    in_flight: dict[int, Entry] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    dead: list[int] = field(default_factory=list)
    attempts: dict[int, int] = field(default_factory=dict)

    def pop(self, batch: int, now: int) -> list[tuple[int, int]]:
        """(offset, attempt) the pop must return; applies the dead-lettering it causes."""
        chosen = []
        for offset in range(self.count):
            if len(chosen) >= batch:
                break
            if offset in self.done:
                continue
            entry = self.in_flight.get(offset)
            if entry is not None and entry.visible_at > now:
                continue
            if entry is not None and entry.attempt >= MAX_ATTEMPTS:
                self.dead.append(offset)
                self.done.add(offset)
                del self.in_flight[offset]
                continue
            chosen.append((offset, entry.attempt + 1 if entry else 1))
        return chosen

    def live(self, offset: int, handle: str) -> bool:
        entry = self.in_flight.get(offset)
        return entry is not None and entry.handle == handle


async def _restart(store: MessageStore, root: Path, compact_after: int = 0) -> MessageStore:
    await store.shutdown()
    store = MessageStore(small_config(root))
    await store.start()
    if compact_after:  # small journal: compactions happen in the middle of the run
        store.pop._writer._compact_after = compact_after  # type: ignore[union-attr]
    return store


@pytest.mark.parametrize("seed", range(6))
async def test_random_operations_match_the_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    await store.start()
    model = Model(count=rng.randint(5, 25))
    await store.put(TOPIC, 0, [msg(f"m{i}") for i in range(model.count)])
    assert await store.wait_dispatched()
    compact_after = 1_500 if seed % 2 else 0
    if compact_after:  # small journal: compactions happen in the middle of the run
        store.pop._writer._compact_after = compact_after  # type: ignore[union-attr]
    compactions = 0
    now = T0
    handles: list[tuple[int, str]] = []  # every handle ever issued: live and stale ones
    try:
        for _ in range(120):
            op = rng.random()
            if op < 0.35:
                batch = rng.randint(1, 6)
                invisible = rng.choice([1, 500, 2_000, 10_000])
                expected = model.pop(batch, now)
                got = await store.pop.pop(
                    G, TOPIC, None, None, batch, invisible, MAX_ATTEMPTS, now=now
                )
                assert [(p.message.queue_offset, p.attempt) for p in got] == expected
                for p in got:
                    assert p.message.body == f"m{p.message.queue_offset}".encode()
                    model.in_flight[p.message.queue_offset] = Entry(
                        now + invisible, p.attempt, p.receipt_handle
                    )
                    handles.append((p.message.queue_offset, p.receipt_handle))
            elif op < 0.6 and handles:
                offset, handle = rng.choice(handles)
                if model.live(offset, handle):
                    await store.pop.ack(G, TOPIC, handle)
                    del model.in_flight[offset]
                    model.done.add(offset)
                else:
                    with pytest.raises(InvalidReceiptHandleError):
                        await store.pop.ack(G, TOPIC, handle)
            elif op < 0.72 and handles:
                offset, handle = rng.choice(handles)
                invisible = rng.choice([1, 1_000, 5_000])
                if model.live(offset, handle):
                    new = await store.pop.change_invisible(G, TOPIC, handle, invisible, now=now)
                    model.in_flight[offset] = Entry(
                        now + invisible, model.in_flight[offset].attempt, new
                    )
                    handles.append((offset, new))
                else:
                    with pytest.raises(InvalidReceiptHandleError):
                        await store.pop.change_invisible(G, TOPIC, handle, invisible, now=now)
            elif op < 0.95:
                now += rng.choice([1, 300, 1_000, 3_000])
            else:
                compactions += store.pop.stats()["journal_compactions"]
                store = await _restart(store, root, compact_after)
        compactions += store.pop.stats()["journal_compactions"]
        assert compactions > 0 or not compact_after
        assert await store.wait_dispatched()
        dlq = store.get_messages("%DLQ%mg", 0, 0, 100).messages
        assert [m.body for m in dlq] == [f"m{o}".encode() for o in model.dead]
        state = store.pop.state.queues[(G, TOPIC, 0)]
        assert set(state.in_flight) == set(model.in_flight)
        assert state.pop_offset == min(
            [o for o in range(model.count) if o not in model.done], default=model.count
        )
    finally:
        await store.shutdown()


@pytest.mark.parametrize("seed", range(4))
async def test_random_fifo_operations_keep_message_group_order(tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    root = tmp_path / "store"
    store = MessageStore(small_config(root))
    await store.start()
    groups = ["A", "B", "C", ""]
    sent = [rng.choice(groups) for _ in range(rng.randint(10, 30))]
    await store.put(
        TOPIC, 0, [msg(f"m{i}", **{MESSAGE_GROUP_PROPERTY: g}) for i, g in enumerate(sent)]
    )
    assert await store.wait_dispatched()
    now = T0
    in_flight: dict[int, str] = {}  # offset -> live handle
    finished: set[int] = set()
    try:
        for _ in range(150):
            op = rng.random()
            if op < 0.4:
                got = await store.pop.pop(
                    G, TOPIC, None, None, rng.randint(1, 5), 1_000, 1_000, fifo=True, now=now
                )
                for p in got:
                    offset = p.message.queue_offset
                    group = sent[offset]
                    if group:
                        earlier = [o for o in range(offset) if sent[o] == group]
                        assert all(o in finished for o in earlier), (offset, group)
                        assert not any(sent[o] == group for o in in_flight if o != offset), (
                            offset,
                            group,
                        )
                    in_flight[offset] = p.receipt_handle
            elif op < 0.75 and in_flight:
                offset = rng.choice(sorted(in_flight))
                try:
                    await store.pop.ack(G, TOPIC, in_flight[offset])
                except InvalidReceiptHandleError:
                    pytest.fail("a live handle was refused")
                del in_flight[offset]
                finished.add(offset)
            elif op < 0.95:
                now += rng.choice([10, 600, 1_000])
            else:
                store = await _restart(store, root)
        # drain: everything is delivered eventually, each group in order
        for _ in range(200):
            if len(finished) == len(sent):
                break
            now += 2_000
            for p in await store.pop.pop(G, TOPIC, None, None, 8, 1_000, 1_000, fifo=True, now=now):
                await store.pop.ack(G, TOPIC, p.receipt_handle)
                finished.add(p.message.queue_offset)
        assert finished == set(range(len(sent)))
    finally:
        await store.shutdown()
