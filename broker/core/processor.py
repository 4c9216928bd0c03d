"""``CoreProcessor``: the core's implementation of the port (``port.Port``), the one place the
front ends' requests meet the store.

It composes the core's services (send, read, pop, retry, transactions, clients, admin) and
answers the calls that front ends made straight into the store before: queue offsets, lookups
by key, unique id, log offset and time, raw records, recalls of timed messages, the store's
settings and statistics. A rule two front ends shared (a lookup by key, a record read at a
user's offset, the read-your-writes wait) is written here once.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from wharf.broker.core.errors import Reason, TopicNotFound, TopicNotReadable, UnknownTimer
from wharf.broker.core.model import TopicDefaults
from wharf.broker.core.port import RequestContext
from wharf.broker.core.read import DISPATCH_WAIT_S
from wharf.broker.core.retry import retry_topic
from wharf.broker.errors import NotReplicatedError
from wharf.broker.meta.topics import validate_topic_name
from wharf.store.errors import InvalidMessageError, StoreError

if TYPE_CHECKING:
    from wharf.broker.core.admin import AdminCore
    from wharf.broker.core.clients import ClientRegistry
    from wharf.broker.core.pop import PopCore
    from wharf.broker.core.read import ReadCore
    from wharf.broker.core.retry import RetryCore
    from wharf.broker.core.send import SendCore
    from wharf.broker.core.transactions import TransactionCore
    from wharf.broker.meta.groups import SubscriptionGroup, SubscriptionGroupManager
    from wharf.broker.meta.offsets import ConsumerOffsetManager
    from wharf.broker.meta.topics import TopicConfig, TopicConfigManager
    from wharf.store import MessageStore, ReplicationStatus, StoreConfig, StoreStats
    from wharf.store.model import GetResult, QueueStat, StoredMessage, TagFilter
    from wharf.store.retention.stats import RetentionStats

log = logging.getLogger("wharf.broker.core")
QUERY_SPAN_AHEAD_MS = 1000  # a lookup "until now" reaches this far ahead (clock steps)
UNIQUE_ID_QUERY_MAX = 32  # candidates a lookup by unique id reads (RocketMQ's defaultQueryMaxNum)


class CoreProcessor:
    """The port (``Messaging`` and ``Admin``) over one store, the metadata tables and the
    core's services."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        groups: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        *,
        send: SendCore,
        read: ReadCore,
        pop: PopCore,
        retry: RetryCore,
        transactions: TransactionCore,
        clients: ClientRegistry,
        admin: AdminCore,
    ) -> None:
        self._store = store
        self._topics, self._groups, self._offsets = topics, groups, offsets
        self._send, self._read, self._pop, self._retry = send, read, pop, retry
        self._transactions, self._clients, self._admin = transactions, clients, admin

    # --- the core's services --------------------------------------------------------------------
    @property
    def send(self) -> SendCore:
        return self._send

    @property
    def read(self) -> ReadCore:
        return self._read

    @property
    def pop(self) -> PopCore:
        return self._pop

    @property
    def retry(self) -> RetryCore:
        return self._retry

    @property
    def transactions(self) -> TransactionCore:
        return self._transactions

    @property
    def clients(self) -> ClientRegistry:
        return self._clients

    @property
    def admin(self) -> AdminCore:
        return self._admin

    # --- topics and groups as clients use them --------------------------------------------------
    def topic(self, name: str) -> TopicConfig | None:
        return self._topics.get(name)

    @property
    def topic_defaults(self) -> TopicDefaults:
        return TopicDefaults(self._topics.default_queue_nums, self._topics.auto_create)

    def routable_topic(self, name: str) -> TopicConfig | None:
        validate_topic_name(name)
        topic = self._topics.get(name)
        if topic is None and not self._topics.auto_create:
            raise TopicNotFound(
                Reason.TOPIC_NOT_FOUND,
                f"topic {name!r} does not exist and autoCreateTopicEnable is off",
            )
        return topic

    def readable_topic(self, name: str) -> TopicConfig:
        topic = self._topics.get(name)
        if topic is None:
            raise TopicNotFound(Reason.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        if not topic.readable:
            raise TopicNotReadable(
                Reason.NOT_READABLE, f"topic {name!r} is not readable (perm={topic.perm})"
            )
        return topic

    def topic_as_sent(self, name: str) -> TopicConfig:
        return self._topics.for_send(name)

    def group_for_use(self, name: str) -> SubscriptionGroup:
        return self._groups.for_use(name)

    def join_group(self, name: str) -> SubscriptionGroup:
        group = self._groups.for_use(name)
        self._topics.ensure_system(retry_topic(name), 1)
        return group

    # --- committed offsets ----------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        return self._offsets.query(group, topic, queue_id)

    async def offsets_durable(self) -> None:
        await self._offsets.durable()

    def check_offsets_master(self) -> None:
        role = getattr(self._store, "role", None)  # a test's stand-in store has none
        if role is not None:
            role.refusal()

    # --- read-your-own-writes, queue offsets ----------------------------------------------------
    async def wait_own_writes(self, request: RequestContext) -> bool:
        if request.deadline is not None and request.remaining(DISPATCH_WAIT_S) <= 0:
            return False
        return await self._read.own_writes_visible(request.remaining(DISPATCH_WAIT_S))

    def min_offset(self, topic: str, queue_id: int) -> int:
        return self._store.get_min_offset(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return self._store.get_max_offset(topic, queue_id)

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._store.get_offset_by_timestamp(topic, queue_id, timestamp_ms)

    def read_now(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None,
        max_bytes: int,
    ) -> GetResult:
        return self._store.get_messages(topic, queue_id, offset, max_count, tag_filter, max_bytes)

    # --- lookups --------------------------------------------------------------------------------
    def query_by_key(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        return self._store.query_messages(topic, key, max_num, begin_ms, end_ms)

    def message_by_unique_id(self, topic: str, unique_id: str) -> StoredMessage | None:
        """The message of ``topic`` whose unique id (UNIQ_KEY) is ``unique_id``, through the
        index (the id is indexed as a key), or None."""
        now = int(time.time() * 1000) + QUERY_SPAN_AHEAD_MS
        for message in self.query_by_key(topic, unique_id, UNIQUE_ID_QUERY_MAX, 0, now):
            if message.unique_id == unique_id:
                return message
        return None

    def message_at(self, commit_log_offset: int) -> StoredMessage | None:
        """A user's log offset (an offset message id, an admin's view) is not trusted: an
        offset that is no record's start is not found, never an error."""
        try:
            message = self._store.look_message_by_offset(commit_log_offset)
        except (StoreError, ValueError):
            return None
        if message is None or message.commit_log_offset != commit_log_offset:
            return None
        return message

    def record_at(self, commit_log_offset: int) -> bytes | None:
        message = self.message_at(commit_log_offset)
        if message is None:
            return None
        return self._store.read_bytes(commit_log_offset, message.store_size)

    def first_store_time(self, topic: str, queue_id: int) -> int:
        store = self._store
        first = store.read_consume_queue(topic, queue_id, store.get_min_offset(topic, queue_id), 1)
        if not first:
            return -1
        message = self.message_at(first[0][0])
        return -1 if message is None else message.store_timestamp

    def index_position(self) -> tuple[int, int]:
        return self._store.dispatch_timestamp, self._store.dispatch_offset

    # --- timed messages -------------------------------------------------------------------------
    async def recall(
        self, request: RequestContext, offset: int, message_id: str, topic: str
    ) -> None:
        try:
            await self._store.timer.cancel(offset, message_id, topic)
        except InvalidMessageError as exc:
            raise UnknownTimer(Reason.UNKNOWN_TIMER, str(exc)) from None
        log.debug("%s: timed message %s of %s recalled (%s)", request.protocol, message_id,
                  topic, request.principal or "anonymous")  # fmt: skip

    # --- the store's settings and statistics ----------------------------------------------------
    @property
    def store_config(self) -> StoreConfig:
        return self._store.config

    def store_stats(self) -> StoreStats:
        return self._store.stats()

    # --- topic retention (the store's RetentionService) ---------------------------------------
    async def delete_records(self, topic: str, queue_id: int, offset: int) -> int:
        """The move, durable here; then shipped to the replicas at once with the metadata
        (``RetentionService.follow_starts``), and under SYNC_MASTER answered once the
        replicas every acknowledgement needs hold it (as Kafka's DeleteRecords waits for its
        followers): a failover right after the answer must not serve the records again."""
        start = await self._store.retention.delete_records(topic, queue_id, offset)
        ha = getattr(self._store, "ha_master", None)  # a test's stand-in store has none
        if ha is not None and not await ha.metadata_replicated():
            raise NotReplicatedError(
                f"the log start of {topic}:{queue_id} moved to {start} here, but the in-sync "
                "replicas did not take it within slaveTimeout: retry"
            )
        return start

    def retention_stats(self) -> RetentionStats:
        return self._store.retention.stats()

    # --- the metadata tables as the tools list them ---------------------------------------------
    def topics(self, include_system: bool) -> list[TopicConfig]:
        return self._topics.listing(include_system)

    @property
    def topics_version(self) -> int:
        return self._topics.version

    def topics_stamp(self) -> tuple[int, int]:
        return self._topics.version, len(self._topics.table)

    def topic_count(self) -> int:
        return len(self._topics)

    def groups(self) -> list[SubscriptionGroup]:
        return self._groups.listing()

    @property
    def groups_version(self) -> int:
        return self._groups.version

    def group(self, name: str) -> SubscriptionGroup | None:
        return self._groups.get(name)

    def group_count(self) -> int:
        return len(self._groups)

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        return self._offsets.of_group(group)

    def groups_with_offsets(self) -> set[str]:
        return self._offsets.groups()

    def groups_of_topic(self, topic: str) -> set[str]:
        return self._offsets.groups_of_topic(topic)

    def offset_table(self) -> dict[str, dict[str, int]]:
        return self._offsets.to_json()["offsetTable"]  # type: ignore[no-any-return]

    def queue_stats(self, topic: str) -> list[QueueStat]:
        return self._store.get_queue_stats(topic)

    def replication(self) -> ReplicationStatus | None:
        status = getattr(self._store, "replication_status", None)  # None: a stand-in store
        return None if status is None else status()  # type: ignore[no-any-return]
