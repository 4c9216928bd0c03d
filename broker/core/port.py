"""The port: the one typed interface the protocol front ends use (``Messaging`` and ``Admin``),
and the request context their calls carry (``RequestContext``).

What crosses it: core values (``model.py``, ``admin.py``, ``transactions.py``, ``read.py``), the
store's public values (``wharf.store``: ``StoredMessage``, ``GetResult``, ``QueueStat``,
``StoreStats``, ``StoreConfig`` ...) and the core's refusals (``errors.Refused``). Never the
store itself, nor a table of the broker's metadata through its internals: a front end that
needs the store asks the port, and the port's implementation (``processor.CoreProcessor``) is
where the store is driven, once for every protocol.

The anchors: RocketMQ 5's proxy puts one ``MessagingProcessor`` interface under its gRPC and
remoting front ends, every call carrying a ``ProxyContext`` (who, from where, which protocol);
tansu's Kafka broker sits on one ``Storage`` trait. Here the front ends reach the core's
sub-services (``send``, ``read``, ``pop``, ``retry``, ``transactions``, ``clients``,
``admin``: each a concrete core class, typed) and the calls below, which replaced reaches into
the store: queue offsets, lookups by key, id and time, raw records, recalls, the broker's store
settings and statistics, replication status.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from wharf.broker.core.admin import AdminCore
    from wharf.broker.core.clients import ClientRegistry
    from wharf.broker.core.model import TopicDefaults
    from wharf.broker.core.pop import PopCore
    from wharf.broker.core.read import ReadCore
    from wharf.broker.core.retry import RetryCore
    from wharf.broker.core.send import SendCore
    from wharf.broker.core.transactions import TransactionCore
    from wharf.broker.meta.groups import SubscriptionGroup
    from wharf.broker.meta.topics import TopicConfig
    from wharf.store import ReplicationStatus, StoreConfig, StoreStats
    from wharf.store.model import GetResult, QueueStat, StoredMessage, TagFilter
    from wharf.store.retention.stats import RetentionStats

__all__ = ["Admin", "Messaging", "Port", "RequestContext"]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who asks, from where, in which protocol, until when (RocketMQ 5's ``ProxyContext``).

    ``deadline`` is a ``time.monotonic()`` instant (None: the call's own bounds only); a wait
    behind the port never outlives it."""

    protocol: str  # "wharf.v1", "rocketmq.v2", "remoting", "kafka"
    principal: str = ""  # the authenticated account (access key, SASL user); "" anonymous
    client_id: str = ""  # the client's own id, when its protocol names one
    deadline: float | None = None

    def remaining(self, at_most: float) -> float:
        """Seconds left before the deadline, capped at ``at_most`` (never below 0)."""
        if self.deadline is None:
            return at_most
        return max(min(at_most, self.deadline - time.monotonic()), 0.0)

    def within(self, seconds: float | None) -> RequestContext:
        """The same request with a deadline ``seconds`` from now (None: unchanged)."""
        if seconds is None:
            return self
        return RequestContext(
            self.protocol, self.principal, self.client_id, time.monotonic() + seconds
        )


class Messaging(Protocol):
    """What a front end does with messages: send, read, pop, retry, transactions, clients,
    queue offsets and lookups."""

    @property
    def send(self) -> SendCore: ...  # admission, queue choice, dedupe, every send shape

    @property
    def read(self) -> ReadCore: ...  # pull, long poll, raw records, the durable-write path

    @property
    def pop(self) -> PopCore: ...  # pop consumption: receive, ack, invisible time, DLQ

    @property
    def retry(self) -> RetryCore: ...  # a consumed message sent back (retry, dead letters)

    @property
    def transactions(self) -> TransactionCore: ...  # ending, resolving, the open halves

    @property
    def clients(self) -> ClientRegistry: ...  # group members, sessions, their channels

    # --- topics and groups as clients use them ------------------------------------------------
    def topic(self, name: str) -> TopicConfig | None:
        """The topic's config, None if unknown: no admission, no auto-create."""
        ...

    @property
    def topic_defaults(self) -> TopicDefaults: ...  # a topic not made yet (auto-create)

    def routable_topic(self, name: str) -> TopicConfig | None:
        """The topic a client asks the route of: None when not made yet but auto-create is on;
        InvalidArgumentError for a bad name, ``TopicNotFound`` when unknown without
        auto-create."""
        ...

    def readable_topic(self, name: str) -> TopicConfig:
        """The topic a consumer reads: ``TopicNotFound`` when unknown (a read never creates
        it), ``TopicNotReadable`` when its perm bits forbid reads."""
        ...

    def topic_as_sent(self, name: str) -> TopicConfig:
        """The topic as a producer's first send makes it (auto-create, a %RETRY% topic with
        one queue), without the send's shutting-down check (a route query): the broker's own
        topics and a bad name are InvalidArgumentError, unknown without auto-create
        NotFoundError."""
        ...

    def group_for_use(self, name: str) -> SubscriptionGroup:
        """The consumer group, auto-created when allowed (NotFoundError otherwise)."""
        ...

    def join_group(self, name: str) -> SubscriptionGroup:
        """A consumer's heartbeat: its group for use and the group's retry topic made (one
        queue), so a send-back has somewhere to go."""
        ...

    # --- committed offsets --------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """The group's committed offset (InvalidArgumentError below 0)."""
        ...

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, -1 when the group never committed for that queue."""
        ...

    async def offsets_durable(self) -> None:
        """Returns once every offset committed so far is in the offsets file's journal (and,
        under SYNC_MASTER, applied by the in-sync replicas): the wait before a commit is
        answered. Raises NotReplicatedError, MasterFencedError or UnavailableError."""
        ...

    def check_offsets_master(self) -> None:
        """Before a commit that will wait for ``offsets_durable``: raise why this broker may
        not take it as its group's master (NotMasterError on a replica, MasterFencedError
        once its lease ran out, InSyncReplicasNotEnoughError): a replica's table is its
        master's copy, overwritten by the next snapshot, so a durable answer there is void."""
        ...

    # --- read-your-own-writes, queue offsets --------------------------------------------------
    async def wait_own_writes(self, request: RequestContext) -> bool:
        """Read-your-writes: wait (once, within the request's deadline) for the dispatch of
        what is written now; True when there was something to wait for."""
        ...

    def min_offset(self, topic: str, queue_id: int) -> int: ...

    def max_offset(self, topic: str, queue_id: int) -> int: ...

    def offset_at(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first offset stored at or after ``timestamp_ms`` (the max offset if none)."""
        ...

    def read_now(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_count: int,
        tag_filter: TagFilter | None,
        max_bytes: int,
    ) -> GetResult:
        """One read, no wait, no read-your-writes wait (an internal consumer's scan)."""
        ...

    # --- lookups ------------------------------------------------------------------------------
    def query_by_key(
        self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int
    ) -> list[StoredMessage]:
        """Messages by KEYS entry or unique id through the index, newest first."""
        ...

    def message_by_unique_id(self, topic: str, unique_id: str) -> StoredMessage | None: ...

    def message_at(self, commit_log_offset: int) -> StoredMessage | None:
        """The record starting exactly at ``commit_log_offset`` (None: none starts there)."""
        ...

    def record_at(self, commit_log_offset: int) -> bytes | None:
        """``message_at``'s record as stored (its bytes)."""
        ...

    def first_store_time(self, topic: str, queue_id: int) -> int:
        """The store time of the queue's oldest message, -1 if none can be read."""
        ...

    def index_position(self) -> tuple[int, int]:
        """(store timestamp, log offset) the index has reached (dispatch)."""
        ...

    # --- timed messages -----------------------------------------------------------------------
    async def recall(
        self, request: RequestContext, offset: int, message_id: str, topic: str
    ) -> None:
        """Cancel a pending timed message; ``UnknownTimer`` when none is pending there."""
        ...


class Admin(Protocol):
    """What a front end's tools do with the broker: topics and groups (``admin``), its store's
    settings and statistics, replication status."""

    @property
    def admin(self) -> AdminCore: ...  # topics and groups changed, statistics, progress

    @property
    def store_config(self) -> StoreConfig: ...  # the store's settings, a value

    def store_stats(self) -> StoreStats: ...

    # --- topic retention ----------------------------------------------------------------------
    async def delete_records(self, topic: str, queue_id: int, offset: int) -> int:
        """Kafka's DeleteRecords: the queue's log start offset moved up to ``offset`` (at most
        its max offset; never down), durably before the answer, for every protocol (earliest
        offsets, min offsets, reads below it); returns the queue's log start offset."""
        ...

    def retention_stats(self) -> RetentionStats: ...  # compaction and retention figures

    # --- the metadata tables as the tools list them -------------------------------------------
    def topics(self, include_system: bool) -> list[TopicConfig]:
        """Every topic by name (``include_system``: %RETRY%, %DLQ% and the broker's own)."""
        ...

    @property
    def topics_version(self) -> int: ...  # the topic table's dataVersion: +1 a change

    def topics_stamp(self) -> tuple[int, int]:
        """Changes whenever the topic table does (its dataVersion and size: a replica's load
        adds entries without counting a change), for a listing cached by it."""
        ...

    def topic_count(self) -> int: ...  # user topics (no system ones)

    def groups(self) -> list[SubscriptionGroup]: ...  # every subscription group, by name

    @property
    def groups_version(self) -> int: ...  # the group table's dataVersion

    def group(self, name: str) -> SubscriptionGroup | None: ...

    def group_count(self) -> int: ...

    def offsets_of_group(self, group: str) -> dict[str, dict[int, int]]:
        """topic -> {queue id: committed offset} of one group (a copy)."""
        ...

    def groups_with_offsets(self) -> set[str]: ...  # every group that committed an offset

    def groups_of_topic(self, topic: str) -> set[str]: ...  # groups with an offset on it

    def offset_table(self) -> dict[str, dict[str, int]]:
        """Every committed offset as consumerOffset.json holds it: ``topic@group`` ->
        {queue id as a string: offset}."""
        ...

    def queue_stats(self, topic: str) -> list[QueueStat]: ...

    def replication(self) -> ReplicationStatus | None:
        """The store's replication status, None without one (a stand-in store)."""
        ...


class Port(Messaging, Admin, Protocol):
    """Both: what a front end receives."""
