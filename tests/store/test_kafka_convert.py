"""The Kafka record <-> stored message mapping (store/codec/kafka_records.py): what a RocketMQ
consumer sees of a Kafka record, and that everything a Kafka record carries comes back as it
was. Records are the Kafka front end's ``records.Record`` values, as its handlers pass them."""

from __future__ import annotations

import json

import pytest
from wharf.broker.frontends.kafka.records import Record
from wharf.store.codec.kafka_records import (
    KAFKA_HEADERS,
    KAFKA_KEY,
    KAFKA_VALUE,
    MAX_HEADERS_BYTES,
    record_to_message,
    to_record_fields,
)
from wharf.store.codec.properties import SYSTEM_PROPERTY_NAMES
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage


def stored(message: MessageInput) -> StoredMessage:
    return StoredMessage(
        topic="t",
        queue_id=0,
        queue_offset=0,
        commit_log_offset=0,
        store_size=0,
        body=message.body,
        properties=dict(message.properties),
        flag=0,
        sys_flag=0,
        body_crc=0,
        born_timestamp=message.born_timestamp,
        born_host="127.0.0.1:1",
        store_timestamp=99,
        store_host="127.0.0.1:2",
        reconsume_times=0,
        prepared_transaction_offset=0,
    )


def round_trip(record: Record) -> tuple[MessageInput, tuple]:
    message = record_to_message(record, "127.0.0.1:5", lambda: "UNIQ")
    return message, to_record_fields(stored(message))


def test_plain_record_maps_to_keys_and_user_properties() -> None:
    record = Record(0, 1_700, b"order-7", b"body", [("trace", b"abc"), ("region", b"eu")])
    message, back = round_trip(record)
    assert message.body == b"body" and message.born_timestamp == 1_700
    assert message.properties == {
        "UNIQ_KEY": "UNIQ",
        "KEYS": "order-7",
        "trace": "abc",
        "region": "eu",
    }
    assert back == (b"order-7", b"body", [("trace", b"abc"), ("region", b"eu")])


@pytest.mark.parametrize("key", [b"two words", b"\xff\x00bin", b"", b"a\x01b"])
def test_keys_that_keys_cannot_hold_go_base64(key: bytes) -> None:
    message, back = round_trip(Record(0, 1, key, b"v", []))
    assert "KEYS" not in message.properties and KAFKA_KEY in message.properties
    assert back[0] == key


@pytest.mark.parametrize(
    "headers",
    [
        [("bin", b"\x00\xff")],
        [("dup", b"1"), ("dup", b"2")],
        [("null", None)],
        [("KEYS", b"not-the-key")],  # a broker property name
        [("__KAFKA_KEY", b"x")],
        [("sep", b"a\x02b")],
        [("ok", b"text"), ("bin", b"\x80")],  # one odd header packs them all
    ],
)
def test_headers_that_properties_cannot_hold_are_packed_in_order(headers: list) -> None:
    message, back = round_trip(Record(0, 1, b"k", b"v", headers))
    assert KAFKA_HEADERS in message.properties
    assert json.loads(message.properties[KAFKA_HEADERS])  # JSON, no separators
    assert "\x01" not in message.properties[KAFKA_HEADERS]
    assert back[2] == headers
    assert message.properties.get("KEYS") == "k"


def test_null_and_empty_values_and_keys() -> None:
    tomb, back = round_trip(Record(0, 1, None, None, []))
    assert tomb.body == b"\x00" and tomb.properties[KAFKA_VALUE] == "null"
    assert back[:2] == (None, None)
    empty, back = round_trip(Record(0, 1, None, b"", []))
    assert empty.properties[KAFKA_VALUE] == "empty" and back[1] == b""
    plain, back = round_trip(Record(0, 1, None, b"\x00", []))
    assert KAFKA_VALUE not in plain.properties and back[1] == b"\x00"  # a real NUL body


def test_no_timestamp_means_store_time() -> None:
    message, _ = round_trip(Record(0, -1, None, b"v", []))
    assert message.born_timestamp == 0


def test_a_rocketmq_message_as_a_kafka_record() -> None:
    message = MessageInput(
        body=b"hello",
        properties={"UNIQ_KEY": "id", "KEYS": "a b", "TAGS": "paid", "color": "red", "DELAY": "3"},
    )
    key, value, headers = to_record_fields(stored(message))
    assert (key, value) == (b"a b", b"hello")
    assert headers == [("color", b"red"), ("TAGS", b"paid")]  # broker properties stay out


def test_headers_too_large_to_store_are_a_store_error() -> None:
    # Packed headers over 32 KiB could not fit the record's property section: refused with the
    # store's InvalidMessageError (the Kafka front end answers it INVALID_RECORD, code 87).
    big = [("bin", b"\xff" * (MAX_HEADERS_BYTES * 3 // 4))]
    with pytest.raises(InvalidMessageError, match=r"headers take .* the limit is 32768"):
        record_to_message(Record(0, 1, None, b"v", big), "127.0.0.1:5", lambda: "UNIQ")


def test_system_property_names_are_the_codec_property_constants() -> None:
    assert {
        "KEYS",
        "TAGS",
        "UNIQ_KEY",
        "DELAY",
        "TRAN_MSG",
        "__SHARDINGKEY",
    } <= SYSTEM_PROPERTY_NAMES
    # Kafka's own names and the separator are not system properties (headers keep them apart).
    assert not {KAFKA_KEY, KAFKA_VALUE, KAFKA_HEADERS, "\x02"} & SYSTEM_PROPERTY_NAMES
