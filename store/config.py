"""Store configuration: one frozen dataclass, resolved once at start and passed as a value.

Field names are RocketMQ's MessageStoreConfig names in snake_case (the broker's TOML file uses
the camelCase originals, e.g. ``flushDiskType`` -> ``flush_disk_type``). Defaults are
RocketMQ's unless a comment says why not.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

ASYNC_FLUSH = "ASYNC_FLUSH"
SYNC_FLUSH = "SYNC_FLUSH"

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    # storePathRootDir: commitlog/, consumequeue/, index/, config/, checkpoint, abort live here.
    store_path_root_dir: str = "data"
    # mappedFileSizeCommitLog: 1 GiB segments; tests use a few KiB so rolling happens constantly.
    mapped_file_size_commit_log: int = 1024 * 1024 * 1024
    # mappedFileSizeConsumeQueue: 300,000 units of 20 bytes per file.
    mapped_file_size_consume_queue: int = 300_000 * 20
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

    # Wharf: put() waits while dispatch (ReputService) is more than this many bytes behind the
    # written end (0 = never). Pure-Python dispatch is slower than appends; without a bound the
    # backlog -- consumer lag, and the re-dispatch a crash restart must do -- grows without limit.
    # 64 MiB is about 1 s of dispatch work for keyed 1 KiB messages (measured: a kill -9 at a
    # 128 MiB backlog re-dispatched for 3.2 s on a busy 2-core box). append() never waits.
    max_dispatch_lag_bytes: int = 64 * 1024 * 1024

    # Written into every record as STOREHOST and used in offset message ids (ipv4:port).
    store_host: str = "127.0.0.1:8081"

    def replace(self, **changes: object) -> StoreConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
