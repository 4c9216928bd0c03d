"""Register servicers with request deserializers that never raise.

grpc's generated ``add_*Servicer_to_server`` lets a DecodeError escape from the deserializer:
the client gets an opaque error and the broker log a traceback per garbage request. Here a
request that does not parse becomes a ``MalformedRequest`` value, which the RPC wrapper (and
the send stream, per request) answers with INVALID_ARGUMENT like any other bad input.
Responses may be given as their wire bytes (``bytes``): sent as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from wharf.broker.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError


class MalformedRequest:
    __slots__ = ("reason", "type_name")

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason

    @property
    def message(self) -> str:
        return f"request is not a valid {self.type_name} ({self.reason})"


class RefusedRequest:
    """A request of a client stream the ACL refused (broker/frontends/acl_guard.py): the stream's
    handler answers it with PERMISSION_DENIED (UNAUTHENTICATED when ``unauthenticated``) in
    its own reply and goes on."""

    __slots__ = ("message", "request_id", "unauthenticated")

    def __init__(self, message: str, request_id: int = 0, unauthenticated: bool = False) -> None:
        self.message = message
        self.request_id = request_id
        self.unauthenticated = unauthenticated


def check_stream_item(request: object) -> None:
    """A client-stream item that did not parse, or that the ACL refused, is its own error
    (the stream's handler answers it in the item's reply and goes on)."""
    if type(request) is MalformedRequest:
        raise InvalidArgumentError(request.message)
    if type(request) is RefusedRequest:  # by the ACL (broker/frontends/acl_guard.py)
        if request.unauthenticated:
            raise UnauthenticatedError(request.message)
        raise PermissionDeniedError(request.message)


def safe_deserializer(cls: Any) -> Callable[[bytes], Any]:
    parse = cls.FromString
    type_name = cls.DESCRIPTOR.full_name

    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except DecodeError as exc:
            return MalformedRequest(type_name, str(exc) or "undecodable bytes")

    return deserialize


def _serializer(cls: Any) -> Callable[[Any], bytes]:
    """The response's SerializeToString; a handler may also yield the wire bytes of a
    response it encoded itself (PullMessageStream's batches), which pass through as they are."""
    serialize = cls.SerializeToString

    def to_bytes(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return to_bytes


_HANDLER_FACTORIES = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


# (service full name, method, behavior, response class) -> the behavior to serve (the ACL).
Wrap = Callable[[str, Any, Any, Any], Any]


class MethodHandlers(Protocol):
    """A second transport serving the same handlers (broker/frontends/wire/server.py)."""

    def add_method_handlers(self, service: str, handlers: dict[str, Any]) -> None: ...


def add_servicer(
    server: grpc.aio.Server,
    servicer: Any,
    service: ServiceDescriptor,
    wrap: Wrap | None = None,
    also: MethodHandlers | None = None,
) -> None:
    """``servicer``'s methods on ``server`` (and on ``also``, the wire port, when given)."""
    handlers = method_handlers(servicer, service, wrap)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    if also is not None:
        also.add_method_handlers(service.full_name, handlers)


def method_handlers(
    servicer: Any, service: ServiceDescriptor, wrap: Wrap | None = None
) -> dict[str, Any]:
    """``servicer``'s methods as grpc method handlers by name (what gRPC and the wire port
    both serve), each behind ``wrap`` (the ACL) when given."""
    handlers = {}
    for method in service.methods:
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        factory = _HANDLER_FACTORIES[(method.client_streaming, method.server_streaming)]
        behavior = getattr(servicer, method.name)
        if wrap is not None:
            behavior = wrap(service.full_name, method, behavior, response_cls)
        handlers[method.name] = factory(
            behavior,
            request_deserializer=safe_deserializer(request_cls),
            response_serializer=_serializer(response_cls),
        )
    return handlers
