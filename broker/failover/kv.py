"""The few etcd operations the election uses, as a typed seam (``Etcd``): leases (grant, keep
alive, revoke), a read, a put (bound to a lease or not) and one compare-and-swap transaction.
``wharf.broker.failover.etcd`` implements it on aetcd (the broker), ``.memory`` in memory (the
election's unit tests); nothing else of etcd is used.

There is no watch: a replica polls ``master`` every ``Timing.poll_s`` (a watch stream must be
re-created after every etcd restart, a poll needs nothing), so the seam has none to stand in for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias


@dataclass(frozen=True, slots=True)
class Entry:
    """A key's value and its revisions (etcd's: the cluster-wide revision of the put that
    created the key, and of the last one that changed it)."""

    value: bytes
    create_revision: int
    mod_revision: int


# --- transaction comparisons (all must hold for the success operations to run) ----------------
@dataclass(frozen=True, slots=True)
class Absent:
    """The key does not exist (etcd: its create revision is 0)."""

    key: bytes


@dataclass(frozen=True, slots=True)
class ValueIs:
    """The key exists with this value."""

    key: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class CreatedAt:
    """The key was created at this revision (the same key, not one deleted and made again)."""

    key: bytes
    revision: int


@dataclass(frozen=True, slots=True)
class ModifiedAt:
    """The key was last changed at this revision (nobody wrote it since it was read)."""

    key: bytes
    revision: int


Compare: TypeAlias = Absent | ValueIs | CreatedAt | ModifiedAt


# --- transaction operations -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Put:
    """Write the key; with ``lease`` (an id, 0 = none) it is deleted when that lease ends."""

    key: bytes
    value: bytes
    lease: int = 0


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the key (nothing happens if it does not exist)."""

    key: bytes


Op: TypeAlias = Put | Delete


class Etcd(Protocol):
    """What the election needs of etcd. Every call may raise when etcd does not answer (the
    election's loop logs it and tries again at its next poll)."""

    @property
    def target(self) -> str:
        """Where it points, for log lines ("127.0.0.1:2379,...")."""
        ...

    async def grant(self, ttl_s: int) -> int:
        """A new lease of ``ttl_s`` seconds; returns its id."""
        ...

    async def refresh(self, lease: int) -> int:
        """Keep ``lease`` alive once: its TTL from now in seconds (<= 0: it has ended, and the
        keys bound to it are gone)."""
        ...

    async def revoke(self, lease: int) -> None:
        """End ``lease`` now: the keys bound to it are deleted."""
        ...

    async def get(self, key: bytes) -> Entry | None:
        """The key's value and revisions, None if it does not exist."""
        ...

    async def put(self, key: bytes, value: bytes, lease: int = 0) -> None:
        """Write ``key`` (bound to ``lease`` unless 0)."""
        ...

    async def transaction(self, compare: Sequence[Compare], success: Sequence[Op]) -> bool:
        """Atomically: if every comparison holds, apply ``success`` and return True; else
        change nothing and return False."""
        ...

    async def close(self) -> None:
        """Release the connection (the election has stopped)."""
        ...
