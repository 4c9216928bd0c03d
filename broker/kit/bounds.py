"""Connection bounds of the asyncio listeners (wire, remoting, Kafka, metrics), one rule for
all: what a connection may hold is bounded by settings, not by the good manners of its peer.

- Caps: at most ``max_connections`` connections per listener and ``max_per_address`` from one
  client address; a connection past either is closed as soon as it is accepted.
- Read deadline (``frameReadTimeoutMs``): a frame begun must arrive whole within it, and a new
  connection must send its first bytes within it. Measured against the clock, not per byte,
  so a peer dribbling one byte a second (slowloris) is cut like a silent one. Time during
  which the broker itself stopped reading (back-pressure) does not count.
- Idle timeout: a connection with no call in flight (a parked long poll or an open stream is
  a call in flight) that sent nothing for the listener's idle time is closed.
- Budget (``maxBufferedFrameBytes``): the bytes every connection of the broker holds in
  partially received frames, together; a connection whose bytes would take the total past it
  is closed (the newest growth is refused, the frames already arriving go on).

Each closing is one log line (at most ``_LOG_BURST`` per ``_LOG_WINDOW_S`` per listener, then
one line counting the rest: 5,000 closed connections must not be 5,000 lines).

How: ``ListenerGuard.wrap(factory)`` wraps each connection's protocol in ``_Guarded``, which
sees its bytes and asks the protocol two questions (``Watched``): is a call in flight
(``busy``), and how many bytes of an unfinished frame it holds (``receiving``; > 0 also for a
call opened whose request has not come). One timer per listener sweeps the connections every
``sweep_s`` (a quarter of the shorter timeout, 50 ms..1 s): ~1 us a connection, 5 ms for
5,000, instead of a timer re-armed per read on the hot path.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["FrameBudget", "ListenerGuard", "ListenerLimits", "Watched", "peer_host"]

log = logging.getLogger("broker.bounds")

_LOG_BURST = 20  # closing lines per listener per window before they are only counted
_LOG_WINDOW_S = 10.0
_SWEEP_MIN_S, _SWEEP_MAX_S = 0.05, 1.0


class Watched(Protocol):
    """What a guarded protocol answers about itself."""

    def busy(self) -> bool:
        """A call (request) is in flight: the connection is not idle whatever its silence."""
        ...

    def receiving(self) -> int:
        """Bytes of an unfinished frame held (> 0 as well while a call waits for its
        request): the read deadline runs while this is > 0."""
        ...


class BoundSettings(Protocol):
    """The broker's settings ``ListenerLimits.of`` reads (BrokerConfig's; a Protocol, so the
    NameServer can use this module without the broker's config and the store behind it)."""

    # Read-only properties: BrokerConfig is a frozen dataclass.
    @property
    def connection_max_idle_ms(self) -> int: ...
    @property
    def server_channel_max_idle_time_seconds(self) -> int: ...
    @property
    def kafka_connections_max_idle_ms(self) -> int: ...
    @property
    def frame_read_timeout_ms(self) -> int: ...
    @property
    def max_connections_per_listener(self) -> int: ...
    @property
    def max_connections_per_address(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """One listener's bounds (seconds; 0 = no limit)."""

    name: str  # the setting of its address, for log lines ("wireListen")
    idle_s: float
    read_s: float
    max_connections: int
    max_per_address: int
    idle_setting: str = "connectionMaxIdleMs"

    @classmethod
    def of(cls, broker: BoundSettings, name: str) -> ListenerLimits:
        """The limits of listener ``name`` ("wireListen", "remotingListen", "kafkaListen",
        "metricsListen") from the broker's settings: remoting and Kafka idle by their own
        protocol's setting and default, the others by connectionMaxIdleMs."""
        idle_s, setting = broker.connection_max_idle_ms / 1000, "connectionMaxIdleMs"
        if name.startswith("remoting"):
            idle_s = broker.server_channel_max_idle_time_seconds
            setting = "serverChannelMaxIdleTimeSeconds"
        elif name.startswith("kafka"):
            idle_s, setting = (
                broker.kafka_connections_max_idle_ms / 1000,
                "kafkaConnectionsMaxIdleMs",
            )
        return cls(
            name=name,
            idle_s=idle_s,
            read_s=broker.frame_read_timeout_ms / 1000,
            max_connections=broker.max_connections_per_listener,
            max_per_address=broker.max_connections_per_address,
            idle_setting=setting,
        )


class FrameBudget:
    """Bytes held in partially received frames by every guarded connection of one broker."""

    __slots__ = ("held", "refused", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0
        self.refused = 0  # connections closed for taking the total past ``total``

    def change(self, delta: int) -> bool:
        """Count ``delta`` bytes more (or fewer); False when growing took the total past it."""
        self.held += delta
        return delta <= 0 or self.held <= self.total


def peer_host(transport: asyncio.BaseTransport) -> str:
    """The client's IP as connected (ipv4-mapped ipv6 as ipv4), '' for a Unix socket."""
    peer = transport.get_extra_info("peername")
    if isinstance(peer, tuple) and peer:
        host = str(peer[0])
        return host[7:] if host.startswith("::ffff:") else host
    return ""


class _CloseLog:
    """One line per closing, at most ``_LOG_BURST`` per window, then a count of the rest."""

    __slots__ = ("_count", "_skipped", "_window")

    def __init__(self) -> None:
        self._window = 0.0
        self._count = 0
        self._skipped = 0

    def __call__(self, name: str, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._window >= _LOG_WINDOW_S:
            if self._skipped:
                log.warning("%s: %d more connections closed in %.0f s (lines left out)",
                            name, self._skipped, _LOG_WINDOW_S)  # fmt: skip
            self._window, self._count, self._skipped = now, 0, 0
        if self._count < _LOG_BURST:
            self._count += 1
            log.warning("%s: " + message, name, *args)
        else:
            self._skipped += 1


class ListenerGuard:
    """The bounds of one listener: ``wrap(factory)`` for ``create_server``; ``close()`` stops
    its sweep. ``budget`` is the broker's, shared by its listeners (None: no budget)."""

    def __init__(self, limits: ListenerLimits, budget: FrameBudget | None = None) -> None:
        self.limits = limits
        self.budget = budget
        self.connections: set[_Guarded] = set()
        self.by_address: collections.Counter[str] = collections.Counter()
        self.refused = 0  # over a cap
        self.cut = 0  # closed by a deadline or the budget
        self._timer: asyncio.TimerHandle | None = None
        self.log = _CloseLog()
        timeouts = [t for t in (limits.idle_s, limits.read_s) if t > 0]
        self.sweep_s = min(_SWEEP_MAX_S, max(_SWEEP_MIN_S, min(timeouts, default=4.0) / 4))

    def wrap(self, factory: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Guarded(factory(), self)

    def admit(self, conn: _Guarded, host: str) -> str | None:
        """None when ``conn`` may stay (then counted), else why not."""
        limits = self.limits
        if limits.max_connections and len(self.connections) >= limits.max_connections:
            return (f"{len(self.connections)} connections are open on this listener "
                    f"(maxConnectionsPerListener is {limits.max_connections})")  # fmt: skip
        if host and limits.max_per_address and self.by_address[host] >= limits.max_per_address:
            return (f"{self.by_address[host]} connections are open from {host} "
                    f"(maxConnectionsPerAddress is {limits.max_per_address})")  # fmt: skip
        self.connections.add(conn)
        if host:
            self.by_address[host] += 1
        if self._timer is None and (limits.idle_s > 0 or limits.read_s > 0):
            self._timer = asyncio.get_running_loop().call_later(self.sweep_s, self._sweep)
        return None

    def leave(self, conn: _Guarded, host: str) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            if host:
                left = self.by_address[host] - 1
                if left > 0:
                    self.by_address[host] = left
                else:
                    del self.by_address[host]

    def _sweep(self) -> None:
        self._timer = None
        if not self.connections:
            return  # re-armed by the next admission
        now = time.monotonic()
        limits = self.limits
        for conn in list(self.connections):
            try:
                conn.check(now, limits)
            except Exception:  # a bug in a protocol's answers must not end the sweeps
                log.exception("%s: checking a connection failed", limits.name)
        self._timer = asyncio.get_running_loop().call_later(self.sweep_s, self._sweep)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Guarded(asyncio.Protocol):
    """A connection's protocol, seen by its listener's guard (everything else passes
    through)."""

    __slots__ = ("_guard", "_held", "_host", "_inner", "_last", "_peer", "_since", "_transport")

    def __init__(self, inner: Any, guard: ListenerGuard) -> None:
        self._inner = inner
        self._guard = guard
        self._transport: asyncio.Transport | None = None
        self._host = ""
        self._peer = "?"
        self._last = time.monotonic()  # the last bytes received (or the accept)
        self._since = self._last  # when the frame being received began (0.0: none)
        self._held = 0  # bytes counted against the budget

    # --- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        self._host = peer_host(transport)
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and peer else "?"
        refusal = self._guard.admit(self, self._host)
        if refusal is not None:
            self._guard.refused += 1
            self._guard.log(self._guard.limits.name, "refused a connection from %s: %s",
                            self._peer, refusal)  # fmt: skip
            self._inner = None
            transport.abort()  # type: ignore[attr-defined]  # a stream transport's
            return
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        inner = self._inner
        if inner is None:
            return
        self._last = now = time.monotonic()
        inner.data_received(data)
        held = inner.receiving()
        if held <= 0:
            self._since = 0.0
        elif not self._since:
            self._since = now
        budget = self._guard.budget
        if budget is not None and held != self._held:
            grew = budget.change(held - self._held)
            self._held = held
            if not grew:
                budget.refused += 1
                self._cut(
                    "holds %d bytes of an unfinished frame, and all connections together "
                    "%d (maxBufferedFrameBytes is %d)", held, budget.held, budget.total,
                )  # fmt: skip

    def connection_lost(self, exc: Exception | None) -> None:
        guard = self._guard
        guard.leave(self, self._host)
        if self._held and guard.budget is not None:
            guard.budget.change(-self._held)
            self._held = 0
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def close(self) -> None:
        """End the connection now (a stop)."""
        if self._transport is not None:
            self._transport.abort()

    # --- the guard's ------------------------------------------------------------------------------
    def check(self, now: float, limits: ListenerLimits) -> None:
        inner, transport = self._inner, self._transport
        if inner is None or transport is None or transport.is_closing():
            return
        if not transport.is_reading():
            # The broker stopped reading (back-pressure): its peer is not the slow one.
            self._last = now
            if self._since:
                self._since = now
            return
        if not self._since and inner.receiving() > 0:
            self._since = now  # a call opened without its request, found by the sweep
        if self._since and limits.read_s > 0 and now - self._since > limits.read_s:
            self._cut(
                "closed the connection from %s: no whole frame (or request) for %.1f s, %d "
                "bytes of one held (frameReadTimeoutMs is %d)",
                self._peer, now - self._since, inner.receiving(), limits.read_s * 1000,
            )  # fmt: skip
            return
        if limits.idle_s > 0 and now - self._last > limits.idle_s and not inner.busy():
            self._cut(
                "closed the connection from %s: idle for %.1f s (%s is %g s)",
                self._peer, now - self._last, limits.idle_setting, limits.idle_s,
            )  # fmt: skip

    def _cut(self, message: str, *args: Any) -> None:
        guard = self._guard
        guard.cut += 1
        if not message.startswith("closed"):
            message, args = "closed the connection from %s: it " + message, (self._peer, *args)
        guard.log(guard.limits.name, message, *args)
        if self._transport is not None:
            self._transport.abort()  # no goodbye owed: the peer misbehaved or left
