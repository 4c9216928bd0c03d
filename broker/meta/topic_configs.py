"""A topic's configs: Kafka's names, types and checks, defined once for every protocol.

A topic's configs live in its ``attributes`` (``topics.json``) under Kafka's names and in
Kafka's value form (``cleanup.policy`` = ``delete`` | ``compact`` | ``compact,delete``), beside
RocketMQ 5's ``message.type``. RocketMQ 5's own spelling of the one attribute the two share
(``+cleanup.policy=COMPACTION`` / ``DELETE``) is taken on input and stored in Kafka's form;
:func:`rocketmq_view` gives RocketMQ's spelling back. :func:`policy_of` turns a topic's
attributes into the store's :class:`TopicPolicy`.

Errors are :class:`ConfigError` with Kafka's wording, so the Kafka front end answers
INVALID_CONFIG (40) with the message as Kafka's broker words it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from wharf.store.retention.policy import LONG_MAX, TopicPolicy

CLEANUP_POLICY = "cleanup.policy"
_ROCKETMQ_CLEANUP = {"COMPACTION": "compact", "DELETE": "delete"}


class ConfigError(ValueError):
    """A config name or value the broker refuses (Kafka: INVALID_CONFIG)."""


def _long(low: int) -> Callable[[str, str], str]:
    def check(name: str, value: str) -> str:
        try:
            number = int(value.strip())
        except ValueError:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Not a number of type LONG"
            ) from None
        if not low <= number <= LONG_MAX:
            raise ConfigError(
                f"Invalid value {value} for configuration {name}: Value must be at least {low}"
            )
        return str(number)

    return check


def _ratio(name: str, value: str) -> str:
    try:
        number = float(value.strip())
    except ValueError:
        raise ConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type DOUBLE"
        ) from None
    if not 0.0 <= number <= 1.0:
        raise ConfigError(
            f"Invalid value {value} for configuration {name}: Value must be between 0 and 1"
        )
    return repr(number)


def _cleanup(name: str, value: str) -> str:
    parts = [p.strip() for p in value.split(",") if p.strip()]
    parts = [_ROCKETMQ_CLEANUP.get(p.upper(), p) for p in parts]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(
            f"Invalid value {value} for configuration {name}: "
            "String must be one of: compact, delete"
        )
    return ",".join(sorted(set(parts)))  # "compact,delete", Kafka's spelling


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    default: str
    check: Callable[[str, str], str]  # (name, value) -> the stored form, or ConfigError


# The configs Wharf honours per topic (the store's TopicPolicy); a name here is settable by
# CreateTopics, (Incremental)AlterConfigs and the RocketMQ/wharf.v1 admin attributes.
KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey(CLEANUP_POLICY, "delete", _cleanup),
        ConfigKey("retention.ms", "-1", _long(-1)),
        ConfigKey("retention.bytes", "-1", _long(-1)),
        ConfigKey("segment.ms", "604800000", _long(1)),
        ConfigKey("min.cleanable.dirty.ratio", "0.5", _ratio),
        ConfigKey("min.compaction.lag.ms", "0", _long(0)),
        ConfigKey("max.compaction.lag.ms", str(LONG_MAX), _long(1)),
        ConfigKey("delete.retention.ms", "86400000", _long(0)),
    )
}


def checked(name: str, value: str | None) -> str:
    """The stored form of one config, or ConfigError naming it."""
    key = KEYS.get(name)
    if key is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    if value is None:
        raise ConfigError(f"Null value not supported for topic configs: {name}")
    return key.check(name, value)


def policy_of(attributes: dict[str, str]) -> TopicPolicy:
    """The store's policy for a topic's attributes (values already checked when stored)."""
    cleanup = attributes.get(CLEANUP_POLICY, "delete").split(",")
    retention = attributes.get("retention.ms")

    def number(name: str) -> int:
        return int(attributes.get(name, KEYS[name].default))

    return TopicPolicy(
        compact="compact" in cleanup,
        delete="delete" in cleanup,
        retention_ms=None if retention is None else int(retention),
        retention_bytes=number("retention.bytes"),
        segment_ms=number("segment.ms"),
        min_cleanable_dirty_ratio=float(
            attributes.get("min.cleanable.dirty.ratio", KEYS["min.cleanable.dirty.ratio"].default)
        ),
        min_compaction_lag_ms=number("min.compaction.lag.ms"),
        max_compaction_lag_ms=number("max.compaction.lag.ms"),
        delete_retention_ms=number("delete.retention.ms"),
    )


def rocketmq_view(attributes: dict[str, str]) -> dict[str, str]:
    """A topic's attributes as RocketMQ 5 spells them (``cleanup.policy`` COMPACTION/DELETE)."""
    out = dict(attributes)
    policy = out.get(CLEANUP_POLICY)
    if policy is not None:
        out[CLEANUP_POLICY] = "COMPACTION" if "compact" in policy.split(",") else "DELETE"
    return out
