"""v2 ``Message`` -> the store's ``MessageInput``, in one place (the receive direction lands
with the pop store).

What a record keeps (so a wharf.v1 pull of the topic shows it):
- body (IDENTITY as is; GZIP inflated, bounded by maxMessageSize; a gzip stream that does not
  parse or ends before its trailer, so its CRC is unchecked, is MESSAGE_CORRUPTED); a
  ``body_digest`` that is sent is checked (MESSAGE_CORRUPTED on mismatch);
- ``tag`` -> TAGS, ``keys`` -> KEYS (space-joined, so a key may not contain a space),
  ``message_id`` -> UNIQ_KEY (the client's own id, returned on send), ``message_group`` ->
  ``__SHARDINGKEY`` (RocketMQ's MessageConst.PROPERTY_SHARDING_KEY: the FIFO message group);
- user properties exactly as sent, in the same map. System names (``RESERVED_PROPERTY_NAMES``)
  are refused as user keys (ILLEGAL_MESSAGE_PROPERTY_KEY), so the two never mix;
- ``born_timestamp`` (the clients send whole seconds) in ms; born host = the gRPC peer (records
  hold an ipv4:port).

Limits: message group 1..64 characters (ILLEGAL_MESSAGE_GROUP); message id 1..128 characters
(ILLEGAL_MESSAGE_ID); body 1..maxMessageSize bytes after inflating (MESSAGE_BODY_EMPTY /
MESSAGE_BODY_TOO_LARGE); no system property name as a user property (v2's own rule: it has
fields for them). The rules every protocol shares (tag, keys, property names and limits) are
the messaging core's (``broker/core/validate.py``): ``to_input`` applies the list form of the
key rule (``check_keys``) and the send's admission the rest; ``send.py`` maps their reasons to
ILLEGAL_MESSAGE_TAG, ILLEGAL_MESSAGE_KEY, ILLEGAL_MESSAGE_PROPERTY_KEY and
MESSAGE_PROPERTIES_TOO_LARGE.
"""

from __future__ import annotations

import hashlib
import zlib

from wharf.broker.core.validate import check_keys
from wharf.broker.frontends.v2.codes import Code, V2Error
from wharf.rocketmq.v2 import definition_pb2
from wharf.store.codec import properties as store_properties
from wharf.store.codec.properties import (
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from wharf.store.model import MessageInput

PROPERTY_MESSAGE_GROUP = store_properties.PROPERTY_MESSAGE_GROUP  # the pop store reads it too
RESERVED_PROPERTY_NAMES = SYSTEM_PROPERTY_NAMES | {PROPERTY_MESSAGE_GROUP}
MAX_MESSAGE_GROUP_LENGTH = 64
MAX_MESSAGE_ID_LENGTH = 128
MAX_BORN_MS = 1 << 53  # far beyond any real clock; a fuzzed int64 would not fit the record


def _has_separator(text: str) -> bool:
    return "\x01" in text or "\x02" in text


def _body(message: definition_pb2.Message, max_size: int) -> bytes:
    sysp = message.system_properties
    body = message.body
    encoding = sysp.body_encoding
    if encoding == definition_pb2.GZIP:
        inflater = zlib.decompressobj(wbits=47)  # gzip or zlib header
        try:
            body = inflater.decompress(body, max_size + 1)
        except zlib.error as exc:
            raise V2Error(Code.MESSAGE_CORRUPTED, f"body is not valid gzip: {exc}") from None
        if not inflater.eof and len(body) <= max_size:  # cut short: its CRC was never checked
            raise V2Error(Code.MESSAGE_CORRUPTED, "body is truncated gzip (no end of stream)")
    elif encoding not in (definition_pb2.IDENTITY, definition_pb2.ENCODING_UNSPECIFIED):
        raise V2Error(Code.BAD_REQUEST, "body_encoding must be IDENTITY or GZIP")
    if not body:
        raise V2Error(Code.MESSAGE_BODY_EMPTY, "message body is empty")
    if len(body) > max_size:
        size = "over" if encoding == definition_pb2.GZIP else str(len(body))
        raise V2Error(
            Code.MESSAGE_BODY_TOO_LARGE,
            f"message body is {size} bytes; the broker's maxMessageSize is {max_size}",
        )
    if sysp.HasField("body_digest"):
        _check_digest(message.body, sysp.body_digest)
    return body


def _check_digest(raw: bytes, digest: definition_pb2.Digest) -> None:
    kind = digest.type
    if kind == definition_pb2.CRC32:
        crc = zlib.crc32(raw)
        expected = {format(crc, "X"), format(crc, "08X"), str(crc)}  # Java/Go, Python, Node
    elif kind == definition_pb2.MD5:
        expected = {hashlib.md5(raw).hexdigest().upper()}
    elif kind == definition_pb2.SHA1:
        expected = {hashlib.sha1(raw).hexdigest().upper()}
    else:
        return
    if digest.checksum.upper() not in expected:
        raise V2Error(Code.MESSAGE_CORRUPTED, "body_digest does not match the body")


def message_group(message: definition_pb2.Message) -> str:
    """The FIFO message group ('' when none), validated."""
    sysp = message.system_properties
    if not sysp.HasField("message_group"):
        return ""
    group = sysp.message_group
    if not group.strip() or len(group) > MAX_MESSAGE_GROUP_LENGTH or _has_separator(group):
        raise V2Error(
            Code.ILLEGAL_MESSAGE_GROUP,
            f"message_group must be 1..{MAX_MESSAGE_GROUP_LENGTH} characters",
        )
    return group


def message_id(message: definition_pb2.Message) -> str:
    mid = message.system_properties.message_id
    if not mid.strip() or len(mid) > MAX_MESSAGE_ID_LENGTH or _has_separator(mid):
        raise V2Error(
            Code.ILLEGAL_MESSAGE_ID,
            f"system_properties.message_id must be 1..{MAX_MESSAGE_ID_LENGTH} characters",
        )
    return mid


def _user_properties(message: definition_pb2.Message) -> dict[str, str]:
    """The user properties; a system property's name is refused (the core checks the rest)."""
    props = dict(message.user_properties)
    for name in props:
        if name in RESERVED_PROPERTY_NAMES:
            raise V2Error(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                f"user property {name!r} is a reserved system property name",
            )
    return props


def to_input(
    message: definition_pb2.Message, uid: str, group: str, max_size: int, born_host: str
) -> MessageInput:
    """One v2 message -> the store's input (raises V2Error, or the core's InvalidSend for a
    bad key); the core's ``check_inputs`` completes the validation."""
    sysp = message.system_properties
    body = _body(message, max_size)
    properties = _user_properties(message)
    if sysp.HasField("tag"):
        properties[PROPERTY_TAGS] = sysp.tag  # checked by the core's admission
    if sysp.keys:
        properties[PROPERTY_KEYS] = check_keys(sysp.keys)
    properties[PROPERTY_UNIQ_KEY] = uid
    if group:
        properties[PROPERTY_MESSAGE_GROUP] = group
    born_ms = sysp.born_timestamp.seconds * 1000 + sysp.born_timestamp.nanos // 1_000_000
    if not 0 < born_ms < MAX_BORN_MS:
        born_ms = 0  # absent or absurd: the store time stands in
    return MessageInput(body, properties, 0, 0, born_ms, born_host)
