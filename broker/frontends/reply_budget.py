"""Bytes of pull replies handed to gRPC but not yet read by their client, per client connection
and in total: a consumer that stops reading cannot make the broker buffer without limit.

A unary reply stays in gRPC's buffers until the client's HTTP/2 window lets it out; the call
(and the reply's memory) ends only then. Measured here: 200 parked long-poll pulls of a client
stopped with SIGSTOP, woken by 4 MB of new messages, grew the broker by 584 MiB (each woke with
a 3 MiB reply). With this budget a connection holds at most ``per_client`` unread bytes (plus
one reply); its next pull gets RESOURCE_EXHAUSTED naming the limit before anything is read (the SDK backs off and retries at the same
offset: nothing is skipped), and every other connection keeps its own budget. The total cap is
the last line for many stalled clients at once.

A reservation is released by the call's done callback: when gRPC has sent the reply (or the
call was cancelled because the client went away).

A pull stream (PullMessageStream) holds its replies from the moment they are built until gRPC
has taken them for sending (``StreamReplies``): while one stream holds ``per_client`` bytes
its pulls do not read (they wait, rather than fail, until the client takes replies), so a
stream that stops reading holds at most ``per_client`` plus one reply of maxPullBytes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from wharf.broker.errors import ResourceExhaustedError

MIB = 1 << 20


class ReplyBudget:
    def __init__(self, per_client: int, total: int) -> None:
        self.per_client = per_client
        self.total = total
        self.held = 0
        self._by_client: dict[str, int] = {}
        self.refused = 0

    def for_call(self, context: Any) -> CallReplies:
        return CallReplies(self, context)

    def admit(self, client: str) -> None:
        """Before a read: refuse while the client (or the broker) is at its budget, so a
        refused pull allocates nothing. Its call may itself stay alive until the stalled
        client reads (its status cannot be sent before the replies queued ahead of it)."""
        held = self._by_client.get(client, 0)
        if held >= self.per_client:
            self.refused += 1
            raise ResourceExhaustedError(
                f"client {client} has {held / MIB:.1f} MiB of pull replies it has not read yet "
                f"(maxUnreadPullBytesPerClient is {self.per_client / MIB:.0f} MiB): read the "
                "replies already received before pulling more"
            )
        if self.held >= self.total:
            self.refused += 1
            raise ResourceExhaustedError(
                f"the broker holds {self.held / MIB:.1f} MiB of pull replies that clients have "
                f"not read yet (maxUnreadPullBytes is {self.total / MIB:.0f} MiB); retry shortly"
            )

    def hold(self, client: str, nbytes: int) -> None:
        self._by_client[client] = self._by_client.get(client, 0) + nbytes
        self.held += nbytes

    def release(self, client: str, nbytes: int) -> None:
        self.held -= nbytes
        left = self._by_client.get(client, 0) - nbytes
        if left > 0:
            self._by_client[client] = left
        else:
            self._by_client.pop(client, None)


class CallReplies:
    """One pull call's view of the budget: ``admit()`` before each read, ``hold(nbytes)`` once
    the reply is built (released when the call ends). A read and its hold run without an await
    in between, so a client holds at most its budget plus one reply of maxPullBytes."""

    __slots__ = ("_budget", "_client", "_context")
    full = False  # a unary call never waits for room (it is refused instead)

    def __init__(self, budget: ReplyBudget, context: Any) -> None:
        self._budget = budget
        self._context = context
        self._client = ""

    def _client_key(self) -> str:
        if not self._client:
            self._client = self._context.peer()  # one HTTP/2 connection: "ipv4:host:port"
        return self._client

    async def room(self) -> None:
        pass

    def admit(self) -> None:
        self._budget.admit(self._client_key())

    def hold(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        client, budget = self._client_key(), self._budget
        budget.hold(client, nbytes)
        self._context.add_done_callback(lambda _context: budget.release(client, nbytes))

    def long_polling(self) -> None:
        pass  # a unary reply is written by its own call whenever it comes


class StreamReplies:
    """The replies of one pull stream: ``for_pull()`` gives each pull its accounting object;
    the stream calls ``taken(nbytes)`` once gRPC has taken a reply of ``nbytes`` for sending
    (or drops it). ``full`` while the stream holds ``window`` bytes or more."""

    __slots__ = ("_budget", "_client", "_room", "held", "window")

    def __init__(self, budget: ReplyBudget, client: str, window: int) -> None:
        self._budget = budget
        self._client = client
        self.window = window
        self.held = 0
        self._room = asyncio.Event()
        self._room.set()

    @property
    def full(self) -> bool:
        return self.held >= self.window

    async def room(self) -> None:
        while self.held >= self.window:
            await self._room.wait()

    def admit(self) -> None:
        self._budget.admit(self._client)

    def hold(self, nbytes: int) -> None:
        self._budget.hold(self._client, nbytes)
        self.held += nbytes
        if self.held >= self.window:
            self._room.clear()

    def taken(self, nbytes: int) -> None:
        if nbytes <= 0:
            return
        self._budget.release(self._client, nbytes)
        self.held -= nbytes
        if self.held < self.window:
            self._room.set()

    def for_pull(self) -> PullReplies:
        return PullReplies(self)


class PullReplies:
    """One pull of a stream: remembers the bytes its reply holds (``nbytes``) and whether it
    parked in a long poll (``long_polled``: the stream then writes its reply at once when it
    can, instead of batching it with the replies of its request's neighbours)."""

    __slots__ = ("_stream", "delivered", "long_polled", "nbytes")

    def __init__(self, stream: StreamReplies) -> None:
        self._stream = stream
        self.nbytes = 0
        self.long_polled = False
        # Its reply was written in place by the arrival that answered its long poll (its
        # slot and bytes given back then): nothing more to give back when its task ends.
        self.delivered = False

    def long_polling(self) -> None:
        self.long_polled = True

    @property
    def full(self) -> bool:
        return self._stream.full

    async def room(self) -> None:
        await self._stream.room()

    def admit(self) -> None:
        self._stream.admit()

    def hold(self, nbytes: int) -> None:
        if nbytes > 0:
            self._stream.hold(nbytes)
            self.nbytes += nbytes


class NoReplyBudget:
    """For callers without a gRPC context (unit tests of the processor)."""

    full = False

    async def room(self) -> None:
        pass

    def admit(self) -> None:
        pass

    def hold(self, nbytes: int) -> None:
        pass

    def long_polling(self) -> None:
        pass
