"""A parked raw pull answered ahead of the sync (broker/core/long_poll.py "Ahead of the
sync"): its reply is built while the fdatasync runs and written by the store's sync thread
right after it (``ReadCore.write_when_durable``); the connection's other writes wait for the
outcome, so every reply arrives once and in order. In-process, the real store under
SYNC_FLUSH (the compiled sync thread), the SDK over the wire port."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from wharf.broker.core import read as read_core
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.core.read import DEFERRED, ReadCore
from wharf.broker.frontends.wire import server as wire_server
from wharf.client import Admin, Producer, PullConsumer
from wharf.client.errors import UnavailableError

from tests.inproc import InProcFactory


async def test_on_planned_answers_a_parked_pull_ahead_and_leaves_the_rest_parked() -> None:
    holder = LongPollHolder(100)
    holder.bind_loop(asyncio.get_running_loop())
    seen: list[tuple[str, int, int]] = []

    def ahead(name: str, value: Any) -> Any:
        def call(max_offset: int, durable_end: int) -> Any:
            seen.append((name, max_offset, durable_end))
            return value

        return call

    taken = asyncio.create_task(holder.park("t", 0, 5, 10, ahead=ahead("taken", "sent")))
    declining = asyncio.create_task(holder.park("t", 0, 5, 10, ahead=ahead("declines", None)))
    beyond = asyncio.create_task(holder.park("t", 0, 6, 10, ahead=ahead("beyond", "no")))
    other = asyncio.create_task(holder.park("t", 1, 5, 10, ahead=ahead("other", "no")))
    plain = asyncio.create_task(holder.park("t", 0, 5, 10))
    await asyncio.sleep(0)
    assert holder.parked_count == 5

    holder.on_planned("t", 0, 6, 4096)  # queue 0 reaches offset 6 once the log is durable

    assert await taken == "sent"
    assert sorted(seen) == [("declines", 6, 4096), ("taken", 6, 4096)]
    assert holder.parked_count == 4  # the one that declined waits for the arrival as usual
    holder.on_arrival("t", 0, 6)
    assert await declining is True and await plain is True
    assert not beyond.done() and not other.done()
    holder.close()
    assert await beyond is False and await other is False


async def _wire_topic(inproc_broker: InProcFactory, flush: str, topic: str, queues: int) -> str:
    """An in-process broker flushing as ``flush``, with ``topic``: its wire endpoint."""
    broker = await inproc_broker(flush_disk_type=flush)
    endpoint = f"wire://{broker.controller.ready()['wire']}"
    async with Admin(endpoint) as admin:
        await admin.create_topic(topic, queue_nums=queues)
    return endpoint


class _Spy:
    """ReadCore.write_when_durable, recorded: each hand-over's answer and its outcome."""

    def __init__(self) -> None:
        self.answers: list[int] = []
        self.outcomes: list[tuple[int, int]] = []  # (bytes handed over, outcome)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = ReadCore.write_when_durable
        spy = self

        def write_when_durable(core: ReadCore, end: int, fd: int, data: bytes, done: Any) -> int:
            def recorded(outcome: int) -> None:
                spy.outcomes.append((len(data), outcome))
                done(outcome)

            answer = original(core, end, fd, data, recorded)
            spy.answers.append(answer)
            return answer

        monkeypatch.setattr(ReadCore, "write_when_durable", write_when_durable)


async def test_lone_messages_reach_a_long_poll_from_the_sync_thread_once_and_in_order(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two queues long-polled on one pull stream, messages sent one by one and in pairs (two
    replies owed by one sync: the second waits behind the first): every message arrives
    once, in queue order, and lone ones left from the sync thread, all of their bytes."""
    spy = _Spy()
    spy.install(monkeypatch)
    topic, rounds = "Ahead", 30
    endpoint = await _wire_topic(inproc_broker, "SYNC_FLUSH", topic, 2)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    async with Producer(endpoint) as producer, PullConsumer(endpoint, "ahead") as consumer:
        queues = await consumer.queues(topic)
        wanted = {0: rounds + rounds // 2, 1: rounds // 2}

        async def poll(queue_index: int) -> None:
            offset = 0
            while len(got[queue_index]) < wanted[queue_index]:
                result = await consumer.pull(queues[queue_index], offset, max_wait_ms=5_000)
                got[queue_index] += [m.body for m in result.messages]
                offset = result.next_begin_offset

        pollers = [asyncio.create_task(poll(0)), asyncio.create_task(poll(1))]
        for i in range(rounds):
            await asyncio.sleep(0.02)  # the pulls park again: each message arrives alone
            if i % 2:
                await asyncio.gather(
                    producer.send(topic, b"q0-%02d" % i, queue_id=0),
                    producer.send(topic, b"q1-%02d" % i, queue_id=1),
                )
            await producer.send(topic, b"lone-%02d" % i, queue_id=0)
        await asyncio.wait_for(asyncio.gather(*pollers), 20)
    q0 = [b for b in got[0] if b.startswith(b"q0")]
    assert q0 == [b"q0-%02d" % i for i in range(1, rounds, 2)]
    assert [b for b in got[0] if b.startswith(b"lone")] == [b"lone-%02d" % i for i in range(rounds)]
    assert got[1] == [b"q1-%02d" % i for i in range(1, rounds, 2)]
    assert len(got[0]) == len(set(got[0]))
    # Most lone messages went out from the sync thread, whole (a reply the loop built after
    # the thread's fdatasync ended is written by the loop: DURABLE).
    deferred = spy.answers.count(DEFERRED)
    assert deferred >= rounds // 2, spy.answers
    assert len(spy.outcomes) == deferred
    assert all(outcome == size for size, outcome in spy.outcomes), spy.outcomes


async def test_no_reply_is_handed_over_without_sync_flush(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ASYNC_FLUSH: nothing waits for a sync, so no pull is answered ahead (the arrival
    answers it once dispatched, as always)."""
    spy = _Spy()
    spy.install(monkeypatch)
    endpoint = await _wire_topic(inproc_broker, "ASYNC_FLUSH", "AsyncAhead", 1)
    async with Producer(endpoint) as producer, PullConsumer(endpoint, "async") as consumer:
        queues = await consumer.queues("AsyncAhead")
        pull = asyncio.create_task(consumer.pull(queues[0], 0, max_wait_ms=5_000))
        await asyncio.sleep(0.2)
        await producer.send("AsyncAhead", b"x", queue_id=0)
        assert [m.body for m in (await asyncio.wait_for(pull, 10)).messages] == [b"x"]
    assert spy.answers == [] or set(spy.answers) == {read_core.REFUSED}


async def test_a_reply_owed_to_a_hung_disk_ends_its_connection_and_the_client_pulls_again(
    inproc_broker: InProcFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sync thread never answers the hand-over (an fdatasync that hangs): the
    connection's other replies wait behind it for ``OWED_LIMIT_S`` at most, then the
    connection is shut down; the client's pulls fail over to a new connection and read every
    record from their offsets (nothing lost, nothing waits on the disk for good)."""
    monkeypatch.setattr(wire_server, "OWED_LIMIT_S", 0.5)
    owed: list[int] = []

    def hung(core: ReadCore, end: int, fd: int, data: bytes, done: Any) -> int:
        owed.append(len(data))
        return DEFERRED  # ``done`` is never called: the disk hangs

    monkeypatch.setattr(ReadCore, "write_when_durable", hung)
    endpoint = await _wire_topic(inproc_broker, "SYNC_FLUSH", "Hung", 2)
    async with Producer(endpoint) as producer, PullConsumer(endpoint, "hung") as consumer:
        queues = await consumer.queues("Hung")
        await producer.send("Hung", b"ready", queue_id=1)
        parked = asyncio.create_task(consumer.pull(queues[0], 0, max_wait_ms=20_000))
        await asyncio.sleep(0.2)
        await producer.send("Hung", b"owed", queue_id=0)  # answers the parked pull ahead
        for _ in range(100):
            if owed:
                break
            await asyncio.sleep(0.01)
        assert owed, "the parked pull was not answered ahead of the sync"
        # A pull on the same stream whose record is durable already: its reply is held.
        started = asyncio.get_running_loop().time()
        held = asyncio.create_task(consumer.pull(queues[1], 0, max_wait_ms=0))
        done, _ = await asyncio.wait({held, parked}, timeout=0.3)
        assert not done, "a reply overtook the one the sync thread owes"
        outcomes = await asyncio.wait_for(asyncio.gather(held, parked, return_exceptions=True), 10)
        waited = asyncio.get_running_loop().time() - started
        assert 0.4 <= waited < 5, waited
        assert all(isinstance(o, UnavailableError) for o in outcomes), outcomes
        # A new connection: the records are there, from the same offsets.
        again0 = await consumer.pull(queues[0], 0, max_wait_ms=5_000)
        again1 = await consumer.pull(queues[1], 0, max_wait_ms=5_000)
        assert [m.body for m in again0.messages] == [b"owed"]
        assert [m.body for m in again1.messages] == [b"ready"]
