"""Message properties and topic names: the property names Wharf reads (RocketMQ's
MessageConst), the separators of the PROPERTIES text, its to/from string forms, the reserved
topics and the topic-name rule. Sans-IO, numpy-free.

PROPERTIES is ``name\\x01value\\x02`` repeated (every pair terminated, as RocketMQ writes it);
names and values must not contain either separator. Several KEYS are joined by a space.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re

from wharf.store.codec.layout import MAX_TOPIC_LENGTH
from wharf.store.errors import InvalidMessageError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "  # several KEYS are joined by a space, as RocketMQ does

PROPERTY_KEYS = "KEYS"
PROPERTY_TAGS = "TAGS"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"
PROPERTY_DELAY_TIME_LEVEL = "DELAY"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
# The cluster of the broker that stored a RocketMQ 4.x send (its SendMessageProcessor adds it).
PROPERTY_CLUSTER = "CLUSTER"
PROPERTY_PRODUCER_GROUP = "PGROUP"
# RocketMQ's MessageConst.PROPERTY_SHARDING_KEY: a FIFO message group (v2 ``message_group``).
PROPERTY_MESSAGE_GROUP = "__SHARDINGKEY"
# Delivery at any time (RocketMQ 5's timer): the time in ms since the epoch, or a delay in s.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
# A recall's cancel marker names the timer message it cancels (RocketMQ's name).
PROPERTY_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
# Wharf: the timer queue offset a delivered copy came from (the record of its delivery).
PROPERTY_TIMER_QUEUE_OFFSET = "TIMER_QUEUE_OFFSET"
# Transactions (RocketMQ's names): a half message; its check-back immunity in seconds.
PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"
PROPERTY_CHECK_IMMUNITY_TIME = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Wharf: the half-queue offset a committed copy or a rollback marker resolves.
PROPERTY_TRAN_HALF_OFFSET = "TRAN_HALF_OFFSET"
# Kafka's record key and null value as the Kafka mapping stores them (codec/kafka_records.py):
# a key that is not plain text, base64; a null value (a tombstone) marks a placeholder body.
# Not named PROPERTY_*: those are the system properties every reader's user properties leave
# out (SYSTEM_PROPERTY_NAMES below); these stay what they were.
KAFKA_KEY_PROPERTY = "__KAFKA_KEY"
KAFKA_VALUE_PROPERTY = "__KAFKA_VALUE"  # "null" | "empty"
# A Kafka transaction's COMMIT/ABORT marker, written by the broker (broker/core/txn_index.py).
KAFKA_CONTROL_PROPERTY = "__KAFKA_CONTROL"

# Every property name the broker or the store gives a meaning (RocketMQ's MessageConst): the
# PROPERTY_* names above. The user properties of a message are the others (the broker's
# message rules count them; the v2 and Kafka mappings leave these out).
SYSTEM_PROPERTY_NAMES = frozenset(
    value
    for name, value in dict(globals()).items()
    if name.startswith("PROPERTY_") and name != "PROPERTY_SEPARATOR" and isinstance(value, str)
)


def compaction_key(properties: dict[str, str]) -> bytes | None:
    """The key a compacted topic keeps the latest record of: a Kafka record's key as its
    producer sent it, else the whole KEYS text (RocketMQ 5's CompactionLog keys by
    ``getKeys()``); None without one. base64 is decoded leniently: the key need only be the
    same for the same text."""
    packed = properties.get(KAFKA_KEY_PROPERTY)
    if packed is not None:
        try:
            return base64.b64decode(packed)
        except (binascii.Error, ValueError):
            return packed.encode()
    keys = properties.get(PROPERTY_KEYS)
    return keys.encode() if keys else None


def is_tombstone(properties: dict[str, str]) -> bool:
    """A Kafka record with a null value: on a compacted topic it deletes its key."""
    return properties.get(KAFKA_VALUE_PROPERTY) == "null"


# --- Reserved topics ---------------------------------------------------------------------------
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # queue 0: timer messages; queue 1: cancel markers
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# The characters of topic and group names, defined once for the store and every protocol:
# RocketMQ's [%a-zA-Z0-9_-] and Kafka's '.' (com.acme.orders.v1 is Kafka's everyday name).
# A name of dots only is refused: "." and ".." are directories (Kafka refuses them too).
NAME_CHARS = "%a-zA-Z0-9._-"
NAME_PATTERN = re.compile(rf"(?!\.{{1,2}}$)[{NAME_CHARS}]+")
TOPIC_PATTERN = re.compile(rf"(?!\.{{1,2}}$)[{NAME_CHARS}]{{1,{MAX_TOPIC_LENGTH}}}")


def valid_name(name: str, limit: int = MAX_TOPIC_LENGTH) -> bool:
    """Whether ``name`` is a topic or group name of at most ``limit`` characters."""
    return len(name) <= limit and NAME_PATTERN.fullmatch(name) is not None


def name_rule(limit: int = MAX_TOPIC_LENGTH) -> str:
    """The rule, for a refusal's message."""
    return f"1-{limit} characters of [{NAME_CHARS}], not '.' or '..'"


def properties_to_string(properties: dict[str, str]) -> str:
    """``{"k": "v"}`` -> ``"k\\x01v\\x02"`` (every pair terminated, as RocketMQ writes them)."""
    if not properties:
        return ""
    return "\x02".join(map("\x01".join, properties.items())) + "\x02"


def string_to_properties(text: str) -> dict[str, str]:
    """Inverse of ``properties_to_string``; tolerant of a missing final separator."""
    result: dict[str, str] = {}
    for pair in text.split("\x02"):
        if pair:
            name, _, value = pair.partition("\x01")
            result[name] = value
    return result


def has_separator(text: str) -> bool:
    """Whether ``text`` holds a reserved separator (it cannot be a property name or value)."""
    return "\x01" in text or "\x02" in text


def validate_topic(topic: str) -> bytes:
    """Return the topic's ascii bytes or raise InvalidMessageError."""
    if not isinstance(topic, str):
        raise InvalidMessageError(f"topic must be a string, got {type(topic).__name__}")
    return _topic_bytes(topic)


@functools.lru_cache(maxsize=4096)  # topics repeat; the regex costs ~0.5 us per batch
def _topic_bytes(topic: str) -> bytes:
    if TOPIC_PATTERN.fullmatch(topic) is None:
        raise InvalidMessageError(f"topic {topic!r} is invalid: use {name_rule()}")
    return topic.encode("ascii")
