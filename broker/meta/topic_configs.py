"""A topic's configs: Kafka's names, types and checks, defined once for every protocol.

A topic's configs live in its ``attributes`` (``topics.json``) under Kafka's names and in
Kafka's value form (``cleanup.policy`` = ``delete`` | ``compact`` | ``compact,delete``), beside
RocketMQ 5's ``message.type``. RocketMQ 5's own spelling of the one attribute the two share
(``+cleanup.policy=COMPACTION`` / ``DELETE``) is taken on input and stored in Kafka's form;
:func:`rocketmq_view` gives RocketMQ's spelling back. :func:`policy_of` turns a topic's
attributes into the store's :class:`TopicPolicy`.

Errors are :class:`ConfigError` with Kafka's wording, so the Kafka front end answers
INVALID_CONFIG (40) with the message as Kafka's broker words it.

Kafka's other topic configs, which tools send at creation (Kafka Streams, Connect, schema
registries, quixstreams, faust): :data:`FIXED` are accepted, not stored, when the value asked is
what Wharf does for every topic (:func:`check_fixed`, against the broker's figures); any other
value, and every other Kafka config (:data:`UNSUPPORTED`), is a ConfigError saying why, so no
config is silently ignored in a way that changes what a client sees. :func:`checked_configs`
applies both to one request's configs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


@dataclass(frozen=True, slots=True)
class FixedKey:
    """A Kafka config Wharf does not store: ``accepts(value, wharf)`` is True for the values
    that mean what Wharf does anyway (``wharf``: the broker's figure, :func:`check_fixed`)."""

    name: str
    accepts: Callable[[str, str], bool]
    why: str  # what Wharf does instead, for the refusal ({wharf}: the broker's figure)


def _number_equal(value: str, wharf: str) -> bool:
    try:
        return int(value.strip()) == int(wharf)
    except ValueError:
        return False


def _segment_size(value: str, wharf: str) -> bool:
    try:
        return int(value.strip()) >= 14  # Kafka's minimum (a v0 record's overhead)
    except ValueError:
        return False


FIXED: dict[str, FixedKey] = {
    k.name: k
    for k in (
        FixedKey(
            "message.timestamp.type",
            lambda v, w: v.strip() == "CreateTime",
            "Wharf keeps the producer's timestamp (CreateTime only)",
        ),
        FixedKey(
            "compression.type",
            lambda v, w: v.strip() in ("producer", "uncompressed"),
            "Wharf stores and fetches records uncompressed whatever the producer's codec "
            "(producer or uncompressed only)",
        ),
        # Segments are the shared commit log's (mappedFileSizeCommitLog): a topic's size only
        # sets when Kafka would free disk, which no client sees. Kafka Streams sends 50 MiB for
        # its repartition topics.
        FixedKey(
            "segment.bytes",
            _segment_size,
            "Wharf's segments are the broker's shared commit log's ({wharf} bytes); a number "
            "of at least 14 is accepted and not stored",
        ),
        FixedKey(
            "min.insync.replicas",
            _number_equal,
            "replication is the broker's: minInSyncReplicas ({wharf}) applies to every topic "
            "(only {wharf} is accepted)",
        ),
        FixedKey(
            "max.message.bytes",
            _number_equal,
            "the record size limit is the broker's: maxMessageSize ({wharf}) applies to every "
            "topic (only {wharf} is accepted)",
        ),
        FixedKey(
            "unclean.leader.election.enable",
            lambda v, w: v.strip().lower() == "false",
            "Wharf only ever elects an in-sync replica (false only)",
        ),
    )
}

# Kafka's other topic configs: refused by name (an unknown name gets Kafka's own wording).
UNSUPPORTED = frozenset(
    {
        "compression.gzip.level",
        "compression.lz4.level",
        "compression.zstd.level",
        "file.delete.delay.ms",
        "flush.messages",
        "flush.ms",
        "follower.replication.throttled.replicas",
        "index.interval.bytes",
        "leader.replication.throttled.replicas",
        "local.retention.bytes",
        "local.retention.ms",
        "message.downconversion.enable",
        "message.format.version",
        "message.timestamp.after.max.ms",
        "message.timestamp.before.max.ms",
        "message.timestamp.difference.max.ms",
        "preallocate",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "remote.storage.enable",
        "segment.index.bytes",
        "segment.jitter.ms",
    }
)


def check_fixed(name: str, value: str | None, wharf: str) -> None:
    """ConfigError unless ``value`` of FIXED config ``name`` is what Wharf does (``wharf``:
    the broker's figure for it, e.g. maxMessageSize for max.message.bytes)."""
    key = FIXED[name]
    if value is None or not key.accepts(value, wharf):
        why = key.why.format(wharf=wharf)
        raise ConfigError(f"Invalid value {value} for configuration {name}: {why}")


def checked_configs(
    configs: Iterable[tuple[str, str | None]], wharf: Mapping[str, str]
) -> dict[str, str]:
    """The attributes to store for a topic's configs (CreateTopics, AlterConfigs): KEYS in
    their stored form; FIXED ones checked against ``wharf`` (name -> the broker's figure) and
    not stored; ConfigError for the first other."""
    out: dict[str, str] = {}
    for name, value in configs:
        if name in FIXED:
            check_fixed(name, value, wharf[name])
        elif name in UNSUPPORTED:
            raise ConfigError(f"Topic config {name} is not supported by Wharf")
        else:
            out[name] = checked(name, value)
    return out
