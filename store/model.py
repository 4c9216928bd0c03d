"""Values that cross the store's public boundary (the broker builds and reads these).

Kept free of I/O and of any gRPC type. Slotted classes: thousands are made per batch.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

# ``MessageStore.write_when_durable``'s answers (the sync thread's, ``log/sync_engine.py``).
DEFERRED = 0  # the sync thread sends it; ``done(outcome)`` follows on the loop
DURABLE = 1  # on disk already: the caller writes it itself
REFUSED = -1  # not taken: the caller writes it once wait_flushed says it is durable


@dataclass(slots=True)
class MessageInput:
    """One message handed to the store. ``properties`` holds user AND system properties
    (KEYS joined by a space, TAGS, UNIQ_KEY, DELAY ...; names from ``wharf.store.codec.properties``)."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0  # ms; 0 = store time
    born_host: str = "127.0.0.1:0"  # "ipv4:port"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


# What the store is given to run before every append of messages (``MessageStore(put_hook=)``):
# (topic, queue id, messages, now in ms) -> where and what to append instead. The broker's core
# parks delayed, timed and half messages in their system topics with it
# (broker/core/addressing.py), as RocketMQ 5's broker registers its put-message hooks on its
# store: the writer appends what it is given and knows no message semantics.
PutHook = Callable[
    [str, int, Sequence["MessageInput"], int], tuple[str, int, Sequence["MessageInput"]]
]


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored, but not synced within syncFlushTimeout
    # SYNC_MASTER: stored here, but not on enough replicas within slaveTimeout ...
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    # ... or not sent to replicas at all: too few connected (or all too far behind).
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(slots=True)
class AppendResult:
    """Where a batch landed. Records are contiguous: record i starts at ``offsets[i]``."""

    topic: str  # the topic really written (SCHEDULE_TOPIC_XXXX for delayed messages)
    queue_id: int
    first_queue_offset: int
    offsets: list[int]  # commit log offset of each record
    sizes: list[int]  # record sizes in bytes
    store_timestamp: int  # ms
    end_offset: int  # commit log offset right after the batch (what a sync flush must reach)


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    append: AppendResult


@dataclass(slots=True)
class StoredMessage:
    """A record decoded from the CommitLog (MessageExt)."""

    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    body_crc: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def tags(self) -> str:
        return self.properties.get("TAGS", "")

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get("KEYS", "")
        return raw.split(" ") if raw else []

    @property
    def unique_id(self) -> str:
        return self.properties.get("UNIQ_KEY", "")


class GetStatus(enum.Enum):
    """RocketMQ's GetMessageStatus; the broker maps these to PullStatus."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # read some, none matched the filter
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # queue empty (or unknown)
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: nothing new (long-poll)
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # offset > max
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # offset < min (retention removed it)
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"  # unit points to a commit log range already deleted
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)


@dataclass(slots=True)
class TagFilter:
    """A subscription's filter. Tags: ``*`` (or empty) matches everything; ``a || b`` matches
    tags a or b; ``codes`` are Java String.hashCode values checked against ConsumeQueue
    tagsCode first, the exact tag string on the decoded record. ``sql``: a compiled SQL92
    property expression (``wharf.store.read.sql_filter``), checked on the decoded properties
    (the tag is the property ``TAGS``); ``expression`` is its text."""

    tags: frozenset[str]
    codes: frozenset[int]
    sql: Callable[[Mapping[str, str]], bool] | None = None
    expression: str = ""

    @property
    def match_all(self) -> bool:
        return not self.tags and self.sql is None

    def matches(self, properties: Mapping[str, str]) -> bool:
        """Does a message with these properties pass (tags, then the SQL expression)?"""
        if self.tags and properties.get("TAGS", "") not in self.tags:
            return False
        return self.sql is None or self.sql(properties)


@dataclass(slots=True)
class QueueStat:
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int  # ms; 0 if empty


@dataclass(slots=True)
class StoreStats:
    """Cheap counters read at scrape / status time (no file walking)."""

    commit_log_min_offset: int
    commit_log_max_offset: int  # end of written data
    commit_log_flushed_offset: int
    commit_log_committed_offset: int  # == max unless transientStorePoolEnable
    dispatch_behind_bytes: int  # max offset - reput offset
    commit_log_segments: int
    consume_queue_files: int
    index_files: int
    disk_used_ratio: float  # 0..1, of the filesystem holding the commit log
    writable: bool
    not_writable_reason: str
    messages_put_total: int
    bytes_put_total: int
    recovery_seconds: float
    flush_count: int
    last_flush_seconds: float
    storage_size_bytes: int  # commitlog + consumequeue + index bytes on disk
    # Times the commit log hit ENOSPC/EDQUOT and started refusing writes (one per episode).
    disk_full_episodes: int = 0
    # Writes held by the dispatch back-pressure (maxDispatchLagBytes), and those of them
    # refused "broker busy" after waitTimeMillsInSendQueue.
    sends_held: int = 0
    sends_refused_busy: int = 0


@dataclass(slots=True)
class RawGetResult:
    """A read of whole stored records (``store/read/get_raw.py``): what a front end copies
    to its socket as it is."""

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes = b""  # whole stored records, concatenated in queue-offset order
    count: int = 0  # records in ``records``
    body_bytes: int = 0  # sum of their BODYLENGTH (what the view path counts as bytes out)


# Told after dispatch made new messages visible: (topic, queue_id, new max offset).
ArrivalListener = Callable[[str, int, int], None]
# Told while a sync runs: (topic, queue_id, max offset once applied, log offset to be durable).
PlannedListener = Callable[[str, int, int, int], None]
# Committed consumer offsets: (topic, queue_id) -> {group: offset}.
ConsumerProgress = Callable[[], Mapping[tuple[str, int], Mapping[str, int]]]


def _nothing_committed(group: str, topic: str, queue_id: int) -> int:
    return -1


@dataclass(frozen=True, slots=True)
class ConsumerLink:
    """What the store learns of its consumers from the layer above (the broker's long polls
    and offset table), given once at construction as ``ReplicaLink`` is for replication: the
    store keeps no consumer state of its own, and nothing rewires it while it runs.

    - ``on_arrival(topic, queue_id, max_offset)``: dispatch made new messages visible; left
      out of a dispatch report while ``quiet()`` is True (nobody to wake);
    - ``on_planned(topic, queue_id, max_offset, durable_end)``: while a sync runs, the queues
      it advances once ``durable_end`` is on disk (``Arrivals``: a reply ahead of the sync);
    - ``waiting()``: True while a reader waits for new messages (a parked long poll): under
      SYNC_FLUSH each sync then dispatches in its own callback;
    - ``progress()``: the committed offsets; retention counts the messages it deletes that a
      group had not consumed;
    - ``committed(group, topic, queue_id)``: a group's committed offset, -1 for none: pop
      never hands out a group's messages below it.
    """

    on_arrival: ArrivalListener | None = None
    quiet: Callable[[], bool] | None = None
    on_planned: PlannedListener | None = None
    waiting: Callable[[], bool] | None = None
    progress: ConsumerProgress = dict
    committed: Callable[[str, str, int], int] = _nothing_committed


class PoppedMessage(NamedTuple):
    """One pop delivery: the message, its receipt handle, its delivery attempt (1, 2, ...)."""

    message: StoredMessage
    receipt_handle: str
    attempt: int
