"""Wharf Python SDK (asyncio first; blocking wrappers in :mod:`client.sync`).

from client import Producer, PushConsumer, ConsumeResult

async with Producer("127.0.0.1:8081") as producer:
    await producer.send("orders", b"hello", tags="paid")
"""

from client.admin import Admin
from client.consumer.pull import PullConsumer, PullResult, PullStatus
from client.consumer.push import PushConsumer
from client.errors import (
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
    UnavailableError,
    WharfError,
)
from client.message import (
    ConsumeResult,
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from client.producer import Producer
from client.selector import (
    MessageQueueSelector,
    SelectMessageQueueByHash,
    SelectMessageQueueByRandom,
)

__all__ = [
    "Admin",
    "AlreadyExistsError",
    "BrokerInternalError",
    "ClientClosedError",
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
    "UnavailableError",
    "WharfError",
]
