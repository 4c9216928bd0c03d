"""PullMessage with a reply decoder that leaves the records where gRPC put them.

The generated stub parses a reply into a protobuf message (a copy of the whole ~1 MiB of
records into its arena) and reading ``reply.records`` copies them once more. A pull reply has
four varints and the ``records`` bytes, so this decoder walks the protobuf wire format itself
and keeps ``records`` as a range of the received buffer: ``wharf.client.records`` slices bodies
straight out of it. A reply carrying MessageViews (a broker that predates ``raw_records``) or
anything unexpected is handed to the regular protobuf parser, so nothing is lost.

    pull = pull_callable(channel)
    reply = await pull(request, timeout=5)
    messages = messages_from_reply(reply, "*")
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from wharf.v1 import common_pb2, messaging_pb2

PULL_METHOD = "/wharf.v1.MessagingService/PullMessage"

# PullMessageResponse field numbers (proto/wharf/v1/messaging.proto).
_STATUS, _NEXT_BEGIN, _MIN, _MAX, _MESSAGES, _RECORDS, _REQUEST_ID = 1, 2, 3, 4, 5, 6, 7
_ERROR, _BATCH = 8, 9
_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5
_INT64_WRAP = 1 << 64


class PullReply:
    """The fields of a PullMessageResponse; ``buffer[records_start:records_end]`` are the
    raw records (not copied out). ``error``: (gRPC code number, message) of a stream reply
    that failed, else None."""

    __slots__ = (
        "batch",
        "buffer",
        "error",
        "max_offset",
        "messages",
        "min_offset",
        "next_begin_offset",
        "records_end",
        "records_start",
        "request_id",
        "status",
    )

    def __init__(self, buffer: bytes) -> None:
        self.buffer = buffer
        self.status = 0
        self.next_begin_offset = 0
        self.min_offset = 0
        self.max_offset = 0
        self.records_start = 0
        self.records_end = 0
        self.messages: Sequence[common_pb2.MessageView] = ()
        self.request_id = 0
        self.error: tuple[int, str] | None = None
        self.batch: list[PullReply] = []  # PullMessageStream: several replies in one message

    @property
    def records(self) -> bytes:
        """A copy of the records (the SDK itself reads them in place)."""
        return self.buffer[self.records_start : self.records_end]


class _Unexpected(Exception):
    """The reply needs the full protobuf parser (views, or a wire type we do not walk)."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]  # IndexError on a truncated reply
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise _Unexpected


def _int64(value: int) -> int:
    return value - _INT64_WRAP if value >= 1 << 63 else value


def decode_pull_reply(data: bytes) -> PullReply:
    """A PullMessageResponse's wire bytes -> PullReply, records uncopied (the replies of a
    stream message's ``batch`` too: each a PullReply over the same buffer)."""
    try:
        return _walk(data, 0, len(data))
    except (_Unexpected, IndexError):
        return _from_protobuf(data)


def _walk(data: bytes, pos: int, size: int) -> PullReply:
    reply = PullReply(data)
    while pos < size:
        key, pos = _varint(data, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = _varint(data, pos)
            if field == _STATUS:
                reply.status = _int64(value)
            elif field == _NEXT_BEGIN:
                reply.next_begin_offset = _int64(value)
            elif field == _MIN:
                reply.min_offset = _int64(value)
            elif field == _MAX:
                reply.max_offset = _int64(value)
            elif field == _REQUEST_ID:
                reply.request_id = value
        elif wire_type == _LENGTH_DELIMITED:
            length, pos = _varint(data, pos)
            end = pos + length
            if end > size or (field != _RECORDS and field <= _ERROR):
                raise _Unexpected  # views and errors: the protobuf parser
            if field == _RECORDS:  # last one wins, as protobuf merges scalar fields
                reply.records_start, reply.records_end = pos, end
            elif field == _BATCH:
                try:
                    reply.batch.append(_walk(data, pos, end))
                except (_Unexpected, IndexError):
                    reply.batch.append(_from_protobuf(data[pos:end]))
            pos = end
        elif wire_type == _FIXED64:
            pos += 8
        elif wire_type == _FIXED32:
            pos += 4
        else:
            raise _Unexpected  # groups: not in this message
    if pos != size:
        raise _Unexpected
    return reply


def _from_protobuf(data: bytes) -> PullReply:
    """The regular parser (raises DecodeError on garbage, as the generated stub would)."""
    message = messaging_pb2.PullMessageResponse.FromString(data)
    records = message.records
    reply = PullReply(records)
    reply.status = message.status
    reply.next_begin_offset = message.next_begin_offset
    reply.min_offset = message.min_offset
    reply.max_offset = message.max_offset
    reply.records_end = len(records)
    reply.messages = list(message.messages)
    reply.request_id = message.request_id
    if message.HasField("error"):
        reply.error = (message.error.code, message.error.message)
    reply.batch = [_from_protobuf(item.SerializeToString()) for item in message.batch]
    return reply


def pull_callable(channel: grpc.aio.Channel) -> grpc.aio.UnaryUnaryMultiCallable:
    """``PullMessage`` on ``channel``, answering PullReply instead of PullMessageResponse."""
    return channel.unary_unary(
        PULL_METHOD,
        request_serializer=messaging_pb2.PullMessageRequest.SerializeToString,
        response_deserializer=decode_pull_reply,
    )
