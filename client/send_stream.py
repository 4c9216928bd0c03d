"""One ``SendMessageStream`` bidi call: many requests in flight, replies matched by request_id.

A broken stream fails every pending request with the mapped error (UNAVAILABLE and friends
are retriable, so the producer re-sends) and the producer opens a new stream on next use.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator

import grpc
from wharf.v1 import messaging_pb2, messaging_pb2_grpc

from client.errors import ClientClosedError, UnavailableError, WharfError, from_rpc_error


class SendStream:
    def __init__(self, stub: messaging_pb2_grpc.MessagingServiceStub) -> None:
        self._requests: asyncio.Queue[messaging_pb2.SendMessageRequest | None] = asyncio.Queue()
        self._pending: dict[int, asyncio.Future[messaging_pb2.SendMessageResponse]] = {}
        self._ids = itertools.count(1)
        self._call = stub.SendMessageStream(self._request_iterator())
        self._reader = asyncio.get_running_loop().create_task(self._read_loop())
        self.broken: WharfError | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def request(
        self, request: messaging_pb2.SendMessageRequest
    ) -> messaging_pb2.SendMessageResponse:
        if self.broken is not None:
            raise self.broken
        request.request_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[request.request_id] = future
        self._requests.put_nowait(request)
        try:
            return await future
        finally:
            self._pending.pop(request.request_id, None)

    async def close(self) -> None:
        self._requests.put_nowait(None)  # half-close: the broker ends the stream after replies
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), 5.0)
        except (TimeoutError, asyncio.CancelledError):
            self._call.cancel()
            self._reader.cancel()

    async def _request_iterator(self) -> AsyncIterator[messaging_pb2.SendMessageRequest]:
        while True:
            request = await self._requests.get()
            if request is None:
                return
            yield request

    async def _read_loop(self) -> None:
        error: WharfError = UnavailableError("send stream ended by the broker")
        try:
            async for response in self._call:
                future = self._pending.get(response.request_id)
                if future is not None and not future.done():
                    future.set_result(response)
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
        except asyncio.CancelledError:
            error = ClientClosedError("producer closed")
        finally:
            self.broken = error
            # End the request generator too: gRPC's writer task would otherwise stay parked
            # in it and be destroyed pending ("aclose(): generator is already running").
            self._requests.put_nowait(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(error)
