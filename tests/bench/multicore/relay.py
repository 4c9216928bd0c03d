"""A relay process: every apache.rocketmq.v2 call taken on a gRPC port and forwarded, bytes
and headers as they came, to a broker's wire port (which serves the same services), or, with
``--canned-sends``, SendMessage answered here and nothing stored.

    python -m tests.bench.multicore.relay --store HOST:PORT --listen 127.0.0.1:PORT --ready FILE
        [--canned-sends]

The front-end plan's simplest form (broker/README.md, "Using N cores"): no call is decoded
here, so every method keeps the broker's semantics (ACL signatures, transactions' Telemetry
stream, long polling, pop) and the broker's per-call gRPC work moves to this process; the
broker pays a wire call instead. ``--canned-sends`` measures grpc.aio's own floor for the
official client's sends: each SendMessageRequest is parsed for its message ids and answered
OK with them (what the client checks), so the rate is what a broker built on grpc.aio could
reach if storing cost nothing. Other calls (QueryRoute, HeartBeat, Telemetry) still go to
the broker, which the client needs to start.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import uvloop
from grpc import aio
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import definition_pb2, service_pb2

REPO_ROOT = Path(__file__).resolve().parents[3]  # where ``-m tests.bench...`` resolves
SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
SEND = f"/{SERVICE.full_name}/SendMessage"
# HTTP/2 and gRPC transport headers: grpc.aio sets its own on the forwarded call.
_TRANSPORT = frozenset({"user-agent", "te", "content-type", "grpc-accept-encoding", "grpc-timeout"})


def _headers(context: aio.ServicerContext) -> tuple[tuple[str, Any], ...]:
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if key not in _TRANSPORT and not key.startswith(":")
    )


def _forwarders(channel: WireChannel) -> dict[str, grpc.RpcMethodHandler]:
    """One raw-bytes handler per method of the service, by its streaming shape."""
    handlers: dict[str, grpc.RpcMethodHandler] = {}
    for method in SERVICE.methods:
        name = f"/{SERVICE.full_name}/{method.name}"
        if method.client_streaming:
            handlers[name] = grpc.stream_stream_rpc_method_handler(_bidi(channel, name))
        elif method.server_streaming:
            handlers[name] = grpc.unary_stream_rpc_method_handler(_server_stream(channel, name))
        else:
            handlers[name] = grpc.unary_unary_rpc_method_handler(_unary(channel, name))
    return handlers


def _unary(channel: WireChannel, name: str) -> Callable[..., Any]:
    stub = channel.unary_unary(name)

    async def relay(request: bytes, context: aio.ServicerContext) -> bytes:
        try:
            return await stub(request, metadata=_headers(context), timeout=context.time_remaining())  # type: ignore[no-any-return]
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")
            raise

    return relay


def _server_stream(channel: WireChannel, name: str) -> Callable[..., Any]:
    stub = channel.unary_stream(name)

    async def relay(request: bytes, context: aio.ServicerContext) -> AsyncIterator[bytes]:
        call = stub(request, metadata=_headers(context), timeout=context.time_remaining())
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")

    return relay


def _bidi(channel: WireChannel, name: str) -> Callable[..., Any]:
    stub = channel.stream_stream(name)

    async def relay(requests: AsyncIterator[bytes], context: aio.ServicerContext
                    ) -> AsyncIterator[bytes]:  # fmt: skip
        call = stub(metadata=_headers(context))

        async def upstream() -> None:
            async for request in requests:
                await call.write(request)
            await call.done_writing()

        pump = asyncio.ensure_future(upstream())
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")
        finally:
            pump.cancel()

    return relay


def _canned_send() -> grpc.RpcMethodHandler:
    offsets = itertools.count()

    async def send(request: bytes, context: aio.ServicerContext) -> bytes:
        parsed = service_pb2.SendMessageRequest.FromString(request)
        reply = service_pb2.SendMessageResponse()
        reply.status.code = definition_pb2.OK
        reply.status.message = "OK"
        for message in parsed.messages:
            entry = reply.entries.add()
            entry.status.code = definition_pb2.OK
            entry.status.message = "OK"
            entry.message_id = message.system_properties.message_id
            entry.offset = next(offsets)
        return reply.SerializeToString()

    return grpc.unary_unary_rpc_method_handler(send)


class _Table(grpc.GenericRpcHandler):
    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._handlers = handlers

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._handlers.get(details.method)  # type: ignore[attr-defined]


async def serve(store: str, listen: str, ready: Path, canned_sends: bool) -> None:
    channel = WireChannel(store)
    handlers = _forwarders(channel)
    if canned_sends:
        handlers[SEND] = _canned_send()
    server = aio.server(options=[("grpc.so_reuseport", 1)])
    server.add_generic_rpc_handlers((_Table(handlers),))
    port = server.add_insecure_port(listen)
    await server.start()
    await asyncio.to_thread(ready.write_text, json.dumps({"port": port}))
    await server.wait_for_termination()


def launch(store: str, listen: str, ready: Path, canned_sends: bool = False,
           timeout: float = 60.0) -> subprocess.Popen[bytes]:  # fmt: skip
    """This program in a process of its own, returned once it serves ``listen`` (its ready
    file written); RuntimeError, the process killed, if it exits or is not ready in time."""
    command = [sys.executable, "-m", "tests.bench.multicore.relay", "--store", store,
               "--listen", listen, "--ready", str(ready),
               *(["--canned-sends"] if canned_sends else [])]  # fmt: skip
    relay = subprocess.Popen(command, cwd=REPO_ROOT)
    deadline = time.monotonic() + timeout
    while not ready.exists():
        code = relay.poll()
        if code is not None or time.monotonic() > deadline:
            relay.kill()
            relay.wait()
            why = f"exited with {code}" if code is not None else f"not ready in {timeout:g} s"
            raise RuntimeError(f"relay on {listen}: {why}")
        time.sleep(0.05)
    return relay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", required=True, help="the broker's wire port, host:port")
    parser.add_argument("--listen", required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--canned-sends", action="store_true")
    args = parser.parse_args()
    uvloop.run(serve(args.store, args.listen, args.ready, args.canned_sends))


if __name__ == "__main__":
    main()
