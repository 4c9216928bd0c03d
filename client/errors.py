"""The client's exception family, mapped from gRPC status codes in ONE place.

Every exception carries the broker's message (``str(err)``), the gRPC status name
(``err.code``) and whether a retry may succeed (``err.retriable``)::

    try:
        await producer.send("orders", b"...")
    except NotFoundError as err:      # the topic does not exist and auto-create is off
        print(err.code, err)
"""

from __future__ import annotations

import grpc


class WharfError(Exception):
    """Base of every error the SDK raises."""

    code: str = "UNKNOWN"
    retriable: bool = False
    from_broker: bool = False  # True when the broker (or gRPC) reported it, not a local check

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgumentError(WharfError):
    """The broker (or the SDK) rejected the request: bad topic name, empty body, bad offset..."""

    code = "INVALID_ARGUMENT"


class NotFoundError(WharfError):
    """Topic, group or message not found."""

    code = "NOT_FOUND"


class AlreadyExistsError(WharfError):
    code = "ALREADY_EXISTS"


class ResourceExhaustedError(WharfError):
    """The broker is out of disk or too busy (too many parked pulls / in-flight sends)."""

    code = "RESOURCE_EXHAUSTED"
    retriable = True


class UnavailableError(WharfError):
    """Cannot reach the broker, or it is shutting down / its store failed."""

    code = "UNAVAILABLE"
    retriable = True


class DeadlineExceededError(WharfError):
    """The call's deadline passed before the broker answered."""

    code = "DEADLINE_EXCEEDED"
    retriable = True


class PermissionDeniedError(WharfError):
    """The topic's permission forbids this (e.g. writing a read-only topic)."""

    code = "PERMISSION_DENIED"


class UnauthenticatedError(WharfError):
    """The broker has aclEnable and the call carried no valid signature (credentials missing,
    unknown, wrong, or a clock more than aclMaxClockSkew off)."""

    code = "UNAUTHENTICATED"


class FailedPreconditionError(WharfError):
    code = "FAILED_PRECONDITION"


class FlushDiskTimeoutError(WharfError):
    """SYNC_FLUSH did not complete within syncFlushTimeout: stored, durability unknown."""

    code = "FLUSH_DISK_TIMEOUT"


class ClientClosedError(WharfError):
    """The client was closed (or not started) when the call was made."""

    code = "CLIENT_CLOSED"


class BrokerInternalError(WharfError):
    code = "INTERNAL"


_BY_STATUS: dict[grpc.StatusCode, type[WharfError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.OUT_OF_RANGE: InvalidArgumentError,
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDeniedError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthenticatedError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.INTERNAL: BrokerInternalError,
    grpc.StatusCode.CANCELLED: UnavailableError,
}

_BY_NUMBER: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}


def error_for_status(status: grpc.StatusCode, message: str) -> WharfError:
    """The typed exception for a gRPC status, carrying the broker's message."""
    cls = _BY_STATUS.get(status, WharfError)
    error = cls(message or status.name, code=status.name)
    error.from_broker = True
    return error


def error_for_status_number(number: int, message: str) -> WharfError:
    """Same as :func:`error_for_status` for the numeric code of a stream reply's ``ErrorInfo``."""
    status = _BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)
    return error_for_status(status, message)


# What gRPC's client core says when the connection under a call broke in a way it cannot name
# (a broker killed mid-stream): a transport failure on this side, not the broker's INTERNAL.
_CORE_INTERNAL = "Internal error from Core"


def from_rpc_error(err: grpc.RpcError) -> WharfError:
    """Map a failed gRPC call (sync or aio) to the SDK's exception."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    if code is grpc.StatusCode.INTERNAL and details == _CORE_INTERNAL:
        return UnavailableError(f"the connection to the broker broke ({details})")
    return error_for_status(code or grpc.StatusCode.UNKNOWN, details or "")
