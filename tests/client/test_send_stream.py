"""SendStream's writer hand-off: callers write their own request when no write is in progress,
leave it to the writer otherwise, and a cancelled writer hands its backlog over (no request is
stranded), against the real daemon."""

from __future__ import annotations

import asyncio

from wharf.client.channel import open_channel
from wharf.client.record_encoder import RecordEncoder, results_of
from wharf.client.send_stream import SendStream
from wharf.v1 import messaging_pb2

from tests.harness import BrokerProcess


def _head(topic: str) -> bytes:
    return messaging_pb2.SendMessageRequest(topic=topic, queue_id=0).SerializeToString()


async def test_concurrent_requests_all_answered_even_when_a_writer_is_cancelled(
    broker: BrokerProcess, name: str
) -> None:
    encoder = RecordEncoder()
    tail = encoder.tail(name)
    channel = open_channel(broker.endpoint)
    stream = SendStream(channel)
    try:
        # 60 callers at once, 20 records each: most find a write in progress.
        batches = [
            [encoder.encode_bare(tail, b"%d-%d" % (c, i), f"{c:016X}{i:016X}") for i in range(20)]
            for c in range(60)
        ]
        calls = [
            asyncio.ensure_future(stream.request_records(_head(name), records))
            for records in batches
        ]
        await asyncio.sleep(0)  # every caller has queued its request; the first is writing
        calls[0].cancel()  # the writer goes away: the others must still be sent
        done = await asyncio.gather(*calls[1:])
        assert all(reply.count == 20 and not reply.HasField("error") for reply in done)
        offsets = sorted(reply.first_queue_offset for reply in done)
        assert len(set(offsets)) == len(offsets)  # distinct appends, none lost or merged
        # A later request on the same stream still works, results line up with the records.
        records = batches[0]
        reply = await stream.request_records(_head(name), records)
        results = results_of(reply, name, records, [f"{0:016X}{i:016X}" for i in range(20)])
        assert [r.queue_offset for r in results] == list(
            range(reply.first_queue_offset, reply.first_queue_offset + 20)
        )
    finally:
        await stream.close()
        await channel.close()
    assert stream.pending == 0


async def test_a_stream_the_broker_ends_at_once_fails_its_requests_with_the_broker_s_status() -> (
    None
):
    """The broker may end a stream before the first write lands (ACL refuses it at open): the
    write then raises grpc.aio's BaseError ("Internal error from Core", not an RpcError); the
    caller must get the status the broker ended the call with, not an INTERNAL error."""
    import grpc
    from wharf.client.errors import UnauthenticatedError

    class EndedCall:
        def __init__(self) -> None:
            self.ended = asyncio.Event()

        async def write(self, data: bytes) -> None:
            self.ended.set()
            raise grpc.aio.InternalError("Internal error from Core")

        async def done_writing(self) -> None:
            raise grpc.aio.UsageError("call already done")

        def __aiter__(self):  # type: ignore[no-untyped-def]
            return self._replies()

        async def _replies(self):  # type: ignore[no-untyped-def]
            await self.ended.wait()
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAUTHENTICATED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="no signature",
            )
            yield  # an async generator

        def cancel(self) -> None:
            pass

    class Channel:
        def stream_stream(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
            return lambda: EndedCall()

    stream = SendStream(Channel())  # type: ignore[arg-type]
    try:
        await stream.request_records(_head("t"), [b"x"])
        raise AssertionError("the request was answered")
    except UnauthenticatedError as exc:
        assert "no signature" in str(exc)
    await stream.close()


def test_a_connection_broken_under_a_call_is_retriable_and_a_broker_internal_error_is_not() -> None:
    """gRPC's client core reports a connection torn down mid-call (a broker killed with
    SIGKILL under a send stream) as INTERNAL "Internal error from Core": that is a transport
    failure (retriable, another broker may take the send), unlike the broker's own INTERNAL."""
    import grpc
    from wharf.client.errors import BrokerInternalError, UnavailableError, from_rpc_error

    def error(details: str) -> grpc.aio.AioRpcError:
        meta = grpc.aio.Metadata()
        return grpc.aio.AioRpcError(grpc.StatusCode.INTERNAL, meta, meta, details=details)

    broken = from_rpc_error(error("Internal error from Core"))
    assert isinstance(broken, UnavailableError) and broken.retriable
    broker = from_rpc_error(error("internal error: the store failed"))
    assert isinstance(broker, BrokerInternalError) and not broker.retriable
