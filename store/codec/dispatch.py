"""What dispatch (the ReputService) needs from CommitLog records: ``DispatchRequest`` (no body
copy), one record at a time (``decode_dispatch``) or many of one buffer in one loop
(``decode_dispatches``). ``wharf.store.fast.dispatch_columns`` is the columnar twin for big
chunks. Sans-IO, numpy-free.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable

from wharf.store.codec.layout import MESSAGE_MAGIC_CODE, RECORD_HEADER_SIZE
from wharf.store.codec.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from wharf.store.codec.records import (
    _TOPICS,
    ReadableBuffer,
    _cached,
    _decode_properties,
    _layout,
    _topic_text,
    _unpack_header,
)


class DispatchRequest:
    """What the ReputService needs from one record (no body copy)."""

    __slots__ = (
        "born_timestamp",
        "commit_log_offset",
        "keys",
        "prepared_transaction_offset",
        "properties",
        "queue_id",
        "queue_offset",
        "size",
        "store_timestamp",
        "sys_flag",
        "tags",
        "topic",
        "uniq_key",
    )

    def __init__(
        self,
        commit_log_offset: int,
        size: int,
        topic: str,
        queue_id: int,
        queue_offset: int,
        store_timestamp: int,
        sys_flag: int,
        tags: str,
        keys: list[str],
        uniq_key: str,
        properties: dict[str, str],
        prepared_transaction_offset: int,
        born_timestamp: int,
    ) -> None:
        self.commit_log_offset = commit_log_offset
        self.size = size
        self.topic = topic
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.store_timestamp = store_timestamp
        self.sys_flag = sys_flag
        self.tags = tags
        self.keys = keys
        self.uniq_key = uniq_key
        self.properties = properties
        self.prepared_transaction_offset = prepared_transaction_offset
        self.born_timestamp = born_timestamp

    def __repr__(self) -> str:
        return (
            f"DispatchRequest(offset={self.commit_log_offset}, size={self.size}, "
            f"topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset})"
        )


def decode_dispatches(
    buf: ReadableBuffer, positions: Iterable[int], base_offset: int
) -> list[DispatchRequest]:
    """``decode_dispatch`` for many records of one buffer (the ReputService's batch form; same
    result and same CorruptRecordError), in one loop as ``decode_records``: one header unpack,
    the lengths checked with plain arithmetic, the topic from a dict, the properties parsed
    inline. Any record the quick checks do not accept goes through ``decode_dispatch``."""
    if not isinstance(buf, bytes | mmap.mmap):
        buf = bytes(buf)  # slices of these would be unhashable views: cache keys need bytes
    unpack = _unpack_header
    new_request = DispatchRequest
    topics = _TOPICS
    size = len(buf)
    requests: list[DispatchRequest] = []
    append = requests.append
    for pos in positions:
        try:
            (total, magic, _, queue_id, _, queue_offset, _, sys_flag, born_ts, _, store_ts, _, _,
             prepared, body_len) = unpack(buf, pos)  # fmt: skip
        except struct.error:
            append(decode_dispatch(buf, pos, base_offset))  # raises the precise error
            continue
        body_end = pos + RECORD_HEADER_SIZE + body_len
        end = pos + total
        if magic != MESSAGE_MAGIC_CODE or body_len < 0 or end > size or body_end + 3 > end:
            append(decode_dispatch(buf, pos, base_offset))
            continue
        props_pos = body_end + 3 + buf[body_end]
        if props_pos > end or props_pos + (buf[props_pos - 2] << 8 | buf[props_pos - 1]) != end:
            append(decode_dispatch(buf, pos, base_offset))
            continue
        raw_topic = buf[body_end + 1 : props_pos - 2]
        topic = topics.get(raw_topic)  # type: ignore[call-overload]
        if topic is None:
            topic = _cached(topics, bytes(raw_topic), pos, _topic_text)
        properties: dict[str, str] = {}
        if props_pos < end:
            for pair in str(buf[props_pos:end], "utf-8", "replace").split("\x02"):
                if pair:
                    name, _, value = pair.partition("\x01")
                    properties[name] = value
        get = properties.get
        keys_text = get(PROPERTY_KEYS)
        if keys_text:
            keys = keys_text.split(KEY_SEPARATOR)
            if "" in keys:  # doubled or edge separators
                keys = [k for k in keys if k]
        else:
            keys = []
        append(
            new_request(
                base_offset + pos,
                total,
                topic,
                queue_id,
                queue_offset,
                store_ts,
                sys_flag,
                get(PROPERTY_TAGS, ""),
                keys,
                get(PROPERTY_UNIQ_KEY, ""),
                properties,
                prepared,
                born_ts,
            )
        )
    return requests


def decode_dispatch(
    buf: ReadableBuffer, pos: int = 0, base_offset: int | None = None
) -> DispatchRequest:
    """Decode what dispatch needs from the record at ``buf[pos:]`` (no body copy)."""
    fields, topic, props_pos, end = _layout(buf, pos)
    props = _decode_properties(buf, props_pos, end)
    get = props.get
    keys_text = get(PROPERTY_KEYS)
    if keys_text:
        keys = keys_text.split(KEY_SEPARATOR)
        if "" in keys:  # doubled or edge separators
            keys = [k for k in keys if k]
    else:
        keys = []
    return DispatchRequest(
        fields[6] if base_offset is None else base_offset + pos,
        fields[0],
        topic,
        fields[3],
        fields[5],
        fields[10],
        fields[7],
        get(PROPERTY_TAGS, ""),
        keys,
        get(PROPERTY_UNIQ_KEY, ""),
        props,
        fields[13],
        fields[8],
    )
