"""The broker's error family and THE one table mapping domain/store errors to gRPC statuses.

Processors raise these (or let store errors through); the RPC wrapper in ``frontends/grpc/rpc.py`` turns any
of them into a status with the exception's message, which must tell the user what to do.
"""

from __future__ import annotations

import errno

import grpc
from wharf.store.errors import (
    CorruptRecordError,
    DamagedQueueError,
    DiskFullError,
    FlushFailedError,
    InvalidMessageError,
    MessageNotFoundError,
    NotMasterError,
    ResourceLimitError,
    StoreBusyError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
    SyncDiskFullError,
)


class BrokerError(Exception):
    """Base of the broker's own errors; the subclass decides the status code."""


class InvalidArgumentError(BrokerError):
    """Bad input: topic name, body size, offsets, queue id, tag expression ..."""


class NotFoundError(BrokerError):
    """Unknown topic (auto-create off), group, message."""


class AlreadyExistsError(BrokerError):
    """CreateTopic on an existing topic."""


class PermissionDeniedError(BrokerError):
    """Topic permission forbids the operation (perm bits)."""


class UnauthenticatedError(BrokerError):
    """A request without a valid signature (aclEnable), answered inside a stream."""


class ResourceExhaustedError(BrokerError):
    """Too many parked pulls or in-flight requests."""


class FailedPreconditionError(BrokerError):
    """The request cannot be served in this broker's state (not the master, not in controller
    mode): the message says what to do instead."""


class UnavailableError(BrokerError):
    """The broker is shutting down."""


class NotReplicatedError(UnavailableError):
    """A change made here, and durable here, that the replicas every acknowledgement needs
    did not take within slaveTimeout: a failover now could take it back (retry)."""


# Checked in order: the first matching class wins (subclasses before their bases).
ERROR_STATUS: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (ResourceExhaustedError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (InvalidMessageError, grpc.StatusCode.INVALID_ARGUMENT),
    (MessageNotFoundError, grpc.StatusCode.NOT_FOUND),
    (DiskFullError, grpc.StatusCode.RESOURCE_EXHAUSTED),  # SyncDiskFullError too
    (ResourceLimitError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StoreBusyError, grpc.StatusCode.RESOURCE_EXHAUSTED),  # retriable: the SDK backs off
    (FlushFailedError, grpc.StatusCode.UNAVAILABLE),
    (NotMasterError, grpc.StatusCode.FAILED_PRECONDITION),
    (StoreShutDownError, grpc.StatusCode.UNAVAILABLE),
    (StoreNotWritableError, grpc.StatusCode.UNAVAILABLE),
    (CorruptRecordError, grpc.StatusCode.DATA_LOSS),
    (DamagedQueueError, grpc.StatusCode.DATA_LOSS),
    (StoreError, grpc.StatusCode.INTERNAL),
    (TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
)

# Checked in order like ERROR_STATUS: the first matching class gives the hint.
_HINTS: dict[type[BaseException], str] = {
    SyncDiskFullError: " (disk full during a disk sync: free space, then restart the broker; "
    "the state of the file after a failed sync is unknown)",
    DiskFullError: " (disk full: free space or lower fileReservedTime; writes resume by themselves)",
    FlushFailedError: " (a disk flush failed: the store refuses writes until restarted; check "
    "the disk and the broker log)",
}


# Operating-system limits that are the operator's to raise, not bugs: a clear status instead of
# INTERNAL, and the broker keeps serving what does not need a new file.
_OS_LIMITS: dict[int, str] = {
    errno.EMFILE: "too many open files: the broker reached its open-file limit (ulimit -n); "
    "raise it (LimitNOFILE= in systemd, --ulimit nofile= in Docker) or use fewer queues",
    errno.ENFILE: "too many open files in the system (fs.file-max reached)",
    errno.ENOMEM: "out of memory or of memory maps (vm.max_map_count reached): free memory, "
    "raise vm.max_map_count or use fewer queues",
}


def os_limit(exc: BaseException) -> str | None:
    """What to do about an operating-system limit met (every protocol's error table), or
    None when ``exc`` is not one."""
    if isinstance(exc, OSError) and exc.errno in _OS_LIMITS:
        return f"{_OS_LIMITS[exc.errno]} ({exc})"
    return None


def status_for(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """(status code, user-facing message) for an exception raised while serving an RPC.
    Unknown exceptions are INTERNAL with their type named (and logged by the caller)."""
    if isinstance(exc, OSError) and exc.errno in _OS_LIMITS:
        return grpc.StatusCode.RESOURCE_EXHAUSTED, f"{_OS_LIMITS[exc.errno]} ({exc})"
    for cls, code in ERROR_STATUS:
        if isinstance(exc, cls):
            message = str(exc) or cls.__name__
            for hint_cls, hint in _HINTS.items():
                if isinstance(exc, hint_cls):
                    message += hint
                    break
            return code, message
    return grpc.StatusCode.INTERNAL, f"internal error ({type(exc).__name__}): {exc}"
