"""One Kafka record <-> one stored message (``MessageInput`` in, ``StoredMessage`` out): the
Kafka column of the mapping table in broker/frontends/kafka/README.md "Mapping", the one place
the mapping is written down (a change of the rules is a change there). A stored body with the
COMPRESSED sysflag is read through ``bodies.plain_body``, as every protocol without that flag
reads it.

It lives with the record codec, beside its compiled twin (``store/fast/_kafka_convert.c``,
loaded by ``wharf.store.fast.load`` through ``store/fast/kafka_convert.py``): the two write
the store's records byte for byte alike (tests/store/test_kafka_convert_fast.py), so a change
here is a change there. The Kafka front end takes the Python mapping from here and the compiled
one through the store's exports (``wharf.store.kafka_send_records``, ``kafka_fetch_batch``,
``kafka_compiled``), never ``wharf.store.fast`` itself.

What stays in the front end (broker/frontends/kafka/records.py): the wire codec of record
batches (framing, varints, CRC-32C, compression codecs). This module takes a record's fields
only (``KafkaRecord``: any value with ``timestamp``, ``key``, ``value`` and ``headers``, as the
front end's ``Record``); the C twin parses a batch's records section itself and never calls the
Python wire codec, so nothing of it needs to be in the store.

A refusal is the store's ``InvalidMessageError`` (headers too large to store); the front end
answers it INVALID_RECORD, as every InvalidMessageError (broker/frontends/kafka/errors.py).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Protocol

from wharf.store.codec.bodies import plain_body
from wharf.store.codec.properties import (
    KAFKA_KEY_PROPERTY,
    KAFKA_VALUE_PROPERTY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    SYSTEM_PROPERTY_NAMES,
)
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage

__all__ = [
    "KAFKA_HEADERS",
    "KAFKA_KEY",
    "KAFKA_PRODUCER",
    "KAFKA_VALUE",
    "Header",
    "KafkaRecord",
    "properties_bytes",
    "record_body_properties",
    "record_to_message",
    "to_record_fields",
]

KAFKA_PREFIX = "__KAFKA_"
KAFKA_KEY = KAFKA_KEY_PROPERTY
KAFKA_HEADERS = "__KAFKA_HEADERS"
KAFKA_VALUE = KAFKA_VALUE_PROPERTY  # "null" | "empty": the body is a placeholder byte
PLACEHOLDER = b"\x00"
# On the first record of an idempotent batch: "pid:epoch:base_sequence:count" (producers.py).
KAFKA_PRODUCER = "__KAFKA_PRODUCER"
MAX_HEADERS_BYTES = 32 * 1024  # __KAFKA_HEADERS: the store's property section is < 32 KiB
_SEPARATORS = ("\x01", "\x02")

Header = tuple[str, bytes | None]  # a Kafka header: name, value (null or bytes)


class KafkaRecord(Protocol):
    """A Kafka record's fields the mapping reads (the front end's ``records.Record``)."""

    @property
    def timestamp(self) -> int: ...  # ms

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[Header]: ...


def _text(data: bytes) -> str | None:
    """``data`` as text fit for a property value, or None."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    if "\x01" in text or "\x02" in text:
        return None
    return text


def _plain_key(key: bytes) -> str | None:
    text = _text(key)
    if not text or " " in text or not text.strip():
        return None
    return text


def _plain_name(name: str) -> bool:
    return (
        bool(name.strip())
        and name not in SYSTEM_PROPERTY_NAMES
        and not name.startswith(KAFKA_PREFIX)
        and not any(s in name for s in _SEPARATORS)
    )


def record_to_message(
    record: KafkaRecord, born_host: str, unique_id: Callable[[], str]
) -> MessageInput:
    body, props = record_body_properties(record, unique_id)
    return MessageInput(
        body=body,
        properties=props,
        born_timestamp=max(record.timestamp, 0),
        born_host=born_host,
    )


def properties_bytes(props: dict[str, str]) -> bytes:
    """``props`` in the store's ``name\x01value\x02`` form (what record_body_properties
    makes holds no separator: text is checked, base64 and JSON have none)."""
    return "".join([f"{k}\x01{v}\x02" for k, v in props.items()]).encode()


def record_body_properties(
    record: KafkaRecord, unique_id: Callable[[], str]
) -> tuple[bytes, dict[str, str]]:
    """The stored body and properties of a Kafka record (the mapping above)."""
    props: dict[str, str] = {PROPERTY_UNIQ_KEY: unique_id()}
    key = record.key
    if key is not None:
        text = _plain_key(key)
        if text is not None:
            props[PROPERTY_KEYS] = text
        else:
            props[KAFKA_KEY] = base64.b64encode(key).decode()
    body = record.value
    if not body:
        props[KAFKA_VALUE] = "null" if body is None else "empty"
        body = PLACEHOLDER
    headers = record.headers
    if headers:
        plain: dict[str, str] = {}
        for name, value in headers:
            text = _text(value) if value is not None else None
            if text is None or name in plain or not _plain_name(name):
                plain = {}
                break
            plain[name] = text
        if len(plain) == len(headers):
            props.update(plain)
        else:
            packed = json.dumps(
                [[n, None if v is None else base64.b64encode(v).decode()] for n, v in headers],
                separators=(",", ":"),
            )
            if len(packed) > MAX_HEADERS_BYTES:
                raise InvalidMessageError(
                    f"headers take {len(packed)} bytes encoded; the limit is {MAX_HEADERS_BYTES}"
                )
            props[KAFKA_HEADERS] = packed
    return body, props


def to_record_fields(message: StoredMessage) -> tuple[bytes | None, bytes | None, list[Header]]:
    """(key, value, headers) of a stored message, whichever protocol produced it."""
    props = message.properties
    key: bytes | None = None
    packed_key = props.get(KAFKA_KEY)
    if packed_key is not None:
        try:
            key = base64.b64decode(packed_key)
        except (binascii.Error, ValueError):
            key = packed_key.encode()
    else:
        keys = props.get(PROPERTY_KEYS)
        if keys:
            key = keys.encode()
    marked = props.get(KAFKA_VALUE)
    value: bytes | None
    if marked is not None:  # the body is a placeholder byte
        value = None if marked == "null" else b""
    else:
        value = plain_body(message.body, message.sys_flag)
    packed = props.get(KAFKA_HEADERS)
    headers: list[Header] = []
    if packed is not None:
        try:
            for name, data in json.loads(packed):
                headers.append((str(name), None if data is None else base64.b64decode(data)))
        except (ValueError, TypeError, binascii.Error):
            headers = [(KAFKA_HEADERS, packed.encode())]  # not ours: handed over as it is
    else:
        for name, text in props.items():
            if name not in SYSTEM_PROPERTY_NAMES and not name.startswith(KAFKA_PREFIX):
                headers.append((name, text.encode()))
        tag = props.get(PROPERTY_TAGS)
        if tag:
            headers.append((PROPERTY_TAGS, tag.encode()))
    return key, value, headers
