"""PullMessageStream against the real daemon: many pulls in flight answered by request_id,
PullMessage's statuses, long-poll wake-up, commit piggy-back, byte-sized pulls, per-pull errors,
cancellation, and bounded memory for a client that stops reading."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from wharf.v1 import messaging_pb2

from tests.broker.daemon_helpers import Client
from tests.broker.test_exhaustion import rss_mib
from tests.harness import REPO_ROOT, BrokerProcess, Daemons


class Stream:
    """One PullMessageStream call fed from a queue (requests written as the test goes)."""

    def __init__(self, client: Client) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self.call = client.msg.PullMessageStream(self._iterate(), timeout=60)
        self.replies = self._flatten()
        self.messages = 0  # stream messages received (a batch is one)

    def _flatten(self) -> Iterator[messaging_pb2.PullMessageResponse]:
        """One reply at a time, those of a coalesced ``batch`` message too."""
        for message in self.call:
            self.messages += 1
            yield from message.batch or (message,)

    def _iterate(self) -> Iterator[messaging_pb2.PullMessageRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def send(self, request_id: int, **fields: Any) -> None:
        fields.setdefault("consumer_group", "g")
        fields.setdefault("queue_id", 0)
        self._requests.put(messaging_pb2.PullMessageRequest(request_id=request_id, **fields))

    def send_batch(self, *requests: messaging_pb2.PullMessageRequest) -> None:
        self._requests.put(messaging_pb2.PullMessageRequest(batch=requests))

    def cancel(self, request_id: int) -> None:
        self._requests.put(messaging_pb2.PullMessageRequest(request_id=request_id, cancel=True))

    def next(self) -> messaging_pb2.PullMessageResponse:
        return next(self.replies)

    def close(self) -> list[messaging_pb2.PullMessageResponse]:
        self._requests.put(None)
        return list(self.replies)


def parked_pulls(broker: BrokerProcess) -> float:
    text = urllib.request.urlopen(f"http://{broker.metrics_endpoint}/metrics", timeout=10).read()
    found = re.search(rb"^wharf_long_poll_parked_requests (\S+)$", text, re.M)
    assert found is not None
    return float(found.group(1))


@pytest.fixture
def broker(daemons: Daemons, tmp_path: Path) -> Iterator[BrokerProcess]:
    with daemons.broker(tmp_path, settings={"defaultTopicQueueNums": 2}) as started:
        yield started


def test_pulls_in_flight_are_answered_by_request_id_in_queue_order(broker: BrokerProcess) -> None:
    client = Client(broker.endpoint)
    try:
        client.send("S", *[b"a%d" % i for i in range(6)], queue_id=0)
        client.send("S", b"b0", queue_id=1)
        stream = Stream(client)
        # A long poll on queue 1 past its end parks; the pulls behind it are answered anyway.
        stream.send(1, topic="S", queue_id=1, queue_offset=1, max_wait_ms=20_000)
        stream.send(2, topic="S", queue_offset=0, max_messages=4)
        stream.send(3, topic="S", queue_offset=4, max_messages=4, commit_offset=4)
        first, second = stream.next(), stream.next()
        by_id = {first.request_id: first, second.request_id: second}
        assert sorted(by_id) == [2, 3]
        assert [m.body for m in by_id[2].messages] == [b"a0", b"a1", b"a2", b"a3"]
        assert [m.queue_offset for m in by_id[3].messages] == [4, 5]
        assert by_id[3].status == messaging_pb2.FOUND and by_id[3].next_begin_offset == 6
        committed = client.msg.QueryConsumerOffset(
            messaging_pb2.QueryConsumerOffsetRequest(consumer_group="g", topic="S", queue_id=0),
            timeout=10,
        )
        assert committed.offset == 4  # the piggy-backed commit
        # Caught up: NO_NEW_MSG at once without max_wait_ms, as PullMessage.
        stream.send(4, topic="S", queue_offset=6)
        caught_up = stream.next()
        assert (caught_up.request_id, caught_up.status) == (4, messaging_pb2.NO_NEW_MSG)
        # The parked pull wakes on arrival, not on its 20 s deadline.
        started = time.monotonic()
        client.send("S", b"b1", queue_id=1)
        woken = stream.next()
        assert woken.request_id == 1 and [m.body for m in woken.messages] == [b"b1"]
        assert time.monotonic() - started < 5.0
        assert stream.close() == []
    finally:
        client.close()


def test_errors_come_back_per_pull_and_the_stream_goes_on(broker: BrokerProcess) -> None:
    client = Client(broker.endpoint)
    try:
        client.send("E", b"x" * 100, b"y" * 100, b"z" * 100, queue_id=0)
        stream = Stream(client)
        stream.send(1, topic="E", queue_id=7)
        stream.send(2, topic="E", queue_offset=-1)
        stream.send(3, topic="E", queue_offset=0, max_bytes=-5)
        errors = {r.request_id: r.error for r in (stream.next(), stream.next(), stream.next())}
        assert {rid: e.code for rid, e in errors.items()} == {
            1: grpc.StatusCode.INVALID_ARGUMENT.value[0],
            2: grpc.StatusCode.INVALID_ARGUMENT.value[0],
            3: grpc.StatusCode.INVALID_ARGUMENT.value[0],
        }
        assert "queue_id 7 is out of range" in errors[1].message
        # Pulls sized by bytes: 250 bytes of records hold one 100-byte message's record.
        stream.send(4, topic="E", queue_offset=0, max_bytes=250, raw_records=True)
        sized = stream.next()
        assert sized.status == messaging_pb2.FOUND and sized.next_begin_offset == 1
        assert not sized.HasField("error")
        # Beyond the stored end: OFFSET_ILLEGAL with where to go, the same as PullMessage's.
        stream.send(5, topic="E", queue_offset=99)
        illegal = stream.next()
        unary = client.pull("E", offset=99)
        assert illegal.status == unary.status == messaging_pb2.OFFSET_ILLEGAL
        assert (illegal.next_begin_offset, illegal.max_offset) == (unary.next_begin_offset, 3)
        assert stream.close() == []
    finally:
        client.close()


def test_a_batch_of_pulls_is_answered_pull_by_pull(broker: BrokerProcess) -> None:
    client = Client(broker.endpoint)
    try:
        client.send("B", *[b"q0-%d" % i for i in range(3)], queue_id=0)
        client.send("B", b"q1-0", queue_id=1)
        stream = Stream(client)

        def pull(request_id: int, **fields: Any) -> messaging_pb2.PullMessageRequest:
            return messaging_pb2.PullMessageRequest(
                request_id=request_id, consumer_group="g", topic="B", **fields
            )

        stream.send_batch(
            pull(1, queue_id=0, queue_offset=0, max_messages=2),
            pull(2, queue_id=1, queue_offset=0),
            pull(3, queue_id=5),  # bad: its own error, the others are served
            pull(4, queue_id=0, queue_offset=2, commit_offset=2),
        )
        replies = {r.request_id: r for r in (stream.next() for _ in range(4))}
        assert [m.body for m in replies[1].messages] == [b"q0-0", b"q0-1"]
        assert [m.body for m in replies[2].messages] == [b"q1-0"]
        assert replies[3].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert [m.body for m in replies[4].messages] == [b"q0-2"]
        # Replies ready together were coalesced into fewer stream messages than pulls.
        assert stream.messages < 4
        assert stream.close() == []
    finally:
        client.close()


def test_a_cancelled_pull_leaves_nothing_parked_and_gets_no_reply(broker: BrokerProcess) -> None:
    client = Client(broker.endpoint)
    try:
        client.send("C", b"first", queue_id=0)
        stream = Stream(client)
        stream.send(1, topic="C", queue_offset=1, max_wait_ms=30_000)
        deadline = time.monotonic() + 10
        while parked_pulls(broker) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parked_pulls(broker) == 1
        stream.cancel(1)
        while parked_pulls(broker) > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert parked_pulls(broker) == 0
        client.send("C", b"second", queue_id=0)
        stream.send(2, topic="C", queue_offset=0)
        reply = stream.next()  # not a late answer to the cancelled pull
        assert reply.request_id == 2 and [m.body for m in reply.messages] == [b"first", b"second"]
        assert stream.close() == []
    finally:
        client.close()


def test_half_close_answers_the_pulls_in_flight_then_ends(broker: BrokerProcess) -> None:
    client = Client(broker.endpoint)
    try:
        stream = Stream(client)
        stream.send(1, topic="H", queue_offset=0, max_wait_ms=300)
        # Its id is in flight: refused on its own, under request_id 0 (answering it under 1
        # would answer the pull in flight).
        stream.send(1, topic="H", queue_offset=0)
        rest = stream.close()
        assert [(r.request_id, r.status) for r in rest] == [(0, 0), (1, messaging_pb2.NO_NEW_MSG)]
        assert rest[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "request_id 1 is already in flight" in rest[0].error.message
    finally:
        client.close()


# A consumer that opens one pull stream, asks for far more than it reads, and stops reading
# (SIGSTOP: its socket buffers fill, gRPC cannot deliver the replies).
STALLED_STREAM = """
import sys, time, grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc
channel = grpc.insecure_channel(sys.argv[1], options=[("grpc.max_receive_message_length", 64 << 20)])
stub = messaging_pb2_grpc.MessagingServiceStub(channel)
def requests():
    for i in range(int(sys.argv[2])):
        yield messaging_pb2.PullMessageRequest(
            request_id=i + 1, consumer_group="stalled", topic="Big", queue_id=0, queue_offset=0,
            max_messages=1024, max_wait_ms=30000, raw_records=i % 2 == 0)
    time.sleep(600)
replies = stub.PullMessageStream(requests(), timeout=120)
next(replies)
print("reading", flush=True)
time.sleep(600)
"""


def growth_behind_a_stalled_reader(broker: BrokerProcess, stalled: subprocess.Popen[str]) -> float:
    """MiB the broker grows in 3 s once ``stalled`` (a client that printed "reading" after its
    first reply) is stopped with its pulls in flight: it answers what it can of them."""
    assert stalled.stdout is not None and stalled.stdout.readline().strip() == "reading"
    os.kill(stalled.pid, signal.SIGSTOP)
    before = rss_mib(broker.pid)
    time.sleep(3.0)
    return rss_mib(broker.pid) - before


@pytest.mark.slow
def test_a_stream_that_stops_reading_holds_bounded_memory(daemons: Daemons, tmp_path: Path) -> None:
    settings = {"maxMessageSize": 1 << 20, "defaultTopicQueueNums": 1}
    with daemons.broker(tmp_path, settings=settings) as broker:
        client = Client(broker.endpoint)
        bodies = [os.urandom(500_000) for _ in range(8)]
        for body in bodies:
            client.send("Big", body)
        stalled = subprocess.Popen(
            [sys.executable, "-c", STALLED_STREAM, broker.endpoint, "400"],
            stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )  # fmt: skip
        try:
            grown = growth_behind_a_stalled_reader(broker, stalled)
            # Unbounded, 400 replies of ~3 MiB would queue (1.2 GB); the stream holds at most
            # maxUnreadPullBytesPerClient (16 MiB) + one reply, and reads at most 64 requests.
            assert grown < 100, f"broker grew {grown:.0f} MiB for one stalled stream"
            # Another consumer is served at once, and reads everything.
            other = Stream(client)
            other.send(1, topic="Big", consumer_group="healthy", max_messages=8)
            pulled = other.next()
            assert pulled.status == messaging_pb2.FOUND and pulled.messages[0].body == bodies[0]
            assert len(pulled.messages) == 6  # 3 MiB maxPullBytes
            other.close()
        finally:
            stalled.kill()
            stalled.wait()
            client.close()
