"""Pop consumption (RocketMQ 5's receive with invisible time) for every front end: the group's
rules, its dead-letter topic, and the store's pop calls (``wharf.store.pop``).

- ``consumer(group)``: the group (auto-created when allowed; the metadata's NotFoundError or
  InvalidArgumentError otherwise, which each front end maps) with what a pop of it needs: a
  message is delivered at most ``retryMaxTimes`` + 1 times, then dead-lettered to
  ``%DLQ%<group>``; a FIFO group (``consume_message_orderly``) gets one message group at a time.
  The DLQ topic (1 queue) is registered here, before the pop store can dead-letter into it, so
  its copies are listed and readable like the offset path's.
- ``receive``, ``ack``, ``change_invisible``, ``dead_letter``: the pop store's calls for that
  group; a stale or forged receipt handle raises the store's InvalidReceiptHandleError.
- The pop-progress bridge (what the pop store acknowledged in order becomes committed offsets,
  so offset consumers and replicas see it) is the ``PopProgress`` part (``background.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from wharf.broker.core.read import visible_reads
from wharf.broker.core.txn_index import TxnIndex
from wharf.broker.meta.groups import SubscriptionGroupManager
from wharf.broker.meta.topics import TopicConfigManager
from wharf.store.codec.properties import DLQ_GROUP_TOPIC_PREFIX
from wharf.store.errors import InvalidReceiptHandleError
from wharf.store.model import PoppedMessage, TagFilter


@dataclass(frozen=True, slots=True)
class PopConsumer:
    """A consumer group as a pop of it needs it."""

    group: str
    max_attempts: int  # deliveries before the dead-letter topic: retryMaxTimes + 1
    fifo: bool


class PopCore:
    """``pop()`` is the store's PopService (it exists once the store runs; StoreError on a
    replica)."""

    def __init__(
        self,
        pop: Callable[[], Any],
        groups: SubscriptionGroupManager,
        topics: TopicConfigManager,
        txns: TxnIndex | None = None,
    ) -> None:
        self._pop = pop
        self._groups = groups
        self._topics = topics
        self._txns = txns
        self._filtered: Any = None  # the pop service whose reads see Kafka transactions

    def _service(self) -> Any:
        """The store's pop service, its reads through ``visible_reads`` once Kafka
        transactions exist (a new service after a role change is wrapped again)."""
        service = self._pop()
        if self._txns and service is not self._filtered:
            txns = self._txns
            service.filter_reads(lambda read: visible_reads(txns, read))
            self._filtered = service
        return service

    def consumer(self, group: str) -> PopConsumer:
        settings = self._groups.for_use(group)
        self._topics.ensure_system(DLQ_GROUP_TOPIC_PREFIX + group, 1)
        return PopConsumer(group, settings.retry_max_times + 1, settings.consume_message_orderly)

    async def receive(
        self,
        consumer: PopConsumer,
        topic: str,
        tag_filter: TagFilter,
        batch: int,
        invisible_ms: int,
        polling_ms: int,
    ) -> list[PoppedMessage]:
        """Up to ``batch`` visible messages from any queue of ``topic``, invisible for
        ``invisible_ms``; long-polls up to ``polling_ms`` while there is none ([] then)."""
        found: list[PoppedMessage] = await self._service().pop_wait(
            consumer.group, topic, None, tag_filter, batch, invisible_ms,
            consumer.max_attempts, consumer.fifo, polling_ms,
        )  # fmt: skip
        return found

    async def ack(self, group: str, topic: str, receipt_handle: str) -> None:
        await self._pop().ack(group, topic, receipt_handle)

    async def ack_many(
        self, group: str, topic: str, receipt_handles: Sequence[str]
    ) -> list[InvalidReceiptHandleError | None]:
        """``ack`` of several handles journaled together (one write, one fdatasync): per
        handle None (acked) or the error ``ack`` would raise."""
        return await self._pop().ack_many(group, topic, receipt_handles)

    async def change_invisible(
        self, group: str, topic: str, receipt_handle: str, invisible_ms: int
    ) -> str:
        """The delivery invisible for ``invisible_ms`` from now; its new receipt handle."""
        handle: str = await self._pop().change_invisible(group, topic, receipt_handle, invisible_ms)
        return handle

    async def dead_letter(self, consumer: PopConsumer, topic: str, receipt_handle: str) -> None:
        """The consumer gave up on a delivery: a copy to ``%DLQ%<group>`` now, whatever its
        attempt, and the delivery finished for the group."""
        await self._pop().dead_letter(consumer.group, topic, receipt_handle)
