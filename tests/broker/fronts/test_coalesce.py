"""The fronts' coalescer (broker/fronts/coalesce.py) against a fake broker that holds its
first request until released, so the calls arriving meanwhile park and merge: what merges
(sends: NORMAL messages, one topic; acks: one group and topic; the same headers but the
request id), how the merged answer is split back, and the call-by-call retry of a merged
request refused as a whole."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import grpc
import pytest
from wharf.broker.fronts.coalesce import AckMerge, Coalescer, Merge, SendMerge
from wharf.rocketmq.v2 import definition_pb2, service_pb2

OK = definition_pb2.OK
BAD_BODY = definition_pb2.MESSAGE_BODY_EMPTY
MULTIPLE = definition_pb2.MULTIPLE_RESULTS
BAD_HANDLE = definition_pb2.INVALID_RECEIPT_HANDLE
NO_TOPIC = definition_pb2.TOPIC_NOT_FOUND


class FakeBroker:
    """The wire stub: answers like the v2 send path. A request with a message whose body is
    ``b""`` is refused whole (no entries, nothing stored); a body ``b"flush-timeout"`` gets its
    own entry status; the first request waits for ``release``."""

    def __init__(self) -> None:
        self.requests: list[tuple[service_pb2.SendMessageRequest, Any]] = []
        self.release = asyncio.Event()
        self.arrived = asyncio.Event()
        self.stored: list[bytes] = []
        self._offsets = itertools.count()

    def unary_unary(self, name: str) -> Any:
        return self.call if name.endswith("/SendMessage") else self.ack

    async def ack(self, raw: bytes, metadata: Any = None, **_: Any) -> bytes:
        """Request-level TOPIC_NOT_FOUND for topic "missing"; handle "bad": its entry fails."""
        request = service_pb2.AckMessageRequest.FromString(raw)
        self.requests.append((request, metadata))  # type: ignore[arg-type]
        self.arrived.set()
        if len(self.requests) == 1:
            await self.release.wait()
        reply = service_pb2.AckMessageResponse()
        if request.topic.name == "missing":
            reply.status.code = NO_TOPIC
            return reply.SerializeToString()
        for e in request.entries:
            entry = reply.entries.add(message_id=e.message_id, receipt_handle=e.receipt_handle)
            entry.status.code = BAD_HANDLE if e.receipt_handle == "bad" else OK
            if e.receipt_handle != "bad":
                self.stored.append(e.receipt_handle.encode())
        reply.status.code = OK
        return reply.SerializeToString()

    async def call(self, raw: bytes, metadata: Any = None, **_: Any) -> bytes:
        request = service_pb2.SendMessageRequest.FromString(raw)
        self.requests.append((request, metadata))
        self.arrived.set()
        if len(self.requests) == 1:
            await self.release.wait()
        reply = service_pb2.SendMessageResponse()
        if any(not m.body for m in request.messages):
            reply.status.code = BAD_BODY
            reply.status.message = "empty body"
            return reply.SerializeToString()
        codes = set()
        for m in request.messages:
            entry = reply.entries.add(message_id=m.system_properties.message_id)
            entry.offset = next(self._offsets)
            entry.status.code = MULTIPLE if m.body == b"flush-timeout" else OK
            entry.status.message = "timeout" if m.body == b"flush-timeout" else "OK"
            codes.add(entry.status.code)
            self.stored.append(m.body)
        reply.status.code = OK if codes == {OK} else MULTIPLE
        return reply.SerializeToString()


class Context:
    def __init__(self, client: str = "c1", request_id: str = "r") -> None:
        self.headers = (("x-mq-client-id", client), ("x-mq-request-id", request_id))

    def invocation_metadata(self) -> Any:
        return self.headers

    def time_remaining(self) -> None:
        return None

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise AssertionError(f"aborted {code} {details}")


def request(*bodies: bytes, topic: str = "orders", group: str = "") -> bytes:
    out = service_pb2.SendMessageRequest()
    for body in bodies:
        m = out.messages.add(body=body)
        m.topic.name = topic
        m.system_properties.message_id = f"id-{body.decode()}"
        if group:
            m.system_properties.message_group = group
            m.system_properties.message_type = definition_pb2.FIFO
        else:
            m.system_properties.message_type = definition_pb2.NORMAL
    return out.SerializeToString()


async def handled(
    broker: FakeBroker, merge: Merge, calls: list[tuple[bytes, Context]], max_bytes: int
) -> list[bytes]:
    """The first call goes out alone and is held; the rest arrive while it is out."""
    coalescer = Coalescer(broker, merge, max_bytes)  # type: ignore[arg-type]
    first = asyncio.ensure_future(coalescer.handle(*calls[0]))  # type: ignore[arg-type]
    await broker.arrived.wait()
    rest = [asyncio.ensure_future(coalescer.handle(*c)) for c in calls[1:]]  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    broker.release.set()
    answers = await asyncio.gather(first, *rest)
    assert coalescer.calls == len(calls) and coalescer.requests == len(broker.requests)
    return answers


async def sends(
    broker: FakeBroker, calls: list[tuple[bytes, Context]], max_bytes: int = 1 << 20
) -> list[service_pb2.SendMessageResponse]:
    answers = await handled(broker, SendMerge, calls, max_bytes)
    return [service_pb2.SendMessageResponse.FromString(a) for a in answers]


def ack(*handles: str, topic: str = "orders", group: str = "g") -> bytes:
    out = service_pb2.AckMessageRequest()
    out.group.name, out.topic.name = group, topic
    for handle in handles:
        out.entries.add(message_id=f"id-{handle}", receipt_handle=handle)
    return out.SerializeToString()


async def acks(broker: FakeBroker, calls: list[tuple[bytes, Context]]
               ) -> list[service_pb2.AckMessageResponse]:  # fmt: skip
    answers = await handled(broker, AckMerge, calls, 1 << 20)
    return [service_pb2.AckMessageResponse.FromString(a) for a in answers]


async def test_calls_arriving_while_one_is_out_go_in_one_request_and_get_their_own_entries() -> (
    None
):
    broker = FakeBroker()
    calls = [(request(b"a"), Context(request_id="1"))]
    calls += [(request(f"b{i}".encode(), f"c{i}".encode()), Context(request_id=f"r{i}"))
              for i in range(5)]  # fmt: skip
    answers = await sends(broker, calls)
    assert [len(r.messages) for r, _ in broker.requests] == [1, 10]
    assert broker.requests[1][1] == calls[1][1].headers  # a caller's own headers, not a blend
    assert [[e.message_id for e in a.entries] for a in answers] == [
        ["id-a"], *[[f"id-b{i}", f"id-c{i}"] for i in range(5)]
    ]  # fmt: skip
    assert all(a.status.code == OK for a in answers)
    assert len({e.offset for a in answers for e in a.entries}) == 11


async def test_a_merged_request_refused_whole_is_sent_again_call_by_call() -> None:
    broker = FakeBroker()
    calls = [(request(b"a"), Context()), (request(b"b"), Context()), (request(b""), Context()),
             (request(b"d"), Context())]  # fmt: skip
    answers = await sends(broker, calls)
    assert [len(r.messages) for r, _ in broker.requests] == [1, 3, 1, 1, 1]
    assert [a.status.code for a in answers] == [OK, OK, BAD_BODY, OK]
    assert sorted(broker.stored) == [b"a", b"b", b"d"]  # each once


async def test_fifo_calls_other_topics_and_other_clients_are_not_merged() -> None:
    broker = FakeBroker()
    calls = [
        (request(b"a"), Context()),
        (request(b"f1", group="g"), Context()),
        (request(b"f2", group="g"), Context()),
        (request(b"t1", topic="other"), Context()),
        (request(b"x1"), Context(client="c2")),
        (request(b"x2"), Context(client="c2", request_id="other")),
    ]
    answers = await sends(broker, calls)
    sizes = sorted(len(r.messages) for r, _ in broker.requests)
    assert sizes == [1, 1, 1, 1, 2]  # only c2's two NORMAL calls to "orders" shared one
    assert all(a.status.code == OK for a in answers)


async def test_a_call_with_mixed_results_says_multiple_and_each_entry_keeps_its_own() -> None:
    broker = FakeBroker()
    calls = [(request(b"a"), Context()), (request(b"b", b"flush-timeout"), Context()),
             (request(b"c"), Context())]  # fmt: skip
    answers = await sends(broker, calls)
    assert [a.status.code for a in answers] == [OK, MULTIPLE, OK]
    assert [e.status.code for e in answers[1].entries] == [OK, MULTIPLE]


@pytest.mark.parametrize("max_bytes", [2_500])
async def test_a_merged_request_stays_within_the_size_limit(max_bytes: int) -> None:
    broker = FakeBroker()
    body = b"x" * 450  # ~930 bytes a request (the message id repeats the body)
    calls = [(request(b"a"), Context())]
    calls += [(request(body + str(i).encode()), Context()) for i in range(5)]
    await sends(broker, calls, max_bytes)
    sizes = [len(r.messages) for r, _ in broker.requests]
    assert sizes[0] == 1 and sum(sizes) == 6 and max(sizes) == 2
    assert all(len(r.SerializeToString()) <= max_bytes for r, _ in broker.requests)


async def test_acks_of_one_group_and_topic_share_a_request_and_each_gets_its_entries() -> None:
    broker = FakeBroker()
    calls = [(ack("h0"), Context()), (ack("h1"), Context()), (ack("h2", "bad"), Context()),
             (ack("h3", group="other"), Context()), (ack("h4"), Context())]  # fmt: skip
    answers = await acks(broker, calls)
    assert sorted(len(r.entries) for r, _ in broker.requests) == [1, 1, 4]  # type: ignore[attr-defined]
    assert [a.status.code for a in answers] == [OK, OK, BAD_HANDLE, OK, OK]
    assert [[e.receipt_handle for e in a.entries] for a in answers] == [
        ["h0"], ["h1"], ["h2", "bad"], ["h3"], ["h4"]
    ]  # fmt: skip
    assert [e.status.code for e in answers[2].entries] == [OK, BAD_HANDLE]


async def test_acks_refused_whole_are_sent_again_one_by_one() -> None:
    broker = FakeBroker()
    calls = [(ack("h0"), Context()), (ack("h1", topic="missing"), Context()),
             (ack("h2", topic="missing"), Context())]  # fmt: skip
    answers = await acks(broker, calls)
    assert [len(r.entries) for r, _ in broker.requests] == [1, 2, 1, 1]  # type: ignore[attr-defined]
    assert [a.status.code for a in answers] == [OK, NO_TOPIC, NO_TOPIC]


def test_a_merged_send_holds_no_more_messages_than_the_broker_takes() -> None:
    """The front cannot import the broker's v2 layer (an import contract): its copy of the
    batch limit is held to the broker's here."""
    from wharf.broker.frontends.v2.send import MAX_BATCH as BROKER_MAX_BATCH
    from wharf.broker.fronts.coalesce import MAX_BATCH

    assert MAX_BATCH == BROKER_MAX_BATCH
