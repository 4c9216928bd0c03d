"""The one mapping table from domain/store errors to gRPC statuses."""

from __future__ import annotations

import errno

import grpc
import pytest
from wharf.broker.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    status_for,
)
from wharf.store.errors import (
    CorruptRecordError,
    DamagedQueueError,
    DiskFullError,
    FlushFailedError,
    InvalidFilterError,
    InvalidMessageError,
    MessageNotFoundError,
    StoreBusyError,
    StoreNotWritableError,
    StoreShutDownError,
)

S = grpc.StatusCode


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgumentError("x"), S.INVALID_ARGUMENT),
        (NotFoundError("x"), S.NOT_FOUND),
        (AlreadyExistsError("x"), S.ALREADY_EXISTS),
        (PermissionDeniedError("x"), S.PERMISSION_DENIED),
        (ResourceExhaustedError("x"), S.RESOURCE_EXHAUSTED),
        (UnavailableError("x"), S.UNAVAILABLE),
        (InvalidMessageError("x"), S.INVALID_ARGUMENT),
        (InvalidFilterError("x"), S.INVALID_ARGUMENT),
        (MessageNotFoundError("x"), S.NOT_FOUND),
        (DiskFullError("disk 91% full"), S.RESOURCE_EXHAUSTED),
        (StoreBusyError("broker busy"), S.RESOURCE_EXHAUSTED),
        (FlushFailedError("fdatasync: EIO"), S.UNAVAILABLE),
        (StoreShutDownError("x"), S.UNAVAILABLE),
        (StoreNotWritableError("x"), S.UNAVAILABLE),
        (CorruptRecordError(42, "bad crc"), S.DATA_LOSS),
        (DamagedQueueError("consume queue T/0 is damaged"), S.DATA_LOSS),
        (TimeoutError(), S.DEADLINE_EXCEEDED),
        (KeyError("boom"), S.INTERNAL),
    ],
)
def test_each_error_maps_to_one_status(error: BaseException, code: grpc.StatusCode) -> None:
    assert status_for(error)[0] == code


def test_messages_tell_the_user_what_to_do() -> None:
    assert "free space" in status_for(DiskFullError("disk 91% full"))[1]
    assert "restarted" in status_for(FlushFailedError("fdatasync: EIO"))[1]
    assert status_for(KeyError("boom"))[1].startswith("internal error (KeyError)")


def test_open_file_limits_are_resource_exhausted_with_what_to_raise() -> None:
    code, message = status_for(OSError(errno.EMFILE, "Too many open files"))
    assert code == S.RESOURCE_EXHAUSTED
    assert "ulimit -n" in message and "LimitNOFILE" in message
    assert (
        status_for(OSError(errno.ENFILE, "Too many open files in system"))[0]
        == S.RESOURCE_EXHAUSTED
    )
    # Other OS errors stay internal: they are bugs or broken disks, not limits to raise.
    assert status_for(OSError(errno.EIO, "I/O error"))[0] == S.INTERNAL
