"""The producer's half of the records fast path: messages -> CommitLog records, and the compact
reply -> one ``SendResult`` per record.

The broker checks and appends producer-encoded records with one copy (see
``wharf.store.codec.send_records``, whose encoder this module uses: the record layout is defined
once, in ``wharf.store.codec.layout``, and shared as RocketMQ shares its MessageDecoder). The
producer does the per-message encoding on its own core, so the broker's event loop does not.
Offset message ids are ``wharf.store.codec.ids``'s (``send_results`` is their compiled twin).

    encoder = RecordEncoder()
    record = encoder.encode("orders", b"hello", unique_id, tags="paid")
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from itertools import accumulate
from typing import Any

from wharf.client.compression import COMPRESS_THRESHOLD
from wharf.client.errors import InvalidArgumentError
from wharf.client.message import SendResult, SendStatus, body_payload
from wharf.store import fast
from wharf.store.codec.ids import format_offset_msg_id, offset_msg_id_prefix
from wharf.store.codec.layout import SYSFLAG_COMPRESSED
from wharf.store.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.codec.records import _crc32
from wharf.store.codec.send_records import encode_record, topic_tail
from wharf.store.errors import InvalidMessageError
from wharf.v1 import messaging_pb2

# The compiled batch encoder (store/fast/_record_encoder.c); None: the Python code does the same.
_compiled = fast.load("_record_encoder")
_encode_bare_records = None if _compiled is None else _compiled.encode_bare_records
_send_results = None if _compiled is None else _compiled.send_results
_column_results = None if _compiled is None else _compiled.column_results

_UNIQ_KEY_NAME = f"{PROPERTY_UNIQ_KEY}\x01"
_STATUS_OF = {status.value: status for status in SendStatus}.get
_new_tuple = tuple.__new__


def _check_text(what: str, text: str) -> str:
    if "\x01" in text or "\x02" in text:
        raise InvalidArgumentError(f"{what} {text!r} contains \\x01 or \\x02 (reserved separators)")
    return text


class RecordEncoder:
    """Encodes messages as records (bodies over ``compress_threshold`` zlib-compressed)."""

    def __init__(self, compress_threshold: int = COMPRESS_THRESHOLD) -> None:
        self.compress_threshold = compress_threshold
        self._tails: dict[str, bytes] = {}

    def tail(self, topic: str) -> bytes:
        """TOPICLENGTH + TOPIC for ``topic`` (validated once, then cached)."""
        tail = self._tails.get(topic)
        if tail is None:
            try:
                tail = topic_tail(topic)
            except InvalidMessageError as exc:
                raise InvalidArgumentError(str(exc)) from None
            if len(self._tails) >= 4096:
                self._tails.clear()
            self._tails[topic] = tail
        return tail

    def encode_bare(self, tail: bytes, body: bytes, unique_id: str) -> bytes:
        """The common high-rate case: a bytes body <= the threshold, no tags/keys/properties."""
        return encode_record(
            tail,
            body,
            f"{_UNIQ_KEY_NAME}{unique_id}\x02".encode(),
            0,
            0,
            int(time.time() * 1000),
        )

    def encode_bare_many(
        self, tail: bytes, bodies: Sequence[bytes], unique_ids: Sequence[str]
    ) -> list[bytes]:
        """``encode_bare`` for many bodies with one born timestamp (send_batch's bulk path):
        compiled when built, ~0.22 instead of ~0.9 us per 1 KiB body."""
        born = int(time.time() * 1000)
        if _encode_bare_records is not None:
            return _encode_bare_records(tail, bodies, unique_ids, born, _crc32)  # type: ignore[no-any-return]
        name = _UNIQ_KEY_NAME
        return [
            encode_record(tail, body, f"{name}{uid}\x02".encode(), 0, 0, born)
            for body, uid in zip(bodies, unique_ids, strict=True)
        ]

    def encode(
        self,
        topic: str,
        body: bytes | str,
        unique_id: str,
        *,
        tags: str | None = None,
        keys: Iterable[str] = (),
        properties: Mapping[str, str] | None = None,
        flag: int = 0,
    ) -> bytes:
        """One record; raises InvalidArgumentError for what the broker would refuse."""
        payload, compressed = body_payload(body, self.compress_threshold)
        sys_flag = SYSFLAG_COMPRESSED if compressed else 0
        parts: list[str] = []
        if properties:
            for name, value in properties.items():
                if not name:
                    raise InvalidArgumentError("property names must not be empty")
                _check_text("property", str(name))
                parts.append(f"{name}\x01{_check_text('property value', str(value))}\x02")
        if tags:
            parts.append(f"{PROPERTY_TAGS}\x01{_check_text('tags', tags)}\x02")
        if keys:
            key_list = (keys,) if isinstance(keys, str) else tuple(keys)
            if key_list:
                joined = KEY_SEPARATOR.join(_check_text("key", k) for k in key_list)
                parts.append(f"{PROPERTY_KEYS}\x01{joined}\x02")
        parts.append(f"{_UNIQ_KEY_NAME}{unique_id}\x02")
        if not 0 <= flag <= 0x7FFFFFFF:
            raise InvalidArgumentError(f"flag must be a non-negative int32, got {flag}")
        try:
            return encode_record(
                self.tail(topic),
                payload,
                "".join(parts).encode(),
                flag,
                sys_flag,
                int(time.time() * 1000),
            )
        except InvalidMessageError as exc:
            raise InvalidArgumentError(str(exc)) from None


def _offset_id_prefix(store_host: str) -> str:
    """The offset message id prefix of ``store_host``; zeros for a host that is not
    ``ipv4:port`` (the ids still name the offsets)."""
    try:
        return offset_msg_id_prefix(store_host)
    except InvalidMessageError:
        return "0" * 16


def results_of(
    response: messaging_pb2.SendMessageResponse,
    topic: str,
    records: Sequence[bytes],
    unique_ids: Sequence[str],
) -> list[SendResult]:
    """One SendResult per record from a compact reply (see SendMessageResponse in the proto)."""
    if response.count != len(records):
        raise InvalidArgumentError(
            f"broker stored {response.count} records of the {len(records)} sent"
        )
    return results_at(
        response.status, response.store_host, response.queue_id, response.first_queue_offset,
        response.first_commit_log_offset, topic, records, unique_ids,
    )  # fmt: skip


def results_at(
    status_number: int,
    store_host: str,
    queue_id: int,
    first: int,
    first_commit_log_offset: int,
    topic: str,
    records: Sequence[bytes],
    unique_ids: Sequence[str],
) -> list[SendResult]:
    """One SendResult per record of a batch stored from ``first`` in ``queue_id`` and from
    ``first_commit_log_offset`` in the commit log (a compact reply's, or a batch's columns)."""
    return results_maker(status_number, store_host)(
        queue_id, first, first_commit_log_offset, topic, records, unique_ids
    )


ResultsMaker = Callable[[int, int, int, str, Sequence[bytes], Sequence[str]], list[SendResult]]


def results_maker(status_number: int, store_host: str) -> ResultsMaker:
    """``results_at`` with the reply's status and store host resolved once: (queue_id, first,
    first_commit_log_offset, topic, records, unique_ids) -> the batch's SendResults (a reply
    in columns answers 32 batches with one status and host: ~1 us a batch less)."""
    status = _STATUS_OF(status_number, SendStatus.UNKNOWN)
    prefix = _offset_id_prefix(store_host)
    if _send_results is not None:
        compiled = _send_results

        def make(
            queue_id: int,
            first: int,
            first_commit_log_offset: int,
            topic: str,
            records: Sequence[bytes],
            unique_ids: Sequence[str],
        ) -> list[SendResult]:
            return compiled(  # type: ignore[no-any-return]
                SendResult, status, unique_ids, records, first_commit_log_offset, prefix,
                queue_id, first, topic,
            )  # fmt: skip

        return make
    offset_id = partial(format_offset_msg_id, prefix)
    new = _new_tuple

    def make_python(
        queue_id: int,
        first: int,
        first_commit_log_offset: int,
        topic: str,
        records: Sequence[bytes],
        unique_ids: Sequence[str],
    ) -> list[SendResult]:
        # Record i starts where records 0..i-1 end: the producer knows their sizes.
        offsets = accumulate(map(len, records), initial=first_commit_log_offset)
        return [
            new(SendResult, (status, uid, offset_id(offset), queue_id, queue_offset, topic))
            for uid, offset, queue_offset in zip(
                unique_ids, offsets, range(first, first + len(records)), strict=False
            )
        ]

    return make_python


def column_results(
    status_number: int,
    store_host: str,
    queue_ids: list[int],
    firsts: list[int],
    offsets: list[int],
    topics: list[str],
    batches: list[list[Any]],
) -> list[list[SendResult]]:
    """``results_at`` of every batch of a reply in columns, none failed: batch i's items,
    (record, unique id, ...) tuples, stored from ``firsts[i]`` in ``queue_ids[i]`` and from
    ``offsets[i]`` in the commit log. Compiled, one call for the reply: at 256 topics a call
    and two item lists a batch were ~0.6 us of Python a 16-message batch."""
    if _column_results is not None:
        status = _STATUS_OF(status_number, SendStatus.UNKNOWN)
        return _column_results(  # type: ignore[no-any-return]
            SendResult, status, _offset_id_prefix(store_host), queue_ids, firsts, offsets,
            topics, batches,
        )  # fmt: skip
    make = results_maker(status_number, store_host)
    return [
        make(queue_id, first, offset, topic, [i[0] for i in items], [i[1] for i in items])
        for queue_id, first, offset, topic, items in zip(
            queue_ids, firsts, offsets, topics, batches, strict=True
        )
    ]
