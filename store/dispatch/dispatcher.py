"""Dispatch core: a decoded chunk of CommitLog records -> ConsumeQueue units + index entries
(RocketMQ's CommitLogDispatcherBuildConsumeQueue / BuildIndex), synchronous.

``Dispatcher.plan`` groups a chunk's units into runs of consecutive logical offsets per queue,
packed; ``apply`` appends them and writes the index entries that fit the newest IndexFile.
A chunk is either numpy columns (``wharf.store.fast.dispatch_columns``, large chunks) or one
DispatchRequest per record (small chunks, recovery); both give the same runs and entries
(tests compare the files they write byte for byte). A run that starts past its queue's end
is held, never written over blanks while its records may be in the log: the caller goes on
from ``gaps.rewind()`` (``wharf.store.dispatch.gaps``). Used by the ReputService
(``wharf.store.dispatch.reput``) on the event loop and by recovery in a thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import starmap
from typing import NamedTuple, overload

import numpy as np
from wharf.store.codec.dispatch import DispatchRequest
from wharf.store.codec.hashes import java_string_hash
from wharf.store.codec.layout import (
    CQ_STORE_UNIT_SIZE,
    CQ_UNIT,
    CQ_UNIT_FIELDS,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from wharf.store.codec.properties import PROPERTY_DELAY_TIME_LEVEL, SCHEDULE_TOPIC
from wharf.store.dispatch.gaps import QueueGaps
from wharf.store.errors import DamagedQueueError
from wharf.store.fast.dispatch_columns import DispatchColumns
from wharf.store.fast.index_batch import IndexColumns
from wharf.store.fast.layout_dtypes import packed
from wharf.store.index.index_file import IndexEntry
from wharf.store.index.index_files import IndexService
from wharf.store.queue.consume_queue import ConsumeQueue, Unit, append_usual_runs
from wharf.store.queue.table import ConsumeQueueTable

_TAG_CODE_CACHE = 65536
_NOT_QUEUED = (SYSFLAG_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_ROLLBACK)

# (topic, queue id) -> new max offset of that queue, after one chunk.
QueueAdvance = dict[tuple[str, int], int]
# A decoded chunk: columns (large chunks) or one request per record (small chunks, recovery).
DispatchRecords = DispatchColumns | Sequence[DispatchRequest]
IndexEntries = IndexColumns | list[IndexEntry]

_CQ_UNITS = packed(
    CQ_UNIT_FIELDS, {"COMMIT_LOG_OFFSET": "offset", "SIZE": "size", "TAGS_CODE": "code"}
)
assert _CQ_UNITS.itemsize == CQ_STORE_UNIT_SIZE


class QueueRun(NamedTuple):
    """Units for consecutive logical offsets of one queue, packed (CQ_UNIT each)."""

    key: tuple[str, int]  # (topic, queue id)
    first: int  # logical offset of the first unit
    unit_count: int
    units: bytes
    physical_end: int  # offset + size of the last unit's record


class QueueRuns(Sequence[QueueRun]):
    """A columns chunk's runs as columns: run i is ``keys[i]`` from logical offset
    ``firsts[i]``, its units ``data[bounds[i]:bounds[i + 1]]``, its last record ending at
    ``ends[i]``. ``Dispatcher.apply_ready`` reads the columns; a QueueRun is made only for a
    run read as one (a run left for new files, tests). At 256 topics a 1 MiB chunk holds ~64
    runs of 16 units: an object a run, then unpacked, was ~0.4 us of each."""

    __slots__ = ("bounds", "data", "ends", "firsts", "keys")

    def __init__(
        self,
        keys: list[tuple[str, int]],
        firsts: list[int],
        bounds: list[int],
        ends: list[int],
        data: bytes,
    ) -> None:
        self.keys, self.firsts, self.bounds, self.ends, self.data = keys, firsts, bounds, ends, data

    @classmethod
    def of(cls, runs: Sequence[QueueRun]) -> QueueRuns:
        """The columns of runs made one by one (a chunk of requests)."""
        bounds = [0]
        for run in runs:
            bounds.append(bounds[-1] + len(run.units))
        return cls(
            [run.key for run in runs],
            [run.first for run in runs],
            bounds,
            [run.physical_end for run in runs],
            b"".join(run.units for run in runs),
        )

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> QueueRun: ...
    @overload
    def __getitem__(self, index: slice) -> list[QueueRun]: ...
    def __getitem__(self, index: int | slice) -> QueueRun | list[QueueRun]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("run index out of range")
        a, b = self.bounds[index], self.bounds[index + 1]
        units = self.data[a:b]
        return QueueRun(
            self.keys[index], self.firsts[index], len(units) // CQ_STORE_UNIT_SIZE, units,
            self.ends[index],
        )  # fmt: skip


class DispatchPlan(NamedTuple):
    runs: Sequence[QueueRun]  # per queue in log order
    records: DispatchRecords  # for the index entries, computed when applied
    record_count: int  # records in the chunk
    last_timestamp: int  # store time of the chunk's last record (0 if empty)


class Dispatcher:
    def __init__(
        self, queues: ConsumeQueueTable, index: IndexService | None, delay_levels_ms: Sequence[int]
    ) -> None:
        self.queues = queues
        self.index = index
        self.delay_levels_ms = list(delay_levels_ms)
        self._tag_codes: dict[str, int] = {}  # tag -> Java hash: tags repeat, hashing is slow
        # Runs past their queue's end, held: after a chunk the caller goes on from
        # ``gaps.rewind()`` when it is not None (store/dispatch/gaps.py).
        self.gaps = QueueGaps()

    def tags_code(self, req: DispatchRequest) -> int:
        if req.topic == SCHEDULE_TOPIC:
            level_text = req.properties.get(PROPERTY_DELAY_TIME_LEVEL, "")
            code = self._deliver_time(level_text, req.store_timestamp)
            if code is not None:
                return code
        return java_string_hash(req.tags) if req.tags else 0

    def _deliver_time(self, level_text: str, store_timestamp: int) -> int | None:
        """For delayed messages the unit carries the deliver time (RocketMQ's
        computeDeliverTimestamp), which ScheduleMessageService compares with the clock."""
        if level_text.isdigit() and int(level_text) > 0 and self.delay_levels_ms:
            level = min(int(level_text), len(self.delay_levels_ms))
            return store_timestamp + self.delay_levels_ms[level - 1]
        return None

    def plan(self, records: DispatchRecords) -> DispatchPlan:
        """One pass over a chunk: ConsumeQueue units grouped into runs of consecutive queue
        offsets per queue (in log order)."""
        if isinstance(records, DispatchColumns):
            return self._plan_columns(records)
        return self._plan_requests(records)

    def _plan_requests(self, requests: Sequence[DispatchRequest]) -> DispatchPlan:
        open_runs: dict[tuple[str, int], tuple[int, list[Unit]]] = {}
        runs: list[tuple[tuple[str, int], int, list[Unit]]] = []
        codes = self._tag_codes
        for req in requests:
            # Prepared and rolled-back transaction halves get no ConsumeQueue unit (RocketMQ).
            if req.sys_flag & 0xC in _NOT_QUEUED:
                continue
            key = (req.topic, req.queue_id)
            code = codes.get(req.tags) if key[0] != SCHEDULE_TOPIC else None
            if code is None:
                code = self.tags_code(req)
                if key[0] != SCHEDULE_TOPIC and len(codes) < _TAG_CODE_CACHE:
                    codes[req.tags] = code
            unit = (req.commit_log_offset, req.size, code)
            run = open_runs.get(key)
            if run is not None and run[0] + len(run[1]) == req.queue_offset:
                run[1].append(unit)
            else:  # first unit of the queue, or not consecutive (overlap or gap)
                run = open_runs[key] = (req.queue_offset, [unit])
                runs.append((key, run[0], run[1]))
        packed = [
            QueueRun(key, first, len(units), b"".join(starmap(CQ_UNIT.pack, units)), end)
            for key, first, units in runs
            for end in (units[-1][0] + units[-1][1],)
        ]
        last = requests[-1].store_timestamp if requests else 0
        return DispatchPlan(packed, requests, len(requests), last)

    def _plan_columns(self, cols: DispatchColumns) -> DispatchPlan:
        count = len(cols)
        codes = cols.tags_codes
        if cols.delay_texts:
            codes = codes.copy()
            stamps = cols.store_timestamps
            for row, text in cols.delay_texts.items():
                code = self._deliver_time(text, int(stamps[row]))
                if code is not None:
                    codes[row] = code
        trans = cols.sys_flags & 0xC
        queued = (trans != SYSFLAG_TRANSACTION_PREPARED) & (trans != SYSFLAG_TRANSACTION_ROLLBACK)
        rows = None if np.count_nonzero(queued) == count else queued.nonzero()[0]
        queue_keys = cols.topic_ids << 32 | cols.queue_ids & 0xFFFFFFFF
        if rows is not None:
            queue_keys = queue_keys[rows]
        n = len(queue_keys)
        last = int(cols.store_timestamps[-1]) if count else 0
        if not n:  # nothing queued (empty chunk, or only transaction halves)
            return DispatchPlan([], cols, count, last)
        # Group by queue, log order inside a queue: a stable sort, unless no queue has two
        # segments (a segment: consecutive records of one queue, a producer's batch). Then the
        # segments are the runs as they lie: at 256 topics a 1 MiB chunk is ~64 segments of
        # ~16 records of distinct queues, and the sort of its ~900 keys with the gathers after
        # it were ~100-150 of ~12,000 instructions a message in-process (callgrind).
        changes = queue_keys[1:] != queue_keys[:-1]  # after each segment's last row
        segment_keys = queue_keys[:-1][changes].tolist()
        if segment_keys and len({*segment_keys, int(queue_keys[-1])}) <= len(segment_keys):
            order = queue_keys.argsort(kind="stable")
            rows = order if rows is None else rows[order]
            queue_keys = queue_keys[order]
            changes = queue_keys[1:] != queue_keys[:-1]

        def take(column: np.ndarray) -> np.ndarray:
            return column if rows is None else column[rows]

        offsets, sizes, queue_offsets = (
            take(cols.offsets),
            take(cols.sizes),
            take(cols.queue_offsets),
        )
        units = np.empty(n, dtype=_CQ_UNITS)
        units["offset"] = offsets
        units["size"] = sizes
        units["code"] = take(codes)
        data = units.tobytes()
        # A run ends where the queue changes or the queue offsets stop being consecutive.
        breaks = changes | (queue_offsets[1:] != queue_offsets[:-1] + 1)
        firsts = np.zeros(1, dtype=np.int64)
        if np.count_nonzero(breaks):
            firsts = np.concatenate((firsts, breaks.nonzero()[0] + 1))
        lasts = np.concatenate((firsts[1:] - 1, [n - 1]))
        first_rows = firsts if rows is None else rows[firsts]
        topics = cols.topics
        runs = QueueRuns(
            [
                (topics[topic], queue_id)
                for topic, queue_id in zip(
                    cols.topic_ids[first_rows].tolist(),
                    cols.queue_ids[first_rows].tolist(),
                    strict=True,
                )
            ],
            queue_offsets[firsts].tolist(),
            [*(firsts * CQ_STORE_UNIT_SIZE).tolist(), n * CQ_STORE_UNIT_SIZE],
            (offsets[lasts] + sizes[lasts]).tolist(),
            data,
        )
        return DispatchPlan(runs, cols, count, last)

    def missing_files(self, plan: DispatchPlan) -> list[tuple[ConsumeQueue, list[int]]]:
        """Per queue, the file starts that applying ``plan`` would create."""
        needed = []
        find = self.queues.find_or_create
        for key, first, count, _, _ in plan.runs:
            queue = find(*key)
            if queue.within_files(first + count):
                continue  # the usual case, inside the newest file: nothing to create
            start = max(first, queue.max_offset)
            starts = queue.missing_files(start, first + count - start)
            if starts:
                needed.append((queue, starts))
        return needed

    def apply(self, plan: DispatchPlan) -> tuple[QueueAdvance, IndexEntries]:
        """Append the units and return the queues that advanced and the index entries still
        to be written (the caller may need to roll a file)."""
        return self.apply_queues(plan), self.apply_index(plan)

    def apply_queues(self, plan: DispatchPlan) -> QueueAdvance:
        """The ConsumeQueue half of ``apply``: the queues that advanced. A run past its
        queue's end is held (``gaps``: the caller re-dispatches from ``gaps.rewind()``)."""
        advanced: QueueAdvance = {}
        find = self.queues.find_or_create
        hold = self.gaps.hold
        for key, first, _, units, physical_end in plan.runs:
            queue = find(*key)
            if first > queue.max_offset and hold(queue, key, first):
                continue
            try:
                queue.append_packed(first, units, physical_end)
            except DamagedQueueError:
                continue  # that queue alone (logged once, rebuilt at the next start)
            advanced[key] = queue.max_offset
        return advanced

    def apply_ready(self, plan: DispatchPlan) -> tuple[QueueAdvance, list[QueueRun]]:
        """``apply_queues`` of the runs that fit their queue's newest file, with no
        ``missing_files`` pass first (a lookup and a check a run, ~0.7 us of ~64 runs a chunk
        at 256 topics): a run that needs a file is left, with every later run of its queue
        (a queue's runs keep their order), for the caller to create the files in a thread and
        apply them. Returns the queues that advanced and the runs left. The usual runs (the
        queue's next units, room in its tail) go in one compiled call
        (``consume_queue.append_usual_runs``: ~1.3 us of Python a run here before); this loop
        takes the others, in order."""
        runs = plan.runs if isinstance(plan.runs, QueueRuns) else QueueRuns.of(plan.runs)
        advanced: QueueAdvance = {}
        left: list[QueueRun] = []
        table = self.queues
        keys, firsts, bounds, ends, data = runs.keys, runs.firsts, runs.bounds, runs.ends, runs.data
        # Most runs are their queue's next units: taken in one compiled call; the rest here.
        rest = append_usual_runs(
            table.queues, table.links, (keys, firsts, bounds, ends, data), advanced
        )
        held: set[tuple[str, int]] = set()
        queues, find, hold = table.queues, table.find_or_create, self.gaps.hold
        for i in rest:
            key, first, end = keys[i], firsts[i], ends[i]
            queue = queues.get(key)
            if queue is None:
                queue = find(*key)
            units = data[bounds[i] : bounds[i + 1]]
            count = len(units) // CQ_STORE_UNIT_SIZE
            if (held and key in held) or not queue.within_files(first + count):
                held.add(key)  # left for new files, with the queue's later runs
                left.append(QueueRun(key, first, count, units, end))
                continue
            if first > queue.max_offset and hold(queue, key, first):
                continue
            try:
                queue.append_packed(first, units, end)  # its usual-run path first
            except DamagedQueueError:
                continue  # that queue alone (logged once, rebuilt at the next start)
            advanced[key] = queue.max_offset
        return advanced, left

    def apply_index(self, plan: DispatchPlan) -> IndexEntries:
        """The index half of ``apply``: the entries still to be written (a roll needed)."""
        index = self.index
        if index is None or not plan.record_count:
            return []
        records = plan.records
        entries: IndexEntries
        if isinstance(records, DispatchColumns):
            entries = index.entries_for_columns(records)
        else:
            entries = index.entries_for(r for r in records if r.keys or r.uniq_key)
        if len(entries):
            entries = entries[index.put_entries_nowait(entries) :]
        return entries

    def dispatch(self, records: DispatchRecords) -> tuple[QueueAdvance, IndexEntries]:
        """``plan`` + ``apply`` (queue files created in place: recovery, tests)."""
        return self.apply(self.plan(records))
