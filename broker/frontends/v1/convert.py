"""Conversions between the wire (wharf.v1 protos) and the store's values, in ONE place.

Hot paths: ``to_inputs`` runs once per send request and ``to_view`` once per pulled message,
so both avoid per-message work that can be hoisted (property dicts are built directly, the
offset message id prefix is precomputed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from wharf.broker.errors import InvalidArgumentError, status_for
from wharf.store.codec.ids import OffsetMsgIdFormatter, UniqueIdGenerator
from wharf.store.codec.layout import SYSFLAG_COMPRESSED
from wharf.store.codec.properties import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.model import MessageInput, PutStatus, StoredMessage
from wharf.v1 import common_pb2, messaging_pb2

# A store put's status -> the send reply's.
SEND_STATUS = {
    PutStatus.PUT_OK: messaging_pb2.SEND_OK,
    PutStatus.FLUSH_DISK_TIMEOUT: messaging_pb2.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: messaging_pb2.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: messaging_pb2.SLAVE_NOT_AVAILABLE,
}


def error_into(error: common_pb2.ErrorInfo, exc: BaseException) -> grpc.StatusCode:
    """Fill a reply's ``error`` (a part's, a batch's) from ``exc``; returns its status code
    (INTERNAL: the caller logs the exception)."""
    code, message = status_for(exc)
    error.code = code.value[0]
    error.message = message
    return code


# Properties the view carries in dedicated fields instead of the properties map.
_VIEW_HIDDEN = frozenset((PROPERTY_KEYS, PROPERTY_TAGS, PROPERTY_UNIQ_KEY))
_RESERVED_CHARS = ("\x01", "\x02")


def _check_properties(properties: dict[str, str], index: int) -> None:
    for name, value in properties.items():
        if not name:
            raise InvalidArgumentError(f"message #{index}: property names must not be empty")
        for text in (name, value):
            if "\x01" in text or "\x02" in text:
                raise InvalidArgumentError(
                    f"message #{index}: property {name!r} contains \\x01 or \\x02 "
                    "(reserved as separators)"
                )


_FIELD = {f.name: f.number for f in common_pb2.Message.DESCRIPTOR.fields}
_BODY = _FIELD["body"]
_TAGS = _FIELD["tags"]
_KEYS = _FIELD["keys"]
_PROPERTIES = _FIELD["properties"]
_DELAY_LEVEL = _FIELD["delay_level"]
_FLAG = _FIELD["flag"]
_COMPRESSED = _FIELD["compressed"]
_UNIQUE_ID = _FIELD["unique_id"]
_BORN_TIMESTAMP = _FIELD["born_timestamp"]


def to_inputs(
    messages: Sequence[common_pb2.Message],
    ids: UniqueIdGenerator,
    max_message_size: int,
    max_delay_level: int,
    born_host: str,
) -> tuple[list[MessageInput], list[str], int]:
    """Proto messages -> (store inputs, unique ids, the batch's delay level).

    A batch is ONE store append into one queue, so its messages must share a delay level
    (delayed messages are appended to SCHEDULE_TOPIC_XXXX's queue for that level).
    Hot path: reading a proto attribute costs ~0.3 us whether set or not, so each message is
    read with one ``ListFields()`` (only the fields it sets): about twice as fast."""
    inputs: list[MessageInput] = []
    unique_ids: list[str] = []
    append_input = inputs.append
    append_id = unique_ids.append
    delay = messages[0].delay_level
    if delay < 0:
        raise InvalidArgumentError(f"delay_level must be >= 0, got {delay}")
    # RocketMQ clamps a level past the last one rather than failing the send.
    delay_text = str(min(delay, max_delay_level)) if delay else ""
    for index, m in enumerate(messages):
        fields = m.ListFields()
        if len(fields) == 2 and not delay:
            # Fast path: what the SDK sends for a bare body (body + its unique id), read
            # without the generic field dispatch below (ListFields sorts by field number).
            (body_field, body), (uid_field, uid) = fields
            if body_field.number == _BODY and uid_field.number == _UNIQUE_ID:
                size = len(body)
                if size > max_message_size:
                    raise _bad_body(index, size, max_message_size)
                append_id(uid)
                append_input(MessageInput(body, {PROPERTY_UNIQ_KEY: uid}, 0, 0, 0, born_host))
                continue
        body = b""
        uid = ""
        flag = sys_flag = born_timestamp = level = 0
        properties: dict[str, str] = {}
        user_properties = None
        for field, value in fields:
            number = field.number
            if number == _BODY:
                body = value
            elif number == _UNIQUE_ID:
                uid = value
            elif number == _TAGS:
                properties[PROPERTY_TAGS] = value
            elif number == _KEYS:
                properties[PROPERTY_KEYS] = " ".join(value)
            elif number == _PROPERTIES:
                user_properties = dict(value)
                _check_properties(user_properties, index)
            elif number == _DELAY_LEVEL:
                level = value
            elif number == _FLAG:
                flag = value
            elif number == _COMPRESSED:
                sys_flag = SYSFLAG_COMPRESSED
            elif number == _BORN_TIMESTAMP:
                born_timestamp = value
        size = len(body)
        if not size or size > max_message_size:
            raise _bad_body(index, size, max_message_size)
        if level != delay:
            raise _mixed_delay()
        if not uid:
            uid = ids.next_id()
        properties[PROPERTY_UNIQ_KEY] = uid
        append_id(uid)
        if delay_text:
            properties[PROPERTY_DELAY_TIME_LEVEL] = delay_text
        if user_properties:
            # System properties (TAGS, KEYS, UNIQ_KEY, DELAY) win over user ones.
            user_properties.update(properties)
            properties = user_properties
        append_input(MessageInput(body, properties, flag, sys_flag, born_timestamp, born_host))
    return inputs, unique_ids, delay


def _mixed_delay() -> InvalidArgumentError:
    """A batch whose messages' delay levels differ (it is one append into one queue)."""
    return InvalidArgumentError(
        "messages of one batch must share a delay level; send delayed messages in their own request"
    )


def _bad_body(index: int, size: int, max_message_size: int) -> InvalidArgumentError:
    if not size:
        return InvalidArgumentError(f"message #{index}: body is empty")
    return InvalidArgumentError(
        f"message #{index}: body is {size} bytes; maxMessageSize is {max_message_size} "
        "(compress it or split it)"
    )


def add_views(views: Any, messages: Sequence[StoredMessage], ids: OffsetMsgIdFormatter) -> None:
    """Append store records to a repeated MessageView field (``response.messages``).

    Built in place with ``add()``: about a third cheaper than making MessageView objects and
    copying them in. Keys/tags/unique id are lifted out of the properties map, and the map is
    only filled when there is something left in it (usually there is not)."""
    add = views.add
    fmt = ids.format
    hidden = _VIEW_HIDDEN
    for m in messages:
        props = m.properties
        keys = props.get(PROPERTY_KEYS)
        view = add(
            topic=m.topic,
            queue_id=m.queue_id,
            queue_offset=m.queue_offset,
            commit_log_offset=m.commit_log_offset,
            msg_id=props.get(PROPERTY_UNIQ_KEY, ""),
            offset_msg_id=fmt(m.commit_log_offset),
            body=m.body,
            tags=props.get(PROPERTY_TAGS, ""),
            born_timestamp=m.born_timestamp,
            store_timestamp=m.store_timestamp,
            reconsume_times=m.reconsume_times,
            born_host=m.born_host,
            store_host=m.store_host,
            store_size=m.store_size,
        )
        # Rarely set fields go through attribute writes: every kwarg costs even when zero.
        if m.sys_flag & SYSFLAG_COMPRESSED:
            view.compressed = True
        if m.flag:
            view.flag = m.flag
        if keys:
            view.keys.extend(keys.split(" "))
        if not hidden.issuperset(props):
            view.properties.update({k: v for k, v in props.items() if k not in hidden})


def to_view(m: StoredMessage, ids: OffsetMsgIdFormatter) -> common_pb2.MessageView:
    """One store record -> MessageView (QueryMessage / ViewMessage)."""
    scratch = messaging_pb2.QueryMessageResponse()
    add_views(scratch.messages, [m], ids)
    return scratch.messages[0]
