"""``Etcd`` (``kv.py``) in memory: the stand-in the election's unit tests run against
(tests/broker/test_election.py), with what a test needs to play etcd's part deterministically.

- One revision counter for the whole store, as etcd's: a put or delete takes the next one.
- Leases never run out on their own: ``expire(lease)`` ends one (its keys go, as when etcd lets
  it lapse), so a test decides when a master "dies".
- ``down = True``: every call raises ``EtcdUnavailable`` (etcd unreachable) until set back.
- ``stalled_refreshes = n``: the next n renewals hang until cancelled (a member cut from its
  peers holds a request until its time-out).
- Each call yields to the event loop once before it acts (a round trip's worth), so callers
  running concurrently interleave between calls; a transaction is one atomic step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from wharf.broker.failover.kv import Absent, Compare, CreatedAt, Entry, ModifiedAt, Op, Put, ValueIs


class EtcdUnavailable(ConnectionError):
    """MemoryEtcd.down: etcd does not answer."""


@dataclass(slots=True)
class _Key:
    value: bytes
    create_revision: int
    mod_revision: int
    lease: int


class MemoryEtcd:
    def __init__(self, target: str = "memory") -> None:
        self._target = target
        self.revision = 0
        self._keys: dict[bytes, _Key] = {}
        self._leases: dict[int, int] = {}  # id -> TTL granted (seconds)
        self._next_lease = 0x7E57_0000
        self.down = False
        self.closed = False
        self.transactions = 0  # how many ran (won or lost)
        self.stalled_refreshes = 0
        self.refreshes = 0  # how many were sent (stalled or answered)

    # --- test controls ------------------------------------------------------------------------
    def expire(self, lease: int) -> None:
        """The lease lapses now (its holder stopped renewing it): its keys are deleted."""
        if lease in self._leases:
            self._end(lease)

    def lease_of(self, key: bytes) -> int:
        """The lease ``key`` is bound to (0: none, or no such key)."""
        entry = self._keys.get(key)
        return entry.lease if entry is not None else 0

    def live_leases(self) -> set[int]:
        return set(self._leases)

    def value(self, key: bytes) -> bytes | None:
        """The key's value now, without a round trip (None if absent)."""
        entry = self._keys.get(key)
        return entry.value if entry is not None else None

    def keys(self, prefix: bytes = b"") -> dict[bytes, bytes]:
        return {k: e.value for k, e in sorted(self._keys.items()) if k.startswith(prefix)}

    # --- Etcd ---------------------------------------------------------------------------------
    @property
    def target(self) -> str:
        return self._target

    async def grant(self, ttl_s: int) -> int:
        await self._round_trip()
        self._next_lease += 1
        self._leases[self._next_lease] = ttl_s
        return self._next_lease

    async def refresh(self, lease: int) -> int:
        self.refreshes += 1
        if self.stalled_refreshes:
            self.stalled_refreshes -= 1
            await asyncio.Event().wait()  # until the caller cancels it
        await self._round_trip()
        return self._leases.get(lease, 0)

    async def revoke(self, lease: int) -> None:
        await self._round_trip()
        self._end(lease)

    async def get(self, key: bytes) -> Entry | None:
        await self._round_trip()
        entry = self._keys.get(key)
        if entry is None:
            return None
        return Entry(entry.value, entry.create_revision, entry.mod_revision)

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        await self._round_trip()
        self._apply([Put(key, value, lease)])

    async def transaction(self, compare: Sequence[Compare], success: Sequence[Op]) -> bool:
        await self._round_trip()
        self.transactions += 1
        if not all(self._holds(c) for c in compare):
            return False
        self._apply(success)
        return True

    async def close(self) -> None:
        self.closed = True

    # --- inside -------------------------------------------------------------------------------
    async def _round_trip(self) -> None:
        await asyncio.sleep(0)
        if self.down:
            raise EtcdUnavailable("etcd is down (MemoryEtcd.down)")

    def _holds(self, c: Compare) -> bool:
        entry = self._keys.get(c.key)
        if isinstance(c, Absent):
            return entry is None
        if isinstance(c, ValueIs):
            return entry is not None and entry.value == c.value
        if isinstance(c, CreatedAt):
            return (entry.create_revision if entry is not None else 0) == c.revision
        assert isinstance(c, ModifiedAt)
        return (entry.mod_revision if entry is not None else 0) == c.revision

    def _apply(self, ops: Sequence[Op]) -> None:
        for op in ops:  # etcd checks a put's lease before it changes anything
            if isinstance(op, Put) and op.lease and op.lease not in self._leases:
                raise LookupError(f"etcdserver: requested lease not found ({op.lease:#x})")
        self.revision += 1  # one revision per request, as etcd's transactions
        for op in ops:
            if isinstance(op, Put):
                old = self._keys.get(op.key)
                created = old.create_revision if old is not None else self.revision
                self._keys[op.key] = _Key(op.value, created, self.revision, op.lease)
            else:
                self._keys.pop(op.key, None)

    def _end(self, lease: int) -> None:
        if self._leases.pop(lease, None) is None:
            raise LookupError(f"etcdserver: requested lease not found ({lease:#x})")
        self.revision += 1
        for key in [k for k, e in self._keys.items() if e.lease == lease]:
            del self._keys[key]
