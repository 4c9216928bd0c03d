"""``WireChannel`` stream calls handing responses to a sink as they arrive (``deliver``: what
the SDK's send and pull stream read loops use on the wire port), against a scripted wire peer:
responses that came before the sink go first and in order, and a sink that raises ends its
own call with that error while the connection's other calls go on."""

from __future__ import annotations

import asyncio

import pytest
from wharf import wire
from wharf.client.wire_channel import WireChannel

METHOD = "/test.Service/Stream"


async def scripted_peer(script: asyncio.Queue[list[tuple[int, int, bytes]]]):
    """A wire server that writes the frames it is given, in order; (server, port)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(wire.PREFACE)
        while True:
            frames = await script.get()
            writer.write(b"".join(wire.frame(kind, call, data) for kind, call, data in frames))
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_queued_responses_reach_the_sink_first_then_each_as_it_arrives() -> None:
    script: asyncio.Queue[list[tuple[int, int, bytes]]] = asyncio.Queue()
    server, port = await scripted_peer(script)
    channel = WireChannel(f"127.0.0.1:{port}")
    try:
        call = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)()
        await call.write(b"hello")  # opens call 1
        script.put_nowait([(wire.MESSAGE, 1, b"a"), (wire.MESSAGE, 1, b"b")])
        await asyncio.sleep(0.1)  # both queued before the sink exists
        got: list[bytes] = []
        delivering = asyncio.create_task(call.deliver(got.append))
        await asyncio.sleep(0.05)
        assert got == [b"a", b"b"]
        script.put_nowait([(wire.MESSAGE, 1, b"c")])
        await asyncio.sleep(0.05)
        assert got == [b"a", b"b", b"c"]
        script.put_nowait([(wire.STATUS, 1, wire.encode_status(0, ""))])
        await asyncio.wait_for(delivering, 2)  # the call ended OK: deliver returns
    finally:
        await channel.close()
        server.close()


async def test_a_raising_sink_ends_only_its_call() -> None:
    script: asyncio.Queue[list[tuple[int, int, bytes]]] = asyncio.Queue()
    server, port = await scripted_peer(script)
    channel = WireChannel(f"127.0.0.1:{port}")
    try:
        factory = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)
        failing, other = factory(), factory()
        await failing.write(b"x")  # call 1
        await other.write(b"y")  # call 2

        def sink(item: bytes) -> None:
            if item == b"bad":
                raise ValueError("cannot take this one")

        delivering = asyncio.create_task(failing.deliver(sink))
        await asyncio.sleep(0.05)
        script.put_nowait(
            [(wire.MESSAGE, 1, b"ok"), (wire.MESSAGE, 1, b"bad"), (wire.MESSAGE, 2, b"fine")]
        )
        with pytest.raises(ValueError, match="cannot take this one"):
            await asyncio.wait_for(delivering, 2)
        assert failing.done()
        assert await asyncio.wait_for(other.read(), 2) == b"fine"  # the connection goes on
        script.put_nowait([(wire.MESSAGE, 2, b"more")])
        assert await asyncio.wait_for(other.read(), 2) == b"more"
    finally:
        await channel.close()
        server.close()
