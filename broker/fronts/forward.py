"""Every apache.rocketmq.v2 MessagingService call forwarded to the broker's wire port, bytes
and headers as they came (the wire port serves the same services as the gRPC port): nothing is
decoded, so each method keeps the broker's semantics and status codes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from grpc import aio
from wharf.client.wire_channel import WireChannel
from wharf.rocketmq.v2 import service_pb2

__all__ = ["SEND", "SERVICE", "MethodTable", "forwarders", "headers_of"]

SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
SEND = f"/{SERVICE.full_name}/SendMessage"
# HTTP/2 and gRPC transport headers: the wire channel sets its own on the forwarded call.
_TRANSPORT = frozenset({"user-agent", "te", "content-type", "grpc-accept-encoding", "grpc-timeout"})

Headers = tuple[tuple[str, Any], ...]


def headers_of(context: aio.ServicerContext) -> Headers:
    """The caller's application headers (``x-mq-*``, authorization), in order."""
    return tuple(
        (key, value)
        for key, value in context.invocation_metadata() or ()
        if key not in _TRANSPORT and not key.startswith(":")
    )


def forwarders(channel: WireChannel) -> dict[str, grpc.RpcMethodHandler]:
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

    async def forward(request: bytes, context: aio.ServicerContext) -> bytes:
        try:
            return await stub(
                request, metadata=headers_of(context), timeout=context.time_remaining()
            )  # type: ignore[no-any-return]
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")
            raise

    return forward


def _server_stream(channel: WireChannel, name: str) -> Callable[..., Any]:
    stub = channel.unary_stream(name)

    async def forward(request: bytes, context: aio.ServicerContext) -> AsyncIterator[bytes]:
        call = stub(request, metadata=headers_of(context), timeout=context.time_remaining())
        try:
            async for reply in call:
                yield reply
        except grpc.aio.AioRpcError as exc:
            await context.abort(exc.code(), exc.details() or "")

    return forward


def _bidi(channel: WireChannel, name: str) -> Callable[..., Any]:
    stub = channel.stream_stream(name)

    async def forward(requests: AsyncIterator[bytes], context: aio.ServicerContext
                      ) -> AsyncIterator[bytes]:  # fmt: skip
        call = stub(metadata=headers_of(context))

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

    return forward


class MethodTable(grpc.GenericRpcHandler):
    """The handlers by full method name (an unknown method: UNIMPLEMENTED, by grpc)."""

    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._handlers = handlers

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self._handlers.get(details.method)  # type: ignore[attr-defined]
