"""Producer-encoded records (SendMessageRequest.records) through the real daemon: stored with
the broker-owned fields filled in, found by every read path, and refused as a whole -- with the
bad record named and nothing written -- when one record is wrong."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from wharf.store.codec.ids import create_offset_msg_id
from wharf.store.codec.layout import RECORD_HEADER_SIZE
from wharf.store.codec.records import decode_record
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.v1 import common_pb2, messaging_pb2

from tests.broker.daemon_helpers import SMALL_STORE, Client
from tests.harness import BrokerProcess, Daemons

UID = "7F00000100010000000000000000{:04X}"


def record(topic: str, body: bytes, i: int, extra: bytes = b"", flag: int = 0) -> bytes:
    properties = extra + f"UNIQ_KEY\x01{UID.format(i)}\x02".encode()
    return encode_record(topic_tail(topic), body, properties, flag, 0, 1_700_000_000_000 + i)


@pytest.fixture
def daemon(daemons: Daemons, tmp_path: Path) -> BrokerProcess:
    broker = daemons.broker(
        tmp_path, settings={**SMALL_STORE, "flushDiskType": "SYNC_FLUSH"}, start=False
    )
    broker.start()
    yield broker
    broker.stop()


def send_records(
    client: Client, topic: str, data: bytes, queue_id: int = 1
) -> messaging_pb2.SendMessageResponse:
    request = messaging_pb2.SendMessageRequest(topic=topic, queue_id=queue_id, records=data)
    return client.msg.SendMessage(request, timeout=10)


def test_records_are_stored_with_broker_fields_and_found_by_every_read(
    daemon: BrokerProcess,
) -> None:
    client = Client(daemon.endpoint)
    try:
        client.send("rec", b"first", queue_id=1)  # queue 1 already holds offset 0
        records = [
            record("rec", b"body-%d" % i, i, b"TAGS\x01t%d\x02KEYS\x01k%d\x02" % (i % 2, i), flag=i)
            for i in range(5)
        ]
        reply = send_records(client, "rec", b"".join(records))
        assert not reply.results and reply.count == 5
        assert reply.status == messaging_pb2.SEND_OK and reply.queue_id == 1
        assert reply.first_queue_offset == 1

        pulled = client.pull("rec", offset=1, queue_id=1, max_messages=10).messages
        assert [m.body for m in pulled] == [b"body-%d" % i for i in range(5)]
        assert [m.queue_offset for m in pulled] == [1, 2, 3, 4, 5]
        assert [m.msg_id for m in pulled] == [UID.format(i) for i in range(5)]
        assert [(m.tags, list(m.keys), m.flag) for m in pulled] == [
            (f"t{i % 2}", [f"k{i}"], i) for i in range(5)
        ]
        assert all(m.born_timestamp == 1_700_000_000_000 + i for i, m in enumerate(pulled))
        assert all(m.born_host.startswith("127.0.0.1:") for m in pulled)  # the peer, as seen
        # Commit log offsets follow from the first one and the sizes the producer knows.
        offset = reply.first_commit_log_offset
        for sent, view in zip(records, pulled, strict=True):
            assert view.commit_log_offset == offset
            assert view.offset_msg_id == create_offset_msg_id(reply.store_host, offset)
            offset += len(sent)
        viewed = client.msg.ViewMessage(
            messaging_pb2.ViewMessageRequest(msg_id=pulled[3].offset_msg_id), timeout=10
        ).message
        assert viewed.body == b"body-3"
        by_key = client.msg.QueryMessage(
            messaging_pb2.QueryMessageRequest(topic="rec", key="k4"), timeout=10
        ).messages
        assert [m.body for m in by_key] == [b"body-4"]
        by_tag = client.pull("rec", offset=1, queue_id=1, tag_expression="t1").messages
        assert [m.body for m in by_tag] == [b"body-1", b"body-3"]
        # Stored bytes: the producer's record with QUEUEID/QUEUEOFFSET/PHYSICALOFFSET/hosts set.
        raw = client.pull("rec", offset=3, queue_id=1, max_messages=1, raw_records=True).records
        stored = decode_record(raw)
        assert (stored.queue_id, stored.queue_offset, stored.body) == (1, 3, b"body-2")
        assert raw[RECORD_HEADER_SIZE:] == records[2][RECORD_HEADER_SIZE:]
    finally:
        client.close()


def corrupt_crc(data: bytes) -> bytes:
    return data[:RECORD_HEADER_SIZE] + b"X" + data[RECORD_HEADER_SIZE + 1 :]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (corrupt_crc(record("rec", b"bad body", 1)), "record #1 of the batch is invalid: BODYCRC"),
        (record("other", b"wrong topic", 1), "record #1 of the batch is invalid: its topic"),
        (
            encode_record(topic_tail("rec"), b"tx", b"UNIQ_KEY\x01U\x02", 0, 4, 0),
            "record #1 of the batch is invalid: SYSFLAG",
        ),
        (
            encode_record(topic_tail("rec"), b"x", b"UNIQ_KEY\x01no-end", 0, 0, 0),
            "PROPERTIES do not end with",
        ),
        (record("rec", b"x" * 70_000, 1), "maxMessageSize"),
    ],
)
def test_one_bad_record_fails_the_request_and_writes_nothing(
    daemon: BrokerProcess, second: bytes, message: str
) -> None:
    client = Client(daemon.endpoint)
    try:
        client.send("rec", b"before", queue_id=1)
        with pytest.raises(grpc.RpcError) as failure:
            send_records(client, "rec", record("rec", b"fine", 0) + second)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in failure.value.details()
        reply = send_records(client, "rec", record("rec", b"after", 2))
        assert reply.first_queue_offset == 1  # the refused batch took no offsets
        # (A pull that finds messages answers with what is dispatched: read from the new one.)
        pulled = client.pull("rec", offset=1, queue_id=1, max_messages=10).messages
        assert [(m.body, m.queue_offset) for m in pulled] == [(b"after", 1)]
    finally:
        client.close()


def test_records_and_messages_in_one_request_are_refused(daemon: BrokerProcess) -> None:
    client = Client(daemon.endpoint)
    try:
        request = messaging_pb2.SendMessageRequest(
            topic="rec", queue_id=0, records=record("rec", b"r", 0)
        )
        request.messages.add(body=b"m")
        with pytest.raises(grpc.RpcError) as failure:
            client.msg.SendMessage(request, timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not both" in failure.value.details()
    finally:
        client.close()


def test_sync_flush_send_stream_answers_each_request_and_keeps_the_stream_order(
    daemon: BrokerProcess,
) -> None:
    """Under SYNC_FLUSH the stream has many requests in flight (appended as they are read,
    answered when their group commit is, so one sync serves many): a bad request still gets
    its own error reply, and requests to one queue -- records or the message form -- take
    queue offsets in the order they were sent."""
    client = Client(daemon.endpoint)
    try:
        client.send("ord", b"first", queue_id=1)  # the queue exists: offset 0

        def request(request_id: int, **fields: object) -> messaging_pb2.SendMessageRequest:
            return messaging_pb2.SendMessageRequest(
                topic="ord", queue_id=1, request_id=request_id, **fields
            )

        mixed = request(5, records=record("ord", b"r", 9))
        mixed.messages.add(body=b"m")
        requests = [
            request(1, records=record("ord", b"a", 1) + record("ord", b"b", 2)),
            request(2, messages=[common_pb2.Message(body=b"c")]),  # the message form
            request(3, records=record("ord", b"d", 4)),
            request(4, records=record("ord", b"x" * 70_000, 5)),  # too large: refused
            mixed,  # refused
            request(6, records=record("ord", b"e", 6)),
        ]
        replies = {r.request_id: r for r in client.msg.SendMessageStream(iter(requests))}
        assert sorted(replies) == [1, 2, 3, 4, 5, 6]
        assert replies[4].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "maxMessageSize" in replies[4].error.message
        assert "not both" in replies[5].error.message
        pulled = client.pull("ord", offset=1, queue_id=1, max_messages=10).messages
        assert [m.body for m in pulled] == [b"a", b"b", b"c", b"d", b"e"]
        assert [m.queue_offset for m in pulled] == [1, 2, 3, 4, 5]
    finally:
        client.close()


def test_batches_in_columns_are_appended_and_answered_each_on_their_own(
    daemon: BrokerProcess,
) -> None:
    """Several batches in columns (``batch_topics``, issue 33): each batch is one append into
    a queue of its topic, answered at its index of the reply's batch columns; a bad batch fails
    alone (its ``batch_errors`` entry), unary and on the stream (SYNC_FLUSH: one group
    commit); columns that do not add up, or set a topic of their own, fail the request."""
    client = Client(daemon.endpoint)
    try:
        for topic in ("ca", "cb"):
            client.send(topic, b"first", queue_id=0)  # created with their queues

        def columns(
            *batches: tuple[str, list[bytes]], **fields: object
        ) -> messaging_pb2.SendMessageRequest:
            blobs = [
                b"".join(record(t, body, i) for i, body in enumerate(bodies))
                for t, bodies in batches
            ]
            return messaging_pb2.SendMessageRequest(
                batch_topics=[t for t, _ in batches], batch_sizes=[len(b) for b in blobs],
                records=b"".join(blobs), **fields,
            )  # fmt: skip

        reply = client.msg.SendMessage(
            columns(("ca", [b"a1", b"a2"]), ("ca", [b"x" * 70_000]), ("cb", [b"b1"])),
            timeout=10,
        )
        assert not reply.parts and not reply.results and reply.count == 3
        assert reply.status == messaging_pb2.SEND_OK
        assert list(reply.batch_errors) == [1]
        assert reply.batch_errors[1].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "maxMessageSize" in reply.batch_errors[1].message
        assert reply.batch_queue_ids[1] == -1
        stored = [(0, "ca", [b"a1", b"a2"]), (2, "cb", [b"b1"])]
        stream = [columns(("cb", [b"b2"]), ("ca", [b"a3"]), request_id=7)]
        (streamed,) = client.msg.SendMessageStream(iter(stream))
        assert streamed.request_id == 7 and streamed.count == 2 and not streamed.batch_errors
        stored += [(0, "cb", [b"b2"]), (1, "ca", [b"a3"])]
        for (index, topic, bodies), answer in zip(
            stored, [reply, reply, streamed, streamed], strict=True
        ):
            queue_id = answer.batch_queue_ids[index]
            first = answer.batch_first_queue_offsets[index]
            pulled = client.pull(topic, offset=first, queue_id=queue_id, max_messages=len(bodies))
            assert [m.body for m in pulled.messages] == bodies
            assert (
                pulled.messages[0].commit_log_offset == answer.batch_first_commit_log_offsets[index]
            )

        for bad, words in (
            (messaging_pb2.SendMessageRequest(batch_topics=["ca"], batch_sizes=[5], records=b"1234"),
             "do not match"),
            (columns(("ca", [b"z"]), topic="ca"), "sets no topic"),
        ):  # fmt: skip
            with pytest.raises(grpc.RpcError) as failure:
                client.msg.SendMessage(bad, timeout=10)
            assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert words in (failure.value.details() or "")
    finally:
        client.close()


def test_parts_of_one_request_are_appended_and_answered_each_on_their_own(
    daemon: BrokerProcess,
) -> None:
    """A request of several batches (``parts``, issue 33): each part is one append into one
    queue with its own reply part, in order; a bad part fails alone, unary and on the stream
    (SYNC_FLUSH here: the parts share one group commit), and a part may not nest parts."""
    client = Client(daemon.endpoint)
    try:
        client.send("pa", b"first", queue_id=1)
        client.send("pb", b"first", queue_id=2)

        def part(topic: str, queue_id: int, *bodies: bytes) -> messaging_pb2.SendMessageRequest:
            data = b"".join(record(topic, body, i) for i, body in enumerate(bodies))
            return messaging_pb2.SendMessageRequest(topic=topic, queue_id=queue_id, records=data)

        bad = part("pa", 1, b"x" * 70_000)
        nested = messaging_pb2.SendMessageRequest(parts=[part("pa", 1, b"n")])
        reply = client.msg.SendMessage(
            messaging_pb2.SendMessageRequest(
                parts=[part("pa", 1, b"a1", b"a2"), bad, part("pb", 2, b"b1"), nested]
            ),
            timeout=10,
        )
        assert len(reply.parts) == 4 and not reply.results and not reply.count
        first, refused, second, refused_nested = reply.parts
        assert (first.queue_id, first.first_queue_offset, first.count) == (1, 1, 2)
        assert (second.queue_id, second.first_queue_offset, second.count) == (2, 1, 1)
        assert refused.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "maxMessageSize" in refused.error.message
        assert "no parts" in refused_nested.error.message
        assert first.status == second.status == messaging_pb2.SEND_OK

        stream = [
            messaging_pb2.SendMessageRequest(
                request_id=7, parts=[part("pb", 2, b"b2"), part("pa", 1, b"a3")]
            ),
            messaging_pb2.SendMessageRequest(request_id=8, topic="pa", queue_id=1,
                                             records=record("pa", b"a4", 9)),
        ]  # fmt: skip
        replies = {r.request_id: r for r in client.msg.SendMessageStream(iter(stream))}
        assert [p.first_queue_offset for p in replies[7].parts] == [2, 3]
        assert replies[8].first_queue_offset == 4  # after the parts of the request before it

        pulled = client.pull("pa", offset=1, queue_id=1, max_messages=10).messages
        assert [m.body for m in pulled] == [b"a1", b"a2", b"a3", b"a4"]
        pulled = client.pull("pb", offset=1, queue_id=2, max_messages=10).messages
        assert [m.body for m in pulled] == [b"b1", b"b2"]

        with pytest.raises(grpc.RpcError) as failure:  # parts and a batch of its own: refused
            client.msg.SendMessage(
                messaging_pb2.SendMessageRequest(topic="pa", parts=[part("pa", 1, b"z")]),
                timeout=10,
            )
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        client.close()
