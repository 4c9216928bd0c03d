"""The store's error family. The broker maps each class to one gRPC status (broker/errors.py).

Every error carries a message a user can act on. The store never acknowledges data it
could not persist: write paths raise, they do not log-and-continue.

Disk full is one error wherever it is hit: ENOSPC/EDQUOT from a write, an allocation
(posix_fallocate of a segment, queue or index file) or a sync becomes DiskFullError
(``disk_full_error``), which the broker maps to RESOURCE_EXHAUSTED. Errors with ``log_once``
are expected conditions that last a while: background services log them once per episode,
without a traceback (store/service.py).
"""

import errno

# errno values that mean "no space": the filesystem is full (ENOSPC) or a quota is (EDQUOT).
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(exc: BaseException) -> bool:
    """Is ``exc`` an OSError saying the filesystem (or a quota) is full?"""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""

    log_once = False  # see the module docstring


class InvalidMessageError(StoreError):
    """The message breaks a limit (body size, topic name, properties size, queue id ...).
    Nothing was written. Maps to INVALID_ARGUMENT."""


class InvalidFilterError(InvalidMessageError):
    """A subscription tag expression is malformed (``||`` alone, empty alternatives ...).
    Maps to INVALID_ARGUMENT like every other bad input."""


class InvalidReceiptHandleError(InvalidMessageError):
    """A pop receipt handle that is malformed (forged), names no message in flight for that
    group and topic, or belongs to an earlier delivery (the message was redelivered, acked,
    dead-lettered, or its invisible time changed since). Nothing was changed. The v2 protocol
    maps it to INVALID_RECEIPT_HANDLE; as an InvalidMessageError it is INVALID_ARGUMENT
    elsewhere."""


class StoreNotWritableError(StoreError):
    """Writes are refused: disk over diskSpaceWarningLevelRatio (90 %), or a sticky flush
    error made the on-disk state unknown, or the store is shutting down. Maps to
    RESOURCE_EXHAUSTED (disk full) / UNAVAILABLE (flush failure, shutdown)."""


class DiskFullError(StoreNotWritableError):
    """Disk use passed diskSpaceWarningLevelRatio, or a write or allocation hit ENOSPC/EDQUOT:
    writes refused until space is freed (retention, an operator). Nothing was acknowledged."""

    log_once = True


class FlushFailedError(StoreNotWritableError):
    """An fsync/fdatasync failed. Sticky: every later write fails too, because the state of
    the file after a failed sync is unknown (see LevelDB DBImpl::Write, NATS filestore)."""


class SyncDiskFullError(DiskFullError, FlushFailedError):
    """An fdatasync failed with ENOSPC/EDQUOT: disk full, and sticky like any failed sync
    (the pages it was writing back may be lost), so writes resume only after a restart."""


def disk_full_error(exc: OSError, what: str) -> DiskFullError:
    """The DiskFullError for an ENOSPC/EDQUOT ``exc`` hit while doing ``what``."""
    reason = exc.strerror or str(exc)
    return DiskFullError(
        f"disk full: {what} failed ({reason}); writes are refused until space is freed"
    )


class StoreShutDownError(StoreNotWritableError):
    """The store is stopping or stopped."""


class NotMasterError(StoreNotWritableError):
    """This store is a replica (brokerRole SLAVE): it takes log bytes from its master only and
    refuses writes; a client sends to the group's master. Maps to FAILED_PRECONDITION."""


class MasterFencedError(StoreNotWritableError):
    """Controller mode: this master's lease ran out, so another replica may have been elected;
    it acknowledges nothing until it knows it is still the master. Maps to UNAVAILABLE: the
    client retries, on the new master once the routes show it."""


class InSyncReplicasNotEnoughError(StoreNotWritableError):
    """Controller mode: fewer replicas in sync than minInSyncReplicas; nothing was written.
    Maps to UNAVAILABLE (another group can take the write)."""


class ResourceLimitError(StoreError):
    """An operating-system limit the operator sets was met (open files, ``vm.max_map_count``)
    and freeing the store's own cached files did not help; nothing was written. Maps to
    RESOURCE_EXHAUSTED; the rest of the store keeps serving."""

    log_once = True


class StoreBusyError(StoreError):
    """A write was held ``waitTimeMillsInSendQueue`` for the dispatch to catch up and it did
    not (RocketMQ's "broker busy"); nothing was written. Retriable: maps to
    RESOURCE_EXHAUSTED (v2 TOO_MANY_REQUESTS, remoting SYSTEM_BUSY)."""

    log_once = True


class ReplicationError(StoreError):
    """Replicated bytes that do not continue this log (a gap, an overlap, another segment
    size): the replica drops the connection and starts over with a new handshake."""


class MessageNotFoundError(StoreError):
    """No message at that offset / with that id. Maps to NOT_FOUND."""


class DamagedQueueError(StoreError):
    """A consume queue's files do not hold what its state says (a short or missing file, a
    file of the wrong size, a gap): damage, or a changed ``mapped_file_size_consume_queue``.
    Found at a start, the table sets the queue aside and recovery rebuilds it from the commit
    log; found while serving, that queue's reads fail with this (DATA_LOSS) and the next start
    rebuilds it. Queue files are derived data: nothing in the commit log is lost."""

    log_once = True  # the queue logs it when found, not every read that meets it


class CorruptRecordError(StoreError):
    """A record failed its checks (magic, size, CRC). Carries the physical offset."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at commit log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
