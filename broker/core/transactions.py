"""Transactions, for every front end: ending one (``TransactionCore.end``), the check-back targets
(``CheckTargets``) and the check-back itself (``TransactionChecker``, RocketMQ's
TransactionalMessageCheckService).

A transaction id is the half message's offset in the half queue (the send result's queue
offset). Ending it commits (the message becomes visible in its topic) or rolls back; each half
is resolved once, a repeated or late END answers how it was resolved and writes nothing. One
that names no open or resolved half of that message (and topic): ``UnknownTransaction``, which
each front end maps (wharf.v1 NOT_FOUND, v2 INVALID_TRANSACTION_ID).

The check-back: a task wakes every ``step_s`` and asks the store for open halves older than
``transactionTimeOut`` ms (or their ``CHECK_IMMUNITY_TIME_IN_SECONDS``) and not checked in the
last ``transactionCheckInterval`` ms. Each goes to the first check target of its topic that
takes it: a Wharf SDK producer's ``TransactionChecks`` stream (``CheckTargets.open``), then the
sources each front end registers with ``CheckTargets.add_source``: a RocketMQ 5 producer's
Telemetry stream (``v2/transactions.py``, over the client registry's sessions), a RocketMQ 4.x
producer's remoting connection (``remoting/transactions.py``); the producer answers with
EndTransaction. Every round counts as a check, producer or not; after
``transactionCheckMax`` checks the half is discarded (never delivered) with a WARNING line and
a count.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wharf.broker.core.errors import Reason, Refused
from wharf.broker.errors import NotFoundError
from wharf.store.codec.properties import PROPERTY_REAL_TOPIC
from wharf.store.errors import InvalidMessageError
from wharf.store.model import StoredMessage

log = logging.getLogger("wharf.broker.transactions")  # the name operators filter on

# Sends a check-back for (half message, transaction id) in its protocol; False: not taken.
CheckTarget = Callable[[StoredMessage, int], bool]
CHANNEL_QUEUE_MAX = 1024  # checks queued for one SDK producer at most


class UnknownTransaction(Refused, NotFoundError):
    """A transaction id that names no half of that message (and topic)."""


@dataclass(frozen=True, slots=True)
class OpenHalf:
    """An open half message as an operator lists it."""

    offset: int  # the transaction id
    topic: str  # its destination
    message_id: str
    stored_ms: int
    checks: int  # check-backs sent so far


def _accept(_half: StoredMessage) -> None:
    pass


class TransactionCore:
    """Transactions for every front end (``port.transactions``): ending one by its
    producer's id (``end``) or by its offset alone (``resolve``: an operator, a RocketMQ 4
    producer), many at once (``end_batch``), and the open halves. ``transactions()`` is the
    store's TransactionService (it exists once the store runs)."""

    def __init__(self, transactions: Callable[[], Any]) -> None:
        self._transactions = transactions

    async def end(self, offset: int, message_id: str, commit: bool, topic: str = "") -> str:
        """Commit or roll back the half at ``offset``; how it is resolved ("COMMITTED",
        "ROLLED_BACK": this call's or the first one's)."""
        try:
            how: str = await self._transactions().end(offset, message_id, commit, topic)
        except InvalidMessageError as exc:
            raise UnknownTransaction(Reason.UNKNOWN_TRANSACTION, str(exc)) from None
        return how

    async def half_of(self, offset: int) -> StoredMessage | None:
        """The open half message at ``offset`` (waiting for a just-sent one to be dispatched),
        or None: resolved, discarded or unknown."""
        tx = self._transactions()
        await tx.follow_to(offset)
        half: StoredMessage | None = tx.half(offset)
        return half

    async def destination_of(self, offset: int) -> str | None:
        """The topic the open half at ``offset`` is for (no log read; waiting for a just-sent
        one to be dispatched), or None: what an END that names no topic is checked against."""
        tx = self._transactions()
        await tx.follow_to(offset)
        half = tx.open_half(offset)
        return None if half is None else str(half.topic)

    async def resolve(
        self,
        offset: int,
        commit: bool,
        *,
        fallback_id: str | None = None,
        check: Callable[[StoredMessage], None] = _accept,
    ) -> str:
        """End the half at ``offset`` by its own message id, for whoever names a transaction
        by its offset alone (wharf.v1's ResolveHalfMessage, RocketMQ 4's END_TRANSACTION).
        ``check(half)`` may refuse it first (it raises). A half no longer open ends by
        ``fallback_id`` (``end`` then answers how it was resolved, or refuses), or without
        one is ``UnknownTransaction``."""
        half = await self.half_of(offset)
        if half is None:
            if fallback_id is None:
                raise UnknownTransaction(
                    Reason.UNKNOWN_TRANSACTION,
                    f"transaction {offset} is not open: resolved or discarded already, or unknown",
                )
            return await self.end(offset, fallback_id, commit)
        check(half)
        return await self.end(offset, half.unique_id, commit)

    async def end_batch(
        self,
        offsets: Sequence[int],
        commit: bool,
        id_prefix: str,
        rest: bool = False,
        topics: set[str] | None = None,
    ) -> dict[str, int]:
        """Resolve many halves of one writer (the store's ``end_batch``: counts committed,
        rolled_back, resolved_before); a half not of that writer: ``UnknownTransaction``."""
        try:
            counts: dict[str, int] = await self._transactions().end_batch(
                offsets, commit, id_prefix, rest, topics
            )
        except InvalidMessageError as exc:
            raise UnknownTransaction(Reason.UNKNOWN_TRANSACTION, str(exc)) from None
        return counts

    def open_halves(self, topic: str = "") -> list[OpenHalf]:
        """The open halves by offset (of ``topic`` when given)."""
        return [
            OpenHalf(offset, half.topic, half.message_id, half.stored_ms, half.checks)
            for offset, half in self._transactions().open_halves()
            if not topic or half.topic == topic
        ]


class CheckTargets:
    """Where check-backs go: the open ``TransactionChecks`` streams of Wharf SDK producers, by
    topic, then the targets of the other front ends' sources (``add_source``)."""

    def __init__(self) -> None:
        self._by_topic: dict[str, list[asyncio.Queue[tuple[StoredMessage, int]]]] = {}
        self._sources: list[Callable[[str], list[CheckTarget]]] = []

    def add_source(self, source: Callable[[str], list[CheckTarget]]) -> None:
        """More check targets of a topic (after the SDK streams'), asked each round."""
        self._sources.append(source)

    def open(self, topics: list[str]) -> asyncio.Queue[tuple[StoredMessage, int]]:
        queue: asyncio.Queue[tuple[StoredMessage, int]] = asyncio.Queue(CHANNEL_QUEUE_MAX)
        for topic in topics:
            self._by_topic.setdefault(topic, []).append(queue)
        return queue

    def close(self, topics: list[str], queue: asyncio.Queue[tuple[StoredMessage, int]]) -> None:
        for topic in topics:
            queues = self._by_topic.get(topic, [])
            if queue in queues:
                queues.remove(queue)
            if not queues:
                self._by_topic.pop(topic, None)

    def targets(self, topic: str) -> list[CheckTarget]:
        def target(queue: asyncio.Queue[tuple[StoredMessage, int]]) -> CheckTarget:
            def put(message: StoredMessage, offset: int) -> bool:
                if queue.full():
                    return False
                queue.put_nowait((message, offset))
                return True

            return put

        out = [target(q) for q in reversed(self._by_topic.get(topic, []))]
        for source in self._sources:
            out.extend(source(topic))
        return out


class TransactionChecker:
    """``transactions`` returns the store's TransactionService (it exists once the store
    runs); ``targets(topic)`` the check targets of a topic, best first."""

    def __init__(
        self,
        transactions: Callable[[], Any],
        targets: Callable[[str], list[CheckTarget]],
        timeout_ms: int,
        interval_ms: int,
        check_max: int,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._transactions = transactions
        self._targets = targets
        self.timeout_ms = timeout_ms
        self.interval_ms = interval_ms
        self.check_max = check_max
        self._clock = clock_ms
        # Wake often enough for small test settings, at most every 5 s.
        self.step_s = min(max(min(timeout_ms, interval_ms) / 4000, 0.05), 5.0)
        self.sent = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.step_s)
            try:
                await self.check_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction check-back round failed; next round in %.1f s",
                              self.step_s)  # fmt: skip

    async def check_once(self) -> None:
        tx = self._transactions()
        await tx.catch_up()
        now = self._clock()
        for offset in tx.due_for_check(now, self.timeout_ms, self.interval_ms):
            message = tx.half(offset)
            if message is None:
                continue
            topic = message.properties.get(PROPERTY_REAL_TOPIC, "")
            if tx.checks_of(offset) >= self.check_max:
                await tx.discard(offset)
                log.warning(
                    "transaction %d (message %s, topic %s) discarded: unresolved after %d "
                    "check-backs (transactionCheckMax)", offset, message.unique_id, topic,
                    self.check_max,
                )  # fmt: skip
                continue
            tx.checked(offset, now)
            for target in self._targets(topic):
                with contextlib.suppress(Exception):
                    if target(message, offset):
                        self.sent += 1
                        break
