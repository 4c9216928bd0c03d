"""Wharf Python SDK (asyncio first; blocking wrappers in :mod:`wharf.client.sync`).

from wharf.client import Producer, PushConsumer, ConsumeResult

async with Producer("127.0.0.1:8081") as producer:
    await producer.send("orders", b"hello", tags="paid")
"""

from wharf.client.admin import Admin
from wharf.client.channel import TlsConfig
from wharf.client.connection import Connection
from wharf.client.consumer.pull import PullConsumer, PullResult, PullStatus
from wharf.client.consumer.push import PushConsumer
from wharf.client.errors import (
    AlreadyExistsError,
    BrokerInternalError,
    ClientClosedError,
    DeadlineExceededError,
    FailedPreconditionError,
    FlushDiskTimeoutError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
    WharfError,
)
from wharf.client.message import (
    ConsumeResult,
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from wharf.client.producer import Producer
from wharf.client.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)

__all__ = [
    "Admin",
    "AlreadyExistsError",
    "BrokerInternalError",
    "ClientClosedError",
    "Connection",
    "ConsumeResult",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "FlushDiskTimeoutError",
    "InvalidArgumentError",
    "Message",
    "MessageQueue",
    "MessageQueueSelector",
    "NotFoundError",
    "PermissionDeniedError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "ReceivedMessage",
    "ResourceExhaustedError",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendResult",
    "SendStatus",
    "TlsConfig",
    "UnauthenticatedError",
    "UnavailableError",
    "WharfError",
]
