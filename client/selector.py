"""Queue selection for ordered messages (RocketMQ's MessageQueueSelector).

# every message of one order goes to the same queue, so it is consumed in order
await producer.send("orders", body, selector=SelectMessageQueueByHash(), selector_arg=order_id)
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import Protocol

from wharf.client.message import MessageQueue


class MessageQueueSelector(Protocol):
    def select(self, queues: Sequence[MessageQueue], arg: object) -> MessageQueue:
        """Pick one of the topic's writable queues for a message sent with ``arg``."""
        ...


class SelectMessageQueueByHash:
    """Same ``arg`` -> same queue (stable across processes: CRC32 of ``str(arg)``)."""

    def select(self, queues: Sequence[MessageQueue], arg: object) -> MessageQueue:
        return queues[zlib.crc32(str(arg).encode()) % len(queues)]


class SelectMessageQueueByRandom:
    def select(self, queues: Sequence[MessageQueue], arg: object) -> MessageQueue:
        return random.choice(list(queues))
