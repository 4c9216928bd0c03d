"""TransactionService: half messages (RocketMQ's transactional messages), each resolved once,
exactly, across restarts and kill -9.

PREPARE. A message with ``TRAN_MSG=true`` is stored under ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0
(``to_half_topic``; the facade rewrites it, the destination kept in REAL_TOPIC / REAL_QID). Its
half offset -- that queue's offset -- identifies the transaction. Nothing reads the half topic
but this service: consumers never see a half message.

END. ``end(offset, message_id, commit)``: COMMIT re-puts the message to its destination with
``TRAN_HALF_OFFSET`` and without TRAN_MSG (visible from then on); ROLLBACK writes a marker to
``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0 carrying ``TRAN_HALF_OFFSET``. Either record closes the
half in an ``OffsetLedger`` (``services/ledger.py``): the commit log alone says what was
resolved, so after kill -9 a commit is neither lost nor doubled and a rollback never comes
back. An END for a half already resolved writes nothing and says how it was resolved: a COMMIT
retried by a producer, or repeated after a check-back, never makes a second copy.

BATCH END (``end_batch``): many halves of one writer -- message ids sharing a prefix -- resolved
in one call, commit copies of one destination appended together; with ``rest`` it also rolls
back that writer's other open halves. The Spark sink commits a micro-batch this way.

CHECK-BACK (driven by the broker, which knows the producers): ``due_for_check(now, timeout_ms,
interval_ms)`` lists open halves older than ``timeout_ms`` (or their
``CHECK_IMMUNITY_TIME_IN_SECONDS``) not checked in the last ``interval_ms``; the broker asks a
producer and calls ``checked(offset)``; ``discard(offset)`` ends one for good (a marker, as a
rollback, reason ``discard``). Check counts live in memory and ride in the checkpoint: a crash
may forget the last few (a few extra checks, never a lost resolution).

CHECKPOINT ``config/transactionCheckpoint.json`` (the ledger's), after each burst of ENDs, at
most every ``checkpoint_interval_s``. START: load it, walk the commit log from its P for
TRAN_HALF_OFFSET marks, read the half queue from the watermark (one record read per open half).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from wharf.store.codec.parking import HALF_QUEUE, unpark
from wharf.store.codec.properties import (
    PROPERTY_CHECK_IMMUNITY_TIME,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRAN_HALF_OFFSET,
    PROPERTY_TRANSACTION_PREPARED,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from wharf.store.errors import InvalidMessageError
from wharf.store.model import MessageInput, StoredMessage
from wharf.store.services.host import StoreHost
from wharf.store.services.ledger import OffsetLedger, checkpoint_loop

log = logging.getLogger(__name__)

READ_BATCH = 256
# One append of a batch END: 1024 messages (the send batch cap) or 4 MiB of bodies.
BATCH_COUNT = 1024
BATCH_BYTES = 4 * 1024 * 1024
# A committed copy is an ordinary message: no prepared flag, no check-back immunity; it keeps
# TRAN_HALF_OFFSET (the mark a restart reads) as RocketMQ's does.
_DROP_ON_COMMIT = (PROPERTY_TRANSACTION_PREPARED, PROPERTY_CHECK_IMMUNITY_TIME)
COMMITTED, ROLLED_BACK, RESOLVED = "committed", "rolled back", "resolved before"


@dataclass(slots=True)
class Half:
    log_offset: int  # of the half record
    message_id: str
    topic: str  # the destination
    stored_ms: int
    immunity_ms: int  # 0 = the broker's transactionTimeOut
    checks: int = 0
    last_check_ms: int = 0


class TransactionService:
    def __init__(
        self, host: StoreHost, checkpoint_file: Path, checkpoint_interval_s: float = 0.2
    ) -> None:
        self.host = host
        self.checkpoint_interval_s = checkpoint_interval_s
        self.ledger: OffsetLedger[Half] = OffsetLedger(checkpoint_file)
        self.open = self.ledger.open
        self._how: dict[int, str] = {}  # resolutions this run, for "already resolved" answers
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.rollbacks = 0
        self.discards = 0
        self.checks = 0

    # --- start / stop ---------------------------------------------------------------------
    def load_blocking(self, marks_since: Callable[[int, str], list[int]]) -> None:
        """Checkpoint + the halves closed since it (``marks_since(offset, prop)``: the value
        of ``prop`` in every record from ``offset`` on) + the half queue since its cursor."""
        ledger = self.ledger
        ledger.load_blocking()
        ledger.close_marked(marks_since(ledger.log_offset, PROPERTY_TRAN_HALF_OFFSET))
        self.follow()
        for text, (checks, last) in dict(ledger.extra.get("checks", {})).items():  # type: ignore[call-overload]
            half = self.open.get(int(text))
            if half is not None:
                half.checks, half.last_check_ms = int(checks), int(last)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            checkpoint_loop(
                self.checkpoint,
                self._dirty,
                self.checkpoint_interval_s,
                self._log_moved,
                "transaction",
            )
        )

    async def stop(self) -> None:
        if self._task is None:  # never started (a replica's): nothing of this log to record
            return
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
        await self.checkpoint()

    def follow(self, limit: int | None = None) -> bool:
        """Read new half-queue units into the open set (before each use): all of them, or at
        most ``limit`` (about ``limit`` x 8 us of decoding); True when caught up."""
        ledger = self.ledger
        read = 0
        while True:
            if limit is not None and read >= limit:
                return False
            units = self.host.read_consume_queue(
                TRANS_HALF_TOPIC, HALF_QUEUE, ledger.cursor, READ_BATCH
            )
            if not units:
                return True
            read += len(units)
            for phy_offset, _size, _code in units:
                offset = ledger.cursor
                ledger.cursor += 1
                if offset in ledger.closed:
                    continue
                msg = self.host.look_message_by_offset(phy_offset)
                if msg is None:
                    ledger.close(offset)
                    continue
                immunity = msg.properties.get(PROPERTY_CHECK_IMMUNITY_TIME, "")
                ledger.add(
                    offset,
                    Half(
                        phy_offset,
                        msg.unique_id,
                        msg.properties.get(PROPERTY_REAL_TOPIC, ""),
                        msg.store_timestamp,
                        int(immunity) * 1000 if immunity.isdigit() else 0,
                    ),
                )

    async def catch_up(self) -> None:
        """``follow`` in slices of ``READ_BATCH`` units (~2 ms), yielding the event loop in
        between: a Spark batch leaves tens of thousands of halves to read at once."""
        caught_up = False
        while not caught_up:
            caught_up = self.follow(READ_BATCH)
            await asyncio.sleep(0)

    def stats(self) -> dict[str, int]:
        self.follow()
        return {
            "half_messages": len(self.open),
            "commits_total": self.commits,
            "rollbacks_total": self.rollbacks,
            "checks_total": self.checks,
            "discards_total": self.discards,
        }

    # --- resolution -----------------------------------------------------------------------
    def half(self, offset: int) -> StoredMessage | None:
        """An open half message (for a check-back), or None."""
        self.follow()
        half = self.open.get(offset)
        return self.host.look_message_by_offset(half.log_offset) if half else None

    async def follow_to(self, offset: int) -> None:
        """Follow the half queue up to ``offset`` and what is written now: an END or a lookup
        right after its SEND waits for that half to be dispatched first."""
        if offset >= self.ledger.cursor:
            await self.host.wait_dispatched()
        await self.catch_up()

    def open_halves(self) -> list[tuple[int, Half]]:
        """The open halves by offset (an operator's list)."""
        self.follow()
        return sorted(self.open.items())

    def open_half(self, offset: int) -> Half | None:
        """The open half at ``offset`` as followed so far (no log read), or None."""
        return self.open.get(offset)

    async def end(self, offset: int, message_id: str, commit: bool, topic: str = "") -> str:
        """Resolve a half: COMMITTED or ROLLED_BACK; for a half resolved before, what happened
        then (RESOLVED when that was before a restart) and nothing is written.
        InvalidMessageError when no half of that message id (and topic) is at that offset."""
        await self.follow_to(offset)
        half = self.open.get(offset)
        if half is None:
            ledger = self.ledger
            if offset in self._how or offset in ledger.closed or offset < ledger.watermark():
                return self._how.get(offset, RESOLVED)
            raise InvalidMessageError(
                f"no transaction {offset} for message {message_id!r}: unknown, or not from "
                "this broker"
            )
        if half.message_id != message_id or (topic and half.topic != topic):
            raise InvalidMessageError(
                f"transaction {offset} is not message {message_id!r} of topic {topic!r}"
            )
        msg = self.host.look_message_by_offset(half.log_offset)
        write_id = self.ledger.begin_write(self.host.commit_log_end())
        try:
            if commit and msg is not None:
                try:
                    real_topic, real_queue, copy = unpark(
                        msg,
                        {PROPERTY_TRAN_HALF_OFFSET: str(offset)},
                        _DROP_ON_COMMIT,
                    )
                except ValueError as exc:
                    raise InvalidMessageError(str(exc)) from None
                await self.host.put(real_topic, real_queue, [copy])
                how = COMMITTED
            else:
                await self.host.put(TRANS_OP_HALF_TOPIC, 0, [_marker(offset, "rollback")])
                how = ROLLED_BACK
        finally:
            self.ledger.end_write(write_id)
        if self.ledger.close(offset) is not None:
            self._how[offset] = how
            if how == COMMITTED:
                self.commits += 1
            else:
                self.rollbacks += 1
        self._dirty.set()
        return how

    async def end_batch(
        self,
        offsets: Sequence[int],
        commit: bool,
        id_prefix: str,
        rest: bool = False,
        topics: set[str] | None = None,
    ) -> dict[str, int]:
        """Resolve many halves of one writer at once (the Spark sink's commit), in order.

        Every half named must be this writer's: its message id starts with ``id_prefix``
        (InvalidMessageError naming the first that does not, or an unknown offset, before
        anything is written). Halves resolved before are counted, not written again, so the
        call is repeatable. COMMIT puts consecutive halves of one destination as one append
        (at most ``BATCH_COUNT`` messages / ``BATCH_BYTES``), ROLLBACK writes markers in
        batches of ``BATCH_COUNT``. ``rest``: every other open half whose id starts with
        ``id_prefix`` is rolled back too (what failed task attempts left behind). ``topics``
        (when not empty) bounds both: a named half of another topic is refused, and ``rest``
        touches only halves of these topics.
        Returns counts: committed, rolled_back, resolved_before."""
        if not id_prefix:
            raise InvalidMessageError("a batch END needs the message id prefix of its writer")
        if offsets and max(offsets) >= self.ledger.cursor:
            await self.host.wait_dispatched()
        await self.catch_up()
        counts = {COMMITTED: 0, ROLLED_BACK: 0, RESOLVED: 0}
        todo, seen = self._named_halves(offsets, id_prefix, topics, counts)
        rollbacks = [] if commit else [o for o, _ in todo]
        commits = todo if commit else []
        if rest:
            rollbacks += [
                o
                for o, h in self.open.items()
                if o not in seen
                and h.message_id.startswith(id_prefix)
                and (not topics or h.topic in topics)
            ]
        await self._write_resolutions(commits, rollbacks, counts)
        return {
            "committed": counts[COMMITTED],
            "rolled_back": counts[ROLLED_BACK],
            "resolved_before": counts[RESOLVED],
        }

    def _named_halves(
        self,
        offsets: Sequence[int],
        id_prefix: str,
        topics: set[str] | None,
        counts: dict[str, int],
    ) -> tuple[list[tuple[int, Half]], set[int]]:
        """``end_batch``'s check of the halves it names, before anything is written: the open
        ones to resolve, in order (InvalidMessageError for an unknown one, another writer's
        or another topic's), and every offset named; those resolved before are counted."""
        todo: list[tuple[int, Half]] = []
        seen: set[int] = set()
        for offset in offsets:
            if offset in seen:
                continue
            seen.add(offset)
            half = self.open.get(offset)
            if half is None:
                ledger = self.ledger
                if offset in self._how or offset in ledger.closed or offset < ledger.watermark():
                    counts[RESOLVED] += 1
                    continue
                raise InvalidMessageError(
                    f"no transaction {offset}: unknown, or not from this broker"
                )
            if topics and half.topic not in topics:
                raise InvalidMessageError(
                    f"transaction {offset} is a message of topic {half.topic!r}, not of "
                    f"{sorted(topics)}"
                )
            if not half.message_id.startswith(id_prefix):
                raise InvalidMessageError(
                    f"transaction {offset} (message {half.message_id!r}) is not one of "
                    f"{id_prefix!r}"
                )
            todo.append((offset, half))
        return todo, seen

    async def _write_resolutions(
        self, commits: list[tuple[int, Half]], rollbacks: list[int], counts: dict[str, int]
    ) -> None:
        """``end_batch``'s writes: the commit copies, a put per destination run, then the
        rollback markers in batches of ``BATCH_COUNT``; each closes its halves once put."""
        write_id = self.ledger.begin_write(self.host.commit_log_end())
        try:
            for group in self._commit_groups(commits):
                topic, queue_id = group[0][1], group[0][2]
                await self.host.put(topic, queue_id, [copy for _, _, _, copy in group])
                self._closed_as([o for o, _, _, _ in group], COMMITTED, counts)
                await asyncio.sleep(0)  # ~13 ms of work per group: let the loop breathe
            for i in range(0, len(rollbacks), BATCH_COUNT):
                chunk = rollbacks[i : i + BATCH_COUNT]
                await self.host.put(TRANS_OP_HALF_TOPIC, 0, [_marker(o, "rollback") for o in chunk])
                self._closed_as(chunk, ROLLED_BACK, counts)
                await asyncio.sleep(0)
        finally:
            self.ledger.end_write(write_id)
            self._dirty.set()

    def _commit_groups(
        self, halves: list[tuple[int, Half]]
    ) -> Iterator[list[tuple[int, str, int, MessageInput]]]:
        """The commit copies of ``halves`` in order, cut where the destination changes or a
        batch is full."""
        group: list[tuple[int, str, int, MessageInput]] = []
        size = 0
        for offset, half in halves:
            msg = self.host.look_message_by_offset(half.log_offset)
            if msg is None:
                raise InvalidMessageError(f"transaction {offset}: its half message is gone")
            try:
                topic, queue_id, copy = unpark(
                    msg, {PROPERTY_TRAN_HALF_OFFSET: str(offset)}, _DROP_ON_COMMIT
                )
            except ValueError as exc:
                raise InvalidMessageError(str(exc)) from None
            if group and (
                (topic, queue_id) != group[0][1:3]
                or len(group) >= BATCH_COUNT
                or size + len(copy.body) > BATCH_BYTES
            ):
                yield group
                group, size = [], 0
            group.append((offset, topic, queue_id, copy))
            size += len(copy.body)
        if group:
            yield group

    def _closed_as(self, offsets: list[int], how: str, counts: dict[str, int]) -> None:
        for offset in offsets:
            if self.ledger.close(offset) is None:
                continue
            self._how[offset] = how
            counts[how] += 1
            if how == COMMITTED:
                self.commits += 1
            else:
                self.rollbacks += 1

    # --- check-back -----------------------------------------------------------------------
    def due_for_check(self, now_ms: int, timeout_ms: int, interval_ms: int) -> list[int]:
        self.follow()
        due = []
        for offset, half in self.open.items():
            age = now_ms - half.stored_ms
            if age < (half.immunity_ms or timeout_ms):
                continue
            if half.checks and now_ms - half.last_check_ms < interval_ms:
                continue
            due.append(offset)
        return due

    def checked(self, offset: int, now_ms: int) -> int:
        """Count a check-back sent for the half; returns its checks so far."""
        half = self.open.get(offset)
        if half is None:
            return 0
        half.checks += 1
        half.last_check_ms = now_ms
        self.checks += 1
        self._dirty.set()
        return half.checks

    def checks_of(self, offset: int) -> int:
        half = self.open.get(offset)
        return half.checks if half else 0

    async def discard(self, offset: int) -> None:
        """End an unresolved half for good (transactionCheckMax reached): never delivered."""
        if offset not in self.open:
            return
        write_id = self.ledger.begin_write(self.host.commit_log_end())
        try:
            await self.host.put(TRANS_OP_HALF_TOPIC, 0, [_marker(offset, "discard")])
        finally:
            self.ledger.end_write(write_id)
        if self.ledger.close(offset) is not None:
            self._how[offset] = ROLLED_BACK
            self.discards += 1
        self._dirty.set()

    # --- checkpoint -----------------------------------------------------------------------
    def _log_moved(self) -> bool:
        return self.host.commit_log_end() != self.ledger.log_offset

    async def checkpoint(self) -> None:
        self.ledger.extra["checks"] = {
            str(o): [h.checks, h.last_check_ms] for o, h in self.open.items() if h.checks
        }
        payload = self.ledger.snapshot(self.host.commit_log_end())
        await asyncio.to_thread(self.ledger.write_blocking, payload)
        if len(self._how) > 65536:  # answers for old resolutions: bounded
            self._how.clear()


def _marker(offset: int, reason: str) -> MessageInput:
    return MessageInput(body=reason.encode(), properties={PROPERTY_TRAN_HALF_OFFSET: str(offset)})
