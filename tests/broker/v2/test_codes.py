"""The error -> v2 Code table: every store/broker failure a v2 client can meet gets a
specific, non-zero code (code 0 makes the official clients retry and store copies)."""

from __future__ import annotations

import errno

import pytest
from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
)
from wharf.broker.frontends.v2.codes import ERROR_CODES, PUT_STATUS_CODES, Code, V2Error, code_for
from wharf.rocketmq.v2 import definition_pb2
from wharf.store.errors import (
    CorruptRecordError,
    DamagedQueueError,
    DiskFullError,
    FlushFailedError,
    InvalidMessageError,
    StoreBusyError,
    StoreError,
    StoreShutDownError,
    SyncDiskFullError,
)
from wharf.store.model import PutStatus


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (V2Error(Code.ILLEGAL_TOPIC, "bad"), Code.ILLEGAL_TOPIC),
        (InvalidArgumentError("x"), Code.BAD_REQUEST),
        (InvalidMessageError("x"), Code.BAD_REQUEST),
        (NotFoundError("x"), Code.NOT_FOUND),
        (PermissionDeniedError("x"), Code.FORBIDDEN),
        (ResourceExhaustedError("x"), Code.TOO_MANY_REQUESTS),
        (UnavailableError("x"), Code.INTERNAL_SERVER_ERROR),
        (DiskFullError("x"), Code.TOO_MANY_REQUESTS),
        (SyncDiskFullError("x"), Code.TOO_MANY_REQUESTS),
        (StoreBusyError("broker busy"), Code.TOO_MANY_REQUESTS),
        (FlushFailedError("x"), Code.INTERNAL_SERVER_ERROR),
        (StoreShutDownError("x"), Code.INTERNAL_SERVER_ERROR),
        (CorruptRecordError(0, "crc"), Code.INTERNAL_SERVER_ERROR),
        (DamagedQueueError("x"), Code.INTERNAL_SERVER_ERROR),
        (StoreError("x"), Code.INTERNAL_ERROR),
        (TimeoutError(), Code.PROXY_TIMEOUT),
        (OSError(errno.EMFILE, "Too many open files"), Code.TOO_MANY_REQUESTS),
        (KeyError("bug"), Code.INTERNAL_ERROR),
    ],
)
def test_every_error_maps_to_a_specific_nonzero_code(exc: BaseException, code: int) -> None:
    got, message = code_for(exc)
    assert got == code
    assert got != definition_pb2.CODE_UNSPECIFIED and message


def test_disk_full_message_tells_the_operator_what_to_do() -> None:
    _, message = code_for(DiskFullError("no space left"))
    assert "no space left" in message and "free space" in message


def test_table_lists_subclasses_before_their_bases() -> None:
    classes = [cls for cls, _ in ERROR_CODES]
    for i, cls in enumerate(classes):
        for later in classes[i + 1 :]:
            assert not issubclass(later, cls), f"{later.__name__} is shadowed by {cls.__name__}"


def test_flush_timeout_is_a_persistence_timeout_and_ok_is_ok() -> None:
    assert PUT_STATUS_CODES[PutStatus.PUT_OK] == Code.OK
    assert PUT_STATUS_CODES[PutStatus.FLUSH_DISK_TIMEOUT] == Code.MASTER_PERSISTENCE_TIMEOUT
    assert set(PUT_STATUS_CODES) == set(PutStatus)
