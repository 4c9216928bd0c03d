"""End-to-end latency of long polls: a caught-up long poll parks at once and is woken by the
arrival of its queue, even while other data waits for dispatch (SYNC_FLUSH keeps some data
undispatched almost all the time under load). Only pulls that cannot park (no long polling, or
an offset ahead of the queue) wait for pending dispatch (read-your-writes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from wharf.broker.controller import BrokerController
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.fakes import FakeStore
from tests.inproc import InProcFactory

SLOW_DISPATCH_S = 0.8


class AlwaysPendingStore(FakeStore):
    """Something is always waiting for dispatch (another queue's unsynced data), and waiting
    for it is slow: a pull that waits for the whole log's dispatch shows up in its latency."""

    dispatch_pending = True  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dispatch_waits = 0

    async def wait_dispatched(self, timeout_s: float = 5.0) -> bool:
        self.dispatch_waits += 1
        await asyncio.sleep(min(SLOW_DISPATCH_S, timeout_s))
        return False


class Rig:
    def __init__(self, controller: BrokerController) -> None:
        self.controller = controller
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}")
        self.stub = messaging_pb2_grpc.MessagingServiceStub(self.channel)

    @property
    def store(self) -> AlwaysPendingStore:
        store = self.controller.store
        assert isinstance(store, AlwaysPendingStore)
        return store

    async def send(self, topic: str, body: bytes) -> None:
        await self.stub.SendMessage(
            messaging_pb2.SendMessageRequest(
                topic=topic, queue_id=0, messages=[common_pb2.Message(body=body)]
            )
        )

    async def pull(self, topic: str, offset: int, **kw: Any) -> messaging_pb2.PullMessageResponse:
        return await self.stub.PullMessage(
            messaging_pb2.PullMessageRequest(
                consumer_group="g", topic=topic, queue_id=0, queue_offset=offset, **kw
            )
        )


@pytest.fixture
async def rig(inproc_broker: InProcFactory) -> AsyncIterator[Rig]:
    rig = Rig((await inproc_broker(AlwaysPendingStore)).controller)
    rig.store.dispatch_waits = 0  # the start's own wait (recovery's dispatch, then topics)
    try:
        yield rig
    finally:
        await rig.channel.close()


async def test_a_caught_up_long_poll_parks_without_waiting_for_dispatch(rig: Rig) -> None:
    await rig.send("lp", b"first")
    parked = asyncio.ensure_future(rig.pull("lp", 1, max_wait_ms=5000))
    await asyncio.sleep(0.1)  # the pull is parked now
    sent_at = time.monotonic()
    await rig.send("lp", b"second")
    reply = await asyncio.wait_for(parked, 5)
    latency = time.monotonic() - sent_at
    assert reply.status == messaging_pb2.FOUND and reply.next_begin_offset == 2
    assert [m.body for m in reply.messages] == [b"second"]
    assert rig.store.dispatch_waits == 0, "a pull that can park must not wait for dispatch"
    assert latency < SLOW_DISPATCH_S / 2, f"woken {latency:.3f} s after the send"


async def test_pulls_that_cannot_park_still_wait_for_pending_dispatch(rig: Rig) -> None:
    await rig.send("ryw", b"only")
    # No long polling: an empty answer first lets pending dispatch catch up (once).
    reply = await rig.pull("ryw", 1, max_wait_ms=0)
    assert reply.status == messaging_pb2.NO_NEW_MSG and rig.store.dispatch_waits == 1
    # Ahead of the queue (an offset from an ack whose message is not dispatched yet): the
    # pull cannot park there, so it waits once too before calling the offset illegal.
    reply = await rig.pull("ryw", 5, max_wait_ms=5000)
    assert reply.status == messaging_pb2.OFFSET_ILLEGAL and rig.store.dispatch_waits == 2
