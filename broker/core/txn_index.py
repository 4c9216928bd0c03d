"""Kafka transactions as every reader sees them: per queue, the open transactions (the last
stable offset, LSO) and the runs of records of aborted ones, and the markers (a Kafka
transaction's commit or abort record, stored in the queue and taking an offset as Kafka's
control batches do).

A Kafka producer's transactional records are stored in place as they arrive (Kafka's model,
not RocketMQ's half topic): what hides them until their transaction ends is this index.

- ``lso``: the first offset of the oldest open transaction of the queue, else its max offset.
  No reader passes it: Kafka's read_committed fetch answers up to it, every other protocol's
  read (``ReadCore``) stops there too (a RocketMQ consumer never sees a record that might
  still abort).
- ``aborted``: the (first, last) offset runs of aborted transactions' records. Kafka's
  read_uncommitted shows them; every other reader skips them (``visible`` / ``keep_raw``).
- markers: a stored record with the property ``CONTROL`` = ``type:pid:epoch:coordinator
  epoch`` (type 0 abort, 1 commit, Kafka's control record key). Kafka's fetch renders it as a
  control batch; every other reader skips it.

Runs are kept exact (the coordinator notes each transactional batch's offsets as it is
appended, ``append``) rather than as Kafka's (producer id, first offset) ranges, so no reader
has to find out which producer wrote a record inside a range: records are one stored message
each, and only the first of a batch carries the producer's mark. Memory: ~100 bytes a run;
consecutive batches of one transaction merge into one run, so an aborted transaction costs
one run per partition unless other producers interleaved. What fills the index is rebuilt
after a restart by the Kafka coordinator (its log, ``broker/frontends/kafka/txn/``).
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from wharf.store.codec.layout import OFFSET_QUEUE_OFFSET, TOTAL_SIZE
from wharf.store.codec.properties import KAFKA_CONTROL_PROPERTY
from wharf.store.codec.records import record_properties
from wharf.store.model import StoredMessage

__all__ = ["CONTROL", "CONTROL_BYTES", "QueueTxns", "TxnIndex", "marker_value", "parse_marker"]

CONTROL = KAFKA_CONTROL_PROPERTY  # the marker's property (its value: marker_value)
CONTROL_BYTES = CONTROL.encode()  # searched for in raw records: absent = no marker there
_SIZE = TOTAL_SIZE.unpack_from
_QUEUE_OFFSET = struct.Struct(">q").unpack_from
ABORT, COMMIT = 0, 1  # Kafka's control record types


def marker_value(kind: int, producer_id: int, epoch: int, coordinator_epoch: int = 0) -> str:
    return f"{kind}:{producer_id}:{epoch}:{coordinator_epoch}"


def parse_marker(value: str) -> tuple[int, int, int, int]:
    """(type, producer id, epoch, coordinator epoch) of a marker's CONTROL value; a value
    not written by the coordinator (sends refuse the property, ``validate.py``; an older
    record) reads as an abort of no producer (-1) rather than failing a reader."""
    try:
        kind, pid, epoch, coordinator = (int(x) for x in value.split(":"))
    except ValueError:
        return ABORT, -1, -1, 0
    return kind, pid, epoch, coordinator


@dataclass(slots=True)
class QueueTxns:
    """One queue's transactions."""

    # producer id -> the runs [first, last] of its open transaction's records, in order
    open: dict[int, list[list[int]]] = field(default_factory=dict)
    # aborted runs, sorted by first offset, never overlapping: firsts[i]..lasts[i]
    firsts: list[int] = field(default_factory=list)
    lasts: list[int] = field(default_factory=list)

    def hidden(self, offset: int) -> bool:
        i = bisect.bisect_right(self.firsts, offset) - 1
        return i >= 0 and offset <= self.lasts[i]

    def skip(self, offset: int) -> int:
        """The first offset at or after ``offset`` outside every aborted run."""
        i = bisect.bisect_right(self.firsts, offset) - 1
        while 0 <= i < len(self.firsts) and self.firsts[i] <= offset <= self.lasts[i]:
            offset = self.lasts[i] + 1
            i += 1
        return offset

    def aborted_in(self, low: int, high: int) -> bool:
        """Any aborted record in [low, high)?"""
        i = bisect.bisect_right(self.firsts, high - 1) - 1
        return i >= 0 and self.lasts[i] >= low

    def add_aborted(self, first: int, last: int) -> None:
        i = bisect.bisect_left(self.firsts, first)
        if i < len(self.firsts) and self.firsts[i] == first:
            self.lasts[i] = max(self.lasts[i], last)  # a replay of the same run
            return
        self.firsts.insert(i, first)
        self.lasts.insert(i, last)


class TxnIndex:
    """Every queue's transactions (``QueueTxns``), by (topic, queue id)."""

    def __init__(self) -> None:
        self._queues: dict[tuple[str, int], QueueTxns] = {}
        # Being rebuilt while this broker already serves (a replica just promoted: the
        # coordinator replays the replicated logs, ``adopt``): every read answers "nothing
        # new" until then (``visible_reads``): the ~1 s to the replay would otherwise serve
        # a replica's index (its start's), showing open transactions' records and markers.
        self.loading = False

    def __bool__(self) -> bool:  # no queue ever had a transaction: every read as before
        return bool(self._queues) or self.loading

    def queue(self, topic: str, queue_id: int) -> QueueTxns | None:
        return self._queues.get((topic, queue_id))

    def _queue(self, topic: str, queue_id: int) -> QueueTxns:
        key = (topic, queue_id)
        txns = self._queues.get(key)
        if txns is None:
            txns = self._queues[key] = QueueTxns()
        return txns

    # --- writers (the Kafka coordinator and produce) -------------------------------------------
    def touch(self, topic: str, queue_id: int) -> None:
        """The queue holds (or will hold) markers: its reads look for them from now on. A
        queue without an entry never had a Kafka transaction, and is read untouched."""
        self._queue(topic, queue_id)

    def append(self, topic: str, queue_id: int, producer_id: int, first: int, count: int) -> None:
        """A transactional batch of ``count`` records stored at ``first``."""
        runs = self._queue(topic, queue_id).open.setdefault(producer_id, [])
        last = first + count - 1
        if runs and runs[-1][1] + 1 == first:
            runs[-1][1] = last
        else:
            runs.append([first, last])

    def end(self, topic: str, queue_id: int, producer_id: int, commit: bool) -> list[list[int]]:
        """The transaction ended in this queue (its marker durable): its runs, which stay
        hidden from then on when it aborted."""
        txns = self._queues.get((topic, queue_id))
        if txns is None:
            return []
        runs = txns.open.pop(producer_id, [])
        if not commit:
            for first, last in runs:
                txns.add_aborted(first, last)
        return runs

    def restore_aborted(self, topic: str, queue_id: int, runs: Iterable[tuple[int, int]]) -> None:
        txns = self._queue(topic, queue_id)
        for first, last in runs:
            txns.add_aborted(first, last)

    def prune(self, min_offset: Callable[[str, int], int]) -> int:
        """Drop the aborted runs below each queue's log start (retention deleted those
        records); the runs dropped."""
        dropped = 0
        for (topic, queue_id), txns in self._queues.items():
            if not txns.firsts:
                continue
            start = min_offset(topic, queue_id)
            gone = bisect.bisect_left(txns.lasts, start)  # (lasts rise with firsts)
            if gone:
                del txns.firsts[:gone], txns.lasts[:gone]
                dropped += gone
        return dropped

    def clear(self) -> None:
        """Forget everything (a coordinator about to replay its log: a new master)."""
        self._queues.clear()

    def adopt(self, rebuilt: TxnIndex) -> None:
        """Take ``rebuilt``'s queues at once (a replay built them aside: no reader ever sees
        a half-built index) and end ``loading``."""
        self._queues = rebuilt._queues
        self.loading = False

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._queues if k[0] == topic]:
            del self._queues[key]

    # --- readers -------------------------------------------------------------------------------
    def lso(self, topic: str, queue_id: int, max_offset: int) -> int:
        txns = self._queues.get((topic, queue_id))
        if txns is None or not txns.open:
            return max_offset
        return min(max_offset, *(runs[0][0] for runs in txns.open.values() if runs))

    def skip_aborted(self, topic: str, queue_id: int, offset: int) -> int:
        """The first offset at or after ``offset`` that is no aborted record."""
        txns = self._queues.get((topic, queue_id))
        return offset if txns is None else txns.skip(offset)

    def open_transactions(self, topic: str, queue_id: int) -> dict[int, int]:
        """producer id -> first offset of its open transaction's records here."""
        txns = self._queues.get((topic, queue_id))
        if txns is None:
            return {}
        return {pid: runs[0][0] for pid, runs in txns.open.items() if runs}

    def visible(
        self, topic: str, queue_id: int, messages: list[StoredMessage], aborted: bool = False
    ) -> list[StoredMessage]:
        """``messages`` without markers and (unless ``aborted``) aborted records."""
        txns = self._queues.get((topic, queue_id))
        if txns is None:
            return messages
        return [
            m
            for m in messages
            if CONTROL not in m.properties and (aborted or not txns.hidden(m.queue_offset))
        ]

    def split_raw(
        self, topic: str, queue_id: int, records: bytes, count: int, aborted: bool = False
    ) -> list[tuple[bytes, int, bool]] | None:
        """Whole stored records cut around markers and (unless ``aborted``) aborted records:
        [(records, count, is_marker)] in order, markers one each, hidden records left out;
        None when nothing is cut (the common case: one search of the bytes, one bisect)."""
        txns = self._queues.get((topic, queue_id))
        if txns is None:
            return None  # no transaction ever touched the queue: no marker, no run
        marker_at = records.find(CONTROL_BYTES)
        if marker_at < 0 and (not txns.firsts or aborted):
            return None
        if marker_at < 0:
            low = _QUEUE_OFFSET(records, OFFSET_QUEUE_OFFSET)[0]
            if not txns.aborted_in(low, low + count):
                return None
        out: list[tuple[bytes, int, bool]] = []
        start = pos = kept = 0
        for index in range(count):
            while 0 <= marker_at < pos:
                marker_at = records.find(CONTROL_BYTES, marker_at + 1)
            offset = _QUEUE_OFFSET(records, pos + OFFSET_QUEUE_OFFSET)[0]
            if marker_at < 0 and (aborted or not txns.aborted_in(offset, offset + count - index)):
                # No marker and no aborted record from here on: the rest in one piece, not
                # walked (offsets run on: a compacted queue's kept records hold no aborted
                # record, retention/transactions.py)
                kept += count - index
                pos = len(records)
                break
            end = pos + _SIZE(records, pos)[0]
            is_marker = pos <= marker_at < end and _is_marker(records, pos, end)
            hide = not aborted and txns.hidden(offset)
            if is_marker or hide:
                if kept:
                    out.append((records[start:pos], kept, False))
                if is_marker:
                    out.append((records[pos:end], 1, True))
                start, kept = end, 0
            else:
                kept += 1
            pos = end
        if kept:
            out.append((records[start:pos], kept, False))
        return out

    def keep_raw(
        self, topic: str, queue_id: int, records: bytes, count: int
    ) -> tuple[bytes, int] | None:
        """``split_raw`` for readers other than Kafka: the visible records joined, or None
        when every record is visible."""
        parts = self.split_raw(topic, queue_id, records, count)
        if parts is None:
            return None
        kept = [(data, n) for data, n, marker in parts if not marker]
        return b"".join(d for d, _ in kept), sum(n for _, n in kept)


def _is_marker(records: bytes, pos: int, end: int) -> bool:
    """The record at [pos, end) carries the CONTROL property (not merely the bytes in a body)."""
    return CONTROL in record_properties(records[pos:end])
