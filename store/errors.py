"""The store's error family. The broker maps each class to one gRPC status (broker/errors.py).

Every error carries a message a user can act on. The store never acknowledges data it
could not persist: write paths raise, they do not log-and-continue.
"""


class StoreError(Exception):
    """Base class of every error the store raises on purpose."""


class InvalidMessageError(StoreError):
    """The message breaks a limit (body size, topic name, properties size, queue id ...).
    Nothing was written. Maps to INVALID_ARGUMENT."""


class InvalidFilterError(InvalidMessageError):
    """A subscription tag expression is malformed (``||`` alone, empty alternatives ...).
    Maps to INVALID_ARGUMENT like every other bad input."""


class StoreNotWritableError(StoreError):
    """Writes are refused: disk over diskSpaceWarningLevelRatio (90 %), or a sticky flush
    error made the on-disk state unknown, or the store is shutting down. Maps to
    RESOURCE_EXHAUSTED (disk full) / UNAVAILABLE (flush failure, shutdown)."""


class DiskFullError(StoreNotWritableError):
    """Disk use passed diskSpaceWarningLevelRatio: writes refused until retention frees space."""


class FlushFailedError(StoreNotWritableError):
    """An fsync/fdatasync failed. Sticky: every later write fails too, because the state of
    the file after a failed sync is unknown (see LevelDB DBImpl::Write, NATS filestore)."""


class StoreShutDownError(StoreNotWritableError):
    """The store is stopping or stopped."""


class MessageNotFoundError(StoreError):
    """No message at that offset / with that id. Maps to NOT_FOUND."""


class CorruptRecordError(StoreError):
    """A record failed its checks (magic, size, CRC). Carries the physical offset."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at commit log offset {offset}: {reason}")
        self.offset = offset
        self.reason = reason
