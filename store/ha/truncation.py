"""A replica's truncation, done before recovery so that a crash at any point cannot bring the
cut records back (RocketMQ #10666: a truncation that only moved in-memory positions came back
after a crash, the stale tail recovered as valid).

When the handshake says the replica's log goes past the consistent point (``epochs.py``), the
replica writes the marker ``StorePaths.truncate_marker_file`` (``{"offset": T}``, atomic, then
the directory fsynced) and restarts. At start, before recovery, ``apply_blocking`` cuts the
CommitLog at ``T``: zeros from ``T`` to the end of its segment and fdatasyncs it, deletes every
later segment, fsyncs the directory, lowers the checkpoint to ``T`` (recovery trusts the bytes
below the checkpoint without reading them) and the P of the timer's and the transactions'
ledgers (their start-up walk from P would land inside other records), drops the epochs that
begin past ``T``, and only then removes the marker. A crash in between leaves the marker: the
next start repeats the same steps (each is idempotent). Recovery then finds the log end at
``T`` and drops the ConsumeQueue units and index entries past it, as after any torn tail.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from wharf.store.ha import epochs
from wharf.store.log.checkpoint import StoreCheckpoint
from wharf.store.paths import (
    StorePaths,
    backup_of,
    fsync_dir_blocking,
    read_json_with_backup_blocking,
    write_json_atomic_blocking,
)

log = logging.getLogger(__name__)

_ZEROS = bytes(1 << 20)


# Fault injection for the crash tests (tests/cluster/test_failover.py): the process dies at
# the named point, as a kill -9 would, so a test can check the next start repairs it.
FAULT_ENV = "WHARF_TEST_FAULT"
FAULT_EXIT = 99


def request_blocking(paths: StorePaths, offset: int) -> None:
    """Persist the decision to cut the log at ``offset`` (applied at the next start)."""
    write_json_atomic_blocking(paths.truncate_marker_file, {"offset": offset})
    if os.environ.get(FAULT_ENV) == "crash-after-truncation-marker":
        os._exit(FAULT_EXIT)


def pending_blocking(paths: StorePaths) -> int | None:
    data = read_json_with_backup_blocking(paths.truncate_marker_file)
    return int(data["offset"]) if isinstance(data, dict) and "offset" in data else None


def apply_blocking(
    paths: StorePaths, segment_size: int, lower_offsets: Callable[[int], None]
) -> int | None:
    """Cut the CommitLog at the pending offset, if any (see the module docstring); returns it.
    ``lower_offsets(T)`` lowers the commit-log offsets other files keep to at most T."""
    offset = pending_blocking(paths)
    if offset is None:
        return None
    folder = paths.commit_log_dir
    names = sorted(n for n in os.listdir(folder) if n.isdigit()) if folder.exists() else []
    removed = 0
    for name in names:
        start = int(name)
        path = folder / name
        if start >= offset:
            path.unlink()
            removed += 1
        elif start + segment_size > offset:
            _zero_tail_blocking(path, offset - start)
    if folder.exists():
        fsync_dir_blocking(folder)
    if os.environ.get(FAULT_ENV) == "crash-during-truncation":
        os._exit(FAULT_EXIT)  # the log is cut, the checkpoint and the marker are not updated
    checkpoint = StoreCheckpoint(str(paths.checkpoint_file))
    checkpoint.load_blocking()
    if checkpoint.physic_offset > offset or checkpoint.logics_offset > offset:
        checkpoint.physic_offset = min(checkpoint.physic_offset, offset)
        checkpoint.logics_offset = min(checkpoint.logics_offset, offset)
        checkpoint.flush_blocking()
    lower_offsets(offset)
    kept = [e for e in epochs.load_blocking(paths.epochs_file) if e[1] <= offset]
    epochs.save_blocking(paths.epochs_file, kept)
    for marker in (paths.truncate_marker_file, backup_of(paths.truncate_marker_file)):
        marker.unlink(missing_ok=True)
    fsync_dir_blocking(paths.root)
    log.warning("replica log truncated at %d (%d later segments deleted): what lay past it was "
                "never acknowledged by the group", offset, removed)  # fmt: skip
    return offset


def _zero_tail_blocking(path: Path, position: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        size = os.fstat(fd).st_size
        while position < size:
            position += os.pwrite(fd, _ZEROS[: min(len(_ZEROS), size - position)], position)
        os.fdatasync(fd)
    finally:
        os.close(fd)
