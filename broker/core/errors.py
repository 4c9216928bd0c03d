"""The core's refusals: each one a broker error (so wharf.v1's ``status_for`` maps it as it maps
the processors' own) that also names its ``Reason``, the neutral verdict a front end with finer
codes (apache.rocketmq.v2's ``code_for`` table cannot tell a bad tag from a bad key) maps on
its own. The message is the user-facing text, as everywhere in the broker."""

from __future__ import annotations

import enum

from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)


class Reason(enum.Enum):
    """Why the core refused a call (one value per rule; a front end maps each to a code)."""

    SHUTTING_DOWN = "shutting down"
    EMPTY = "no messages"
    ILLEGAL_TOPIC = "illegal topic"  # a bad name, or reserved for the broker
    OWN_TOPIC = "the broker's own topic"  # %RETRY%, %DLQ%, SCHEDULE_TOPIC_XXXX, rmq_sys_ ...
    TOPIC_NOT_FOUND = "topic not found"  # unknown and autoCreateTopicEnable off
    NOT_WRITABLE = "topic not writable"  # perm bits
    NOT_READABLE = "topic not readable"  # perm bits
    ILLEGAL_QUEUE = "queue out of range"
    BODY_EMPTY = "empty body"
    BODY_TOO_LARGE = "body too large"
    ILLEGAL_TAG = "illegal tag"
    ILLEGAL_KEY = "illegal key"
    ILLEGAL_PROPERTY = "illegal property"
    PROPERTIES_TOO_LARGE = "properties too large"
    UNKNOWN_TRANSACTION = "unknown transaction"  # no half of that message (and topic) there
    UNKNOWN_TIMER = "unknown timer"  # a recall of no pending timed message (delivered, recalled)


class Refused(Exception):
    """Base of the core's refusals: each also derives from the broker error it is."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidSend(Refused, InvalidArgumentError):
    """A request or message the rules refuse (INVALID_ARGUMENT for wharf.v1)."""


class TopicNotFound(Refused, NotFoundError):
    """An unknown topic while autoCreateTopicEnable is off."""


class TopicNotWritable(Refused, PermissionDeniedError):
    """The topic's permission bits forbid sends."""


class TopicNotReadable(Refused, PermissionDeniedError):
    """The topic's permission bits forbid reads."""


class ShuttingDown(Refused, UnavailableError):
    """The broker is shutting down: retry on another broker."""


class UnknownTimer(Refused, NotFoundError):
    """A recall that names no pending timed message (delivered or recalled already)."""
