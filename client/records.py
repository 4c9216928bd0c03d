"""Raw CommitLog records from a ``raw_records`` pull -> ``ReceivedMessage``s, decoded lazily.

The broker's fast pull path sends the stored records' bytes (RocketMQ's design: the broker
copies the CommitLog bytes out, the client decodes them with the shared MessageDecoder). The
record layout is defined once in ``wharf.store.codec.layout`` and is the wire format here, so this
module imports that sans-IO codec (allowed by the import-linter contract in ``pyproject.toml``).

The walk is compiled (``wharf.store.fast._record_decoder``, built with the package; the
pure-Python loop here is its reference and runs where it is not built, under
``WHARF_NO_SPEEDUPS``, or for a buffer that is not ``bytes``). Per 1 KiB record the compiled
walk creates the message with its body (uncompressed) and a leading ``UNIQ_KEY`` msg_id
already decoded: ~0.28 us per message for walk + ``body`` + ``msg_id`` against ~1.2 us in
Python. A message so holds its own body copy next to the reply's buffer, which all of the
reply's messages share (up to twice the body bytes while both live). Everything else is read
from the reply's bytes when the application asks: a header field is one ``unpack_from``,
``tags`` and rarer properties one regex match over the properties text (no dict is built
unless ``properties`` is read), a compressed body is inflated on first read. The records may
sit inside a larger buffer (the whole gRPC reply: ``wharf.client.consumer.pull_wire`` hands
over the received bytes uncopied). The broker filters by tag HASH only in this mode, so
``parse_records`` re-checks exact tags (as RocketMQ clients do) and drops hash collisions.

    messages = messages_from_reply(reply, "paid || shipped")
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache
from typing import TYPE_CHECKING

from wharf.client.compression import decompress
from wharf.client.errors import BrokerInternalError
from wharf.client.message import PROPERTY_RETRY_TOPIC, ReceivedMessage
from wharf.store import fast
from wharf.store.codec.hosts import decode_host
from wharf.store.codec.ids import format_offset_msg_id, host_bytes_prefix
from wharf.store.codec.layout import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    OFFSET_BORN_HOST,
    OFFSET_BORN_TIMESTAMP,
    OFFSET_FLAG,
    OFFSET_MAGIC,
    OFFSET_PHYSICAL_OFFSET,
    OFFSET_QUEUE_ID,
    OFFSET_QUEUE_OFFSET,
    OFFSET_RECONSUME_TIMES,
    OFFSET_STORE_HOST,
    OFFSET_STORE_TIMESTAMP,
    OFFSET_SYS_FLAG_LOW_BYTE,
    RECORD_FIXED_SIZE,
    RECORD_HEADER_SIZE,
    SYSFLAG_COMPRESSED,
    partial_struct,
)
from wharf.store.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.v1 import common_pb2, messaging_pb2

if TYPE_CHECKING:
    from wharf.client.consumer.pull_wire import PullReply

_VIEW_HIDDEN = frozenset((PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY))
# What walking the records needs: TOTALSIZE, MAGICCODE, BODYLENGTH (3.5x cheaper than the
# whole header; single fields are unpacked on use, see the byte diagram in codec.layout).
_unpack_walk = partial_struct(("TOTAL_SIZE", "MAGIC", "BODY_LENGTH")).unpack_from
_int_at = struct.Struct(">i").unpack_from
_long_at = struct.Struct(">q").unpack_from
_host_at = struct.Struct("8s").unpack_from
# UNIQ_KEY as the first pair (how producers write it): one anchored match at the start.
_UNIQ_KEY_FIRST = re.compile(rb"UNIQ_KEY\x01([^\x02]*)\x02").match
# The compiled walk (store/fast/_record_decoder.c); None: the Python loop in parse_records.
_compiled = fast.load("_record_decoder")
# The walk let only V1 and V2 records through, and their magics differ in the last byte: a V2
# record (a topic over 127 bytes) has a two-byte TOPICLENGTH.
_MAGIC_LAST_BYTE = OFFSET_MAGIC + 3
_V2_LAST_BYTE = MESSAGE_MAGIC_CODE_V2 & 0xFF
assert MESSAGE_MAGIC_CODE & 0xFF != _V2_LAST_BYTE


def _tail_at(buf: bytes, pos: int, body_len: int) -> tuple[int, int]:
    """(TOPIC's start, PROPERTIES' start) of the walked record at ``pos`` (unchecked)."""
    topic_pos = pos + RECORD_HEADER_SIZE + body_len
    if buf[pos + _MAGIC_LAST_BYTE] != _V2_LAST_BYTE:
        return topic_pos + 1, topic_pos + 3 + buf[topic_pos]
    return topic_pos + 2, _v2_props(buf, topic_pos)


def _v2_props(buf: bytes, topic_pos: int) -> int:
    """PROPERTIES' start of a V2 record whose TOPICLENGTH is at ``topic_pos`` (two bytes)."""
    return topic_pos + 4 + (buf[topic_pos] << 8 | buf[topic_pos + 1])


class RecordMessage(ReceivedMessage):
    """A ``ReceivedMessage`` backed by one stored record inside a pull reply's bytes.

    Same public API as the MessageView-backed one; ``view`` builds the equivalent
    MessageView on first use."""

    __slots__ = ("_all_properties", "_body_len", "_buf", "_end", "_msg_id", "_pos")

    def __init__(self, buf: bytes, pos: int, end: int, body_len: int) -> None:
        # Only what every message needs: the inherited ``_properties`` / ``_view`` slots stay
        # unset until ``properties`` or ``view`` is read; ``_body`` and ``_msg_id`` are None
        # until first read (the compiled walk fills them at once).
        self._buf = buf
        self._pos = pos
        self._end = end
        self._body_len = body_len
        self._all_properties: dict[str, str] | None = None
        self._body = None
        self._msg_id: str | None = None

    # --- lazily decoded parts -------------------------------------------------------------
    def _props_pos(self) -> int:
        buf = self._buf
        topic_pos = self._pos + RECORD_HEADER_SIZE + self._body_len
        if buf[self._pos + _MAGIC_LAST_BYTE] != _V2_LAST_BYTE:  # V1: one comparison more
            props_pos = topic_pos + 3 + buf[topic_pos]
        else:
            props_pos = _v2_props(buf, topic_pos)
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

    def _property(self, name: str, default: str) -> str:
        """One property's value without building the dict (one regex match, ~3x cheaper
        than the dict): the LAST pair named ``name``, as the dict keeps the last duplicate."""
        props = self._all_properties
        if props is not None:
            return props.get(name, default)
        buf = self._buf
        end = self._end
        topic_pos = self._pos + RECORD_HEADER_SIZE + self._body_len
        if buf[self._pos + _MAGIC_LAST_BYTE] != _V2_LAST_BYTE:  # V1: one comparison more
            props_pos = topic_pos + 3 + buf[topic_pos]
        else:
            props_pos = _v2_props(buf, topic_pos)
        if props_pos > end or props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) != end:
            raise _malformed(self._pos, "field lengths do not add up to TOTALSIZE")
        found = _PROPERTY_PATTERNS[name].match(buf, props_pos, end)
        if found is None:
            return default
        value = found[1]
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value.decode("utf-8", "replace")

    def _compressed(self) -> bool:
        return bool(self._buf[self._pos + OFFSET_SYS_FLAG_LOW_BYTE] & SYSFLAG_COMPRESSED)

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
            if self._compressed():
                body = decompress(body, True)
            self._body = body
        return body

    @property
    def properties(self) -> dict[str, str]:
        try:
            return self._properties  # type: ignore[return-value]
        except AttributeError:
            props = {k: v for k, v in self._props().items() if k not in _VIEW_HIDDEN}
            self._properties = props
            return props

    @property
    def topic(self) -> str:
        return self._property(PROPERTY_RETRY_TOPIC, "") or self.queue_topic

    @property
    def queue_topic(self) -> str:
        topic_pos = _tail_at(self._buf, self._pos, self._body_len)[0]
        return _topic(self._buf[topic_pos : self._props_pos() - 2])

    @property
    def queue_id(self) -> int:
        return _int_at(self._buf, self._pos + OFFSET_QUEUE_ID)[0]

    @property
    def queue_offset(self) -> int:
        return _long_at(self._buf, self._pos + OFFSET_QUEUE_OFFSET)[0]

    @property
    def commit_log_offset(self) -> int:
        return _long_at(self._buf, self._pos + OFFSET_PHYSICAL_OFFSET)[0]

    @property
    def msg_id(self) -> str:
        # Fast path for what every consumer reads: the producer writes UNIQ_KEY as the first
        # property and the encoder rejects duplicate names and separators in values, so a
        # leading ``UNIQ_KEY\x01`` pair is the property (one anchored match: ~1.5x cheaper
        # than ``_property``). Anything else, malformed records included, takes that path.
        # The compiled walk has already done the same match.
        msg_id = self._msg_id
        if msg_id is not None:
            return msg_id
        buf = self._buf
        end = self._end
        topic_pos = self._pos + RECORD_HEADER_SIZE + self._body_len
        if buf[self._pos + _MAGIC_LAST_BYTE] != _V2_LAST_BYTE:  # V1: one comparison more
            props_pos = topic_pos + 3 + buf[topic_pos]
        else:
            props_pos = _v2_props(buf, topic_pos)
        if props_pos <= end and props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) == end:
            found = _UNIQ_KEY_FIRST(buf, props_pos, end)
            if found is not None:
                try:
                    return found[1].decode()
                except UnicodeDecodeError:
                    pass
        return self._property(PROPERTY_UNIQ_KEY, "")

    @property
    def offset_msg_id(self) -> str:
        # RocketMQ's MessageDecoder.createMessageId: STOREHOST (8 bytes) + PHYSICALOFFSET.
        host = _host_at(self._buf, self._pos + OFFSET_STORE_HOST)[0]
        return format_offset_msg_id(host_bytes_prefix(host), self.commit_log_offset)

    @property
    def tags(self) -> str:
        return self._property(PROPERTY_TAGS, "")

    @property
    def keys(self) -> tuple[str, ...]:
        text = self._property(PROPERTY_KEYS, "")
        return tuple(text.split(KEY_SEPARATOR)) if text else ()

    @property
    def born_timestamp(self) -> int:
        return _long_at(self._buf, self._pos + OFFSET_BORN_TIMESTAMP)[0]

    @property
    def store_timestamp(self) -> int:
        return _long_at(self._buf, self._pos + OFFSET_STORE_TIMESTAMP)[0]

    @property
    def reconsume_times(self) -> int:
        return _int_at(self._buf, self._pos + OFFSET_RECONSUME_TIMES)[0]

    @property
    def born_host(self) -> str:
        return decode_host(_host_at(self._buf, self._pos + OFFSET_BORN_HOST)[0])

    @property
    def store_host(self) -> str:
        return decode_host(_host_at(self._buf, self._pos + OFFSET_STORE_HOST)[0])

    @property
    def store_size(self) -> int:
        return self._end - self._pos

    @property
    def flag(self) -> int:
        return _int_at(self._buf, self._pos + OFFSET_FLAG)[0]


def _property_pattern(name: str) -> re.Pattern[bytes]:
    """Matches a properties text up to the value of its last ``name`` pair: greedy
    ``.*\\x02`` backtracks to the last separator followed by the name (or the name opens
    the text). Names and values cannot contain the separators."""
    escaped = re.escape(name.encode())
    return re.compile(rb"(?:.*\x02)?" + escaped + rb"\x01([^\x02]*)", re.DOTALL)


# The properties read per message without building the dict.
_PROPERTY_PATTERNS = {
    name: _property_pattern(name)
    for name in (PROPERTY_UNIQ_KEY, PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_RETRY_TOPIC)
}


@lru_cache(maxsize=1024)
def _topic(raw: bytes) -> str:
    return raw.decode("ascii", "replace")


@lru_cache(maxsize=256)
def exact_tags(tag_expression: str) -> frozenset[str] | None:
    """The tags a subscription accepts; None for everything (``*`` or empty). The broker has
    already validated the expression (same grammar as ``wharf.store.read.filter``)."""
    text = tag_expression.strip()
    if text in ("", "*"):
        return None
    return frozenset(tag.strip() for tag in text.split("||") if tag.strip())


def parse_records(
    buf: bytes, tags: frozenset[str] | None = None, start: int = 0, end: int | None = None
) -> list[ReceivedMessage]:
    """Split the records in ``buf[start:end]`` (all of ``buf`` by default) into messages;
    with ``tags``, keep only exact tag matches. BrokerInternalError if the bytes are not
    well-formed records (sizes checked here; topic/properties lengths when first read)."""
    size = len(buf) if end is None else end
    if _compiled is not None and type(buf) is bytes and 0 <= start <= size <= len(buf):
        try:
            messages: list[ReceivedMessage] = _compiled.walk(RecordMessage, buf, start, size)
        except ValueError as exc:
            raise _malformed(*exc.args) from None
    else:
        messages = walk_records_python(buf, start, size)
    if tags is not None:
        return [m for m in messages if m.tags in tags]
    return messages


def walk_records_python(buf: bytes, start: int, size: int) -> list[ReceivedMessage]:
    """The reference walk of ``buf[start:size]`` (the compiled twin does the same, and also
    fills ``_body`` and ``_msg_id`` at once)."""
    last_header = size - RECORD_FIXED_SIZE  # a record starting later cannot be whole
    messages: list[ReceivedMessage] = []
    append = messages.append
    walk = _unpack_walk
    # object.__new__ plus slot stores skip __init__'s frame: ~25% cheaper per message.
    new = object.__new__
    cls = RecordMessage
    pos = start
    while pos < size:
        if pos > last_header:
            raise _malformed(pos - start, "truncated record header")
        total, magic, body_len = walk(buf, pos)
        end_pos = pos + total
        if (
            (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
            or total < RECORD_FIXED_SIZE
            or end_pos > size
        ):
            raise _malformed(pos - start, "bad magic code or TOTALSIZE")
        if body_len < 0 or RECORD_FIXED_SIZE + body_len > total:
            raise _malformed(pos - start, "field lengths do not add up to TOTALSIZE")
        message = new(cls)
        message._buf = buf
        message._pos = pos
        message._end = end_pos
        message._body_len = body_len
        message._all_properties = None
        message._body = None
        message._msg_id = None
        append(message)
        pos = end_pos
    return messages


def _malformed(pos: int, reason: str) -> BrokerInternalError:
    return BrokerInternalError(f"malformed raw record at byte {pos} of a pull reply: {reason}")


def messages_from_reply(
    reply: messaging_pb2.PullMessageResponse | PullReply, tag_expression: str
) -> list[ReceivedMessage]:
    """The reply's messages: raw records (exact tags re-checked) or, from a broker that does
    not know ``raw_records``, MessageViews (already filtered exactly by the broker)."""
    if isinstance(reply, messaging_pb2.PullMessageResponse):
        records = reply.records  # each read of a bytes field copies it out of the message
        if records:
            return parse_records(records, exact_tags(tag_expression))
    elif reply.records_end > reply.records_start:
        # pull_wire.PullReply: the records are a range of the received bytes, not a copy.
        tags = exact_tags(tag_expression)
        return parse_records(reply.buffer, tags, reply.records_start, reply.records_end)
    return [ReceivedMessage.from_view(view) for view in reply.messages]
