"""A batch send's body: RocketMQ's ``MessageDecoder.encodeMessages`` / ``decodeMessages``, sans-IO.

The body of ``SEND_BATCH_MESSAGE`` (320), and of ``SEND_MESSAGE`` (10) / ``SEND_MESSAGE_V2``
(310) with ``batch`` set (the C++ client sends its batches as 10 with ``batch:"1"``), is one
short record per message, big-endian::

    int32 totalSize | int32 magicCode (0) | int32 bodyCRC (0) | int32 flag | int32 bodyLength
    body | int16 propertiesLength | properties (name\\x01value\\x02...)

``totalSize`` counts the whole record, itself included. Java's ``decodeMessage`` ignores the
magic code and the CRC and reads the body by ``bodyLength``; so does this decoder, but it also
checks that every length stays inside the body and that ``totalSize`` matches the parts (a
record that does not is a ``BatchError``: a broken batch is refused, never stored as garbage).
The topic, queue, sysFlag and born timestamp are the request header's, shared by the batch.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from wharf.store.codec.properties import properties_to_string, string_to_properties

__all__ = ["BatchError", "BatchMessage", "decode_messages", "encode_messages"]

_PREFIX = struct.Struct(">iiiii")  # totalSize, magicCode, bodyCRC, flag, bodyLength
_PROPS_LENGTH = struct.Struct(">h")


class BatchError(ValueError):
    """A batch body that does not decode; ``str(error)`` names the message and the problem."""


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """One message of a batch: its user flag, body and properties."""

    flag: int
    body: bytes
    properties: dict[str, str]


def decode_messages(body: bytes | bytearray | memoryview) -> list[BatchMessage]:
    """The messages of a batch body (``MessageDecoder.decodeMessages``); BatchError if it is
    empty, truncated or inconsistent."""
    data = memoryview(body)
    size = len(data)
    messages: list[BatchMessage] = []
    pos = 0
    while pos < size:
        index = len(messages)
        if size - pos < _PREFIX.size:
            raise BatchError(f"batch message #{index}: {size - pos} bytes left, a record needs 20")
        total, _magic, _crc, flag, body_length = _PREFIX.unpack_from(data, pos)
        if total < _PREFIX.size + 2 or total > size - pos:
            raise BatchError(
                f"batch message #{index}: totalSize {total} does not fit the {size - pos} "
                "bytes left"
            )
        at = pos + _PREFIX.size
        if body_length < 0 or body_length > total - _PREFIX.size - 2:
            raise BatchError(f"batch message #{index}: bodyLength {body_length} exceeds its record")
        message_body = bytes(data[at : at + body_length])
        at += body_length
        (props_length,) = _PROPS_LENGTH.unpack_from(data, at)
        at += 2
        if props_length < 0 or at + props_length != pos + total:
            raise BatchError(
                f"batch message #{index}: propertiesLength {props_length} does not match "
                f"totalSize {total}"
            )
        text = bytes(data[at : at + props_length]).decode("utf-8", "replace")
        messages.append(BatchMessage(flag, message_body, string_to_properties(text)))
        pos += total
    if not messages:
        raise BatchError("batch body is empty: send at least one message")
    return messages


def encode_messages(messages: list[BatchMessage]) -> bytes:
    """``MessageDecoder.encodeMessages``: what a 4.x producer sends (tests, tools)."""
    parts: list[bytes] = []
    for message in messages:
        props = properties_to_string(message.properties).encode()
        if len(props) > 0x7FFF:
            raise ValueError(f"properties of {len(props)} bytes do not fit an int16 length")
        total = _PREFIX.size + len(message.body) + 2 + len(props)
        parts += [
            _PREFIX.pack(total, 0, 0, message.flag, len(message.body)),
            message.body,
            _PROPS_LENGTH.pack(len(props)),
            props,
        ]
    return b"".join(parts)
