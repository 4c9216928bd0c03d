"""Messages on the wire without a broker: unique ids, compression, to_wire, received views, selectors, status codes, endpoints."""

from __future__ import annotations

import re
import zlib

import grpc
import pytest
from wharf.client.channel import parse_endpoints
from wharf.client.compression import COMPRESS_THRESHOLD, decompress, maybe_compress
from wharf.client.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
    WharfError,
    error_for_status,
    error_for_status_number,
)
from wharf.client.ids import UniqueIdGenerator, new_unique_id
from wharf.client.message import MessageQueue, ReceivedMessage, to_wire
from wharf.client.selector import SelectMessageQueueByHash
from wharf.v1 import common_pb2


# ---------------------------------------------------------------- ids, compression, wire
def test_unique_ids_are_32_hex_and_distinct() -> None:
    ids = {new_unique_id() for _ in range(20_000)}
    assert len(ids) == 20_000
    assert all(re.fullmatch(r"[0-9A-F]{32}", i) for i in ids)


def test_unique_id_embeds_ip_and_pid() -> None:
    gen = UniqueIdGenerator(ip=bytes([10, 1, 2, 3]), pid=0x1234)
    assert gen.next_id().startswith("0A0102031234")


def test_bodies_over_threshold_are_compressed_and_round_trip() -> None:
    body = b"abc" * 4000
    payload, compressed = maybe_compress(body)
    assert compressed and len(payload) < len(body)
    assert zlib.decompress(payload) == body
    small, flag = maybe_compress(b"x" * COMPRESS_THRESHOLD)
    assert not flag and small == b"x" * COMPRESS_THRESHOLD
    assert decompress(payload, True) == body


def test_incompressible_body_is_sent_raw() -> None:
    import os

    body = os.urandom(8192)
    assert maybe_compress(body) == (body, False)


def test_to_wire_sets_unique_id_and_rejects_bad_input() -> None:
    wire = to_wire("héllo", tags="a", keys="k1", properties={"p": "v"})
    assert wire.body == "héllo".encode() and wire.keys == ["k1"] and len(wire.unique_id) == 32
    with pytest.raises(InvalidArgumentError, match="empty"):
        to_wire(b"")
    with pytest.raises(InvalidArgumentError, match="delay_level"):
        to_wire(b"x", delay_level=-1)


def test_received_message_is_decompressed_and_retry_topic_restored() -> None:
    view = common_pb2.MessageView(
        topic="%RETRY%g",
        body=zlib.compress(b"payload" * 1000),
        compressed=True,
        properties={"RETRY_TOPIC": "orders"},
        reconsume_times=2,
    )
    msg = ReceivedMessage.from_view(view)
    assert msg.body == b"payload" * 1000
    assert msg.topic == "orders" and msg.queue_topic == "%RETRY%g"


def queues(n: int) -> list[MessageQueue]:
    return [MessageQueue("t", i) for i in range(n)]


def test_hash_selector_is_stable() -> None:
    sel = SelectMessageQueueByHash()
    picks = {sel.select(queues(8), "order-42").queue_id for _ in range(10)}
    assert len(picks) == 1


# ---------------------------------------------------------------- errors, endpoints
def test_status_codes_map_to_typed_errors_with_message() -> None:
    err = error_for_status(grpc.StatusCode.NOT_FOUND, "topic 'x' not found")
    assert isinstance(err, NotFoundError) and str(err) == "topic 'x' not found"
    assert err.code == "NOT_FOUND" and not err.retriable
    assert isinstance(error_for_status_number(14, "down"), UnavailableError)
    assert error_for_status_number(14, "down").retriable
    assert isinstance(error_for_status_number(4, ""), DeadlineExceededError)
    assert type(error_for_status_number(12, "nope")) is WharfError  # UNIMPLEMENTED
    assert error_for_status_number(12, "nope").code == "UNIMPLEMENTED"


def test_endpoints_are_validated() -> None:
    assert parse_endpoints("127.0.0.1:8081") == "127.0.0.1:8081"
    assert parse_endpoints("http://h:1;h2:2") == "h:1"
    for bad in ("nohost", "h:0", "h:abc", ":80"):
        with pytest.raises(InvalidArgumentError, match="host:port"):
            parse_endpoints(bad)
