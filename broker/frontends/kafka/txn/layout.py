"""The transaction log's record: one TxnMetadata, keyed by its transactional id.

Written to the broker's transaction-log topic on every state change and read back in order at
start and on failover (the last record of an id is its state). The layout, defined here only
(big-endian, Kafka's primitive encodings from ``wire.py``):

    version        int16  (1)
    producer id    int64
    producer epoch int16
    timeout ms     int32
    state          int8   (TxnState: Kafka's numbers)
    start ms       int64  (-1: no transaction open)
    update ms      int64
    partitions     int32 count, then (topic string, queue id int32) each
    groups         int32 count, then group string each
    offsets        int32 count, then (group string, topic string, queue int32, offset int64,
                   metadata nullable string) each

    remote         (version 2 only) int32 count, then (brokerName string, topic string,
                   queue id int32) each: partitions other broker groups lead
    last producer  (version 2 only) int64: the id an open transaction's records carry when
                   an epoch overflow gave its abort a new one (-1: none)

    home           (version 3 only) after each offset's metadata: the brokerName of the
                   group holding the queue, "" for this broker's own

Version 1 is written when neither version-2 field is set (what a broker of before reads), 3
when an offset is another group's queue, 2 otherwise; a reader refuses another with
ValueError rather than guess.

The aborted-runs record (``encode_aborted``): one partition's records of one aborted
transaction, written to the aborted-runs topic once its abort marker is durable, read back at
start to hide them again:

    version        int16  (1)
    topic          string
    queue id       int32
    producer id    int64
    marker offset  int64  (its abort marker's: a replay keeps the runs only if that offset
                          still holds this producer's marker, so a topic deleted and made
                          again does not hide its new records at the old offsets)
    runs           int32 count, then (first offset int64, last offset int64) each

The checkpoint record (``encode_checkpoint``): where a replay of the transaction log may start
(every live id's metadata was written again from there on) and every partition the records
before it named (they may hold markers):

    version        int16  (1)
    from offset    int64  (a queue offset of the transaction log)
    partitions     int32 count, then (topic string, queue id int32) each
"""

from __future__ import annotations

from wharf.broker.frontends.kafka.txn.state import TxnMetadata, TxnState
from wharf.broker.frontends.kafka.wire import Reader, Writer

__all__ = [
    "VERSION",
    "decode",
    "decode_aborted",
    "decode_checkpoint",
    "encode",
    "encode_aborted",
    "encode_checkpoint",
]

VERSION = 1
REMOTE_VERSION = 2  # the metadata record with other groups' partitions
HOME_VERSION = 3  # ... and offsets of other groups' queues


def encode(meta: TxnMetadata) -> bytes:
    w = Writer()
    v3 = any(o[5] for o in meta.offsets)
    v2 = v3 or bool(meta.remote) or meta.last_producer_id >= 0
    w.int16(HOME_VERSION if v3 else REMOTE_VERSION if v2 else VERSION)
    w.int64(meta.producer_id)
    w.int16(meta.producer_epoch)
    w.int32(meta.timeout_ms)
    w.int8(int(meta.state))
    w.int64(meta.start_ms)
    w.int64(meta.update_ms)
    w.int32(len(meta.partitions))
    for topic, queue in sorted(meta.partitions):
        w.nullable_string(topic)
        w.int32(queue)
    w.int32(len(meta.groups))
    for group in sorted(meta.groups):
        w.nullable_string(group)
    w.int32(len(meta.offsets))
    for group, topic, queue, offset, metadata, home in sorted(meta.offsets):
        w.nullable_string(group)
        w.nullable_string(topic)
        w.int32(queue)
        w.int64(offset)
        w.nullable_string(metadata)
        if v3:
            w.nullable_string(home)
    if v2:
        w.int32(len(meta.remote))
        for broker, topic, queue in sorted(meta.remote):
            w.nullable_string(broker)
            w.nullable_string(topic)
            w.int32(queue)
        w.int64(meta.last_producer_id)
    return bytes(w.buf)


def decode(transactional_id: str, data: bytes) -> TxnMetadata:
    r = Reader(data)
    version = r.int16()
    if version not in (VERSION, REMOTE_VERSION, HOME_VERSION):
        raise ValueError(
            f"transaction log record version {version}; this broker reads 1-{HOME_VERSION}"
        )
    producer_id, epoch, timeout = r.int64(), r.int16(), r.int32()
    state = TxnState(r.int8())
    start, update = r.int64(), r.int64()
    partitions = frozenset((r.string(), r.int32()) for _ in range(r.int32()))
    groups = frozenset(r.string() for _ in range(r.int32()))
    offsets = frozenset(
        (r.string(), r.string(), r.int32(), r.int64(), r.nullable_string() or "",
         r.string() if version == HOME_VERSION else "")
        for _ in range(r.int32())
    )  # fmt: skip
    remote: frozenset[tuple[str, str, int]] = frozenset()
    last_pid = -1
    if version >= REMOTE_VERSION:
        remote = frozenset((r.string(), r.string(), r.int32()) for _ in range(r.int32()))
        last_pid = r.int64()
    if r.remaining:
        raise ValueError(f"{r.remaining} bytes after a transaction log record")
    return TxnMetadata(
        transactional_id, producer_id, epoch, timeout, state, partitions, groups, offsets,
        start, update, remote, last_pid,
    )  # fmt: skip


def encode_aborted(
    topic: str, queue_id: int, producer_id: int, marker: int, runs: list[list[int]]
) -> bytes:
    w = Writer()
    w.int16(VERSION)
    w.nullable_string(topic)
    w.int32(queue_id)
    w.int64(producer_id)
    w.int64(marker)
    w.int32(len(runs))
    for first, last in runs:
        w.int64(first)
        w.int64(last)
    return bytes(w.buf)


def decode_aborted(data: bytes) -> tuple[str, int, int, int, list[tuple[int, int]]]:
    """(topic, queue id, producer id, marker offset, runs) of an aborted-runs record."""
    r = Reader(data)
    version = r.int16()
    if version != VERSION:
        raise ValueError(f"aborted-runs record version {version}; this broker reads {VERSION}")
    topic, queue_id, producer_id, marker = r.string(), r.int32(), r.int64(), r.int64()
    runs = [(r.int64(), r.int64()) for _ in range(r.int32())]
    if r.remaining:
        raise ValueError(f"{r.remaining} bytes after an aborted-runs record")
    return topic, queue_id, producer_id, marker, runs


def encode_checkpoint(start: int, partitions: set[tuple[str, int]]) -> bytes:
    w = Writer()
    w.int16(VERSION)
    w.int64(start)
    w.int32(len(partitions))
    for topic, queue in sorted(partitions):
        w.nullable_string(topic)
        w.int32(queue)
    return bytes(w.buf)


def decode_checkpoint(data: bytes) -> tuple[int, set[tuple[str, int]]]:
    """(from offset, partitions) of a checkpoint record."""
    r = Reader(data)
    version = r.int16()
    if version != VERSION:
        raise ValueError(f"checkpoint record version {version}; this broker reads {VERSION}")
    start = r.int64()
    partitions = {(r.string(), r.int32()) for _ in range(r.int32())}
    if r.remaining:
        raise ValueError(f"{r.remaining} bytes after a checkpoint record")
    return start, partitions
