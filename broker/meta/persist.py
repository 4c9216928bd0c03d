"""The broker's metadata files under ``<store>/config/`` (as RocketMQ's ConfigManager):
``topics.json``, ``subscriptionGroup.json`` and ``consumerOffset.json``, each a snapshot in
RocketMQ's JSON layout plus a journal beside it (``<name>.journal``) of the entries changed
since the snapshot.

Why a journal (``.venv/bin/python -m tests.bench.metadata_scale``: 25,000 topics,
10,000 groups, 100,000 offsets; 1,000 offset commits/s spread over them, one topic change a
minute, a persist every 5 s and one right after each topic change; the 2 shared cores of the dev
box, so figures vary by ~2x from run to run):

* before, every persist of a dirty table built its whole JSON on the event loop
  (``dumps(manager.to_json())``: a loop stall of 220-480 ms for one topic change, 170-250 ms
  for one offset commit) and rewrote the whole file for it (6 MB of ``topics.json`` for one
  topic, 3.2 MB of ``consumerOffset.json`` for one offset): 44 MB written a minute.
* now the loop only captures what changed (``TableJournal.capture``: the changed entries, or
  a shallow copy of the table after a load: 0.4-2.5 ms for one change, ~5 ms for the 5,000
  commits of a 5 s round, 20-60 ms for the whole tables once after a start), and the writer
  thread turns them into JSON and appends one record to the journal (write + fsync): ~100
  bytes for one offset or topic. The snapshot is rewritten (tmp + fsync + rename + directory
  fsync, the previous one kept as ``.bak``: ``wharf.store.paths``) on the first write after a
  start, and when the journal outgrows ``JOURNAL_SNAPSHOT_RATIO`` times the snapshot (at least
  ``JOURNAL_MIN_BYTES``): 5.3 MB written a minute in all. The thread still shares the GIL:
  the longest loop stall over the run is 60 ms, a full garbage collection (the heap holds
  millions of objects) or a snapshot's sort; the mirror of the files is kept as text
  fragments, so a snapshot is a join (no JSON encoding) and adds no objects for the collector.
  A load replays the journal: 0.6 s instead of 0.25 s for these tables.

A journal record is one line, ``<crc32 hex> <json>\n``. The first names the snapshot the
others apply to (``{"base": <crc32 of the snapshot's bytes>}``); each other one holds the
entries a persist changed, ``{"t": <table key>, "s": {<entry key>: <entry or null>},
"h": {<other top-level fields>}}`` (entries replaced whole; null deletes).
``load_json_blocking`` replays the journal onto the snapshot it read when the header names that
snapshot, and stops at the first record that is incomplete or fails its CRC (the torn tail of a
crash mid-append: dropped; the first write after the start compacts it away). A compaction
writes the new snapshot, then atomically replaces the journal by a header naming it: a crash in
between leaves a journal naming the old snapshot, which the load ignores (its records are all
in the new snapshot). A failed append is cut off again (``ftruncate``) and the next write
compacts.

An append is fsynced unless its writer says ``sync=False`` (a Kafka OffsetCommit under
ASYNC_FLUSH: in the page cache is what survives a kill -9, as Kafka's own commits, which are not
fsynced either); the next ``sync=True`` write fsyncs the journal even when it has nothing new
to append, so a periodic round still brings such records to the disk.

The files stay RocketMQ's: the snapshot alone is what RocketMQ reads (a journal it ignores
holds at most the last ~``JOURNAL_SNAPSHOT_RATIO`` snapshots' worth of changes).

Load falls back to ``.bak`` when the main file is missing or unreadable (torn by a crash before
the rename cannot happen, but a disk error or a hand edit can).

Blocking functions are named ``*_blocking`` and run through a thread.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import zlib
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# One crash-safe writer for every metadata file, shared with the store (delayOffset.json).
from wharf.store.paths import backup_of, write_bytes_atomic_blocking
from wharf.store.paths import write_text_atomic_blocking as _write_text_atomic_blocking

__all__ = [
    "JOURNAL_SUFFIX",
    "MetadataError",
    "PendingWrite",
    "TableJournal",
    "dumps",
    "journal_of",
    "load_json_blocking",
    "nothing_to_write",
    "write_text_atomic_blocking",
]

log = logging.getLogger(__name__)

JOURNAL_SUFFIX = ".journal"
# The snapshot is rewritten once the journal holds more than this many times its size (and at
# least JOURNAL_MIN_BYTES): the rewrite costs at most 1/ratio of the journal's bytes, and a load
# replays at most ratio snapshots' worth of records (~0.1 s for 12 MB).
JOURNAL_SNAPSHOT_RATIO = 4
JOURNAL_MIN_BYTES = 1 << 20


class MetadataError(RuntimeError):
    """A metadata file exists but neither it nor its backup can be read: refuse to start
    rather than silently forget topics or consumer offsets."""


async def nothing_to_write() -> None:
    """A table's ``durable`` when no file backs it (unit tests, tools): nothing to wait for."""


def journal_of(path: Path) -> Path:
    """The journal beside a metadata snapshot: ``<name>.journal``."""
    return path.with_name(path.name + JOURNAL_SUFFIX)


def load_json_blocking(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (or its ``.bak``) with the journal beside it replayed; None
    when neither exists."""
    loaded = _load_snapshot_blocking(path)
    if loaded is None:
        return None
    data, crc = loaded
    records = _read_journal_blocking(journal_of(path))
    if records and records[0].get("base") == f"{crc:08x}":
        for record in records[1:]:
            _apply_record(data, record)
    elif records:  # the snapshot was replaced after these records (or by hand): stale
        log.warning("%s: ignoring a journal written for another snapshot", path.name)
    return data


def _load_snapshot_blocking(path: Path) -> tuple[dict[str, Any], int] | None:
    """The object in ``path`` (else its ``.bak``) and the CRC-32 of its bytes."""
    seen = False
    for candidate in (path, backup_of(path)):
        if not candidate.exists():
            continue
        seen = True
        try:
            raw = candidate.read_bytes()
            data = json.loads(raw.decode("utf-8"))
        except (OSError, ValueError) as exc:
            log.error("cannot read %s (%s); trying the backup", candidate, exc)
            continue
        if isinstance(data, dict):
            if candidate != path:
                log.warning("loaded %s from its backup %s", path.name, candidate.name)
            return data, zlib.crc32(raw)
        log.error("%s does not hold a JSON object; trying the backup", candidate)
    if seen:
        raise MetadataError(
            f"{path} and its backup are unreadable; repair or move them away to start empty"
        )
    return None


def _line(text: str) -> bytes:
    """A journal line: the CRC-32 of the JSON text, the text."""
    payload = text.encode("utf-8")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _encode_record(record: dict[str, Any]) -> bytes:
    return _line(json.dumps(record, separators=(",", ":")))


_INDENT = re.compile(r"\n *")


def _fragment(entry: Any) -> str:
    """An entry's text in a snapshot, where ``dumps`` puts it: two levels deep."""
    return json.dumps(entry, indent=2, sort_keys=True).replace("\n", "\n    ")


def _record_text(
    table_key: str, changes: dict[str, str | None], head: dict[str, Any], with_head: bool
) -> str:
    """``{"t": table_key, "s": changes, "h": head}`` from the entries' fragments (a
    fragment's line breaks and indents are whitespace between tokens: dropped)."""
    entries = ",".join(
        f"{json.dumps(k)}:{'null' if f is None else _INDENT.sub('', f)}" for k, f in changes.items()
    )
    tail = f',"h":{json.dumps(head, separators=(",", ":"))}' if with_head else ""
    return f'{{"t":{json.dumps(table_key)},"s":{{{entries}}}{tail}}}'


def _snapshot_text(head: dict[str, Any], table_key: str, entries: dict[str, str]) -> str:
    """``dumps({**head, table_key: entries})``, the entries being their fragments already:
    the same text, made by a sort and a join."""
    if entries:
        body = ",\n".join(f"    {json.dumps(k)}: {entries[k]}" for k in sorted(entries))
        table = f"{{\n{body}\n  }}"
    else:
        table = "{}"
    top = {
        k: json.dumps(v, indent=2, sort_keys=True).replace("\n", "\n  ") for k, v in head.items()
    }
    top[table_key] = table
    return "{\n" + ",\n".join(f"  {json.dumps(k)}: {top[k]}" for k in sorted(top)) + "\n}"


def _read_journal_blocking(path: Path) -> list[dict[str, Any]]:
    """The journal's whole records, in order; a torn or corrupt tail is dropped (logged)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict[str, Any]] = []
    pos = 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        record = _decode_record(raw[pos:end]) if end >= 0 else None
        if record is None:
            log.warning(
                "%s: dropping a torn tail of %d bytes after %d records",
                path.name,
                len(raw) - pos,
                len(records),
            )
            break
        records.append(record)
        pos = end + 1
    return records


def _decode_record(line: bytes) -> dict[str, Any] | None:
    crc, _, payload = line.partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(payload):
            return None
        record = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if "base" in record:  # the header: which snapshot the records apply to
        return record if isinstance(record["base"], str) else None
    ok = (
        isinstance(record.get("t"), str)
        and isinstance(record.get("s", {}), dict)
        and isinstance(record.get("h", {}), dict)
    )
    return record if ok else None


def _apply_record(data: dict[str, Any], record: dict[str, Any]) -> None:
    table = data.get(record["t"])
    if not isinstance(table, dict):
        table = data[record["t"]] = {}
    for key, entry in record.get("s", {}).items():
        if entry is None:
            table.pop(key, None)
        else:
            table[key] = entry
    data.update(record.get("h", {}))


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def write_text_atomic_blocking(path: Path, text: str | PendingWrite, sync: bool = True) -> None:
    """``text`` as the whole file at ``path`` (``wharf.store.paths``: tmp + fsync, the
    previous file kept as ``.bak``, rename, directory fsync), or a manager's ``capture()``:
    its changes serialized here and written to the file's journal (or a new snapshot; a
    journal append is fsynced only with ``sync``)."""
    if isinstance(text, PendingWrite):
        text.journal.write_blocking(path, sync)
    else:
        _write_text_atomic_blocking(path, text)


class PendingWrite:
    """What ``TableJournal.capture`` hands to the writer thread."""

    __slots__ = ("journal",)

    def __init__(self, journal: TableJournal) -> None:
        self.journal = journal


@dataclass(slots=True)
class _Batch:
    full: bool  # entries hold the whole table (else only the changed entries)
    entries: dict[str, Any]  # entry key -> frozen value (None: deleted)
    head: dict[str, Any]  # the file's other top-level fields (dataVersion)


class TableJournal:
    """The persistence of one manager's table: the loop side records which keys changed
    (``changed``) and captures them cheaply (``capture``); the thread side
    (``write_blocking``, serialized by a lock) keeps a mirror of what the files hold, turns
    the captured entries into JSON and appends them to the journal or writes a snapshot.

    ``freeze`` (on the loop) copies what may still change in place (an offsets dict);
    ``entry_json`` (in the thread) turns a frozen entry into its JSON form; ``json_key`` maps
    a table key to the file's key."""

    def __init__(
        self,
        table_key: str,
        entry_json: Callable[[Any], Any],
        json_key: Callable[[Any], str] = str,
        freeze: Callable[[Any], Any] = lambda value: value,
    ) -> None:
        self.table_key = table_key
        self._entry_json = entry_json
        self._json_key = json_key
        self._freeze = freeze
        # loop side
        self._changed: set[Hashable] = set()
        self._full = True  # the first write after a start or a load copies the whole table
        self._pending: deque[_Batch] = deque()  # appended by the loop, taken by the thread
        # thread side, under _lock
        self._lock = threading.Lock()
        self._mirror: dict[str, str] | None = None  # the entries the files hold (fragments)
        self._head: dict[str, Any] = {}
        self._path: Path | None = None
        self._snapshot_bytes = 0
        self._journal_bytes = 0
        self._compact = False  # a failed append: write a snapshot next
        self._unsynced = False  # appended without fsync (sync=False) since the last fsync
        self.bytes_written = 0  # snapshots and journal records, for tests and benchmarks
        self.snapshots_written = 0

    # --- loop side ------------------------------------------------------------------------
    def changed(self, key: Hashable) -> None:
        self._changed.add(key)

    def reset(self) -> None:
        """The table was replaced (a load): the next capture copies all of it."""
        self._full = True
        self._changed = set()

    def capture(self, table: dict[Any, Any], head: dict[str, Any]) -> PendingWrite:
        """Hand the changes since the last capture to ``write_blocking`` (in a thread). Costs
        the changed entries (a shallow copy of the table after a load), no JSON."""
        freeze, json_key = self._freeze, self._json_key
        if self._full:
            entries = {json_key(k): freeze(v) for k, v in table.items()}
        else:
            entries = {}
            for key in self._changed:
                value = table.get(key)
                entries[json_key(key)] = None if value is None else freeze(value)
        self._pending.append(_Batch(self._full, entries, dict(head)))
        self._full = False
        self._changed = set()
        return PendingWrite(self)

    # --- thread side ----------------------------------------------------------------------
    def write_blocking(self, path: Path, sync: bool = True) -> None:
        """Write every captured batch (in capture order) to ``path``'s journal, or a new
        snapshot; fsync an append only with ``sync``. On an error the batches stay queued for
        the next call. When this returns, every batch captured before the call is in the
        files: one captured by another thread's call was written by it under the lock."""
        with self._lock:
            count = len(self._pending)
            batches = [self._pending[i] for i in range(count)]
            self._write_locked(path, batches, sync)
            for _ in range(count):
                self._pending.popleft()

    def _write_locked(self, path: Path, batches: list[_Batch], sync: bool) -> None:
        convert = self._entry_json
        head = self._head
        # Entries as the snapshot's text fragments (strings: the mirror adds no objects for
        # the garbage collector to walk, and a snapshot is a join, not an encoding).
        base: dict[str, str] | None = None  # a whole table captured in these batches
        changes: dict[str, str | None] = {}
        for batch in batches:
            if batch.full:
                base = {k: _fragment(convert(v)) for k, v in batch.entries.items()}
                changes = {}
            else:
                for key, value in batch.entries.items():
                    changes[key] = None if value is None else _fragment(convert(value))
            head = batch.head
        mirror = self._mirror
        if base is not None:
            _apply(base, changes)
            if mirror is not None:  # write only what differs from the files
                changes = {k: v for k, v in base.items() if mirror.get(k) != v}
                changes.update((k, None) for k in mirror.keys() - base.keys())
        compact = (
            mirror is None
            or self._compact
            or path != self._path
            or not path.exists()
            or not journal_of(path).exists()
        )
        line = b""
        if not compact:
            if not changes and head == self._head:
                if sync and self._unsynced:  # an earlier sync=False append: fsync it now
                    self._fsync_journal(path)
                return
            line = _line(_record_text(self.table_key, changes, head, head != self._head))
            limit = max(JOURNAL_MIN_BYTES, JOURNAL_SNAPSHOT_RATIO * self._snapshot_bytes)
            compact = self._journal_bytes + len(line) > limit
        if compact:
            if base is None:
                assert mirror is not None
                base = dict(mirror)
                _apply(base, changes)
            self._write_snapshot(path, base, head)
            self._mirror = base
        else:
            assert mirror is not None
            self._append(path, line, sync)
            if base is not None:
                self._mirror = base
            else:
                _apply(mirror, changes)
        self._head = head

    def _write_snapshot(self, path: Path, entries: dict[str, str], head: dict[str, Any]) -> None:
        payload = _snapshot_text(head, self.table_key, entries).encode("utf-8")
        write_bytes_atomic_blocking(path, payload, keep_backup=True)
        # A new journal names the new snapshot; until it is in place (a crash here) the old
        # one names the old snapshot, and a load ignores it.
        header = _encode_record({"base": f"{zlib.crc32(payload):08x}"})
        write_bytes_atomic_blocking(journal_of(path), header)
        self.bytes_written += len(payload) + len(header)
        self.snapshots_written += 1
        self._path = path
        self._snapshot_bytes = len(payload)
        self._journal_bytes = len(header)
        self._compact = False
        self._unsynced = False  # the new journal replaced the unsynced one (both fsynced)

    def _fsync_journal(self, path: Path) -> None:
        fd = os.open(journal_of(path), os.O_WRONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._unsynced = False

    def _append(self, path: Path, line: bytes, sync: bool = True) -> None:
        fd = os.open(journal_of(path), os.O_WRONLY | os.O_APPEND)  # made by _write_snapshot
        try:
            size = os.fstat(fd).st_size
            try:
                view = memoryview(line)
                while view:
                    view = view[os.write(fd, view) :]
                if sync:
                    os.fsync(fd)  # also brings any earlier unsynced append to the disk
                    self._unsynced = False
                else:
                    self._unsynced = True
            except OSError:
                self._compact = True  # the next write replaces the journal
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, size)  # no torn record before the next ones
                raise
        finally:
            os.close(fd)
        self.bytes_written += len(line)
        self._journal_bytes += len(line)


def _apply(entries: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
