"""Raw CommitLog records from a ``raw_records`` pull -> ``ReceivedMessage``s, decoded lazily.

The broker's fast pull path sends the stored records' bytes (RocketMQ's design: the broker
copies the CommitLog bytes out, the client decodes them with the shared MessageDecoder). The
record layout is defined once in ``store.format`` and is the wire format here, so this module
imports that sans-IO codec (allowed by the import-linter contract in ``pyproject.toml``).

Per record, parsing costs one header unpack and a few length checks; properties, topic, hosts
and the body are sliced out of the reply bytes only when the application reads them. The
broker filters by tag HASH only in this mode, so ``parse_records`` re-checks exact tags (as
RocketMQ clients do) and drops hash collisions.

    messages = messages_from_reply(reply, "paid || shipped")
"""

from __future__ import annotations

import struct
from functools import lru_cache

from wharf.v1 import common_pb2, messaging_pb2

from client.compression import decompress
from client.errors import BrokerInternalError
from client.message import PROPERTY_RETRY_TOPIC, ReceivedMessage
from store.format import (
    KEY_SEPARATOR,
    MESSAGE_MAGIC_CODE,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RECORD_FIXED_SIZE,
    RECORD_HEADER,
    RECORD_HEADER_SIZE,
    SYSFLAG_COMPRESSED,
    decode_host,
)

# Indexes into RECORD_HEADER's fields (see the byte diagram in store.format).
_TOTAL, _QUEUE_ID, _FLAG, _QUEUE_OFFSET, _PHYSICAL_OFFSET = 0, 3, 4, 5, 6
_SYS_FLAG, _BORN_TS, _BORN_HOST, _STORE_TS, _STORE_HOST, _RECONSUME = 7, 8, 9, 10, 11, 12
_VIEW_HIDDEN = frozenset((PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY))
_unpack_header = RECORD_HEADER.unpack_from
# What walking the records needs: TOTALSIZE, MAGICCODE, BODYLENGTH (3.5x cheaper than the
# whole header; the rest is unpacked on first use).
_unpack_walk = struct.Struct(">iI76xi").unpack_from
# SYSFLAG is a big-endian int at byte 36: its compressed bit lives in byte 39.
_SYS_FLAG_LOW_BYTE = 39


class RecordMessage(ReceivedMessage):
    """A ``ReceivedMessage`` backed by one stored record inside a pull reply's bytes.

    Same public API as the MessageView-backed one; ``view`` builds the equivalent
    MessageView on first use."""

    __slots__ = ("_all_properties", "_body_len", "_buf", "_end", "_header", "_pos")

    def __init__(self, buf: bytes, pos: int, end: int, body_len: int) -> None:
        self._buf = buf
        self._pos = pos
        self._end = end
        self._body_len = body_len
        self._header: tuple | None = None
        self._all_properties: dict[str, str] | None = None
        self._body: bytes | None = None
        self._properties: dict[str, str] | None = None

    # --- lazily decoded parts -------------------------------------------------------------
    @property
    def _fields(self) -> tuple:
        header = self._header
        if header is None:
            header = self._header = _unpack_header(self._buf, self._pos)
        return header

    def _props_pos(self) -> int:
        buf = self._buf
        topic_pos = self._pos + RECORD_HEADER_SIZE + self._body_len
        props_pos = topic_pos + 3 + buf[topic_pos]
        if props_pos > self._end or props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) != (
            self._end
        ):
            raise _malformed(self._pos, "field lengths do not add up to TOTALSIZE")
        return props_pos

    def _props(self) -> dict[str, str]:
        props = self._all_properties
        if props is None:
            text = self._buf[self._props_pos() : self._end].decode("utf-8", "replace")
            props = {}
            for pair in text.split("\x02"):
                if pair:
                    name, _, value = pair.partition("\x01")
                    props[name] = value
            self._all_properties = props
        return props

    def _compressed(self) -> bool:
        return bool(self._buf[self._pos + _SYS_FLAG_LOW_BYTE] & SYSFLAG_COMPRESSED)

    @property
    def view(self) -> common_pb2.MessageView:
        """The equivalent MessageView (built on first use; body as stored)."""
        try:
            return self._view
        except AttributeError:
            pass
        view = common_pb2.MessageView(
            topic=self.queue_topic,
            queue_id=self.queue_id,
            queue_offset=self.queue_offset,
            commit_log_offset=self.commit_log_offset,
            msg_id=self.msg_id,
            offset_msg_id=self.offset_msg_id,
            body=self._raw_body(),
            tags=self.tags,
            keys=self.keys,
            properties=self.properties,
            born_timestamp=self.born_timestamp,
            store_timestamp=self.store_timestamp,
            reconsume_times=self.reconsume_times,
            compressed=self._compressed(),
            flag=self.flag,
            born_host=self.born_host,
            store_host=self.store_host,
            store_size=self.store_size,
        )
        self._view = view
        return view

    def _raw_body(self) -> bytes:
        start = self._pos + RECORD_HEADER_SIZE
        return self._buf[start : start + self._body_len]

    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            body = self._raw_body()
            if self._buf[self._pos + _SYS_FLAG_LOW_BYTE] & SYSFLAG_COMPRESSED:
                body = decompress(body, True)
            self._body = body
        return body

    @property
    def properties(self) -> dict[str, str]:
        if self._properties is None:
            self._properties = {k: v for k, v in self._props().items() if k not in _VIEW_HIDDEN}
        return self._properties

    @property
    def topic(self) -> str:
        return self._props().get(PROPERTY_RETRY_TOPIC) or self.queue_topic

    @property
    def queue_topic(self) -> str:
        topic_pos = self._pos + RECORD_HEADER_SIZE + self._body_len
        return _topic(self._buf[topic_pos + 1 : self._props_pos() - 2])

    @property
    def queue_id(self) -> int:
        return self._fields[_QUEUE_ID]

    @property
    def queue_offset(self) -> int:
        return self._fields[_QUEUE_OFFSET]

    @property
    def commit_log_offset(self) -> int:
        return self._fields[_PHYSICAL_OFFSET]

    @property
    def msg_id(self) -> str:
        return self._props().get(PROPERTY_UNIQ_KEY, "")

    @property
    def offset_msg_id(self) -> str:
        # RocketMQ's MessageDecoder.createMessageId: STOREHOST (8 bytes) + PHYSICALOFFSET.
        fields = self._fields
        return f"{_hex_host(fields[_STORE_HOST])}{fields[_PHYSICAL_OFFSET]:016X}"

    @property
    def tags(self) -> str:
        return self._props().get(PROPERTY_TAGS, "")

    @property
    def keys(self) -> tuple[str, ...]:
        text = self._props().get(PROPERTY_KEYS)
        return tuple(text.split(KEY_SEPARATOR)) if text else ()

    @property
    def born_timestamp(self) -> int:
        return self._fields[_BORN_TS]

    @property
    def store_timestamp(self) -> int:
        return self._fields[_STORE_TS]

    @property
    def reconsume_times(self) -> int:
        return self._fields[_RECONSUME]

    @property
    def born_host(self) -> str:
        return decode_host(self._fields[_BORN_HOST])

    @property
    def store_host(self) -> str:
        return decode_host(self._fields[_STORE_HOST])

    @property
    def store_size(self) -> int:
        return self._end - self._pos

    @property
    def flag(self) -> int:
        return self._fields[_FLAG]


@lru_cache(maxsize=1024)
def _topic(raw: bytes) -> str:
    return raw.decode("ascii", "replace")


@lru_cache(maxsize=64)
def _hex_host(raw: bytes) -> str:
    return raw.hex().upper()


@lru_cache(maxsize=256)
def exact_tags(tag_expression: str) -> frozenset[str] | None:
    """The tags a subscription accepts; None for everything (``*`` or empty). The broker has
    already validated the expression (same grammar as ``store.filter``)."""
    text = tag_expression.strip()
    if text in ("", "*"):
        return None
    return frozenset(tag.strip() for tag in text.split("||") if tag.strip())


def parse_records(buf: bytes, tags: frozenset[str] | None = None) -> list[ReceivedMessage]:
    """Split a ``records`` blob into messages; with ``tags``, keep only exact tag matches.
    BrokerInternalError if the bytes are not well-formed records (the sizes are checked
    here; the topic/properties lengths when first read)."""
    messages: list[ReceivedMessage] = []
    append = messages.append
    walk = _unpack_walk
    pos, size = 0, len(buf)
    while pos < size:
        if size - pos < RECORD_FIXED_SIZE:
            raise _malformed(pos, "truncated record header")
        total, magic, body_len = walk(buf, pos)
        end = pos + total
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_FIXED_SIZE or end > size:
            raise _malformed(pos, "bad magic code or TOTALSIZE")
        if body_len < 0 or pos + RECORD_FIXED_SIZE + body_len > end:
            raise _malformed(pos, "field lengths do not add up to TOTALSIZE")
        message = RecordMessage(buf, pos, end, body_len)
        if tags is None or message.tags in tags:
            append(message)
        pos = end
    return messages


def _malformed(pos: int, reason: str) -> BrokerInternalError:
    return BrokerInternalError(f"malformed raw record at byte {pos} of a pull reply: {reason}")


def messages_from_reply(
    reply: messaging_pb2.PullMessageResponse, tag_expression: str
) -> list[ReceivedMessage]:
    """The reply's messages: raw records (exact tags re-checked) or, from a broker that does
    not know ``raw_records``, MessageViews (already filtered exactly by the broker)."""
    records = reply.records  # each read of a bytes field copies it out of the message
    if records:
        return parse_records(records, exact_tags(tag_expression))
    return [ReceivedMessage.from_view(view) for view in reply.messages]
