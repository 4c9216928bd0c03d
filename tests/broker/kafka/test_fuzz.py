"""Fuzz the Kafka front end (hypothesis): random bytes through the codec and the record batch
decoder raise only their own errors; random well-formed requests of every API and version
(built from the very tables of ``apis.py``), and garbage frames, against a live broker in a
thread: each is answered or its connection closed, and afterwards the broker still produces
and fetches."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from wharf.broker.frontends.kafka.apis import APIS
from wharf.broker.frontends.kafka.codec import (
    decode_request,
    decode_response,
    encode_request,
    parse_header,
)
from wharf.broker.frontends.kafka.errors import KafkaError
from wharf.broker.frontends.kafka.records import Record, decode_batches, encode_batch
from wharf.broker.frontends.kafka.schema import (
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    NBYTES,
    NSTRING,
    RECORDS,
    STRING,
    Array,
    Struct,
    Type,
)
from wharf.broker.frontends.kafka.wire import DecodeError

from tests.broker.kafka.kafka_helpers import SMALL_STORE, KafkaUnderTest, attach_kafka
from tests.inproc import InProcBroker, start_inproc

NAMES = st.sampled_from(["", "t", "fuzz", "g", "a.b", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"])
TEXT = st.one_of(NAMES, st.text(max_size=30))
RECORD_BYTES = st.one_of(
    st.none(),
    st.binary(max_size=200),
    st.builds(
        lambda values: encode_batch([Record(i, 1, None, v, []) for i, v in enumerate(values)]),
        st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=3),
    ),
)
SCALARS: dict[int, Any] = {
    id(INT8): st.integers(-(2**7), 2**7 - 1),
    id(INT16): st.integers(-(2**15), 2**15 - 1),
    id(INT32): st.one_of(st.integers(-3, 40), st.integers(-(2**31), 2**31 - 1)),
    id(INT64): st.one_of(st.integers(-3, 100), st.integers(-(2**63), 2**63 - 1)),
    id(BOOL): st.booleans(),
    id(STRING): TEXT,
    id(NSTRING): st.one_of(st.none(), TEXT),
    id(BYTES): st.binary(max_size=100),
    id(NBYTES): st.one_of(st.none(), st.binary(max_size=100)),
    id(RECORDS): RECORD_BYTES,
}


def strategy(kind: Type, depth: int = 0) -> st.SearchStrategy[Any]:
    if isinstance(kind, Struct):
        return st.fixed_dictionaries({f.name: strategy(f.type, depth + 1) for f in kind.fields})
    if isinstance(kind, Array):
        inner = st.lists(strategy(kind.of, depth + 1), max_size=3 if depth < 3 else 0)
        return st.one_of(st.none(), inner) if kind.nullable else inner
    return SCALARS[id(kind)]


REQUESTS = st.sampled_from(
    [(api, v) for api in APIS.values() for v in range(api.min_version, api.max_version + 1)]
).flatmap(lambda av: st.tuples(st.just(av[0]), st.just(av[1]), strategy(av[0].request)))


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_bytes_never_escape_the_codec(data: bytes) -> None:
    try:
        header, reader = parse_header(data)
    except DecodeError:
        return
    api = APIS.get(header.api_key)
    if api is None or not api.min_version <= header.api_version <= api.max_version:
        return
    with contextlib.suppress(DecodeError):
        decode_request(api, header, reader)


@given(st.binary(max_size=300), st.integers(0, 60))
@settings(max_examples=300, deadline=None)
def test_random_bytes_never_escape_the_batch_decoder(data: bytes, cut: int) -> None:
    valid = encode_batch([Record(0, 1, b"k", b"v", [("h", None)])])
    for candidate in (data, valid[:cut] + data, valid + data):
        with contextlib.suppress(KafkaError):
            decode_batches(candidate)


@given(REQUESTS)
@settings(max_examples=200, deadline=None)
def test_every_request_round_trips_the_tables(request: tuple[Any, int, dict[str, Any]]) -> None:
    api, version, body = request
    frame = encode_request(api, version, 1, body)
    header, reader = parse_header(frame[4:])
    decoded = decode_request(api, header, reader)
    assert reader.remaining == 0
    again = encode_request(api, version, 1, decoded)
    assert again == frame


# --- against a live broker ------------------------------------------------------------------


class LiveBroker:
    """A broker with the Kafka part, in its own thread and event loop."""

    def __init__(self, root: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker: InProcBroker = self.run(start_inproc(root, **SMALL_STORE))
        self.kafka: KafkaUnderTest = self.run(attach_kafka(self.broker.controller))

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self.run(self.kafka.close())
        self.run(self.broker.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    broker = LiveBroker(tmp_path_factory.mktemp("kafka-fuzz"))
    yield broker
    broker.close()


def _exchange(port: int, frames: list[bytes], expect: int | None = None) -> list[bytes]:
    """Send the frames, read what comes back until ``expect`` replies (default: one a frame)
    came or the broker closed the connection."""
    expect = len(frames) if expect is None else expect
    replies: list[bytes] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"".join(frames))
        buf = b""
        while len(replies) < expect:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 4:
                (size,) = struct.unpack_from(">i", buf)
                if len(buf) < 4 + size:
                    break
                replies.append(buf[4 : 4 + size])
                buf = buf[4 + size :]
    return replies


def _alive(live: LiveBroker) -> None:
    """A produce and a fetch of it still work on a fresh connection."""
    api_p, api_f = APIS[0], APIS[1]
    produce = encode_request(
        api_p, 7, 1,
        {"acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "sentinel", "partition_data": [
            {"index": 0, "records": encode_batch([Record(0, 1, b"k", b"alive", [])])}]}]},
    )  # fmt: skip
    (reply,) = _exchange(live.kafka.port, [produce])
    row = decode_response(api_p, 7, reply)[1]["responses"][0]["partition_responses"][0]
    assert row["error_code"] == 0
    fetch = encode_request(
        api_f, 11, 2,
        {"max_wait_ms": 1000, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [{"topic": "sentinel",
         "partitions": [{"partition": 0, "fetch_offset": row["base_offset"],
                         "partition_max_bytes": 1 << 20}]}]},
    )  # fmt: skip
    (reply,) = _exchange(live.kafka.port, [fetch])
    part = decode_response(api_f, 11, reply)[1]["responses"][0]["partitions"][0]
    assert part["error_code"] == 0 and b"alive" in part["records"]


@given(st.lists(REQUESTS, min_size=1, max_size=4))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_random_requests_are_answered_in_order(
    live: LiveBroker, requests: list[tuple[Any, int, dict[str, Any]]]
) -> None:
    frames = []
    for i, (api, version, body) in enumerate(requests):
        if api.key == 1:
            body = {**body, "max_wait_ms": min(max(body["max_wait_ms"], 0), 50)}
        frames.append(encode_request(api, version, 100 + i, body))
    expected = [
        (api, version, 100 + i)
        for i, (api, version, body) in enumerate(requests)
        if not (api.key == 0 and body["acks"] == 0)
    ]
    replies = _exchange(live.kafka.port, frames, len(expected))
    # answered in order (each decodes with its request's schema), or the connection closed
    for reply, (api, version, correlation) in zip(replies, expected, strict=False):
        got, _ = decode_response(api, version, reply)
        assert got == correlation


@given(st.lists(st.binary(max_size=80), min_size=1, max_size=3))
@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_garbage_frames(live: LiveBroker, payloads: list[bytes]) -> None:
    frames = [struct.pack(">i", len(p)) + p for p in payloads]
    _exchange(live.kafka.port, frames)


def test_broker_still_serves_after_the_fuzzing(live: LiveBroker) -> None:
    _alive(live)
    server = live.kafka.part.server
    assert server is not None
    assert server.failures == 0  # no handler raised: every request got its answer
