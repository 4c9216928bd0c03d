"""The store's directory layout under ``store_path_root_dir`` (RocketMQ's StorePathConfigHelper).

::

    <root>/abort                          present while a store runs; left behind by a crash
    <root>/checkpoint                     flush timestamps (StoreCheckpoint)
    <root>/commitlog/<20-digit offset>    CommitLog segments
    <root>/consumequeue/<topic>/<qid>/<20-digit byte offset>
    <root>/consumequeue.positions         queue positions journal (store.queue.positions)
    <root>/index/<yyyyMMddHHmmssSSS>      IndexFiles
    <root>/config/delayOffset.json        ScheduleMessageService progress (+ .bak)
    <root>/config/timerCheckpoint.json    TimerMessageService checkpoint (+ .bak)
    <root>/config/transactionCheckpoint.json  TransactionService checkpoint (+ .bak)
    <root>/pop/journal                    pop (invisible time) journal (``wharf.store.pop``)
    <root>/pop/journal.tmp                a compaction snapshot being written
    <root>/config/epochs.json             master terms and where each began (``store.ha.epochs``)
    <root>/truncate.json                  a replica's pending truncation (``store.ha.truncation``)

Modes: everything the store creates is private to the broker's user, whatever the umask:
directories 0700, files 0600 (``FILE_MODE``/``DIR_MODE``; with a umask of 022 they were 0755
and 0644, and any local account read every message body in the commit log, past the ACL).
``storeGroupShared`` makes them 0750/0640 (a backup or monitoring account in the broker's
group reads them). Files are made through ``create_file_blocking`` (``os.open`` with the mode,
then ``fchmod``: the umask can only take bits away, and a shared group needs its bits whatever
the umask), directories through ``make_dirs_blocking`` (each new one ``chmod``-ed, parents
included: ``os.makedirs`` gives only the last its mode); the root is set to the mode at every
start, so a store made by an older version is closed too. Process-wide (``use_group_shared``,
called by the store at construction): one broker process serves one store.

Durability of names (a power loss keeps a new, renamed or removed directory entry only once
the directory holding it was fsynced; a file's own fsync never makes its name durable):

- the store's directories: each parent is fsynced after a ``mkdir`` (``create_dirs_blocking``,
  ``make_dirs_blocking``; once per directory);
- the ``abort`` marker: written, fsynced, its directory fsynced; removed at a clean shutdown
  by unlink + directory fsync: it decides normal against abnormal recovery;
- metadata files: ``write_bytes_atomic_blocking`` fsyncs the file, renames, fsyncs the directory;
- files created while the store runs (commit log segments: store/log/mapped_file_queue.py;
  consume queue and index files: ``DirectorySyncs``, drained by the thorough queue flush before
  the checkpoint vouches for them, see store/services/queue_flush.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_MODES = (0o600, 0o700)  # (files, directories): the broker's user only
GROUP_SHARED_MODES = (0o640, 0o750)  # storeGroupShared: the broker's group reads too
_modes = PRIVATE_MODES


def use_group_shared(shared: bool) -> None:
    """The modes of what the store creates from now on (``storeGroupShared``)."""
    global _modes
    _modes = GROUP_SHARED_MODES if shared else PRIVATE_MODES


def file_mode() -> int:
    return _modes[0]


def dir_mode() -> int:
    return _modes[1]


def create_file_blocking(path: str | os.PathLike[str], flags: int) -> int:
    """``os.open(path, flags | O_CREAT)`` with the store's file mode whatever the umask (an
    ``fchmod`` after the open: one syscall a file, files are made a few a minute); the fd."""
    fd = os.open(path, flags | os.O_CREAT, file_mode())
    try:
        os.fchmod(fd, file_mode())
    except BaseException:
        os.close(fd)
        raise
    return fd


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
    def consume_queue_positions_file(self) -> Path:
        return self.root / "consumequeue.positions"

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
    def compaction_root(self) -> Path:
        """Kept logs of compacted queues, ``<topic>/<queueId>/`` each (retention/kept_log.py)."""
        return self.root / "compaction"

    def kept_log_dir(self, topic: str, queue_id: int) -> Path:
        return self.compaction_root / topic / str(queue_id)

    @property
    def log_starts_file(self) -> Path:
        """Per-queue log start offsets moved by topic retention and DeleteRecords."""
        return self.config_dir / "logStartOffsets.json"

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
        """Create the store's directories, each durable (its parent fsynced) before anything
        is written into it: a segment whose name is durable is of no use in a lost directory.
        The root gets the store's directory mode even when it exists (a store an older
        version made with 0755: its files are then out of other accounts' reach)."""
        make_dirs_blocking(self.root)
        try:
            os.chmod(self.root, dir_mode())
        except PermissionError:  # a root owned by another account: the files stay private
            log.warning("cannot set the mode of the store root %s to %o (not its owner)",
                        self.root, dir_mode())  # fmt: skip
        for directory in (
            self.commit_log_dir,
            self.consume_queue_root,
            self.index_dir,
            self.config_dir,
            self.pop_dir,
        ):
            make_dirs_blocking(directory)


def make_dirs_blocking(directory: str | os.PathLike[str]) -> list[str]:
    """``os.makedirs(directory, exist_ok=True)``, each directory it created given the store's
    directory mode, then fsync the parent of every one (deepest last), so the new
    directories survive a power loss. One ``isdir`` when ``directory`` exists. Returns the
    directories created, outermost first."""
    path = os.path.abspath(os.fspath(directory))
    created: list[str] = []
    while not os.path.isdir(path):
        created.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if not created:
        return []
    created.reverse()
    os.makedirs(directory, mode=dir_mode(), exist_ok=True)
    for new in created:
        os.chmod(new, dir_mode())
    for new in created:
        fsync_dir_blocking(os.path.dirname(new))
    return created


class DirectorySyncs:
    """Directories with new entries (files, subdirectories) not yet made durable, to be
    fsynced together before a checkpoint vouches for what those entries hold: the consume
    queue and index files created since the last thorough queue flush (which drains this,
    off the write path). Thread-safe: files are created on the loop and in threads."""

    def __init__(self) -> None:
        self._dirs: set[str] = set()
        self._lock = threading.Lock()

    def add(self, *directories: str | os.PathLike[str]) -> None:
        with self._lock:
            self._dirs.update(os.fspath(d) for d in directories)

    def __len__(self) -> int:
        return len(self._dirs)

    def __contains__(self, directory: object) -> bool:
        return isinstance(directory, str | os.PathLike) and os.fspath(directory) in self._dirs

    def sync_blocking(self) -> int:
        """fsync every pending directory (a directory deleted meanwhile has nothing to keep).
        On an error the directories not yet synced stay pending. Returns how many were."""
        with self._lock:
            pending, self._dirs = self._dirs, set()
        ordered = sorted(pending)  # parents before their subdirectories
        done = 0
        try:
            for directory in ordered:
                with contextlib.suppress(FileNotFoundError):
                    fsync_dir_blocking(directory)
                done += 1
        except BaseException:
            with self._lock:
                self._dirs.update(ordered[done:])
            raise
        return done


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
    path: Path, data: bytes | bytearray, *, keep_backup: bool = False
) -> None:
    """``data`` as the whole file at ``path``: write ``<name>.tmp`` (created with the store's
    file mode, private from its first byte), fsync it, optionally move the old file to
    ``backup_of(path)``, rename the tmp over ``path`` (atomic on POSIX) and sync the directory.
    The store's and the broker's atomic file writer (the NameServer, which must not import the
    store, keeps its own in ``wharf.broker.kit.tls.certs``)."""
    with _lock_of(path):
        _write_bytes_atomic_blocking(path, data, keep_backup)


_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock_of(path: Path) -> threading.Lock:
    """One writer of a file at a time: a cancelled checkpoint task leaves its write running in
    its thread while the stop writes the final one, and both use the same ``.tmp``."""
    with _locks_guard:
        return _locks.setdefault(path, threading.Lock())


def _write_bytes_atomic_blocking(path: Path, data: bytes | bytearray, keep_backup: bool) -> None:
    make_dirs_blocking(path.parent)  # durable: a renamed-in file is lost with its directory
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)  # a crash's leftover: a new file takes the mode from birth
    fd = create_file_blocking(tmp, os.O_WRONLY | os.O_EXCL)
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


def fsync_dir_blocking(directory: str | os.PathLike[str]) -> None:
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
    boot: the page cache, and so every mmap write, survived) from a machine crash. Durable
    (file and directory fsynced) before the store serves anything: a marker lost with a power
    cut would make the next start trust the queues as after a clean shutdown."""
    fd = create_file_blocking(path, os.O_WRONLY | os.O_TRUNC)
    try:
        data = (current_boot_id_blocking() + "\n").encode()
        while data:
            data = data[os.write(fd, data) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir_blocking(path.parent)


def remove_abort_marker_blocking(path: Path) -> None:
    """A clean shutdown's last step, once everything else is durable: unlink the marker and
    fsync its directory (else a power cut right after brings it back: a needless abnormal
    recovery, and the shutdown's queue positions snapshot ignored)."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir_blocking(path.parent)


def read_abort_marker_blocking(path: Path) -> tuple[bool, bool]:
    """(abort file present, the page cache of that run survived)."""
    try:
        recorded = path.read_text().strip()
    except FileNotFoundError:
        return False, False
    current = current_boot_id_blocking()
    return True, bool(recorded) and recorded == current
