"""Kafka's error codes this front end answers (Kafka's ``Errors`` enum, the numbers are the
protocol's), and ``KafkaError``: a handler's refusal carrying its code and message."""

from __future__ import annotations

import enum

from wharf.broker.core.errors import Reason, Refused
from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    NotReplicatedError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
)
from wharf.store.errors import (
    InSyncReplicasNotEnoughError,
    InvalidMessageError,
    MasterFencedError,
    NotMasterError,
    ResourceLimitError,
    StoreBusyError,
    StoreNotWritableError,
    StoreShutDownError,
)

__all__ = ["Code", "KafkaError", "code_for"]


class Code(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    PRODUCER_FENCED = 90
    INVALID_CONFIG = 40
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    UNSUPPORTED_COMPRESSION_TYPE = 76
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    MEMBER_ID_REQUIRED = 79
    INVALID_RECORD = 87


class KafkaError(Exception):
    """A refusal a handler answers with ``code`` (and ``message`` where the version has an
    error message field)."""

    def __init__(self, code: Code, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message or code.name


def code_for(exc: BaseException) -> Code:
    """The Kafka code of an error the core or the store raised (a retriable code for what
    may pass: busy, shutting down, a disk that may get room; a permanent one for bad input).

    Before an append (nothing written), as Kafka answers the same states: busy (the dispatch
    back-pressure) or an OS limit, REQUEST_TIMED_OUT (also a change made here that the
    replicas did not take within slaveTimeout: DeleteRecords); a replica, a master whose lease ran out
    or a store shutting down, NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata and
    sends to the leader); too few in-sync replicas, NOT_ENOUGH_REPLICAS; a full disk or a
    failed sync, KAFKA_STORAGE_ERROR (Kafka's offline log dir). All are retriable in the
    clients; librdkafka retries REQUEST_TIMED_OUT as "possibly persisted" (same sequence),
    the others as "not persisted". After an append the handler answers REQUEST_TIMED_OUT
    whatever the error (produce.py)."""
    if isinstance(exc, KafkaError):
        return exc.code
    if isinstance(exc, Refused):
        return _REASON_CODES.get(exc.reason, Code.INVALID_RECORD)
    if isinstance(exc, InvalidMessageError):
        return Code.INVALID_RECORD
    if isinstance(
        exc, (StoreBusyError, ResourceLimitError, ResourceExhaustedError, NotReplicatedError)
    ):
        return Code.REQUEST_TIMED_OUT
    if isinstance(exc, (NotMasterError, MasterFencedError, StoreShutDownError)):
        return Code.NOT_LEADER_OR_FOLLOWER
    if isinstance(exc, InSyncReplicasNotEnoughError):
        return Code.NOT_ENOUGH_REPLICAS
    if isinstance(exc, (StoreNotWritableError, UnavailableError)):
        return Code.KAFKA_STORAGE_ERROR
    if isinstance(exc, PermissionDeniedError):
        return Code.TOPIC_AUTHORIZATION_FAILED
    if isinstance(exc, NotFoundError):
        return Code.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, InvalidArgumentError):
        return Code.INVALID_REQUEST
    return Code.UNKNOWN_SERVER_ERROR


_REASON_CODES = {
    Reason.SHUTTING_DOWN: Code.NOT_LEADER_OR_FOLLOWER,  # retriable: clients refresh and retry
    Reason.ILLEGAL_TOPIC: Code.INVALID_TOPIC_EXCEPTION,
    Reason.OWN_TOPIC: Code.INVALID_TOPIC_EXCEPTION,
    Reason.TOPIC_NOT_FOUND: Code.UNKNOWN_TOPIC_OR_PARTITION,
    Reason.NOT_WRITABLE: Code.TOPIC_AUTHORIZATION_FAILED,
    Reason.ILLEGAL_QUEUE: Code.UNKNOWN_TOPIC_OR_PARTITION,
    Reason.BODY_TOO_LARGE: Code.MESSAGE_TOO_LARGE,
    Reason.PROPERTIES_TOO_LARGE: Code.INVALID_RECORD,
}
