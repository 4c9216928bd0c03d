"""A small synchronous gRPC client for the connector, over the generated ``wharf.v1`` stubs.

Spark pickles readers and writers into other processes, and a ``grpc.Channel`` cannot be
pickled: a ``BrokerRpc`` is therefore made inside ``read()``/``write()`` (or a driver
method) and closed there, never stored on a pickled object. Sync stubs suffice: one Spark
task reads one queue range sequentially and every request carries up to 1024 messages.

Data moves on the broker's fast wire paths, as the SDK's: sends carry producer-encoded
CommitLog records (``SendMessageRequest.records``, compact reply) and pulls ask for the stored
records' bytes (``raw_records``), decoded lazily by ``wharf.client.records``. Both calls bypass the
generated request/response classes where those would copy the records: a send request is
serialized by joining bytes, a pull reply is walked in place (``wharf.client.consumer.pull_wire``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from wharf import keepalive, wire
from wharf.client.auth import Credentials
from wharf.client.channel import TlsConfig
from wharf.client.connection import Connection
from wharf.client.consumer.pull_wire import PULL_METHOD, PullReply, decode_pull_reply
from wharf.client.send_stream import encode_records_request
from wharf.v1 import common_pb2, messaging_pb2, messaging_pb2_grpc

_SEND_METHOD = "/wharf.v1.MessagingService/SendMessage"
# Names of the fast-path calls in BrokerRpc._call (error messages show them).
_SEND_RECORDS = "SendMessage(records)"
_PULL_RECORDS = "PullMessage(raw_records)"

# Bodies go up to 4 MiB and a pull answer up to 1024 of them (the broker caps bytes too).
_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    # 4 MiB HTTP/2 frames, as the SDK's channels: a send chunk or pull reply of records
    # travels in one frame instead of dozens of 16 KiB ones.
    ("grpc.http2.max_frame_size", 4 * 1024 * 1024),
]


def channel_options() -> list[tuple[str, int]]:
    """A connector channel's options: the above and the SDK's keepalive, as brokers and
    NameServers accept it (wharf.keepalive; read per channel, as WHARF_GRPC_KEEPALIVE_MS)."""
    return [*_CHANNEL_OPTIONS, *keepalive.client_options()]


class BrokerCallError(RuntimeError):
    """A broker call failed; the message names the call, the endpoint and the gRPC status."""

    def __init__(self, call: str, endpoint: str, error: grpc.RpcError) -> None:
        code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        super().__init__(f"{call} to {endpoint} failed: {code}: {details}")
        self.code = code


@dataclass(frozen=True, slots=True)
class QueueBounds:
    topic: str
    queue_id: int
    min_offset: int
    max_offset: int  # next offset to be written


class PendingCall:
    """A fast-path call in flight; ``result()`` waits for the broker's reply (BrokerCallError
    on failure, after trying the other endpoints on UNAVAILABLE, as ``BrokerRpc._call``)."""

    def __init__(self, rpc: BrokerRpc, name: str, request: object, future: grpc.Future) -> None:
        self._rpc = rpc
        self._name = name
        self._request = request
        self._future = future

    def result(self) -> object:
        try:
            return self._future.result()
        except grpc.RpcError as exc:
            return self._rpc._retry_elsewhere(self._name, self._request, exc)


class PendingSend(PendingCall):
    def result(self) -> messaging_pb2.SendMessageResponse:
        reply = super().result()
        assert isinstance(reply, messaging_pb2.SendMessageResponse)
        return reply


class PendingPull(PendingCall):
    def result(self) -> PullReply:
        reply = super().result()
        assert isinstance(reply, PullReply)
        return reply


class BrokerRpc:
    """One channel to the first answering endpoint; use as a context manager."""

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout_s: float = 30.0,
        credentials: Credentials | None = None,
        tls: TlsConfig | None = None,
        *,
        connection: Connection | None = None,
    ) -> None:
        """``connection``: the keys that sign every call and the TLS to the brokers (the
        options' ``ReadOptions.connection``); or ``credentials`` (sign every call for a
        broker with aclEnable, wharf.client.auth; None: unsigned) and ``tls`` (None:
        plaintext). ``endpoints``: the brokers to try in turn."""
        if not endpoints:
            raise ValueError("no broker endpoint given")
        for endpoint in endpoints:
            if endpoint.strip().startswith(wire.SCHEME):
                # Spark's tasks call with blocking gRPC channels; the wire port is asyncio only.
                raise ValueError(
                    f"endpoint {endpoint!r}: the Spark connector speaks gRPC, give the broker's "
                    "gRPC address (host:port, without wire://)"
                )
        self._endpoints = list(endpoints)
        self._timeout = timeout_s
        if connection is None:
            connection = Connection(
                access_key=credentials.access_key if credentials is not None else "",
                secret_key=credentials.secret_key if credentials is not None else "",
                tls=tls,
            )
        elif credentials is not None or tls is not None:
            raise ValueError("give connection= or credentials / tls, not both")
        self.connection = connection
        self._index = 0
        self._channel: grpc.Channel | None = None
        self._stub: messaging_pb2_grpc.MessagingServiceStub | None = None
        # Calls on the fast wire paths, made with the channel (see the module docstring).
        self._fast_calls: dict[str, grpc.UnaryUnaryMultiCallable] = {}

    @classmethod
    def for_options(cls, opts: Any) -> BrokerRpc:
        """A client as the connector's read or write options say (endpoints, timeout, and
        their Connection: accessKey/secretKey, TLS)."""
        return cls(opts.endpoints, opts.timeout_s, connection=opts.connection)

    @property
    def endpoint(self) -> str:
        return self._endpoints[self._index]

    def _connect(self) -> messaging_pb2_grpc.MessagingServiceStub:
        if self._stub is None:
            channel = self.connection.open_sync_channel(self.endpoint, _CHANNEL_OPTIONS)
            self._channel = channel
            self._stub = messaging_pb2_grpc.MessagingServiceStub(channel)
            self._fast_calls = {
                # Request bytes joined by encode_records_request are sent as they are.
                _SEND_RECORDS: channel.unary_unary(
                    _SEND_METHOD,
                    request_serializer=bytes,
                    response_deserializer=messaging_pb2.SendMessageResponse.FromString,
                ),
                # The reply's records are left inside the received bytes.
                _PULL_RECORDS: channel.unary_unary(
                    PULL_METHOD,
                    request_serializer=messaging_pb2.PullMessageRequest.SerializeToString,
                    response_deserializer=decode_pull_reply,
                ),
            }
        return self._stub

    def _method(self, name: str) -> Callable[..., object]:
        stub = self._connect()
        fast = self._fast_calls.get(name)
        return fast if fast is not None else getattr(stub, name)

    def _call(self, name: str, request: object) -> object:
        """Unary call; on UNAVAILABLE try the next endpoint once around the list."""
        last: grpc.RpcError | None = None
        for _ in range(len(self._endpoints)):
            call = self._method(name)
            try:
                return call(request, timeout=self._timeout)
            except grpc.RpcError as exc:
                last = exc
                if exc.code() != grpc.StatusCode.UNAVAILABLE or len(self._endpoints) == 1:
                    raise BrokerCallError(name, self.endpoint, exc) from None
                self.close()
                self._index = (self._index + 1) % len(self._endpoints)
        assert last is not None
        raise BrokerCallError(name, self.endpoint, last) from None

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None
        self._fast_calls = {}

    def __enter__(self) -> BrokerRpc:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- calls the connector makes -----------------------------------------------------------
    def queue_bounds(self, topic: str) -> list[QueueBounds]:
        """Min/max offset of every queue of ``topic`` (empty list: topic unknown)."""
        try:
            reply = self._call("GetQueueOffsets", messaging_pb2.GetQueueOffsetsRequest(topic=topic))
        except BrokerCallError as exc:
            if exc.code == grpc.StatusCode.NOT_FOUND:
                return []  # not created yet: a stream picks its queues up once it exists
            raise
        assert isinstance(reply, messaging_pb2.GetQueueOffsetsResponse)
        return [
            QueueBounds(topic, q.queue_id, q.min_offset, q.max_offset)
            for q in sorted(reply.queues, key=lambda q: q.queue_id)
        ]

    def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        request = messaging_pb2.SearchOffsetRequest(
            topic=topic, queue_id=queue_id, timestamp=timestamp_ms
        )
        reply = self._call("SearchOffset", request)
        assert isinstance(reply, messaging_pb2.SearchOffsetResponse)
        return reply.offset

    def start_pull_records(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str,
    ) -> PendingPull:
        """Start a PullMessage in raw_records mode (the caller can decode the previous reply
        meanwhile): the reply's records stay inside the received bytes (the broker filters
        by tag HASH here: ``wharf.client.records`` re-checks tags)."""
        request = messaging_pb2.PullMessageRequest(
            consumer_group=group,
            topic=topic,
            queue_id=queue_id,
            queue_offset=offset,
            max_messages=max_messages,
            max_wait_ms=0,  # a Spark range is planned from known offsets: never long-poll
            tag_expression=tag_expression,
            raw_records=True,
        )
        future = self._method(_PULL_RECORDS).future(request, timeout=self._timeout)  # type: ignore[attr-defined]
        return PendingPull(self, _PULL_RECORDS, request, future)

    def pull_records(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int,
        tag_expression: str,
    ) -> PullReply:
        """``start_pull_records`` and wait for the reply."""
        return self.start_pull_records(
            group, topic, queue_id, offset, max_messages, tag_expression
        ).result()

    def start_send_records(
        self,
        topic: str,
        queue_id: int | None,
        records: Sequence[bytes],
        producer_group: str,
    ) -> PendingSend:
        """Start a SendMessage with producer-encoded records (``wharf.client.record_encoder``): one
        store append, answered in the compact form (status, first offsets, count). The caller
        can encode the next chunk while this one travels; ``result()`` waits for the reply."""
        head = messaging_pb2.SendMessageRequest(topic=topic, producer_group=producer_group)
        if queue_id is not None:
            head.queue_id = queue_id
        request = encode_records_request(head.SerializeToString(), 0, list(records))
        future = self._method(_SEND_RECORDS).future(request, timeout=self._timeout)  # type: ignore[attr-defined]
        return PendingSend(self, _SEND_RECORDS, request, future)

    def send_records(
        self,
        topic: str,
        queue_id: int | None,
        records: Sequence[bytes],
        producer_group: str,
    ) -> messaging_pb2.SendMessageResponse:
        """``start_send_records`` and wait for the reply."""
        return self.start_send_records(topic, queue_id, records, producer_group).result()

    def start_send_messages(
        self,
        topic: str,
        queue_id: int | None,
        messages: Sequence[common_pb2.Message],
        producer_group: str,
    ) -> PendingSend:
        """Start a SendMessage of proto messages (the path of messages the broker re-addresses,
        such as half messages): one store append, one result entry per message."""
        request = messaging_pb2.SendMessageRequest(
            topic=topic, producer_group=producer_group, messages=messages
        )
        if queue_id is not None:
            request.queue_id = queue_id
        future = self._method("SendMessage").future(request, timeout=self._timeout)  # type: ignore[attr-defined]
        return PendingSend(self, "SendMessage", request, future)

    def end_transactions(
        self,
        msg_id_prefix: str,
        ranges: Sequence[tuple[int, int]],
        commit: bool,
        rollback_rest: bool,
        topics: Sequence[str] = (),
    ) -> messaging_pb2.EndTransactionsResponse:
        """Commit or roll back half messages by transaction id ranges (first, count), of
        ``topics`` (empty: any)."""
        request = messaging_pb2.EndTransactionsRequest(
            msg_id_prefix=msg_id_prefix,
            commit=commit,
            rollback_rest=rollback_rest,
            topics=topics,
        )
        for first, count in ranges:
            request.ranges.add(first=first, count=count)
        reply = self._call("EndTransactions", request)
        assert isinstance(reply, messaging_pb2.EndTransactionsResponse)
        return reply

    def _retry_elsewhere(self, name: str, request: object, error: grpc.RpcError) -> object:
        """A call in flight failed: UNAVAILABLE moves on to the next endpoint, as ``_call``."""
        if error.code() != grpc.StatusCode.UNAVAILABLE or len(self._endpoints) == 1:
            raise BrokerCallError(name, self.endpoint, error) from None
        self.close()
        self._index = (self._index + 1) % len(self._endpoints)
        return self._call(name, request)

    def unique_id_exists(self, topic: str, unique_id: str) -> bool:
        """True if a message with this UNIQ_KEY is stored in ``topic`` (IndexFile lookup)."""
        request = messaging_pb2.ViewMessageRequest(msg_id=unique_id, topic=topic)
        try:
            self._method("ViewMessage")(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise BrokerCallError("ViewMessage", self.endpoint, exc) from None
        return True

    def update_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        request = messaging_pb2.UpdateConsumerOffsetRequest(
            consumer_group=group, topic=topic, queue_id=queue_id, offset=offset
        )
        self._call("UpdateConsumerOffset", request)
