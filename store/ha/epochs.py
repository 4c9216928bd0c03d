"""Epochs: which master term wrote which part of the CommitLog (RocketMQ 5's
``epochFileCheckpoint``), and the consistent point of two replicas' logs.

Each entry is ``(epoch, start offset)``: the master elected with ``epoch`` (a number that only
grows, kept in etcd) wrote from ``start`` on, until the next entry's start. A new master
appends its entry (epoch, its log end) before it accepts a write; a replica takes its master's
list at every handshake. The file (``StorePaths.epochs_file``) is a JSON list of pairs written
by the store's one atomic writer: after a crash it is the old list or the new one.

Consistent point (RocketMQ's ``EpochFileCache.findConsistentPoint``): the newest epoch both
lists hold with the same start; each log's part of it ends at the next entry's start or at
the log end; the logs agree up to the smaller of those two ends. A replica truncates to that
point and copies from there: what it loses was never acknowledged under SYNC_MASTER (an
acknowledged message is on every in-sync replica, and only those are elected).
"""

from __future__ import annotations

from pathlib import Path

from wharf.store.paths import read_json_with_backup_blocking, write_json_atomic_blocking

Epochs = list[tuple[int, int]]  # (epoch, start offset), ascending


def load_blocking(path: Path) -> Epochs:
    data = read_json_with_backup_blocking(path)
    if not isinstance(data, list):
        return []
    return sorted((int(epoch), int(start)) for epoch, start in data)


def save_blocking(path: Path, entries: Epochs) -> None:
    write_json_atomic_blocking(path, [list(entry) for entry in sorted(entries)])


def consistent_point(master: Epochs, master_end: int, replica: Epochs, replica_end: int) -> int:
    """Where a replica's log stops agreeing with its master's (see the module docstring).
    Logs without epochs (static roles) agree up to the replica's end; lists with no common
    entry agree nowhere (-1: the replica must be emptied)."""
    if not master and not replica:
        return replica_end
    common = set(master) & set(replica)
    if not common:
        return -1
    epoch, _ = max(common)
    return min(_end_of(master, epoch, master_end), _end_of(replica, epoch, replica_end))


def _end_of(entries: Epochs, epoch: int, log_end: int) -> int:
    later = [start for e, start in entries if e > epoch]
    return min(later) if later else log_end
