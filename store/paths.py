"""The store's directory layout under ``store_path_root_dir`` (RocketMQ's StorePathConfigHelper).

::

    <root>/abort                          present while a store runs; left behind by a crash
    <root>/checkpoint                     flush timestamps (StoreCheckpoint)
    <root>/commitlog/<20-digit offset>    CommitLog segments
    <root>/consumequeue/<topic>/<qid>/<20-digit byte offset>
    <root>/consumequeue.summary           queue positions at a clean shutdown (store.queue.summary)
    <root>/index/<yyyyMMddHHmmssSSS>      IndexFiles
    <root>/config/delayOffset.json        ScheduleMessageService progress (+ .bak)
    <root>/config/timerCheckpoint.json    TimerMessageService checkpoint (+ .bak)
    <root>/config/transactionCheckpoint.json  TransactionService checkpoint (+ .bak)
    <root>/pop/journal                    pop (invisible time) journal (``wharf.store.pop``)
    <root>/pop/journal.tmp                a compaction snapshot being written
    <root>/config/epochs.json             master terms and where each began (``store.ha.epochs``)
    <root>/truncate.json                  a replica's pending truncation (``store.ha.truncation``)
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class StorePaths:
    root: Path

    @classmethod
    def of(cls, root: str | os.PathLike[str]) -> StorePaths:
        return cls(Path(root))

    @property
    def commit_log_dir(self) -> Path:
        return self.root / "commitlog"

    @property
    def consume_queue_root(self) -> Path:
        return self.root / "consumequeue"

    @property
    def consume_queue_summary_file(self) -> Path:
        return self.root / "consumequeue.summary"

    def consume_queue_dir(self, topic: str, queue_id: int) -> Path:
        return self.consume_queue_root / topic / str(queue_id)

    @property
    def index_dir(self) -> Path:
        return self.root / "index"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def delay_offset_file(self) -> Path:
        return self.config_dir / "delayOffset.json"

    @property
    def timer_checkpoint_file(self) -> Path:
        return self.config_dir / "timerCheckpoint.json"

    @property
    def transaction_checkpoint_file(self) -> Path:
        return self.config_dir / "transactionCheckpoint.json"

    @property
    def pop_dir(self) -> Path:
        return self.root / "pop"

    @property
    def pop_journal_file(self) -> Path:
        return self.pop_dir / "journal"

    @property
    def checkpoint_file(self) -> Path:
        return self.root / "checkpoint"

    @property
    def abort_file(self) -> Path:
        return self.root / "abort"

    @property
    def epochs_file(self) -> Path:
        return self.config_dir / "epochs.json"

    @property
    def truncate_marker_file(self) -> Path:
        return self.root / "truncate.json"

    def create_dirs_blocking(self) -> None:
        for directory in (
            self.commit_log_dir,
            self.consume_queue_root,
            self.index_dir,
            self.config_dir,
            self.pop_dir,
        ):
            directory.mkdir(parents=True, exist_ok=True)


def write_json_atomic_blocking(path: Path, payload: object) -> None:
    """``payload`` as indented, key-sorted JSON through ``write_text_atomic_blocking``."""
    write_text_atomic_blocking(path, json.dumps(payload, indent=2, sort_keys=True))


def backup_of(path: Path) -> Path:
    """Where an atomic write keeps the previous version of ``path``: ``<name>.bak``."""
    return path.with_name(path.name + ".bak")


def write_text_atomic_blocking(path: Path, text: str) -> None:
    """RocketMQ's ConfigManager.persist idea, made crash safe: keep the previous version as
    ``<name>.bak`` (``backup_of``) and replace the file atomically (``write_bytes_atomic_blocking``),
    so a crash leaves either the old or the new file, never a torn one. The one writer of every
    metadata file (store and broker)."""
    write_bytes_atomic_blocking(path, text.encode("utf-8"), keep_backup=True)


def write_bytes_atomic_blocking(
    path: Path, data: bytes | bytearray, *, mode: int = 0o644, keep_backup: bool = False
) -> None:
    """``data`` as the whole file at ``path``: write ``<name>.tmp`` (created with ``mode``: a
    private key is 0o600 from its first byte), fsync it, optionally move the old file to
    ``backup_of(path)``, rename the tmp over ``path`` (atomic on POSIX) and sync the directory.
    The store's and the broker's atomic file writer (the NameServer, which must not import the
    store, keeps its own in ``wharf.broker.certs``)."""
    with _lock_of(path):
        _write_bytes_atomic_blocking(path, data, mode, keep_backup)


_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_of(path: Path) -> threading.Lock:
    """One writer of a file at a time: a cancelled checkpoint task leaves its write running in
    its thread while the stop writes the final one, and both use the same ``.tmp``."""
    with _locks_guard:
        return _locks.setdefault(path, threading.Lock())


def _write_bytes_atomic_blocking(
    path: Path, data: bytes | bytearray, mode: int, keep_backup: bool
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a crash's leftover: a new file takes ``mode`` from birth
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_backup and path.exists():
        os.replace(path, backup_of(path))
    os.replace(tmp, path)
    fsync_dir_blocking(path.parent)


def read_json_with_backup_blocking(path: Path) -> object | None:
    """The file, else its ``.bak`` (a crash between the two renames), else None."""
    for candidate in (path, backup_of(path)):
        try:
            with open(candidate, encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            continue
    return None


def fsync_dir_blocking(directory: Path) -> None:
    """Make a directory's entries (a rename, a deletion) durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def current_boot_id_blocking() -> str:
    """Linux's per-boot random id ("" where unavailable)."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def write_abort_marker_blocking(path: Path) -> None:
    """The abort file holds the boot id: after a crash, recovery can tell a process crash (same
    boot: the page cache, and so every mmap write, survived) from a machine crash."""
    path.write_text(current_boot_id_blocking() + "\n")


def read_abort_marker_blocking(path: Path) -> tuple[bool, bool]:
    """(abort file present, the page cache of that run survived)."""
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        return False, False
    current = current_boot_id_blocking()
    return True, bool(recorded) and recorded == current
