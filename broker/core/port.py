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
    from wharf.broker.core.pop import PopCore
    from wharf.broker.core.read import ReadCore
    from wharf.broker.core.retry import RetryCore
    from wharf.broker.core.send import SendCore
    from wharf.broker.core.transactions import TransactionCore
    from wharf.store import ReplicationStatus, StoreConfig, StoreStats
    from wharf.store.model import GetResult, QueueStat, StoredMessage, TagFilter

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

    def queue_stats(self, topic: str) -> list[QueueStat]: ...

    def replication(self) -> ReplicationStatus | None:
        """The store's replication status, None without one (a stand-in store)."""
        ...


class Port(Messaging, Admin, Protocol):
    """Both: what a front end receives."""
