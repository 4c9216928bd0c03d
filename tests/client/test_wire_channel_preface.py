"""A ``wire://`` channel sends no call before the peer's preface: a peer of another protocol
is named by what it sent, whatever the race between its close and our first write, and a
silent one (an HTTP/1 server waits for the client) by a bounded wait."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest
from wharf import wire

from client import wire_channel

# What a gRPC server writes as it accepts: an empty SETTINGS frame (RFC 9113 4.1).
_SETTINGS = struct.pack(">I", 0)[1:] + b"\x04\x00" + struct.pack(">I", 0)


async def _unary(channel: wire_channel.WireChannel) -> None:
    call = channel.unary_unary("/wharf.v1.Messaging/Send")
    await call(b"x", timeout=5)


async def _serve(handle: Callable[..., Awaitable[None]]) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"127.0.0.1:{port}"


def test_a_grpc_port_that_resets_at_once_is_named_not_a_broken_pipe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client loop busy for 50 ms as it opens its first call (CI's 2 cores under the whole
    # suite): the port's SETTINGS and its reset both arrive meanwhile, and a call written
    # before the read is processed meets a reset instead of the SETTINGS.
    open_call = wire_channel._Connection.open_call

    def busy_open_call(self: wire_channel._Connection, deserialize: object) -> object:
        time.sleep(0.05)
        return open_call(self, deserialize)  # type: ignore[arg-type]

    monkeypatch.setattr(wire_channel._Connection, "open_call", busy_open_call)

    def grpc_port(listener: socket.socket) -> None:  # another process's server: a thread
        conn, _ = listener.accept()
        conn.recv(4096)  # the client's preface: this port answers SETTINGS and hangs up
        conn.sendall(_SETTINGS)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()

    async def scenario() -> str:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            thread = threading.Thread(target=grpc_port, args=(listener,))
            thread.start()
            target = f"127.0.0.1:{listener.getsockname()[1]}"
            async with wire_channel.WireChannel(target) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await _unary(channel)
            thread.join()
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        return str(caught.value.details())

    for _ in range(3):
        assert "speaks HTTP/2 (gRPC)" in asyncio.run(scenario())


def test_a_silent_peer_is_named_after_a_bounded_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_channel, "PREFACE_WAIT_S", 0.2)

    async def scenario() -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # an HTTP/1 server: waits for a request that never comes

        server, target = await _serve(handle)
        async with server, wire_channel.WireChannel(target) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await _unary(channel)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE
        return str(caught.value.details())

    assert "sent no Wharf wire preface in 0.2 s" in asyncio.run(scenario())


def test_a_wire_peer_is_served_once_its_preface_arrives() -> None:
    async def scenario() -> bytes:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(wire.PREFACE)
            await reader.readexactly(len(wire.PREFACE))
            header = await reader.readexactly(wire.HEADER_SIZE)
            length, _, call_id = struct.unpack(">IBI", header)
            await reader.readexactly(length)
            writer.write(wire.frame(wire.MESSAGE, call_id, b"reply"))
            writer.write(wire.frame(wire.STATUS, call_id, wire.encode_status(0, "")))
            await writer.drain()
            await reader.read()

        server, target = await _serve(handle)
        async with server, wire_channel.WireChannel(target) as channel:
            call = channel.unary_unary("/wharf.v1.Messaging/Send")
            return await call(b"x", timeout=5)

    assert asyncio.run(scenario()) == b"reply"
