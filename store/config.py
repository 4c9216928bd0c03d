"""Store configuration: one frozen dataclass, resolved once at start and passed as a value,
and the ONE set of bounds its settings are checked against.

Field names are RocketMQ's MessageStoreConfig names in snake_case (the broker's TOML file uses
the camelCase originals, e.g. ``flushDiskType`` -> ``flush_disk_type``). Defaults are
RocketMQ's unless a comment says why not.

Validation lives here, next to the fields, because two callers need it: ``MessageStore``
refuses a config it cannot honour at construction (``StoreConfig.validate``), and the broker's
settings loader checks each store setting as it reads it (``check_setting``) so that its error
names the setting as the operator wrote it (camelCase, file, environment variable or flag).
Both use the same bounds and the same parsers (``parse_delete_when``, ``parse_delay_levels``):
two copies drift apart (they did: disk ratios 1..99 vs (0, 100], a ``deleteWhen`` with blanks
accepted by one and refused by the other).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wharf.store.codec.layout import CQ_STORE_UNIT_SIZE

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


# consumeQueueTailBudget's default: 64 MiB, 16,384 full 4 KiB tails. At 8 MiB (2,048 tails)
# a broker of 40,000 busy queues (10,000 topics) wrote most dispatch runs through, each an
# open, pwrite and close of a queue file (the file cache holds 2,048): the dispatch cost 1.96
# us a message against 1.20 at 64 MiB, and producers were held by its back-pressure
# (tests.bench.topics, 2026-11-26). A bound of the store, whatever the number of queues: on
# the tails' lengths; their memory is at most twice that (a tail's buffer grows by doubling,
# store/fast/_log_scan.c ``grow_tail``).
CONSUME_QUEUE_TAIL_BUDGET = 64 << 20


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # storePathRootDir: commitlog/, consumequeue/, index/, config/, checkpoint, abort live here.
    store_path_root_dir: str = "data"
    # Wharf: what the store creates is 0700 (directories) / 0600 (files), whatever the umask:
    # the commit log holds every message body, past the ACL. storeGroupShared makes them
    # 0750/0640 for an account in the broker's group (backups, monitoring). store/paths.py.
    store_group_shared: bool = False
    # mappedFileSizeCommitLog: 1 GiB segments; tests use a few KiB so rolling happens constantly.
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    # mappedFileSizeConsumeQueue: 300,000 units of 20 bytes per file.
    mapped_file_size_consume_queue: int = 300_000 * 20
    # Wharf (RocksDB's max_open_files): ConsumeQueue files mapped at once, whatever the number
    # of queues; one descriptor and one map each, capped at a quarter of the open-file limit
    # (store/queue/file_cache.py). 2,048 maps at ~12 us a miss.
    max_open_queue_files: int = 2048
    # Wharf: bytes of queue units held in memory for one write of a page per queue (the
    # queues' "tails", store/queue/consume_queue.py); 0 writes each dispatch's units at once
    # (a pwrite per queue per dispatch chunk). See CONSUME_QUEUE_TAIL_BUDGET.
    consume_queue_tail_budget: int = CONSUME_QUEUE_TAIL_BUDGET
    # maxHashSlotNum / maxIndexNum: IndexFile of 40 + 5M*4 + 20M*20 bytes (~420 MB).
    max_hash_slot_num: int = 5_000_000
    max_index_num: int = 20_000_000
    # messageIndexEnable: build IndexFiles (query by key / unique id).
    message_index_enable: bool = True

    # flushDiskType: ASYNC_FLUSH acks after the page-cache write; SYNC_FLUSH after fdatasync.
    flush_disk_type: str = ASYNC_FLUSH
    # syncFlushTimeout (ms): a SYNC_FLUSH put not on disk by then returns FLUSH_DISK_TIMEOUT.
    sync_flush_timeout: int = 5000
    # flushIntervalCommitLog (ms) / flushCommitLogLeastPages / flushCommitLogThoroughInterval (ms).
    flush_interval_commit_log: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval: int = 10_000
    # ConsumeQueue and IndexFile flush on their own service (FlushConsumeQueueService).
    flush_interval_consume_queue: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval: int = 60_000
    # flushConsumeQueueMaxQueues (Wharf's): a per-second pass syncs at most this many queues,
    # the most unflushed first (services/queue_flush.py: at 1,024 busy queues it synced
    # ~700 a second).
    flush_consume_queue_max_queues: int = 16

    # transientStorePoolEnable: appends land in pooled write buffers and a CommitRealTimeService
    # copies them into the file off the event loop. Default chosen by measurement (README).
    transient_store_pool_enable: bool = False
    transient_store_pool_size: int = 5
    commit_interval_commit_log: int = 200
    commit_commit_log_least_pages: int = 4
    # commitCommitLogThoroughInterval (ms): commit whatever is buffered, even below the least
    # pages, once this long has passed without a commit; otherwise a lone small message stays
    # invisible (not readable, not dispatched) until more traffic or shutdown.
    commit_commit_log_thorough_interval: int = 200

    # warmMapedFileEnable (RocketMQ's spelling): touch every page of a new segment ahead of use.
    warm_mapped_file_enable: bool = False
    # zeroFillAheadMbps (MB/s; 0 off; SYNC_FLUSH only): a segment preallocated ahead has its
    # zeros written and synced at this pace, when the log is slow enough for the fill to end
    # well before the segment is needed, and the segment being written gets them 1 MiB ahead
    # of its writer at the same pace: why and when in store/log/allocate.py, fill_ahead.py
    # and mapped_file.py ``ZeroFill``.
    zero_fill_ahead_mbps: int = 32

    # fileReservedTime (hours) / deleteWhen ("04" or "04;16") / cleanResourceInterval (ms).
    file_reserved_time: int = 72
    delete_when: str = "04"
    clean_resource_interval: int = 10_000
    # diskMaxUsedSpaceRatio / diskSpaceCleanForciblyRatio / diskSpaceWarningLevelRatio (percent).
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    # deleteCommitLogFilesInterval (ms between file deletions) / max files per pass.
    delete_commit_log_files_interval: int = 100
    delete_file_batch_max: int = 10

    # maxMessageSize: body limit in bytes (4 MiB). Properties are capped by their 2-byte length.
    max_message_size: int = 4 * 1024 * 1024
    # checkCRCOnRecover: validate body CRCs while recovering.
    check_crc_on_recover: bool = True
    # messageDelayLevel: the delay levels, 1-based, for SCHEDULE_TOPIC_XXXX.
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    # timerMaxDelaySec: how far ahead a delivery time may lie (RocketMQ: 3 days). Keep it below
    # fileReservedTime: retention deletes timers with the segment that holds them.
    timer_max_delay_sec: int = 3 * 24 * 3600

    # Wharf: put() waits while dispatch (ReputService) is more than this many bytes behind the
    # written end (0 = never). Pure-Python dispatch is slower than appends; without a bound the
    # backlog -- consumer lag, and the re-dispatch a crash restart must do -- grows without limit.
    # 64 MiB is about 1 s of dispatch work for keyed 1 KiB messages (measured: a kill -9 at a
    # 128 MiB backlog re-dispatched for 3.2 s on a busy 2-core box). append() never waits.
    max_dispatch_lag_bytes: int = 64 * 1024 * 1024
    # waitTimeMillsInSendQueue: how long a send is held for that room before it is answered
    # "broker busy" (StoreBusyError: RESOURCE_EXHAUSTED, v2 TOO_MANY_REQUESTS, remoting
    # SYSTEM_BUSY; every client retries it with a back-off). RocketMQ's 200 ms bounds a wait in
    # its send thread pool's queue; this wait is for the dispatch, which brings 32 MiB back in
    # ~0.1-0.5 s here, so 1,000 ms. It must stay well below the clients' send deadline (the
    # SDK's 3 s): a send held past it was written after its client had given up (the hold used
    # to be syncFlushTimeout, 5 s, and the SDK reported DeadlineExceededError, issue 33).
    wait_time_mills_in_send_queue: int = 1000

    # Written into every record as STOREHOST and used in offset message ids (ipv4:port).
    store_host: str = "127.0.0.1:8081"

    # --- topic retention and compaction (store/services/retention.py) ------------------------
    # Wharf: how often (ms) topics' retention.ms/bytes and compacted queues are looked at, as
    # Kafka's log.cleaner.backoff.ms (15 s): a topic with segment.ms 1000 and a dirty ratio
    # of 0.01 is compacted within ~15-30 s of its last writes.
    compaction_check_interval: int = 15_000
    # Wharf: the key -> offset map of one pass (160 bytes a key: 209,715 keys at 32 MiB;
    # Kafka's log.cleaner.dedupe.buffer.size is 128 MiB over all its threads, RocketMQ 5's
    # compactionCqMappedFileSize-bound map 100 MiB). A queue with more keys is compacted in
    # several passes, never with more memory.
    compaction_map_bytes: int = 32 << 20
    # Wharf: bytes a second a pass reads and copies (Kafka: log.cleaner.io.max.bytes.per.second,
    # unbounded by default); 0 = unbounded. 32 MiB/s keeps a pass's page-cache churn well below
    # a SYNC_FLUSH log's own.
    compaction_io_bytes_per_second: int = 32 << 20

    # --- replication (store/ha/) -------------------------------------------------------------
    # brokerRole: ASYNC_MASTER, SYNC_MASTER (acks wait for inSyncReplicas - 1 replicas) or SLAVE.
    broker_role: str = "ASYNC_MASTER"
    # haListenPort: the master's replication listener; -1 (Wharf's default) opens none: a
    # broker without replicas listens on no port it does not use (RocketMQ always opens 10912).
    # 0 = an ephemeral port (the ready file reports it). haListenHost: the address it binds.
    ha_listen_port: int = -1
    ha_listen_host: str = "127.0.0.1"
    # haMasterAddress: a SLAVE's master HA address, host:port.
    ha_master_address: str = ""
    # haSendHeartbeatInterval (ms): a replica reports (and an idle master sends an empty frame)
    # at least this often; haHousekeepingInterval (ms): a peer silent this long is dropped.
    ha_send_heartbeat_interval: int = 5000
    ha_housekeeping_interval: int = 20_000
    # haTransferBatchSize: bytes per frame at most. RocketMQ's 32 KiB costs ~140 us of Python
    # per frame; 1 MiB frames move a catching-up replica at ~1.5 GB/s (cluster.md section 3).
    ha_transfer_batch_size: int = 1024 * 1024
    # haMaxGapNotInSync: a replica further behind does not count for SYNC_MASTER at all
    # (SLAVE_NOT_AVAILABLE at once instead of FLUSH_SLAVE_TIMEOUT after slaveTimeout).
    ha_max_gap_not_in_sync: int = 256 * 1024 * 1024
    # slaveTimeout (ms): a SYNC_MASTER put not on enough replicas by then -> FLUSH_SLAVE_TIMEOUT.
    slave_timeout: int = 3000
    # inSyncReplicas: copies a SYNC_MASTER ack needs, the master included. 2, not RocketMQ 5's 1
    # (with 1 a SYNC_MASTER acknowledges alone: "SYNC" would mean nothing).
    in_sync_replicas: int = 2
    # minInSyncReplicas: in controller mode, fewer in-sync copies refuse writes.
    min_in_sync_replicas: int = 1
    # haMaxTimeSlaveNotCatchup (ms): a replica that has not caught up with the log end for this
    # long leaves the in-sync set (and stops holding back the confirm offset).
    ha_max_time_slave_not_catchup: int = 15_000

    def replace(self, **changes: object) -> StoreConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def validate(self) -> None:
        """Raise StoreConfigError (naming the settings) for settings the store cannot honour:
        each field against ``check_setting``, then the bounds that tie fields together."""
        for field in dataclasses.fields(self):
            try:
                check_setting(field.name, getattr(self, field.name))
            except ValueError as exc:
                raise StoreConfigError((field.name,), str(exc)) from None
        if self.message_index_enable and self.max_index_num <= 1:
            raise StoreConfigError(
                ("max_index_num",),
                f"must be > 1 when message_index_enable, got {self.max_index_num}",
            )
        if self.broker_role == "SYNC_MASTER" and self.ha_listen_port < 0:
            raise StoreConfigError(
                ("broker_role", "ha_listen_port"),
                "a SYNC_MASTER needs haListenPort (0 for an ephemeral port): its replicas "
                "connect there",
            )
        if self.min_in_sync_replicas > self.in_sync_replicas:
            raise StoreConfigError(
                ("min_in_sync_replicas", "in_sync_replicas"),
                f"minInSyncReplicas {self.min_in_sync_replicas} exceeds inSyncReplicas "
                f"{self.in_sync_replicas}",
            )
        ratios = (
            self.disk_max_used_space_ratio,
            self.disk_space_clean_forcibly_ratio,
            self.disk_space_warning_level_ratio,
        )
        if list(ratios) != sorted(ratios):
            # Clean, then clean forcibly, then refuse writes: out of order, writes would stop
            # before retention had tried to free anything.
            raise StoreConfigError(
                (
                    "disk_max_used_space_ratio",
                    "disk_space_clean_forcibly_ratio",
                    "disk_space_warning_level_ratio",
                ),
                f"must be increasing, got {ratios}",
            )


class StoreConfigError(ValueError):
    """A setting the store cannot honour. ``settings``: the fields at fault (snake_case), so
    the broker can name them as its operators spell them."""

    def __init__(self, settings: tuple[str, ...], problem: str) -> None:
        super().__init__(f"{'/'.join(settings)}: {problem}")
        self.settings = settings
        self.problem = problem


# --- parsers (the store runs on their results; the broker checks settings with them) ---------


def parse_delete_when(text: str) -> frozenset[int]:
    """``"04"`` or ``"04;16"`` (blanks around items allowed) -> the hours retention may delete
    expired files in. ValueError if an item is not an hour 00-23."""
    hours = set()
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or not 0 <= int(item) <= 23:
            raise ValueError(f"item {item!r} is not an hour 00-23 (in {text!r})")
        hours.add(int(item))
    return frozenset(hours)


_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_LEVEL = re.compile(r"(\d+)([smhd])")


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m 2h"`` -> milliseconds per level (level 1 first). ValueError if malformed."""
    levels = []
    for item in text.split():
        match = _LEVEL.fullmatch(item)
        if match is None or int(match.group(1)) <= 0:
            raise ValueError(
                f"item {item!r} is not a positive number followed by s, m, h or d (in {text!r})"
            )
        levels.append(int(match.group(1)) * _UNIT_MS[match.group(2)])
    if not levels:
        raise ValueError("must name at least one level")
    return levels


# --- per-setting bounds ------------------------------------------------------------------------

# Integer settings are > 0, except these, for which 0 means "every time" or "off".
ZERO_ALLOWED = frozenset(
    {
        "file_reserved_time",  # files expire at once (tests; emptying a broker)
        "flush_commit_log_least_pages",
        "flush_consume_queue_least_pages",
        "commit_commit_log_least_pages",
        "delete_commit_log_files_interval",
        "max_dispatch_lag_bytes",  # 0: put() never waits for dispatch
        "wait_time_mills_in_send_queue",  # 0: a lagging dispatch answers busy at once
        "zero_fill_ahead_mbps",  # 0: preallocated segments stay fallocated only
        "consume_queue_tail_budget",  # 0: no queue tails
        "compaction_io_bytes_per_second",  # 0: a pass runs unpaced
    }
)


def _percent(value: int) -> None:
    # Integer percentages; 100 is allowed and means "never" (use can not exceed 100 %).
    if not 0 < value <= 100:
        raise ValueError(f"disk space ratios are percentages in 1..100, got {value}")


def _multiple_of_unit(value: int) -> None:
    if value % CQ_STORE_UNIT_SIZE:
        raise ValueError(
            f"must be a positive multiple of {CQ_STORE_UNIT_SIZE} (the ConsumeQueue unit size),"
            f" got {value}"
        )


def _flush_type(value: str) -> None:
    if value not in (ASYNC_FLUSH, SYNC_FLUSH):
        raise ValueError(f"expected {ASYNC_FLUSH} or {SYNC_FLUSH}, got {value!r}")


def _non_empty(value: str) -> None:
    if not value.strip():
        raise ValueError("must not be empty")


def _broker_role(value: str) -> None:
    if value not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
        raise ValueError(f"expected ASYNC_MASTER, SYNC_MASTER or SLAVE, got {value!r}")


def _port_or_off(value: int) -> None:
    if not -1 <= value <= 65535:
        raise ValueError(f"expected a port 0..65535, or -1 for none, got {value}")


def _host_port_or_empty(value: str) -> None:
    if not value:
        return
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")


_CHECKS: dict[str, Callable[[Any], object]] = {
    "store_path_root_dir": _non_empty,
    "broker_role": _broker_role,
    "ha_listen_port": _port_or_off,
    "ha_master_address": _host_port_or_empty,
    "ha_listen_host": _non_empty,
    "flush_disk_type": _flush_type,
    "mapped_file_size_consume_queue": _multiple_of_unit,
    "delete_when": parse_delete_when,
    "message_delay_level": parse_delay_levels,
    "disk_max_used_space_ratio": _percent,
    "disk_space_clean_forcibly_ratio": _percent,
    "disk_space_warning_level_ratio": _percent,
}
_INT_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(StoreConfig)
    if type(f.default) is int  # not bool
)


_SIGNED_FIELDS = frozenset({"ha_listen_port"})


def check_setting(name: str, value: Any) -> None:
    """ValueError (the message does not repeat ``name``) if ``value`` is out of the bounds of
    store setting ``name``. ``value`` has the field's type (the caller parsed it)."""
    if name in _SIGNED_FIELDS:
        pass  # checked by its own rule below
    elif name in _INT_FIELDS and (value < 0 or (value == 0 and name not in ZERO_ALLOWED)):
        raise ValueError(f"expected a positive integer, got {value}")
    check = _CHECKS.get(name)
    if check is not None:
        check(value)
