"""THE table from broker/store errors to ``apache.rocketmq.v2.Code``, in one module.

Every v2 response carries an explicit ``Status{code, message}``; code 0 (CODE_UNSPECIFIED) is
never sent: the official clients treat it as an illegal response and retry (3 copies stored).

- ``V2Error(code, message)`` is what the v2 adapter raises for a protocol-level verdict
  (ILLEGAL_TOPIC, MESSAGE_BODY_TOO_LARGE, UNSUPPORTED ...): its code is used as is.
- Anything else goes through ``ERROR_CODES`` (first matching class wins, subclasses first).
  Choices worth knowing:
  - disk full -> TOO_MANY_REQUESTS: the official producer stops retrying on it at once
    (a retry cannot help a full disk; writes resume by themselves once space is freed);
  - a failed flush, a store shutting down or not writable -> INTERNAL_SERVER_ERROR;
  - a sync flush that missed syncFlushTimeout (stored, not yet on disk) is not an exception:
    ``PUT_STATUS_CODES`` maps it to MASTER_PERSISTENCE_TIMEOUT, like RocketMQ's proxy;
  - an unknown exception -> INTERNAL_ERROR with its type named (the caller logs it).
"""

from __future__ import annotations

import errno

from wharf.broker.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    status_for,
)
from wharf.broker.frontends.acl_guard import Refusals
from wharf.rocketmq.v2 import definition_pb2
from wharf.store.errors import (
    CorruptRecordError,
    DamagedQueueError,
    DiskFullError,
    FlushFailedError,
    InvalidFilterError,
    InvalidMessageError,
    InvalidReceiptHandleError,
    MessageNotFoundError,
    NotMasterError,
    ResourceLimitError,
    StoreBusyError,
    StoreError,
    StoreNotWritableError,
    StoreShutDownError,
)
from wharf.store.model import PutStatus

Code = definition_pb2.Code
NOT_SUPPORTED_YET = "not supported by Wharf yet"


class V2Error(Exception):
    """A verdict with its v2 code (raised by validation in the v2 adapter)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# Checked in order: the first matching class wins (subclasses before their bases).
ERROR_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (InvalidArgumentError, Code.BAD_REQUEST),
    (NotFoundError, Code.NOT_FOUND),
    (AlreadyExistsError, Code.BAD_REQUEST),
    (PermissionDeniedError, Code.FORBIDDEN),
    (ResourceExhaustedError, Code.TOO_MANY_REQUESTS),
    (UnavailableError, Code.INTERNAL_SERVER_ERROR),
    (InvalidReceiptHandleError, Code.INVALID_RECEIPT_HANDLE),
    (InvalidFilterError, Code.ILLEGAL_FILTER_EXPRESSION),
    (InvalidMessageError, Code.BAD_REQUEST),
    (MessageNotFoundError, Code.MESSAGE_NOT_FOUND),
    (DiskFullError, Code.TOO_MANY_REQUESTS),  # SyncDiskFullError too
    (ResourceLimitError, Code.TOO_MANY_REQUESTS),
    (StoreBusyError, Code.TOO_MANY_REQUESTS),  # the 5.x clients back off and retry it
    (FlushFailedError, Code.INTERNAL_SERVER_ERROR),
    (NotMasterError, Code.FORBIDDEN),
    (StoreShutDownError, Code.INTERNAL_SERVER_ERROR),
    (StoreNotWritableError, Code.INTERNAL_SERVER_ERROR),
    (CorruptRecordError, Code.INTERNAL_SERVER_ERROR),
    (DamagedQueueError, Code.INTERNAL_SERVER_ERROR),
    (StoreError, Code.INTERNAL_ERROR),
    (TimeoutError, Code.PROXY_TIMEOUT),
)

PUT_STATUS_CODES: dict[PutStatus, int] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
}
PUT_STATUS_MESSAGES: dict[PutStatus, str] = {
    PutStatus.PUT_OK: "OK",
    PutStatus.FLUSH_DISK_TIMEOUT: "stored, but not flushed to disk within syncFlushTimeout",
    PutStatus.FLUSH_SLAVE_TIMEOUT: "stored on the master, but not on enough replicas within "
    "slaveTimeout (SYNC_MASTER)",
    PutStatus.SLAVE_NOT_AVAILABLE: "stored on the master only: too few replicas connected "
    "and caught up (SYNC_MASTER, inSyncReplicas)",
}

_OS_LIMITS = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)


def code_for(exc: BaseException) -> tuple[int, str]:
    """(v2 code, user-facing message) for an exception raised while serving a v2 RPC. The
    message is the one wharf.v1 gives (with its hints: disk full, failed flush ...)."""
    if isinstance(exc, V2Error):
        return exc.code, exc.message
    _, message = status_for(exc)
    if isinstance(exc, OSError) and exc.errno in _OS_LIMITS:
        return Code.TOO_MANY_REQUESTS, message
    for cls, code in ERROR_CODES:
        if isinstance(exc, cls):
            return code, message
    return Code.INTERNAL_ERROR, message


def is_internal(code: int) -> bool:
    """Codes whose cause is worth a traceback in the broker log (a bug, not bad input)."""
    return code == INTERNAL_ERROR


# The codes of the per-message paths as plain ints: ``Code.X`` is a Python-level
# ``EnumTypeWrapper.__getattr__`` (~0.9 µs a lookup, measured), too dear on every call.
OK: int = Code.Value("OK")
BAD_REQUEST: int = Code.Value("BAD_REQUEST")
MULTIPLE_RESULTS: int = Code.Value("MULTIPLE_RESULTS")
MESSAGE_NOT_FOUND: int = Code.Value("MESSAGE_NOT_FOUND")
INVALID_RECEIPT_HANDLE: int = Code.Value("INVALID_RECEIPT_HANDLE")
INTERNAL_ERROR: int = Code.Value("INTERNAL_ERROR")
_CODE_NAMES: dict[int, str] = {v.number: v.name for v in definition_pb2.Code.DESCRIPTOR.values}


def code_name(code: int) -> str:
    """``Code.Name(code)`` (the metrics' label) without the enum wrapper's Python lookups."""
    name = _CODE_NAMES.get(code)
    return name if name is not None else Code.Name(code)  # type: ignore[arg-type]


def status(code: int, message: str) -> definition_pb2.Status:
    return definition_pb2.Status(code=code, message=message)  # type: ignore[arg-type]


def ok() -> definition_pb2.Status:
    return definition_pb2.Status(code=OK, message="OK")  # type: ignore[arg-type]


def not_supported(what: str) -> definition_pb2.Status:
    return definition_pb2.Status(
        code=Code.NOT_IMPLEMENTED, message=f"{what} is {NOT_SUPPORTED_YET}"
    )


# How the ACL refuses an apache.rocketmq.v2 call (broker/frontends/acl_guard.py): in the method's reply.
V2_REFUSALS = Refusals(
    ("UNAUTHORIZED", Code.UNAUTHORIZED),
    ("FORBIDDEN", Code.FORBIDDEN),
    metric_prefix="v2.",
    reply=lambda response_cls, code, message: response_cls(status=status(code, message)),
)
