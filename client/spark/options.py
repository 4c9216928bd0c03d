"""Parse the connector's string options into typed, picklable values, once, with clear errors.

Spark hands a data source a case-insensitive dict of strings. Names mirror spark-sql-kafka
(``startingOffsets``, ``maxOffsetsPerTrigger``, ``failOnDataLoss`` ...); lookups here are
case-insensitive too, so ``maxoffsetspertrigger`` works as in Spark.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from wharf.client.auth import Credentials, resolve_credentials
from wharf.client.channel import DEFAULT_ENDPOINTS, TlsConfig, tls_config
from wharf.client.connection import Connection
from wharf.client.errors import InvalidArgumentError, WharfError

# Special offsets inside an offsets JSON, as in spark-sql-kafka.
EARLIEST = -2
LATEST = -1

# Broker cap on messages per PullMessage (messaging.proto); bigger asks are clipped anyway.
MAX_PULL_BATCH = 1024

_TOPIC_NAME = re.compile(r"^[%A-Za-z0-9._-]{1,249}$")  # the store's names (codec.properties)


class OptionError(ValueError):
    """A connector option is missing or malformed; the message names the option."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a range starts or ends: ``earliest``/``latest`` for every queue, or explicit
    offsets per (topic, queue) with the rest defaulting to ``default`` (EARLIEST or LATEST)."""

    default: int  # EARLIEST or LATEST
    explicit: tuple[tuple[str, int, int], ...] = ()  # (topic, queue id, offset or -1/-2)

    def lookup(self, topic: str, queue_id: int) -> int:
        for t, q, off in self.explicit:
            if t == topic and q == queue_id:
                return off
        return self.default


class _ConnectionParts:
    """The options' ``connection`` under the former field names (read-only now)."""

    __slots__ = ()
    connection: Connection

    @property
    def credentials(self) -> Credentials | None:
        """accessKey/secretKey: signed calls (aclEnable); None: unsigned."""
        if not self.connection.access_key:
            return None
        return Credentials(self.connection.access_key, self.connection.secret_key or "")

    @property
    def tls(self) -> TlsConfig | None:
        return self.connection.tls

    @property
    def namesrv(self) -> str | None:
        return self.connection.namesrv

    @property
    def namesrv_tls(self) -> bool:
        return self.connection.namesrv_tls


@dataclass(frozen=True, slots=True)
class ReadOptions(_ConnectionParts):
    endpoints: tuple[str, ...]  # empty with namesrv
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    starting_timestamp: int | None  # ms; overrides ``starting`` (SearchOffset per queue)
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_properties: bool
    tag_expression: str
    consumer_group: str  # sent with PullMessage
    progress_group: str | None  # stream: mirror committed offsets to this group (monitoring)
    pull_batch_size: int
    arrow_batches: bool  # yield pyarrow.RecordBatch (faster, see bench.py) or tuples
    timeout_s: float
    # How to dial (parse_connection): the brokers (``endpoints``, ``;``-joined) or a cluster's
    # NameServers (``namesrv``: one partition per (group, queue), queues keyed
    # "<topic>@<broker>", client/spark/cluster_rpc.py), keys resolved on the driver, TLS as
    # PEM bytes: pickled to the executors as it is. What BrokerRpc / ClusterRpc dial with.
    connection: Connection


@dataclass(frozen=True, slots=True)
class WriteOptions(_ConnectionParts):
    endpoints: tuple[str, ...]
    topic: str | None  # overrides the ``topic`` column when set
    batch_size: int  # messages per SendMessage request
    max_request_bytes: int  # body bytes per SendMessage request (a batch is one store append)
    idempotent: bool  # deterministic unique ids + skip chunks a previous attempt stored
    transactional: bool  # rows are half messages, committed by the driver's commit()
    check_immunity_s: int  # no check-back for a half before this (the batch is still running)
    writer_id: str | None  # stable id of the write job; see topic_writer.py
    producer_group: str
    timeout_s: float
    # As ReadOptions' (with ``namesrv``: rows spread over every group's write queues, each
    # group's halves committed by its own EndTransactions, topic_writers.py).
    connection: Connection


def parse_connection(options: Mapping[str, str]) -> Connection:
    """The connection options as one ``Connection``: ``endpoints`` (``host:port``, comma
    separated: tried in turn) or ``namesrv`` (a cluster's NameServers, ``;`` separated) with
    ``namesrvTls``; ``accessKey`` / ``secretKey`` (else the driver's WHARF_ACCESS_KEY /
    WHARF_SECRET_KEY; resolved here, so ``""`` on the executors means unsigned whatever their
    environment says); ``tls``, ``caFile``, ``certFile``, ``keyFile`` (read here, on the
    driver: the executors get the PEM bytes)."""
    credentials = _credentials(options)
    return Connection(
        ";".join(_endpoints(options, namesrv_ok=True)) or DEFAULT_ENDPOINTS,
        namesrv=_get(options, "namesrv") or None,
        access_key=credentials.access_key if credentials is not None else "",
        secret_key=credentials.secret_key if credentials is not None else "",
        tls=parse_tls(options),
        namesrv_tls=_bool(options, "namesrvTls", False),
    )


def _get(options: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return None if value is None else str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = _get(options, name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name!r} must be true or false, got {raw!r}")


def _positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = _get(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name!r} must be a positive integer, got {raw!r}")
    return value


def _endpoints(options: Mapping[str, str], namesrv_ok: bool = False) -> tuple[str, ...]:
    raw = _get(options, "endpoints")
    if not raw and namesrv_ok and _get(options, "namesrv"):
        return ()
    if not raw:
        raise OptionError(
            "option 'endpoints' is required: the broker address, e.g. 127.0.0.1:8081"
            + (" (or 'namesrv': a cluster's NameServers)" if namesrv_ok else "")
        )
    endpoints = tuple(e.strip() for e in raw.split(",") if e.strip())
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise OptionError(f"option 'endpoints': {endpoint!r} is not host:port")
    return endpoints


def check_topic_name(topic: str, what: str = "topic") -> str:
    if not _TOPIC_NAME.match(topic):
        raise OptionError(
            f"{what} {topic!r} is not a valid topic name (1..249 of A-Z a-z 0-9 . _ - %)"
        )
    return topic


def _topics(options: Mapping[str, str]) -> tuple[str, ...]:
    raw = _get(options, "topic") or _get(options, "topics") or _get(options, "subscribe")
    if not raw:
        raise OptionError("option 'topic' is required: a topic name or a comma-separated list")
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        raise OptionError("option 'topic' names no topic")
    return tuple(check_topic_name(t) for t in topics)


def parse_offset_spec(name: str, raw: str | None, default: int, allow_earliest: bool) -> OffsetSpec:
    """``earliest`` | ``latest`` | JSON ``{"topic": {"0": 12, "1": -2}}`` (string queue keys;
    -2 earliest, -1 latest)."""
    if raw is None or not raw.strip():
        return OffsetSpec(default)
    text = raw.strip()
    if text.lower() == "earliest":
        if not allow_earliest:
            raise OptionError(f"option {name!r} cannot be 'earliest'")
        return OffsetSpec(EARLIEST)
    if text.lower() == "latest":
        return OffsetSpec(LATEST)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(
            f"option {name!r} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 12}}}}: {exc.msg}'
        ) from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option {name!r}: JSON must be an object of topics")
    explicit: list[tuple[str, int, int]] = []
    for topic, queues in parsed.items():
        check_topic_name(str(topic), f"option {name!r}: topic")
        if not isinstance(queues, dict):
            raise OptionError(f"option {name!r}: topic {topic!r} must map queue ids to offsets")
        for queue, offset in queues.items():
            try:
                queue_id = int(queue)
            except (TypeError, ValueError):
                raise OptionError(
                    f"option {name!r}: queue id {queue!r} is not an integer"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OptionError(
                    f"option {name!r}: offset of {topic}/{queue} must be an integer >= -2"
                )
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name!r}: -2 (earliest) is not allowed here")
            explicit.append((str(topic), queue_id, offset))
    return OffsetSpec(default, tuple(explicit))


def _credentials(options: Mapping[str, str]) -> Credentials | None:
    """Options ``accessKey`` / ``secretKey`` (else the driver's WHARF_ACCESS_KEY /
    WHARF_SECRET_KEY): every broker call is signed for a broker with aclEnable. Resolved on
    the driver and pickled to the executors with the options."""
    try:
        return resolve_credentials(_get(options, "accessKey"), _get(options, "secretKey"))
    except InvalidArgumentError:
        raise OptionError("options 'accessKey' and 'secretKey' go together") from None


def parse_tls(options: Mapping[str, str]) -> TlsConfig | None:
    """``tls`` (true: system roots), ``caFile`` (implies tls), ``certFile`` + ``keyFile``
    (mutual TLS). The files are read here, on the driver: executors get their bytes pickled
    with the options, so the files need not exist on the workers."""
    try:
        return tls_config(
            _bool(options, "tls", False),
            _get(options, "caFile"),
            _get(options, "certFile"),
            _get(options, "keyFile"),
        )
    except WharfError as exc:
        message = str(exc)
        for arg, option in (
            ("ca_file", "caFile"),
            ("cert_file", "certFile"),
            ("key_file", "keyFile"),
        ):
            message = message.replace(arg, option)
        raise OptionError(f"option {message}") from None


def _timeout(options: Mapping[str, str]) -> float:
    raw = _get(options, "timeoutMs")
    if raw is None:
        return 30.0
    ms = _positive_int(options, "timeoutMs", None)
    assert ms is not None
    return ms / 1000.0


def parse_read_options(options: Mapping[str, str], streaming: bool) -> ReadOptions:
    # spark-sql-kafka defaults: streams start at latest, batch reads at earliest.
    starting = parse_offset_spec(
        "startingOffsets",
        _get(options, "startingOffsets"),
        LATEST if streaming else EARLIEST,
        allow_earliest=True,
    )
    ending_raw = _get(options, "endingOffsets")
    if streaming and ending_raw is not None:
        raise OptionError("option 'endingOffsets' applies to batch reads only")
    ending = parse_offset_spec("endingOffsets", ending_raw, LATEST, allow_earliest=False)
    ts_raw = _get(options, "startingTimestamp")
    starting_timestamp = None
    if ts_raw is not None:
        try:
            starting_timestamp = int(ts_raw)
        except ValueError:
            raise OptionError(
                f"option 'startingTimestamp' must be milliseconds since the epoch, got {ts_raw!r}"
            ) from None
        if starting_timestamp < 0:
            raise OptionError("option 'startingTimestamp' must be >= 0")
    max_per_trigger = _positive_int(options, "maxOffsetsPerTrigger", None)
    if max_per_trigger is not None and not streaming:
        raise OptionError("option 'maxOffsetsPerTrigger' applies to streaming reads only")
    pull_batch = _positive_int(options, "pullBatchSize", MAX_PULL_BATCH)
    assert pull_batch is not None
    tag_expression = (_get(options, "tagExpression") or "*").strip() or "*"
    progress_group = _get(options, "progressGroup")
    if progress_group is not None and not streaming:
        raise OptionError("option 'progressGroup' applies to streaming reads only")
    return ReadOptions(
        endpoints=_endpoints(options, namesrv_ok=True),
        topics=_topics(options),
        starting=starting,
        ending=ending,
        starting_timestamp=starting_timestamp,
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=_positive_int(options, "minPartitions", None),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_properties=_bool(options, "includeProperties", False),
        tag_expression=tag_expression,
        consumer_group=_get(options, "groupId") or "wharf-spark-source",
        progress_group=progress_group,
        pull_batch_size=min(pull_batch, MAX_PULL_BATCH),
        arrow_batches=_bool(options, "arrowBatches", True),
        timeout_s=_timeout(options),
        connection=parse_connection(options),
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    topic = _get(options, "topic")
    batch_size = _positive_int(options, "batchSize", 256)
    assert batch_size is not None
    max_bytes = _positive_int(options, "maxRequestBytes", 4 * 1024 * 1024)
    assert max_bytes is not None
    writer_id = _get(options, "writerId")
    # No '.': it separates the writer id from the batch id in the rows' unique ids, so one
    # writer's id prefix never matches another's (the transactional commit selects by it).
    if writer_id is not None and not re.match(r"^[A-Za-z0-9_-]{1,64}$", writer_id):
        raise OptionError("option 'writerId' must be 1..64 of A-Z a-z 0-9 _ -")
    transactional = _bool(options, "transactional", True)
    idempotent = _bool(options, "idempotent", True)
    if transactional and not idempotent:
        raise OptionError(
            "option 'idempotent=false' needs 'transactional=false': a transactional sink "
            "skips rows a committed run of the same batch stored"
        )
    immunity = _positive_int(options, "checkImmunitySec", 3600)
    assert immunity is not None
    return WriteOptions(
        endpoints=_endpoints(options, namesrv_ok=True),
        topic=check_topic_name(topic.strip()) if topic else None,
        batch_size=batch_size,
        max_request_bytes=max_bytes,
        idempotent=idempotent,
        transactional=transactional,
        check_immunity_s=immunity,
        writer_id=writer_id,
        producer_group=_get(options, "producerGroup") or "wharf-spark-sink",
        timeout_s=_timeout(options),
        connection=parse_connection(options),
    )


def new_writer_id() -> str:
    return uuid.uuid4().hex[:16]
