"""Metadata to the replicas, acknowledged: what lets an answer wait until the replicas hold a
metadata change (a Kafka OffsetCommit under SYNC_MASTER: a commit answered and then lost in a
failover makes the group re-read what it had committed).

The master's metadata (topics, groups, consumer offsets: opaque bytes the broker gives) goes
to each replica in METADATA frames: on connect, at once after ``changed()``, and whenever its
bytes differ at the once-a-second check. Every ``changed()`` is a new *version*; a frame
carries the version current when its snapshot was taken (a snapshot taken after a change
holds it). A replica applies frames in order and counts them: every REPORT it sends carries
how many METADATA frames it has applied on this connection (``frames.encode_report``), and it
sends one right after applying a frame. So a replica has applied version ``v`` once it reports
the number of a frame that carried ``v`` or later. A replica of an older version sends
REPORTs without that count: it is taken as holding every version (it cannot say, and
refusing every commit while a group is upgraded one broker at a time would be worse).

``HAMaster.metadata_replicated()`` waits on a ``ReplicaAcks`` of versions instead of log
offsets: True once the replicas every acknowledgement needs hold the version (the master
computes that watermark as it does the log's), False after ``slaveTimeout``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from wharf.store.ha import frames

CHECK_S = 1.0  # consumer offsets change without notice: their bytes are compared this often


@dataclass(slots=True)
class ReplicaMetadata:
    """What one replica connection was sent and has applied."""

    frames: int = 0  # METADATA frames sent on this connection
    sent: deque[list[int]] = field(default_factory=deque)  # [frame number, version], unapplied
    applied: int = -1  # the newest version the replica applied (-1: none yet)
    counts: bool | None = None  # its REPORTs count frames (None: no REPORT yet)
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def reported(self, applied_frames: int | None) -> None:
        """A REPORT came: ``applied_frames`` (None from a replica of an older version)."""
        if applied_frames is None:
            self.counts = False
            return
        self.counts = True
        sent = self.sent
        while sent and sent[0][0] <= applied_frames:
            self.applied = max(self.applied, sent.popleft()[1])

    def held(self, version: int) -> int:
        """The newest version it holds, ``version`` (the latest) if it cannot count."""
        return version if self.counts is False else self.applied


class MetadataShipping:
    """The master's side: versions, the per-connection loop, the waiters."""

    def __init__(
        self, snapshot: Callable[[], bytes] | None, on_applied: Callable[[], None]
    ) -> None:
        """``on_applied()``: a replica was found to hold a newer version without a REPORT."""
        self._snapshot = snapshot
        self._on_applied = on_applied
        self.version = 0
        self._replicas: list[ReplicaMetadata] = []

    def changed(self) -> int:
        """The metadata changed: ship it now; the version a replica must reach to hold it."""
        self.version += 1
        for replica in self._replicas:
            replica.wake.set()
        return self.version

    async def serve(self, replica: ReplicaMetadata, writer: asyncio.StreamWriter) -> None:
        """Send ``replica`` the snapshot whenever it changed, for as long as the connection
        lives (a task of the connection)."""
        if self._snapshot is None:
            await asyncio.Event().wait()  # nothing to send: live as long as the connection
        self._replicas.append(replica)
        try:
            await self._serve(replica, writer)
        finally:
            self._replicas.remove(replica)

    async def _serve(self, replica: ReplicaMetadata, writer: asyncio.StreamWriter) -> None:
        assert self._snapshot is not None
        last = b""
        while True:
            replica.wake.clear()
            version = self.version  # read first: the snapshot holds every change before it
            snapshot = self._snapshot()
            if snapshot != last or not replica.frames:
                writer.write(frames.frame(frames.FrameType.METADATA, snapshot))
                replica.frames += 1
                replica.sent.append([replica.frames, version])
                last = snapshot
                await writer.drain()
            elif replica.sent:
                replica.sent[-1][1] = version  # the frame on its way has these bytes too
            elif version > replica.applied:
                replica.applied = version  # it holds these very bytes
                self._on_applied()
            if version < self.version:
                continue  # changed while this frame was written
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CHECK_S):
                    await replica.wake.wait()
