"""SendMessageStream under SYNC_FLUSH appends each request inline, as it is read, and answers it
from the group commit's done-callback: many requests in flight on one stream are each answered
exactly once with the offsets of their append, in the stream's order; a malformed or invalid
request gets its error at once and the rest go on; a client that stops reading replies stops
the appends at ``maxInflightStreamRequests``; a call that ends mid-flight withdraws its group
commit waits (none is left pending once the sync in flight returns).

The first two run against the real daemon; the slot bound and the withdrawn waits look inside
a broker running in this process (a transport buffers ~1000 small replies a client does not
read, and the group commit's pending list is not visible from outside)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc
from wharf.broker.controller import BrokerController
from wharf.broker.frontends.v1.send import SendProcessor, _SyncFlushStream
from wharf.broker.frontends.wire.server import _END, _Requests
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.store.log.sync_engine import ThreadSyncEngine
from wharf.store.message_store import MessageStore
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.fakes import FakeStore
from tests.harness import Daemons
from tests.inproc import InProcFactory

SYNC_FLUSH_DAEMON = {**SMALL_STORE, "flushDiskType": "SYNC_FLUSH"}


def records(topic: str, first: int, count: int) -> bytes:
    tail = topic_tail(topic)
    return b"".join(
        encode_record(tail, b"m%d" % i, f"UNIQ_KEY\x01{i:032X}\x02".encode())
        for i in range(first, first + count)
    )


def test_many_requests_in_flight_on_one_stream_are_answered_once_with_their_offsets(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    daemon = daemons.broker(tmp_path, settings=SYNC_FLUSH_DAEMON)
    client = Client(daemon.endpoint)
    try:
        requests, counts = [], {}
        body = 0
        for request_id in range(1, 401):
            count = 1 + request_id % 3
            request = messaging_pb2.SendMessageRequest(
                topic="many", queue_id=2, request_id=request_id
            )
            if request_id % 5 == 0:  # the message form among producer-encoded records
                request.messages.extend(
                    common_pb2.Message(body=b"m%d" % (body + i)) for i in range(count)
                )
            else:
                request.records = records("many", body, count)
            requests.append(request)
            counts[request_id] = count
            body += count
        replies = list(client.msg.SendMessageStream(iter(requests), timeout=60))

        assert Counter(r.request_id for r in replies) == Counter(range(1, 401))  # once each
        by_id = {r.request_id: r for r in replies}
        assert not [r for r in replies if r.HasField("error")]
        expected = 0
        commit_log_offsets = []
        for request_id in range(1, 401):  # appended in the stream's order, one queue
            reply = by_id[request_id]
            if request_id % 5 == 0:
                assert [e.queue_offset for e in reply.results] == list(
                    range(expected, expected + counts[request_id])
                )
                assert {e.status for e in reply.results} == {messaging_pb2.SEND_OK}
                commit_log_offsets.append(reply.results[0].commit_log_offset)
            else:
                assert (reply.status, reply.count) == (messaging_pb2.SEND_OK, counts[request_id])
                assert reply.first_queue_offset == expected
                commit_log_offsets.append(reply.first_commit_log_offset)
            expected += counts[request_id]
        assert commit_log_offsets == sorted(set(commit_log_offsets))
        last = client.pull("many", offset=expected - 1, queue_id=2, max_messages=4).messages
        assert [m.body for m in last] == [b"m%d" % (body - 1)]
    finally:
        client.close()
        daemon.stop()


def test_a_malformed_or_invalid_request_gets_its_error_and_the_rest_go_on(
    daemons: Daemons,
    tmp_path: Path,
) -> None:
    daemon = daemons.broker(tmp_path, settings=SYNC_FLUSH_DAEMON)
    channel = grpc.insecure_channel(daemon.endpoint)
    try:
        raw_stream = channel.stream_stream(
            "/wharf.v1.MessagingService/SendMessageStream",
            request_serializer=lambda data: data,
            response_deserializer=messaging_pb2.SendMessageResponse.FromString,
        )

        def request(request_id: int, **fields: object) -> bytes:
            return messaging_pb2.SendMessageRequest(
                topic="mixed", request_id=request_id, **fields
            ).SerializeToString()

        good = {"queue_id": 0}
        payloads = [
            request(1, records=records("mixed", 1, 1), **good),
            b"\xff\xff\xff\xff",  # does not parse
            request(3, records=records("mixed", 3, 1), **good),
            request(4, records=records("mixed", 4, 1), queue_id=99),  # no such queue
            request(5, **good),  # nothing to send
            request(6, records=records("mixed", 6, 1), **good),
        ]
        replies = list(raw_stream(iter(payloads), timeout=30))
        assert len(replies) == 6
        by_id = {r.request_id: r for r in replies}
        invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert by_id[0].error.code == invalid  # the malformed one: no request id to echo
        assert by_id[4].error.code == invalid and "out of range" in by_id[4].error.message
        assert by_id[5].error.code == invalid and "empty" in by_id[5].error.message
        assert [by_id[i].first_queue_offset for i in (1, 3, 6)] == [0, 1, 2]
        assert all(by_id[i].status == messaging_pb2.SEND_OK for i in (1, 3, 6))
    finally:
        channel.close()
        daemon.stop()


async def start_in_process(
    inproc_broker: InProcFactory, store_factory: Callable[..., object] | None, **settings: str
) -> BrokerController:
    started = await inproc_broker(store_factory, **{"flush_disk_type": "SYNC_FLUSH", **settings})
    return started.controller


async def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.005)


async def test_a_client_that_stops_reading_replies_stops_the_appends_at_the_slot_bound(
    inproc_broker: InProcFactory,
    tmp_path: Path,
) -> None:
    controller = await start_in_process(inproc_broker, FakeStore, max_inflight_stream_requests="4")
    store = controller.store
    assert isinstance(store, FakeStore) and controller.ctx is not None
    read = 0

    async def requests() -> AsyncIterator[messaging_pb2.SendMessageRequest]:
        nonlocal read
        for request_id in range(1, 21):
            read += 1
            yield messaging_pb2.SendMessageRequest(
                topic="slots",
                queue_id=0,
                request_id=request_id,
                messages=[common_pb2.Message(body=b"x")],
            )

    replies = SendProcessor(controller.ctx).stream(requests(), "127.0.0.1:1")
    try:
        first = await anext(replies)  # then the client reads nothing for a while
        await asyncio.sleep(0.2)
        # 4 slots: requests 1-4 appended and answered (their replies wait to be written);
        # the reader holds request 5 until a reply is written.
        assert len(store.queues[("slots", 0)]) == 4
        assert read == 5
        rest = [reply async for reply in replies]
        assert sorted(r.request_id for r in [first, *rest]) == list(range(1, 21))
        assert len(store.queues[("slots", 0)]) == 20
    finally:
        await replies.aclose()


async def test_a_call_ended_mid_flight_withdraws_its_group_commit_waits(
    inproc_broker: InProcFactory, tmp_path: Path
) -> None:
    controller = await start_in_process(inproc_broker, None)
    store = controller.store
    assert isinstance(store, MessageStore)
    commit_log = store.insides.commit_log
    group_commit = commit_log.group_commit
    gate = threading.Event()  # the sync thread waits here: the writers stay pending

    def held_sync() -> int:
        gate.wait(10)
        return commit_log._sync_blocking()

    # Syncs on a Python thread that waits for the gate (the running engine is replaced).
    group_commit.engine.close()
    group_commit.engine = ThreadSyncEngine(held_sync, commit_log._flushed_where)
    group_commit.engine.start(group_commit._served, group_commit._fail)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{controller.grpc_port}")
    try:
        call = messaging_pb2_grpc.MessagingServiceStub(channel).SendMessageStream()
        for request_id in range(1, 11):
            await call.write(
                messaging_pb2.SendMessageRequest(
                    topic="gone", queue_id=0, request_id=request_id, records=records("gone", 0, 1)
                )
            )
        await wait_until(
            lambda: sum(not f.done() for _, f in group_commit._pending) == 10,
            "the 10 appends wait for the held sync",
        )
        call.cancel()  # the client goes away
        await wait_until(
            lambda: all(f.cancelled() for _, f in group_commit._pending),
            "every wait of the ended call is withdrawn",
        )
        gate.set()
        await wait_until(lambda: not group_commit._pending, "the pending list is empty")
        assert await store.wait_dispatched(5.0)  # the appends themselves stay, readable
        assert store.get_max_offset("gone", 0) == 10
    finally:
        gate.set()
        await channel.close()


async def test_closing_the_reply_stream_withdraws_the_waits_of_the_requests_in_flight(
    inproc_broker: InProcFactory,
    tmp_path: Path,
) -> None:
    """The call ends while a reply waits to be written (the transport closes the generator):
    the group commit waits of the other requests are withdrawn at once."""
    controller = await start_in_process(inproc_broker, FakeStore)
    store = controller.store
    assert isinstance(store, FakeStore) and controller.ctx is not None

    async def requests() -> AsyncIterator[messaging_pb2.SendMessageRequest]:
        for request_id in range(1, 11):
            yield messaging_pb2.SendMessageRequest(
                topic="closed",
                queue_id=0,
                request_id=request_id,
                messages=[common_pb2.Message(body=b"x")],
            )
            if request_id == 1:
                await asyncio.sleep(0.1)  # the first reply is read before the others arrive

    replies = SendProcessor(controller.ctx).stream(requests(), "127.0.0.1:1")
    first = await anext(replies)
    assert first.request_id == 1
    store.put_delay_s = 30.0  # the other nine wait on a long group commit
    await wait_until(lambda: store.puts_in_flight == 9, "nine requests wait for the sync")
    await replies.aclose()
    await asyncio.sleep(0)  # the waits' done-callbacks run
    assert store.puts_in_flight == 0


async def test_wire_requests_are_taken_in_the_read_callback_in_order_within_the_slots(
    inproc_broker: InProcFactory,
    tmp_path: Path,
) -> None:
    """Over the wire port the call's request queue hands each request to the stream at once
    (no reader task wake-up): appended before anything awaits. Past the slot bound, requests
    queue for the reader; a request is never taken ahead of one the reader holds or one
    queued before it: appends stay in the stream's order and each gets one reply."""
    controller = await start_in_process(inproc_broker, FakeStore, max_inflight_stream_requests="4")
    store = controller.store
    assert isinstance(store, FakeStore) and controller.ctx is not None
    store.put_delay_s = 0.05  # group commit waits: replies come late, slots stay taken
    queued_bytes = [0]
    requests = _Requests(lambda n: queued_bytes.__setitem__(0, queued_bytes[0] + n))

    def request(request_id: int) -> messaging_pb2.SendMessageRequest:
        return messaging_pb2.SendMessageRequest(
            topic="sink", queue_id=0, request_id=request_id,
            messages=[common_pb2.Message(body=b"m%d" % request_id)],
        )  # fmt: skip

    processor = SendProcessor(controller.ctx)
    replies = processor.stream(requests, "127.0.0.1:1")
    first = asyncio.ensure_future(anext(replies))
    try:
        await asyncio.sleep(0)  # the stream starts and registers its sink
        queued = [requests.put(request(i), 10) for i in range(1, 11)]
        assert queued == [False] * 4 + [True] * 6  # 4 slots: taken at once, then queued
        assert [m.body for m in store.queues[("sink", 0)]] == [b"m%d" % i for i in range(1, 5)]
        got = [await first]
        while len(got) < 10:
            got.append(await asyncio.wait_for(anext(replies), 5))
        assert sorted(r.request_id for r in got) == list(range(1, 11))
        bodies = [m.body for m in store.queues[("sink", 0)]]
        assert bodies == [b"m%d" % i for i in range(1, 11)]
        assert queued_bytes[0] == -60  # the reader took the 6 queued ones, no taken one
        requests.put(_END)
        assert [r async for r in replies] == []

        # The sink declines while the reader holds a request waiting for a slot, or no slot
        # is free; it takes one otherwise.
        stream = _SyncFlushStream(processor, "127.0.0.1:1")
        stream.waiting = True
        assert not stream._take_now(request(11))
        stream.waiting, stream.free = False, 0
        assert not stream._take_now(request(11))
        assert len(store.queues[("sink", 0)]) == 10
        stream.free = 1
        assert stream._take_now(request(11))
        assert len(store.queues[("sink", 0)]) == 11 and stream.free == 0
    finally:
        if not first.done():
            first.cancel()
        await replies.aclose()
