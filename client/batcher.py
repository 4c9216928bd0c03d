"""Kafka-style auto-batching: many ``send()`` calls become few multi-message requests.

Messages for the same (topic, queue) accumulate in an open batch. A batch closes when it
reaches ``max_messages`` / ``max_bytes``, or when its linger expires (``linger_s = 0`` means
"at the next event-loop turn", which already gathers every send issued in the same turn)
AND a request slot is free: while ``max_in_flight`` requests are outstanding an expired
batch stays open and keeps growing until a reply frees a slot (Nagle-like). So a lone sender
pays no linger, and a steady stream of sends turns into few large requests instead of a
queue of one-message requests. Every message keeps its own future and result entry.

With ``linger_s = 0``, a batch opened while a slot is free and nothing else waits gets its
request task at once; the task closes the batch when it first runs (the next loop turn, as
the linger callback would): a lone ``send()`` reaches the stream write one loop turn after
the call instead of two.

With ``send_many`` (and ``mergeable`` saying which keys may share a request), a batch's
request also takes the other mergeable batches that wait at that moment (full ones waiting
for a slot, expired ones, and with ``linger_s = 0`` those of the same loop turn), up to
``max_messages`` / ``max_bytes`` in all: many keys in use (a producer writing to hundreds of
topics) then cost few requests instead of one each, the per-request cost having dominated.
Each batch keeps its own results, or its own error; the request's deadline is the earliest of
its batches'.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Awaitable, Callable, Hashable
from operator import attrgetter
from typing import Any

from wharf import hops
from wharf.client.errors import DeadlineExceededError

_NEVER = float("inf")
# A group's columns in passes of C (map): at 256 topics a request's group is ~32 batches.
_DEADLINE = attrgetter("deadline")
_FUTURES = attrgetter("futures")
_KEY_MESSAGES = attrgetter("key", "messages")

# The send function: (key, messages) -> one result per message, in order.
SendBatchFn = Callable[[Any, list[Any]], Awaitable[list[Any]]]
# Several batches in one request: [(key, messages), ...] -> per batch its results or the
# exception that failed it alone.
SendManyFn = Callable[[list[tuple[Any, list[Any]]]], Awaitable[list[list[Any] | Exception]]]


class _Batch:
    """One (topic, queue) batch: its messages, and who waits for their results."""

    # A plain class: the dataclass's __init__ with its three default factories cost ~0.1 us
    # more (0.30 against 0.21 us, timeit); at 256 topics each send_batch opens one.
    __slots__ = ("deadline", "early", "futures", "groups", "key", "messages", "nbytes", "singles",
                 "timer")  # fmt: skip

    def __init__(self, key: Hashable) -> None:
        self.key = key
        self.messages: list[Any] = []
        # One per message: its own future, or None for a member of a group (send_batch).
        self.futures: list[asyncio.Future[Any] | None] = []
        self.singles = 0  # futures that are not None: none, and delivery skips the list
        # Groups: (future of the group's result list, first index, count).
        self.groups: list[tuple[asyncio.Future[Any], int, int]] = []
        self.nbytes = 0
        self.deadline = _NEVER  # loop time; the earliest deadline of its messages
        self.timer: asyncio.TimerHandle | asyncio.Handle | None = None
        # Its request task exists already (the lone-send fast path): it closes the batch when
        # it first runs; until then the batch stays open to the sends of the same loop turn.
        self.early = False


class AutoBatcher:
    def __init__(
        self,
        send_batch: SendBatchFn,
        *,
        linger_s: float = 0.0,
        max_messages: int = 512,
        max_bytes: int = 1 << 20,
        max_in_flight: int = 4,
        max_buffered: int = 65536,
        send_many: SendManyFn | None = None,
        mergeable: Callable[[Any], bool] | None = None,
    ) -> None:
        if max_messages < 1 or max_bytes < 1 or max_in_flight < 1 or linger_s < 0:
            raise ValueError("batcher limits must be positive (linger_s >= 0)")
        self._send_batch = send_batch
        self._send_many = send_many
        self._mergeable = mergeable or (lambda key: True)
        self._linger_s = linger_s
        self._max_messages = max_messages
        self._max_bytes = max_bytes
        self._max_in_flight = max_in_flight
        self._max_buffered = max_buffered
        self._open: dict[Hashable, _Batch] = {}
        self._ready: collections.deque[_Batch] = collections.deque()  # full, waiting for a slot
        self._due: dict[Hashable, None] = {}  # keys whose linger expired (insertion-ordered)
        self._in_flight = 0
        self._buffered = 0  # messages accepted but not yet answered
        self._space = asyncio.Event()
        self._space.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop: asyncio.AbstractEventLoop | None = None  # bound on first use
        self._opened: list[_Batch] = []  # with linger 0: opened this loop turn, to expire
        self._turn: asyncio.Handle | None = None  # the callback that expires them

    def loop_time(self) -> float:
        """The event loop's clock (the time base of ``submit`` deadlines)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop.time()

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def buffered(self) -> int:
        return self._buffered

    @property
    def max_buffered(self) -> int:
        return self._max_buffered

    async def wait_for_space(self) -> None:
        """Back-pressure: wait while ``max_buffered`` messages are unanswered."""
        while self._buffered >= self._max_buffered:
            self._space.clear()
            await self._space.wait()

    def submit(
        self, key: Hashable, message: Any, nbytes: int, deadline: float = float("inf")
    ) -> asyncio.Future[Any]:
        """Queue one message; the future resolves to its result entry (or the batch's error).

        ``deadline`` (loop time) bounds the whole batch request: one timer per batch instead
        of one per message; a batch past its deadline fails with DeadlineExceededError."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        batch = self._open.get(key)
        if batch is None:
            batch = self._open_batch(key, loop)
        future: asyncio.Future[Any] = loop.create_future()
        batch.messages.append(message)
        batch.futures.append(future)
        batch.singles += 1
        batch.nbytes += nbytes
        if deadline < batch.deadline:
            batch.deadline = deadline
        self._buffered += 1
        self._idle.clear()
        if len(batch.messages) >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._close(batch)
        return future

    def submit_group(
        self, key: Hashable, messages: list[Any], nbytes: int, deadline: float = float("inf")
    ) -> asyncio.Future[list[Any]]:
        """Queue several messages that must go out together, contiguous in one request (one
        store append: consecutive queue offsets). They may share the request with other
        messages of the same key. The future resolves to their result entries, in order."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        batch = self._open.get(key)
        if batch is not None and (
            len(batch.messages) + len(messages) > self._max_messages
            or batch.nbytes + nbytes > self._max_bytes
        ):
            self._close(batch)  # the group would overflow it: it goes out as it is
            batch = None
        if batch is None:
            batch = self._open_batch(key, loop)
        future: asyncio.Future[list[Any]] = loop.create_future()
        batch.groups.append((future, len(batch.messages), len(messages)))
        batch.messages.extend(messages)
        batch.futures.extend([None] * len(messages))
        batch.nbytes += nbytes
        if deadline < batch.deadline:
            batch.deadline = deadline
        self._buffered += len(messages)
        self._idle.clear()
        if len(batch.messages) >= self._max_messages or batch.nbytes >= self._max_bytes:
            self._close(batch)
        return future

    def _open_batch(self, key: Hashable, loop: asyncio.AbstractEventLoop) -> _Batch:
        batch = _Batch(key)
        self._open[key] = batch
        if self._linger_s > 0:
            batch.timer = loop.call_later(self._linger_s, self._linger_expired, batch)
        elif self._in_flight < self._max_in_flight and not self._ready and not self._due:
            # Fast path (a lone send: a free slot, nothing waiting): the request task is
            # created now and closes the batch when it first runs, the next loop turn, when a
            # linger callback would have. One loop turn instead of two (callback, then task):
            # ~40-60 us less per lone send, the same batching of a turn's sends.
            batch.early = True
            self._start(batch)
        else:
            # One callback a loop turn expires every batch opened in it: a handle a batch
            # cost ~1.5 us each with hundreds of keys in use.
            self._opened.append(batch)
            if self._turn is None:
                self._turn = loop.call_soon(self._turn_ended)
        return batch

    def _turn_ended(self) -> None:
        batches, self._opened, self._turn = self._opened, [], None
        opened = self._open
        for batch in batches:
            if opened.get(batch.key) is batch:  # else closed meanwhile (most, taken along)
                self._linger_expired(batch)

    def flush_now(self) -> None:
        """Close every open batch at once (used on close)."""
        for batch in list(self._open.values()):
            self._close(batch)

    async def drain(self) -> None:
        """Send everything buffered and wait for every answer."""
        self.flush_now()
        await self._idle.wait()

    def _linger_expired(self, batch: _Batch) -> None:
        if self._open.get(batch.key) is not batch:
            return  # already closed by size
        batch.timer = None
        if self._in_flight < self._max_in_flight:
            self._close(batch)
        else:
            self._due[batch.key] = None  # sent by _pump when a slot frees; grows meanwhile

    def _close(self, batch: _Batch) -> None:
        if self._open.get(batch.key) is not batch:
            return  # already closed
        del self._open[batch.key]
        if batch.early:
            return  # its request task, already started, sends it
        self._due.pop(batch.key, None)
        if batch.timer is not None:
            batch.timer.cancel()
        self._ready.append(batch)
        self._pump()

    def _pump(self) -> None:
        while self._in_flight < self._max_in_flight:
            if not self._ready:
                if not self._due:
                    return
                key = next(iter(self._due))
                self._close(self._open[key])  # re-enters _pump: one send per step
                continue
            self._start(self._ready.popleft())

    def _start(self, batch: _Batch) -> None:
        """Take a request slot and start the batch's request task."""
        self._in_flight += 1
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: _Batch) -> None:
        if batch.early and self._open.get(batch.key) is batch:
            del self._open[batch.key]  # closed now: later sends open the next batch
        group = [batch]
        if self._send_many is not None and self._mergeable(batch.key):
            self._take_companions(group)
        if hops.ENABLED:
            hops.stamp("c.batch_run")
        deadline = min(map(_DEADLINE, group)) if len(group) > 1 else batch.deadline
        try:
            async with asyncio.timeout_at(deadline if deadline != _NEVER else None):
                if len(group) == 1:
                    outcomes: list[list[Any] | Exception] = [
                        await self._send_batch(batch.key, batch.messages)
                    ]
                else:
                    assert self._send_many is not None
                    outcomes = await self._send_many(list(map(_KEY_MESSAGES, group)))
            for member, outcome in zip(group, outcomes, strict=True):
                if isinstance(outcome, Exception):
                    _fail_all(member, outcome)
                else:
                    _deliver(member, outcome)
        except TimeoutError:
            for member in group:
                count = len(member.futures)
                _fail_all(
                    member, DeadlineExceededError(f"no answer for a batch of {count} in time")
                )
        except BaseException as exc:  # every waiter must learn the outcome, even on cancel
            for member in group:
                _fail_all(member, exc if isinstance(exc, Exception) else asyncio.CancelledError())
            if not isinstance(exc, Exception):
                raise
        finally:
            self._in_flight -= 1
            self._buffered -= sum(map(len, map(_FUTURES, group)))
            if self._buffered < self._max_buffered:
                self._space.set()
            self._pump()
            if self._buffered == 0 and not self._open and not self._ready:
                self._idle.set()

    def _take_companions(self, group: list[_Batch]) -> None:
        """Add to ``group`` (one batch) the mergeable batches waiting now, within the limits
        of one batch: those waiting for a slot, the expired ones, and with linger 0 the open
        ones of this loop turn (their linger callback would close them now anyway)."""
        count = len(group[0].messages)
        nbytes = group[0].nbytes
        mergeable = self._mergeable
        max_messages, max_bytes = self._max_messages, self._max_bytes
        if self._ready:
            kept: collections.deque[_Batch] = collections.deque()
            for other in self._ready:
                if (
                    count + len(other.messages) <= max_messages
                    and nbytes + other.nbytes <= max_bytes
                    and mergeable(other.key)
                ):
                    group.append(other)
                    count += len(other.messages)
                    nbytes += other.nbytes
                else:
                    kept.append(other)
            self._ready = kept
        candidates = self._open.values() if self._linger_s == 0 else [
            self._open[key] for key in self._due
        ]  # fmt: skip
        taken = []
        for other in candidates:
            if (
                not other.early
                and count + len(other.messages) <= max_messages
                and nbytes + other.nbytes <= max_bytes
                and mergeable(other.key)
            ):
                taken.append(other)
                count += len(other.messages)
                nbytes += other.nbytes
        opened, due = self._open, self._due
        for other in taken:
            del opened[other.key]
            if due:  # (empty unless every slot was taken when a linger expired)
                due.pop(other.key, None)
            if other.timer is not None:
                other.timer.cancel()
        group.extend(taken)


def _deliver(batch: _Batch, results: list[Any]) -> None:
    if len(results) != len(batch.futures):
        error = RuntimeError(
            f"broker answered {len(results)} results for {len(batch.futures)} messages"
        )
        _fail_all(batch, error)
        return
    if batch.singles:  # else every message is a group's (send_batch): no future of its own
        for future, result in zip(batch.futures, results, strict=True):
            if future is not None and not future.done():
                future.set_result(result)
    elif len(batch.groups) == 1:  # one send_batch alone (many topics: most batches)
        group = batch.groups[0][0]
        if not group.done():
            group.set_result(results)  # all of them, in order: no slice to copy
        return
    for group, first, count in batch.groups:
        if not group.done():
            group.set_result(results[first : first + count])


def _fail_all(batch: _Batch, error: BaseException) -> None:
    for future in batch.futures:
        if future is not None and not future.done():
            future.set_exception(error)
    for group, _, _ in batch.groups:
        if not group.done():
            group.set_exception(error)
