"""The idempotent producer: producer ids (InitProducerId) and, per (producer id, partition), the
sequence numbers of the last ``WINDOW`` batches appended, so a retried batch is stored once.

Per batch (``check`` before the append, ``remember`` right after it, both in the
connection's append order): an epoch older than the one seen is INVALID_PRODUCER_EPOCH; a
batch equal to one of the last 5 (same first and last sequence) is a duplicate, answered with
the base offset it got the first time and not stored again; otherwise its first sequence must
follow the last one (mod 2**31), else OUT_OF_ORDER_SEQUENCE_NUMBER. A partition without state
for the producer takes any first sequence (its state may predate the window: Kafka 2.5+ does
the same after KIP-360 rather than fail the producer). OUT_OF_ORDER_SEQUENCE_NUMBER answers
are counted by cause (``out_of_order``: "ahead" of the expected sequence, a gap; "behind" it)
and logged at most one line a minute per cause, with the count since the last line. A batch
the broker refused before its append for a passing reason (``refused``: the store busy, the
master's lease run out, too few in-sync replicas, a full disk) makes the producer's later
batches on that partition refused alike (REQUEST_TIMED_OUT) until it comes again, not
OUT_OF_ORDER_SEQUENCE_NUMBER for the gap it left: librdkafka bumps its epoch on that and
re-sends what it had no answer for under new sequences, on every partition, so a batch stored
whose acknowledgement failed is stored a second time (the fault campaign: a master resumed
from a 2 s SIGSTOP refused the first buffered request, fenced, and took the next one once a
lease renewal had answered in between).

A duplicate is answered as its first copy would have been, no sooner: ``Seen.written`` keeps
the first append's durability handle until its wait came back PUT_OK, and the retry waits on
it again (disk, in-sync replicas, the master's lease). Answered at once instead, a retry of a
batch whose first answer was NOT_ENOUGH_REPLICAS_AFTER_APPEND (its replica cut off) would get
that offset from a master about to lose its lease, and the next master would give the offset
to another record (the fault campaign lost three acks=all records that way in one run). A
window rebuilt from the log holds dispatched records only: durable (a SYNC_MASTER dispatches
what its in-sync replicas hold, a SYNC_FLUSH store what is on disk).

Replicas of one group (controller mode: brokerId 1, 2 ..., any of them master after a
failover) hand out disjoint ids: broker id ``b`` only ids with ``id % SLOTS == b % SLOTS``. Each
replica keeps its own ``kafkaProducerIds.json`` (not replicated): were both to start at id 0,
a producer given id 0 by one and another given id 0 by the next master would be one producer
to the broker (a batch of one taken for the other's duplicate), and the master would answer
UNKNOWN_PRODUCER_ID, for ever, to a producer whose id a replica had handed out. An id
of another slot is never "unknown": its window is rebuilt from the log as for an id of an
earlier run (what a new master needs for the producers its predecessor served).

Which windows are rebuilt: every one this process may not have seen whole, i.e. all but those
of ids it handed out itself while leading (``leading()``: the partitions' leader, promoted;
a master that loses its term restarts, so "while leading" means "since"). An id this broker
handed out as a replica was used at the master of that time: a window of it missing here is
a window to rebuild, not a fresh producer: taken as empty after a failover, the producer's
retry of a batch the old master had replicated would be stored twice.

Broker groups of one cluster hand out disjoint ids too: with NameServers (``group_base``) a
group's ids are ``group_base(brokerName) + n``, the group's name hashed into bits 40-60
(``crc32 mod 2^20 + 1``: a collision ~n^2 / 2^21, as node ids). Were every group's master to
hand out 0, 1, 2 ..., a transaction of broker-a's producer 7 writing to broker-b's partitions
would be broker-b's producer 7 too (one index entry, one sequence window), and an id past
broker-b's own counter UNKNOWN_PRODUCER_ID there. ``own(pid)``: an id of this group
(a transactional batch of another group's id belongs to a transaction another coordinator
ends, txn/partition_leader.py).

Surviving a restart, split in two:
- producer ids never repeat: ``config/kafkaProducerIds.json`` holds the end of the block of
  ``ID_BLOCK`` ids handed out from; a new block is written (tmp + fsync + rename) BEFORE its
  first id is answered, and a restart starts at the next block;
- sequences are rebuilt from the log, not persisted: the first record of every idempotent
  batch carries ``__KAFKA_PRODUCER=pid:epoch:base_sequence:count`` (convert.py), stored with
  the same durability as the records themselves (a file written after the ack could lag the
  log after a crash, a file written before could claim a batch the log lost). For a producer
  id from an earlier run (below this run's first id) the first batch on a partition reads the
  partition's last ``SCAN`` messages back once to find its window (~2048 messages: a few ms,
  once per producer and partition after a restart).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wharf.broker.frontends.kafka.errors import Code, KafkaError
from wharf.broker.frontends.kafka.records import Batch
from wharf.broker.meta.persist import load_json_blocking, write_text_atomic_blocking
from wharf.store import Written
from wharf.store.codec.kafka_records import KAFKA_PRODUCER
from wharf.store.model import StoredMessage

__all__ = ["ProducerTable", "Seen", "group_base", "producer_mark"]

log = logging.getLogger("broker.kafka")

WINDOW = 5  # batches remembered per producer and partition (Kafka's, max.in.flight <= 5)
# (producer, partition) windows kept, least recently used dropped beyond: every kafka-python
# producer instance is idempotent with a new id, so ids churn (~200 bytes a window). A dropped
# window takes any next sequence, as a partition without state does.
MAX_WINDOWS = 100_000
# ids reserved by one write of the file: 1,000 of this broker's slot
ID_BLOCK = 1000 * 1024
SLOTS = 1024  # broker ids per group, as node ids count them (cluster.NODE_SPAN)
SCAN = 2048
FILE_NAME = "kafkaProducerIds.json"
SEQ_MOD = 1 << 31
OOO_LOG_EVERY_S = 60.0  # one OUT_OF_ORDER_SEQUENCE_NUMBER line a minute per cause, at most
GROUP_SPAN = 1 << 40  # ids of one group: a new block a restart, ~10^6 restarts
GROUP_BUCKETS = 1 << 20  # (2^20 + 1) * 2^40 < 2^63: ids stay positive int64


def group_base(broker_name: str) -> int:
    """The first producer id of broker group ``broker_name`` in a cluster."""
    return (zlib.crc32(broker_name.encode()) % GROUP_BUCKETS + 1) * GROUP_SPAN


# (topic, queue id, offset, count) -> the stored messages there (the store's read)
ReadMessages = Callable[[str, int, int, int], list[StoredMessage]]
# (topic, queue id) -> (min offset, max offset)
QueueRange = Callable[[str, int], tuple[int, int]]


class Seen:
    """One batch of a window: its sequences, where it went, and until it is known durable
    the first append's handle (``written``; None once its wait came back PUT_OK, or for a
    batch read back from the log)."""

    __slots__ = ("base_offset", "first", "last", "written")

    def __init__(self, first: int, last: int, base_offset: int, written: Written | None) -> None:
        self.first, self.last, self.base_offset, self.written = first, last, base_offset, written


@dataclass(slots=True)
class _Partition:
    epoch: int
    # the last WINDOW batches
    batches: collections.deque[Seen] = field(
        default_factory=lambda: collections.deque(maxlen=WINDOW)
    )
    # the first sequence of a batch refused before its append (nothing written, ``refused``):
    # later batches are refused alike until it comes again
    refused: int | None = None


def producer_mark(batch: Batch) -> str:
    return f"{batch.producer_id}:{batch.producer_epoch}:{batch.base_sequence}:{batch.count}"


class ProducerTable:
    def __init__(
        self,
        config_dir: Path,
        read: ReadMessages,
        queue_range: QueueRange,
        broker_id: int = 0,
        leading: Callable[[], bool] = lambda: True,
        base: int = 0,
    ) -> None:
        self.path = config_dir / FILE_NAME
        self.slot = broker_id % SLOTS
        self.base = base  # this group's first id (group_base; 0 without NameServers)
        self._read = read
        self._range = queue_range
        self._leading = leading
        self._next = 0
        self._reserved = 0
        self.first_of_run = 0
        # The first id handed out while leading (None: none yet): windows of this slot's ids
        # from it on were all built here; any other id's missing window is rebuilt.
        self.fresh_from: int | None = None
        self._partitions: collections.OrderedDict[tuple[int, str, int], _Partition] = (
            collections.OrderedDict()
        )
        self._lock = asyncio.Lock()
        # OUT_OF_ORDER_SEQUENCE_NUMBER answers by cause ("ahead", "behind"), and the log's
        # rate limit: when each cause was last logged, answers of it not logged since
        self.out_of_order: collections.Counter[str] = collections.Counter()
        self._ooo_logged: dict[str, float] = {}
        self._ooo_unlogged: collections.Counter[str] = collections.Counter()

    def load_blocking(self) -> None:
        data = load_json_blocking(self.path) or {}
        start = int(data.get("reservedUntil", 0))
        self._next = self._reserved = self.first_of_run = start

    async def allocate(self) -> int:
        """A producer id never handed out before, on this broker, across restarts."""
        async with self._lock:
            self._next += (self.slot - self._next) % SLOTS  # the next id of this broker's slot
            if self._next >= self._reserved:
                reserved = self._next + ID_BLOCK
                text = json.dumps({"reservedUntil": reserved})
                await asyncio.to_thread(self._write_blocking, text)
                self._reserved = reserved
            pid = self.base + self._next
            self._next += 1
            if self.fresh_from is None and self._leading():
                self.fresh_from = pid
            return pid

    def own(self, pid: int) -> bool:
        """Was ``pid`` handed out by this broker group (any of its replicas)?"""
        return self.base <= pid < self.base + GROUP_SPAN

    def _write_blocking(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic_blocking(self.path, text)

    # --- sequences ----------------------------------------------------------------------------
    def check(self, topic: str, queue_id: int, batch: Batch) -> Seen | None:
        """The earlier copy when ``batch`` is a duplicate, None when it is new and in
        sequence; KafkaError otherwise."""
        pid, epoch = batch.producer_id, batch.producer_epoch
        if pid < 0:
            return None
        if self.own(pid) and pid - self.base >= self._next and pid % SLOTS == self.slot:
            raise KafkaError(Code.UNKNOWN_PRODUCER_ID, f"producer id {pid} was never assigned")
        state = self._state(pid, topic, queue_id)
        if state is None:
            return None
        if epoch < state.epoch:
            raise KafkaError(
                Code.INVALID_PRODUCER_EPOCH,
                f"producer {pid} epoch {epoch} is older than {state.epoch}",
            )
        if epoch > state.epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        for seen in state.batches:
            if seen.first == first and seen.last == last:
                return seen
        if state.refused is not None and first != state.refused:
            raise KafkaError(
                Code.REQUEST_TIMED_OUT,
                f"producer {pid} partition {queue_id} of {topic!r}: sequence {first} follows "
                f"sequence {state.refused}, refused before it was written (broker busy): "
                "retry them in order",
            )
        if not state.batches:
            return None
        expected = (state.batches[-1].last + 1) % SEQ_MOD
        if first != expected:
            self._out_of_order(pid, epoch, topic, queue_id, first, last, expected)
            raise KafkaError(
                Code.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} partition {queue_id} of {topic!r}: sequence {first}, "
                f"expected {expected}",
            )
        return None

    def _out_of_order(
        self, pid: int, epoch: int, topic: str, queue_id: int, first: int, last: int, expected: int
    ) -> None:
        """Count an OUT_OF_ORDER_SEQUENCE_NUMBER answer and log it, at most one line a minute
        per cause: a client re-sending out of order (or a broker refusal it did not expect)
        answers it for every batch it has in flight, hundreds a second."""
        # ahead: batches between the last stored and this one are missing (an earlier request
        # refused or lost); behind: an older batch than the window holds, not a duplicate
        cause = "ahead" if (first - expected) % SEQ_MOD < SEQ_MOD // 2 else "behind"
        self.out_of_order[cause] += 1
        now = time.monotonic()
        last_logged = self._ooo_logged.get(cause)
        if last_logged is not None and now - last_logged < OOO_LOG_EVERY_S:
            self._ooo_unlogged[cause] += 1
            return
        self._ooo_logged[cause] = now
        count = self._ooo_unlogged.pop(cause, 0) + 1
        log.warning(
            "kafka: OUT_OF_ORDER_SEQUENCE_NUMBER (%s): producer %d epoch %d on %s:%d sent "
            "sequence %d..%d, expected %d; %d such answer(s) since the last line (%d in all; "
            "at most one line a minute per cause)",
            cause, pid, epoch, topic, queue_id, first, last, expected, count,
            self.out_of_order[cause],
        )  # fmt: skip

    def refused(self, topic: str, queue_id: int, batch: Batch) -> None:
        """Note ``batch`` refused before its append for a passing reason (the store busy, not
        writable for a while: fenced, too few in-sync replicas): nothing of it written. Its producer's later batches on the partition, pipelined
        behind it, are then refused alike (REQUEST_TIMED_OUT) until it is sent again, not
        OUT_OF_ORDER_SEQUENCE_NUMBER for the gap it left: librdkafka takes that for a
        desynchronised sequence and bumps its epoch. A batch that is not the next expected
        one changes nothing (its own check answers it)."""
        pid, epoch, first = batch.producer_id, batch.producer_epoch, batch.base_sequence
        if pid < 0:
            return
        state = self._state(pid, topic, queue_id)
        if state is None or epoch > state.epoch:
            key = (pid, topic, queue_id)
            self._partitions[key] = _Partition(epoch, refused=first)
            self._partitions.move_to_end(key)
            if len(self._partitions) > MAX_WINDOWS:
                self._partitions.popitem(last=False)
            return
        if epoch < state.epoch or state.refused is not None:
            return
        if not state.batches or first == (state.batches[-1].last + 1) % SEQ_MOD:
            state.refused = first

    def remember(
        self, topic: str, queue_id: int, batch: Batch, base_offset: int, written: Written | None
    ) -> Seen | None:
        """Note an appended batch (``written``: its durability handle); its entry, None for a
        producer without an id."""
        pid = batch.producer_id
        if pid < 0:
            return None
        key = (pid, topic, queue_id)
        partitions = self._partitions
        state = partitions.get(key)
        if state is None or batch.producer_epoch > state.epoch:
            state = partitions[key] = _Partition(batch.producer_epoch)
            if len(partitions) > MAX_WINDOWS:
                partitions.popitem(last=False)
        partitions.move_to_end(key)
        state.refused = None  # appended: it was the refused batch's retry, if there was one
        seen = Seen(batch.base_sequence, batch.last_sequence, base_offset, written)
        state.batches.append(seen)
        return seen

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._partitions if k[1] == topic]:
            del self._partitions[key]

    def _state(self, pid: int, topic: str, queue_id: int) -> _Partition | None:
        key = (pid, topic, queue_id)
        state = self._partitions.get(key)
        fresh = (
            self.fresh_from is not None
            and self.own(pid)
            and pid >= self.fresh_from
            and pid % SLOTS == self.slot
        )
        if state is None and not fresh:
            state = self._rebuild(pid, topic, queue_id)
            if state is not None:
                self._partitions[key] = state
        return state

    def _rebuild(self, pid: int, topic: str, queue_id: int) -> _Partition | None:
        """The window of ``pid`` on a partition, from the marks on its last SCAN messages."""
        low, high = self._range(topic, queue_id)
        offset = max(low, high - SCAN)
        state: _Partition | None = None
        prefix = f"{pid}:"
        while offset < high:
            messages = self._read(topic, queue_id, offset, min(512, high - offset))
            if not messages:
                break
            for message in messages:
                mark = message.properties.get(KAFKA_PRODUCER)
                if mark is None or not mark.startswith(prefix):
                    continue
                try:
                    _, epoch, first, count = (int(x) for x in mark.split(":"))
                except ValueError:
                    continue
                if state is None or epoch > state.epoch:
                    state = _Partition(epoch)
                last = (first + count - 1) % SEQ_MOD
                state.batches.append(Seen(first, last, message.queue_offset, None))
            offset = messages[-1].queue_offset + 1
        if state is not None:
            log.info(
                "kafka: producer %d on %s:%d: sequence window rebuilt from the log (last %d)",
                pid, topic, queue_id, state.batches[-1].last,
            )  # fmt: skip
        return state
