"""MetadataPersister: the metadata tables (topics, groups, consumer offsets) written to their
files, a named part of the broker with start, stop and health (``store.service.Service``).

Every ``flushConsumerOffsetInterval`` (5 s), or right after ``wakeup()`` (a topic or group
changed: rare, and costly to forget in a crash; offsets change all the time and wait), runs at
least 50 ms apart so a burst of auto-creates is one write. Each dirty table is captured on the
loop (cheap) and serialized and written in a thread (``persist.write_text_atomic_blocking``).
A failed write keeps the table dirty for the next round; a lasting condition (a full disk, the
open-file table) is one log line per episode.
"""

from __future__ import annotations

import asyncio
import errno
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from wharf.broker.meta.persist import load_json_blocking, write_text_atomic_blocking
from wharf.store.errors import is_disk_full
from wharf.store.service import Service

log = logging.getLogger("broker")

COALESCE_S = 0.05  # a burst of auto-creates becomes one write


class Table(Protocol):
    """What the persister needs of a metadata manager (TopicConfigManager ...)."""

    FILE_NAME: str
    dirty: bool

    def capture(self) -> str: ...

    def load(self, data: Any) -> None: ...


class MetadataPersister(Service):
    def __init__(self, directory: Path, tables: Sequence[Table], interval_s: float) -> None:
        super().__init__("MetadataPersister", interval_s, min_gap_s=COALESCE_S)
        self.directory = directory
        self.tables = tuple(tables)
        self.failing: set[str] = set()  # files whose last write failed

    def load_blocking(self) -> None:
        for table in self.tables:
            table.load(load_json_blocking(self.directory / table.FILE_NAME))

    async def run_once(self) -> None:
        await self.persist()

    async def persist(self) -> None:
        """Write the dirty tables now (snapshot on the loop, file I/O in a thread)."""
        for table in self.tables:
            if not table.dirty:
                continue
            table.dirty = False
            text = table.capture()  # cheap; serialized and written in the thread
            name = table.FILE_NAME
            try:
                await asyncio.to_thread(write_text_atomic_blocking, self.directory / name, text)
            except OSError as exc:
                table.dirty = True  # retried next round
                if name in self.failing:
                    continue  # said once for this episode; a line when it works again
                self.failing.add(name)
                if is_disk_full(exc) or exc.errno in (errno.EMFILE, errno.ENFILE):
                    # A full disk or fd table lasts: one line, no traceback, retried each round.
                    log.error("cannot persist %s: %s; retrying", name, exc)
                else:
                    log.exception("cannot persist %s", name)
            else:
                if name in self.failing:
                    self.failing.discard(name)
                    log.info("persisted %s again", name)

    def health(self) -> dict[str, object]:
        return {"name": self.name, "failing_files": sorted(self.failing)}
