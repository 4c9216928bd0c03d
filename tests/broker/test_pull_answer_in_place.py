"""A parked stream pull is answered in place: the arrival's own call reads the queue, builds the
reply and hands it to the stream's direct writer, before the pull's task runs again
(broker/core/long_poll.py "Answer in place", broker/frontends/v1/pull.py). In-process over the fake
store, whose ``_dispatch`` is the store's arrival notification; the daemon over the wire port
is covered by tests/broker/test_wire.py (each pull answered once, in order)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from wharf.broker.controller import BrokerController
from wharf.broker.core.long_poll import LongPollHolder
from wharf.broker.frontends.reply_budget import PullReplies, StreamReplies
from wharf.broker.frontends.v1.pull import PullProcessor
from wharf.store.codec.properties import PROPERTY_TAGS
from wharf.store.model import MessageInput
from wharf.v1 import messaging_pb2

from tests.fakes import FakeStore
from tests.inproc import InProcFactory


@pytest.fixture
async def controller(inproc_broker: InProcFactory) -> BrokerController:
    return (await inproc_broker(FakeStore)).controller


def pull_request(tags: str = "*") -> messaging_pb2.PullMessageRequest:
    return messaging_pb2.PullMessageRequest(
        consumer_group="g",
        topic="t",
        queue_id=0,
        queue_offset=0,
        max_wait_ms=10_000,
        tag_expression=tags,
    )


def stream_replies(controller: BrokerController) -> PullReplies:
    return StreamReplies(controller.ctx.replies, "ipv4:127.0.0.1:1", 1 << 20).for_pull()


async def parked(controller: BrokerController, count: int) -> None:
    for _ in range(200):
        if controller.long_poll.parked_count == count:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{controller.long_poll.parked_count} pulls parked, not {count}")


class Delivered(list[messaging_pb2.PullMessageResponse]):
    """A stream's direct writer that takes every reply (and keeps it)."""

    def __call__(self, reply: messaging_pb2.PullMessageResponse) -> bool:
        self.append(reply)
        return True


def arrive(controller: BrokerController, body: bytes, tags: str = "") -> None:
    """Store a message without notifying, then notify: the arrival, as dispatch makes it."""
    store = controller.ctx.store
    assert isinstance(store, FakeStore)
    properties = {PROPERTY_TAGS: tags} if tags else {}
    appended = store.write("t", 0, [MessageInput(body, properties)]).appended
    store._dispatch("t", 0, appended.first_queue_offset + 1)


async def test_a_parked_pull_is_answered_in_the_arrivals_own_call(
    controller: BrokerController,
) -> None:
    puller = PullProcessor(controller.ctx)
    replies = stream_replies(controller)
    delivered = Delivered()

    pull = asyncio.create_task(puller.pull(pull_request(), replies, delivered))
    await parked(controller, 1)
    arrive(controller, b"lone")
    # No await since the arrival: the reply was read, built and handed over in its call.
    assert [(r.status, [m.body for m in r.messages]) for r in delivered] == [
        (messaging_pb2.FOUND, [b"lone"])
    ]
    assert delivered[0].next_begin_offset == 1
    assert not pull.done()
    assert await pull is None  # delivered: nothing more for the stream to write
    assert controller.long_poll.parked_count == 0


async def test_a_declined_delivery_leaves_the_built_reply_to_the_pull(
    controller: BrokerController,
) -> None:
    puller = PullProcessor(controller.ctx)
    offered: list[messaging_pb2.PullMessageResponse] = []

    def decline(reply: messaging_pb2.PullMessageResponse) -> bool:
        offered.append(reply)
        return False  # the stream's writer is busy: its task writes the reply in order

    pull = asyncio.create_task(puller.pull(pull_request(), stream_replies(controller), decline))
    await parked(controller, 1)
    arrive(controller, b"queued")
    reply = await pull
    assert reply is offered[0]  # the one reply, built once
    assert reply.status == messaging_pb2.FOUND
    assert [m.body for m in reply.messages] == [b"queued"]


async def test_an_arrival_that_does_not_match_leaves_the_pull_waiting(
    controller: BrokerController,
) -> None:
    """Everything new filtered out: the in-place read finds nothing, so the pull resumes as
    usual and parks again; the next matching arrival is answered in place."""
    puller = PullProcessor(controller.ctx)
    delivered = Delivered()

    replies = stream_replies(controller)
    pull = asyncio.create_task(puller.pull(pull_request("paid"), replies, delivered))
    await parked(controller, 1)
    arrive(controller, b"other", tags="refund")
    assert delivered == []
    await parked(controller, 1)  # woken, read past the mismatch, parked again
    assert not pull.done()
    arrive(controller, b"mine", tags="paid")
    assert [[m.body for m in r.messages] for r in delivered] == [[b"mine"]]
    assert delivered[0].next_begin_offset == 2
    assert await pull is None


async def test_a_pull_whose_stream_replies_are_full_waits_for_room_itself(
    controller: BrokerController,
) -> None:
    """The stream holds its window of unread replies: the arrival does not read for it (no
    reply is built past the window); the pull resumes, waits for room and then reads."""
    puller = PullProcessor(controller.ctx)
    window = StreamReplies(controller.ctx.replies, "ipv4:127.0.0.1:1", 100)
    replies = window.for_pull()
    delivered = Delivered()

    pull = asyncio.create_task(puller.pull(pull_request(), replies, delivered))
    await parked(controller, 1)
    window.hold(100)  # another pull's reply, not yet taken by the client
    arrive(controller, b"later")
    await asyncio.sleep(0.05)
    assert delivered == [] and not pull.done()
    window.taken(100)
    reply = await asyncio.wait_for(pull, 5)
    assert reply is not None and [m.body for m in reply.messages] == [b"later"]
    assert delivered == []


async def test_an_answer_is_what_park_returns_and_a_failing_one_wakes_the_pull(
    caplog: pytest.LogCaptureFixture,
) -> None:
    holder = LongPollHolder(max_parked=10)
    holder.bind_loop(asyncio.get_running_loop())
    answered = asyncio.create_task(holder.park("t", 0, 0, 5.0, answer=lambda end: ("read", end)))
    nothing = asyncio.create_task(holder.park("t", 1, 0, 5.0, answer=lambda end: None))

    def broken(end: int) -> object:
        raise RuntimeError("bug")

    failing = asyncio.create_task(holder.park("t", 2, 0, 5.0, answer=broken))
    await asyncio.sleep(0)
    for queue_id in range(3):
        holder.on_arrival("t", queue_id, 7)
    with caplog.at_level(logging.ERROR, logger="wharf.broker.core.long_poll"):
        assert await answered == ("read", 7)
        assert await nothing is True
        assert await failing is True
    assert "answer failed" in caplog.text
    assert holder.parked_count == 0


async def test_a_pull_answered_as_its_time_runs_out_returns_the_answer_not_false() -> None:
    """The arrival answers (its reply is written) in the same loop turn as the park's timeout
    fires: the pull must report the answer, or it would read and reply a second time."""
    holder = LongPollHolder(max_parked=10)
    holder.bind_loop(asyncio.get_running_loop())
    calls: list[int] = []

    def answer(end: int) -> str:
        calls.append(end)
        return "written"

    pull = asyncio.create_task(holder.park("t", 0, 0, 0.02, answer=answer))
    await asyncio.sleep(0)  # parked
    _hold_the_loop(0.05)  # the park's timeout is due when the loop next looks
    # Queued before the timeout's callback, both in the next turn: answered, then timed out.
    asyncio.get_running_loop().call_soon(holder.on_arrival, "t", 0, 1)
    assert await pull == "written"
    assert calls == [1]


def _hold_the_loop(seconds: float) -> None:
    """Block on purpose (the test's way to make a timer due in the same loop turn)."""
    time.sleep(seconds)


async def test_a_timed_out_pull_is_not_answered() -> None:
    holder = LongPollHolder(max_parked=10)
    calls: list[int] = []
    assert await holder.park("t", 0, 0, 0.01, answer=calls.append) is False
    holder.on_arrival("t", 0, 1)
    assert calls == []
