"""The ``apache.rocketmq.v2.MessagingService`` servicer: thin shells over the v2 modules.

Every unary response and every streamed reply carries an explicit Status (never code 0):
``v2_rpc`` turns an exception into the response's status through ``codes.code_for`` (the
one table), logs INTERNAL_ERROR with its traceback, and times the RPC for metrics as
``v2.<Method>``. A request that does not parse is BAD_REQUEST. A missing ``x-mq-client-id``
is CLIENT_ID_REQUIRED on every RPC (metadata.py).

Implemented: QueryRoute, Heartbeat, Telemetry, NotifyClientTermination, SendMessage,
RecallMessage, QueryAssignment, pop consumption (receive.py): ReceiveMessage, AckMessage,
ChangeInvisibleDuration (which echoes the request's receipt handle on error: the clients copy
it before checking the status), ForwardMessageToDeadLetterQueue, and offset consumption
(pull.py): PullMessage, UpdateOffset, GetOffset, QueryOffset. EndTransaction and
SyncLiteSubscription answer NOT_IMPLEMENTED (tests/broker/v2/test_fuzz.py checks that no input
gets INTERNAL_ERROR from any of them).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from wharf.broker.core.clients import ClientKind
from wharf.broker.core.errors import UnknownTimer
from wharf.broker.core.port import RequestContext
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.grpc.handlers import MalformedRequest, RefusedRequest
from wharf.broker.frontends.grpc.rpc import born_host_of
from wharf.broker.frontends.v2 import clients as v2_clients
from wharf.broker.frontends.v2 import codes
from wharf.broker.frontends.v2.codes import Code, V2Error, code_for
from wharf.broker.frontends.v2.metadata import client_id_of, client_meta
from wharf.broker.frontends.v2.pull import V2PullProcessor
from wharf.broker.frontends.v2.receive import V2ReceiveProcessor
from wharf.broker.frontends.v2.route import (
    Group,
    cluster_groups,
    endpoints_of,
    fill_assignment,
    fill_route,
    not_found_group,
)
from wharf.broker.frontends.v2.send import V2SendProcessor
from wharf.broker.frontends.v2.settings import merge_settings
from wharf.broker.frontends.v2.transactions import end_transaction, v2_check_targets
from wharf.broker.kit.acl.caller import caller
from wharf.broker.meta.groups import SubscriptionGroup
from wharf.rocketmq.v2 import definition_pb2, service_pb2, service_pb2_grpc
from wharf.store.codec.ids import parse_recall_handle

log = logging.getLogger("wharf.broker.frontends.v2")
perf_counter = time.perf_counter
OK = codes.OK
_STREAM_METRICS = {"ReceiveMessage": "v2.ReceiveMessage", "PullMessage": "v2.PullMessage"}
TELEMETRY_OUTBOX_MAX = 1024  # broker commands queued for one client at most
SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


def _response_class(method: str) -> Any:
    return getattr(service_pb2, SERVICE.methods_by_name[method].output_type.name)


def v2_rpc(method: str) -> Callable[..., Any]:
    """Wrap ``async def m(self, request, context, client_id)`` of a unary v2 RPC."""
    response_cls = _response_class(method)
    metric = f"v2.{method}"

    def decorate(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def handler(self: V2MessagingService, request: Any, context: Any) -> Any:
            started = perf_counter()
            code_name = "OK"
            try:
                client_id = client_id_of(context.invocation_metadata())
                if type(request) is MalformedRequest:
                    raise V2Error(codes.BAD_REQUEST, request.message)
                response = await fn(self, request, context, client_id)
                code = response.status.code
                if code != OK:
                    code_name = codes.code_name(code)
                return response
            except asyncio.CancelledError:
                code_name = "CANCELLED"  # client deadline or disconnect: nothing to answer
                raise
            except Exception as exc:
                code, message = code_for(exc)
                code_name = codes.code_name(code)
                if codes.is_internal(code):
                    log.exception("v2 %s failed: %s", method, message)
                response = response_cls(status=codes.status(code, message))
                if method == "ChangeInvisibleDuration" and type(request) is not MalformedRequest:
                    response.receipt_handle = request.receipt_handle
                return response
            finally:
                self.ctx.metrics.observe_rpc(metric, code_name, perf_counter() - started)

        return handler

    return decorate


class V2MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx
        self.clients = ctx.port.clients  # the broker's one registry: v2 clients are sessions
        # Check-backs reach v2 producers on their Telemetry streams.
        ctx.check_targets.add_source(v2_check_targets(self.clients))
        port = ctx.port
        self._max_body_size = port.store_config.max_message_size
        self.sender = V2SendProcessor(
            port.send,
            self._max_body_size,
            on_stored=self._on_stored,
            max_delay_s=port.store_config.timer_max_delay_sec,
        )
        property_filter = ctx.config.enable_property_filter
        self.receiver = V2ReceiveProcessor(
            ctx.port.pop,
            port,
            self._on_delivered,
            property_filter=property_filter,
        )
        self.puller = V2PullProcessor(
            port,
            ctx.port.read.read_waiting,
            self._group,
            port.min_offset,
            port.max_offset,
            port.offset_at,
            self._on_delivered,
            property_filter=property_filter,
        )

    def _on_stored(self, topic: str, sizes: list[int]) -> None:
        self.ctx.counters.messages_in += len(sizes)
        self.ctx.metrics.on_messages_in(topic, sizes)

    def _on_delivered(self, topic: str, group: str, count: int, nbytes: int) -> None:
        self.ctx.counters.messages_out += count
        self.ctx.metrics.on_messages_out(topic, group, count, nbytes)

    def _endpoints(self, requested: definition_pb2.Endpoints) -> definition_pb2.Endpoints:
        return requested if requested.addresses else endpoints_of(self.ctx.endpoint)

    def _group(self, name: str) -> SubscriptionGroup:
        """The consumer group (auto-created when allowed; NOT_FOUND otherwise)."""
        try:
            return self.ctx.port.group_for_use(name)
        except (NotFoundError, InvalidArgumentError) as exc:
            raise not_found_group(exc) from None

    # --- route ----------------------------------------------------------------------------------
    @v2_rpc("QueryRoute")
    async def QueryRoute(self, request, context, client_id):  # type: ignore[no-untyped-def]
        response = service_pb2.QueryRouteResponse(status=codes.ok())
        fill_route(
            response.message_queues,
            self.ctx.port.topic_defaults,
            request.topic.name,
            request.topic.resource_namespace,
            await self._groups(request.topic.name, request.endpoints),
        )
        return response

    async def _groups(self, topic: str, requested: definition_pb2.Endpoints) -> list[Group]:
        routes = self.ctx.cluster_routes()
        cluster = await routes.groups(topic) if routes is not None else None
        own = (self.ctx.config.broker_name, self._endpoints(requested))
        return cluster_groups(self.ctx.port, topic, own, cluster)

    @v2_rpc("QueryAssignment")
    async def QueryAssignment(self, request, context, client_id):  # type: ignore[no-untyped-def]
        group = self._group(request.group.name)
        response = service_pb2.QueryAssignmentResponse(status=codes.ok())
        fill_assignment(
            response.assignments,
            self.ctx.port.topic_defaults,
            request.topic.name,
            request.topic.resource_namespace,
            await self._groups(request.topic.name, request.endpoints),
            fifo=group.consume_message_orderly,
        )
        return response

    # --- clients --------------------------------------------------------------------------------
    @v2_rpc("Heartbeat")
    async def Heartbeat(self, request, context, client_id):  # type: ignore[no-untyped-def]
        entry = v2_clients.on_heartbeat(
            self.clients, client_id, request.client_type, request.group.name
        )
        if entry.kind is ClientKind.UNKNOWN:
            return service_pb2.HeartbeatResponse(
                status=codes.status(
                    Code.UNRECOGNIZED_CLIENT_TYPE,
                    "client_type is unknown: set it or send settings over Telemetry first",
                )
            )
        return service_pb2.HeartbeatResponse(status=codes.ok())

    @v2_rpc("NotifyClientTermination")
    async def NotifyClientTermination(self, request, context, client_id):  # type: ignore[no-untyped-def]
        self.clients.terminate(client_id, caller())
        return service_pb2.NotifyClientTerminationResponse(status=codes.ok())

    def settings_reply(self, client_id: str, command: Any) -> service_pb2.TelemetryCommand:
        """The reply to one TelemetryCommand carrying settings (raises V2Error)."""
        settings = command.settings
        if not settings.HasField("publishing") and not settings.HasField("subscription"):
            raise V2Error(Code.BAD_REQUEST, "settings carry neither publishing nor subscription")
        fifo, attempts = False, 17
        if settings.HasField("subscription"):
            group = self._group(settings.subscription.group.name)
            fifo = group.consume_message_orderly
            attempts = group.retry_max_times + 1
        v2_clients.on_settings(self.clients, client_id, settings)
        merged = merge_settings(settings, self._max_body_size, fifo, attempts)
        return service_pb2.TelemetryCommand(status=codes.ok(), settings=merged)

    async def Telemetry(  # type: ignore[override]
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> AsyncIterator[service_pb2.TelemetryCommand]:
        """One reply per settings frame; other client frames (thread stack traces, verify
        results) are read and ignored; commands of the broker (transaction check-backs) go
        out on the same stream. The stream stays open until the client closes it; then the
        client is dropped. A reader task answers the client's frames into an outbox the
        stream writes from, so the broker can speak while the client is silent."""
        try:
            client_id = client_meta(context.invocation_metadata()).client_id
        except V2Error as exc:
            yield service_pb2.TelemetryCommand(status=codes.status(exc.code, exc.message))
            return
        outbox: asyncio.Queue[service_pb2.TelemetryCommand | None] = asyncio.Queue()

        def send(command: service_pb2.TelemetryCommand) -> bool:
            if outbox.qsize() >= TELEMETRY_OUTBOX_MAX:  # a client not reading: drop, not grow
                return False
            outbox.put_nowait(command)
            return True

        self.clients.channel_opened(client_id, send)
        reader = asyncio.ensure_future(self._read_telemetry(client_id, request_iterator, outbox))
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            reader.cancel()
            self.clients.channel_closed(client_id, send)

    async def _read_telemetry(
        self,
        client_id: str,
        request_iterator: AsyncIterator[Any],
        outbox: asyncio.Queue[service_pb2.TelemetryCommand | None],
    ) -> None:
        try:
            async for command in request_iterator:
                started = time.perf_counter()
                if type(command) is MalformedRequest:
                    reply = service_pb2.TelemetryCommand(
                        status=codes.status(Code.BAD_REQUEST, command.message)
                    )
                elif type(command) is RefusedRequest:  # settings the account may not join with
                    refused = Code.UNAUTHORIZED if command.unauthenticated else Code.FORBIDDEN
                    reply = service_pb2.TelemetryCommand(
                        status=codes.status(refused, command.message)
                    )
                elif command.HasField("settings"):
                    try:
                        reply = self.settings_reply(client_id, command)
                    except Exception as exc:
                        code, message = code_for(exc)
                        if codes.is_internal(code):
                            log.exception("v2 Telemetry settings failed: %s", message)
                        reply = service_pb2.TelemetryCommand(status=codes.status(code, message))
                else:
                    continue
                self.ctx.metrics.observe_rpc(
                    "v2.Telemetry",
                    Code.Name(reply.status.code),
                    time.perf_counter() - started,
                )
                outbox.put_nowait(reply)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client's side of the stream broke: end ours too
            log.debug("v2 Telemetry of %s ended: %s", client_id, exc)
        finally:
            outbox.put_nowait(None)

    # --- send -----------------------------------------------------------------------------------
    @v2_rpc("SendMessage")
    async def SendMessage(self, request, context, client_id):  # type: ignore[no-untyped-def]
        if self.ctx.shutting_down():
            raise V2Error(Code.INTERNAL_SERVER_ERROR, "the broker is shutting down; retry")
        return await self.sender.send(request, born_host_of(context.peer()))

    # --- server-streaming reads -----------------------------------------------------------------
    async def _replies(
        self,
        method: str,
        request: Any,
        context: Any,
        produce: Callable[[Any, float | None], Awaitable[list[Any]]],
    ) -> list[Any]:
        """The replies of a server-streaming read, built whole and then written (the clients
        collect the whole stream before acting on it); a failure is one status reply."""
        started = perf_counter()
        try:
            client_id_of(context.invocation_metadata())
            if type(request) is MalformedRequest:
                raise V2Error(codes.BAD_REQUEST, request.message)
            if self.ctx.shutting_down():
                raise V2Error(Code.INTERNAL_SERVER_ERROR, "the broker is shutting down; retry")
            replies = await produce(request, context.time_remaining())
            code: int = replies[0].status.code
        except asyncio.CancelledError:
            self.ctx.metrics.observe_rpc(f"v2.{method}", "CANCELLED", 0.0)
            raise
        except Exception as exc:
            code, message = code_for(exc)
            if codes.is_internal(code):
                log.exception("v2 %s failed: %s", method, message)
            replies = [_response_class(method)(status=codes.status(code, message))]
        self.ctx.metrics.observe_rpc(
            _STREAM_METRICS[method], codes.code_name(code), perf_counter() - started
        )
        return replies

    # grpc.aio serves a server-streaming method as one only when it is an async generator
    # function itself: these yield the replies ``_replies`` built.
    async def ReceiveMessage(self, request, context):  # type: ignore[no-untyped-def]
        for reply in await self._replies("ReceiveMessage", request, context, self.receiver.receive):
            yield reply

    async def PullMessage(self, request, context):  # type: ignore[no-untyped-def]
        for reply in await self._replies("PullMessage", request, context, self.puller.pull):
            yield reply

    @v2_rpc("UpdateOffset")
    async def UpdateOffset(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return self.puller.update_offset(request)

    @v2_rpc("GetOffset")
    async def GetOffset(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return self.puller.get_offset(request)

    @v2_rpc("QueryOffset")
    async def QueryOffset(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return self.puller.query_offset(request)

    # --- pop consumption ------------------------------------------------------------------------

    @v2_rpc("AckMessage")
    async def AckMessage(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return await self.receiver.ack(request)

    @v2_rpc("ChangeInvisibleDuration")
    async def ChangeInvisibleDuration(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return await self.receiver.change_invisible(request)

    @v2_rpc("EndTransaction")
    async def EndTransaction(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return await end_transaction(self.ctx.port.transactions, request)

    @v2_rpc("RecallMessage")
    async def RecallMessage(self, request, context, client_id):  # type: ignore[no-untyped-def]
        """Cancel a DELAY message before it is due (its send entry's ``recall_handle``)."""
        parsed = parse_recall_handle(request.recall_handle)
        if parsed is None:
            raise V2Error(
                Code.BAD_REQUEST, f"malformed recall_handle {request.recall_handle[:64]!r}"
            )
        offset, message_id = parsed
        try:
            await self.ctx.port.recall(
                RequestContext("rocketmq.v2", client_id=client_id),
                offset,
                message_id,
                request.topic.name,
            )
        except UnknownTimer as exc:
            raise V2Error(Code.NOT_FOUND, str(exc)) from None
        return service_pb2.RecallMessageResponse(status=codes.ok(), message_id=message_id)

    @v2_rpc("ForwardMessageToDeadLetterQueue")
    async def ForwardMessageToDeadLetterQueue(self, request, context, client_id):  # type: ignore[no-untyped-def]
        return await self.receiver.forward_to_dead_letter(request)

    # --- not implemented yet --------------------------------------------------------------------


def _not_implemented(method: str) -> Callable[..., Awaitable[Any]]:
    @v2_rpc(method)
    async def handler(self, request, context, client_id):  # type: ignore[no-untyped-def]
        raise V2Error(Code.NOT_IMPLEMENTED, f"{method} is {codes.NOT_SUPPORTED_YET}")

    handler.__name__ = method
    return handler


for _method in ("SyncLiteSubscription",):
    setattr(V2MessagingService, _method, _not_implemented(_method))
