"""The multiplexed-stream helper (client/stream_mux.py) under both streams, against the real
daemon: replies matched by request id on one call, every waiter failed when the broker dies
under the call, and a new call opened by ``StreamSlot`` on the next use after it broke."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from wharf.client.channel import open_channel
from wharf.client.consumer.pull_stream import PullStream
from wharf.client.errors import ClientClosedError, UnavailableError, WharfError
from wharf.client.record_encoder import RecordEncoder
from wharf.client.records import messages_from_reply
from wharf.client.send_stream import SendStream
from wharf.client.stream_mux import MuxStream, StreamSlot
from wharf.v1 import messaging_pb2

from tests.client.conftest import BROKER_SETTINGS
from tests.harness import BrokerProcess, Daemons, free_port


def _head(topic: str) -> bytes:
    return messaging_pb2.SendMessageRequest(topic=topic, queue_id=0).SerializeToString()


def _long_poll(topic: str, offset: int) -> messaging_pb2.PullMessageRequest:
    return messaging_pb2.PullMessageRequest(
        topic=topic,
        queue_id=0,
        consumer_group="mux",
        queue_offset=offset,
        max_messages=8,
        max_wait_ms=30_000,
        raw_records=True,
    )


async def test_both_streams_share_the_helper_and_match_replies_by_request_id(
    broker: BrokerProcess, name: str
) -> None:
    assert issubclass(SendStream, MuxStream) and issubclass(PullStream, MuxStream)
    encoder = RecordEncoder()
    tail = encoder.tail(name)
    channel = open_channel(broker.endpoint)
    sends, pulls = SendStream(channel), PullStream(channel)
    try:
        # 10 concurrent requests, 1..10 records each: each reply is its own request's.
        batches = [
            [encoder.encode_bare(tail, b"%d-%d" % (n, i), f"{n:016X}{i:016X}") for i in range(n)]
            for n in range(1, 11)
        ]
        replies = await asyncio.gather(*(sends.request_records(_head(name), b) for b in batches))
        assert [reply.count for reply in replies] == list(range(1, 11))
        assert sends.pending == 0
        # Pulls at 10 offsets at once: each reply starts at its own request's offset.
        offsets = [replies[n].first_queue_offset for n in range(10)]
        got = await asyncio.gather(*(pulls.pull(_long_poll(name, o), 10.0) for o in offsets))
        firsts = [messages_from_reply(reply, "*")[0] for reply in got]
        assert [message.queue_offset for message in firsts] == offsets
        assert pulls.pending == 0
    finally:
        pulls.close()
        await sends.close()
        await channel.close()


async def test_a_broker_dying_under_the_call_fails_every_waiter_and_the_slot_reopens(
    daemons: Daemons, tmp_path: Path, name: str
) -> None:
    listen = ["--listen", f"127.0.0.1:{free_port()}"]  # the same port after the restart
    process = daemons.broker(tmp_path / "broker", settings=BROKER_SETTINGS, extra_args=listen)
    encoder = RecordEncoder()
    channel = open_channel(process.endpoint)
    pull_slot: StreamSlot[PullStream] = StreamSlot(functools.partial(PullStream, channel))
    send_slot: StreamSlot[SendStream] = StreamSlot(functools.partial(SendStream, channel))
    try:
        first = send_slot.get()
        assert send_slot.get() is first  # reused while it works
        record = encoder.encode_bare(encoder.tail(name), b"x", "0" * 32)
        assert (await first.request_records(_head(name), [record])).first_queue_offset == 0
        # Three long polls parked on the broker (nothing past offset 1 yet).
        stream = pull_slot.get()
        parked = [asyncio.ensure_future(stream.pull(_long_poll(name, 1), 60.0)) for _ in range(3)]
        await asyncio.sleep(0.2)  # the requests are written and parked
        assert stream.pending == 3
        process.kill()
        outcomes = await asyncio.gather(*parked, return_exceptions=True)
        assert all(isinstance(o, WharfError) and o.retriable for o in outcomes), outcomes
        assert stream.pending == 0 and stream.broken is not None
        try:
            await stream.pull(_long_poll(name, 1), 1.0)
            raise AssertionError("a broken stream took a request")
        except WharfError as exc:
            assert exc is stream.broken
        # The broker back on its port: the slot opens a new call on each use after a loss
        # (the channel reconnects with gRPC's backoff meanwhile: the caller retries).
        process.start()
        opened: set[int] = set()
        for _ in range(300):
            renewed = pull_slot.get()
            assert renewed is not stream and renewed.broken is None
            opened.add(id(renewed))
            try:
                reply = await renewed.pull(_long_poll(name, 0), 10.0)
                break
            except UnavailableError:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("no pull answered after the restart")
        assert [m.body for m in messages_from_reply(reply, "*")] == [b"x"]
        for _ in range(500):  # the send stream learns of the loss in its read loop
            if first.broken is not None:
                break
            await asyncio.sleep(0.01)
        assert isinstance(first.broken, WharfError) and first.broken.retriable
        sends = send_slot.get()
        assert sends is not first and sends.broken is None
        record = encoder.encode_bare(encoder.tail(name), b"y", "1" * 32)
        done = await sends.request_records(_head(name), [record])
        assert done.count == 1 and done.first_queue_offset == 1
    finally:
        for slot in (pull_slot, send_slot):
            taken = slot.take()
            if isinstance(taken, PullStream):
                taken.close()
            elif taken is not None:
                await taken.close()
        await channel.close()
        process.stop()


async def test_closing_fails_the_waiters_with_client_closed(
    broker: BrokerProcess, name: str
) -> None:
    channel = open_channel(broker.endpoint)
    stream = PullStream(channel)
    try:
        waiting = asyncio.ensure_future(stream.pull(_long_poll(name, 0), 60.0))
        await asyncio.sleep(0)  # the pull registered its request
        assert stream.pending == 1
        stream.close()
        try:
            await waiting
            raise AssertionError("the pull was answered")
        except ClientClosedError as exc:
            assert "pull stream closed" in str(exc)
        assert isinstance(stream.broken, ClientClosedError)
        assert not isinstance(stream.broken, UnavailableError)
    finally:
        await channel.close()
