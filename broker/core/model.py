"""The core's small values: what a front end hands the core and gets back, in store terms
(``wharf.store.model``), never a protocol's generated types."""

from __future__ import annotations

from dataclasses import dataclass

from wharf.store import Written, WrittenMany  # a send's handles, as front ends hold them
from wharf.store.model import MessageInput, PutStatus

__all__ = [
    "Failed",
    "Planned",
    "SendOutcome",
    "Stored",
    "TopicDefaults",
    "Written",
    "WrittenMany",
]


@dataclass(frozen=True, slots=True)
class Planned:
    """One message of a de-duplicated send: the producer's id for it (the dedupe key with the
    topic), the queue it goes to, and the store input."""

    message_id: str
    queue_id: int
    message: MessageInput


@dataclass(frozen=True, slots=True)
class Stored:
    """A message of a de-duplicated send that is in the store.

    ``status`` is this attempt's durability verdict (``PUT_OK`` for a retry answered from the
    dedupe window: the first attempt stored it). ``retried``: answered from the window (or
    from a concurrent first attempt) rather than appended by this call. ``timed`` (held by
    the timer until its delivery time) and ``prepared`` (a transaction's half message) say
    which handle a front end returns for it: the queue offset is the recall or transaction
    handle's base."""

    message_id: str
    queue_id: int
    queue_offset: int
    status: PutStatus
    retried: bool = False
    timed: bool = False
    prepared: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """A message of a de-duplicated send that was not stored: ``error`` is what the store (or
    the core) raised; the front end maps it with its own error table."""

    message_id: str
    error: BaseException


SendOutcome = Stored | Failed


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    """What a topic not created yet would be: ``queue_nums`` read and write queues
    (defaultTopicQueueNums) when ``auto_create`` (autoCreateTopicEnable) lets a send make it."""

    queue_nums: int
    auto_create: bool
