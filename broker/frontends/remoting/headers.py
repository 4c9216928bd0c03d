"""Typed views of the remoting custom headers (a command's ``extFields``) on the send, pull,
offset, route, transaction and retry paths, and the message properties string.

Mirrors RocketMQ's ``CommandCustomHeader`` classes in ``remoting/protocol/header``
(``SendMessageRequestHeader``, ``SendMessageRequestHeaderV2``, ``PullMessageRequestHeader``...):
``from_ext_fields`` plays ``RemotingCommand.decodeCommandCustomHeader`` (strings in, typed values
out, ``@CFNotNull`` fields required) and ``to_ext_fields`` plays ``makeCustomHeaderToNet`` (every
value a string, null fields left out). Python names are snake_case; the wire names are
RocketMQ's field names.

Traps:

- SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) carry the send header with one-letter
  names ``a``..``n`` (``SEND_V2_FIELD_NAMES``); SEND_MESSAGE (10) uses the long names.
  ``parse_send_message_request_header`` picks by code, as ``SendMessageRequestHeader
  .parseRequestHeader`` does.
- Batch is a header flag, not only a code: the C++ client sends batches as code 10 with
  ``batch:"1"``. Booleans here accept ``true``/``false`` in any case and ``1``/``0``; Java's
  ``Boolean.parseBoolean`` reads ``"1"`` as false, so a Java broker misses that batch flag.
  A 320 request is a batch whatever its ``m`` says.
- Java silently leaves a field at its default when its number does not parse; these views
  raise ``HeaderError`` naming the field instead (the server answers with the message).
- ``UpdateConsumerOffsetRequestHeader.commit_offset`` may be -1 (ali-ons commits -1 for an
  untouched queue): parsed as is, the caller ignores negative commits.
- The properties string (``name\\x01value\\x02``...) is ``wharf.store.codec.properties``'s
  codec, re-exported here. It keeps a pair with an empty value (and a name without a
  separator, as a name with an empty value); Java's ``string2messageProperties`` drops both.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from wharf.broker.kit.remoting.codes import (
    PULL_FLAG_CLASS_FILTER,
    PULL_FLAG_COMMIT_OFFSET,
    PULL_FLAG_SUBSCRIPTION,
    PULL_FLAG_SUSPEND,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    RequestCode,
)
from wharf.broker.kit.remoting.frame import ext_value_to_str
from wharf.store.codec.properties import properties_to_string, string_to_properties

__all__ = [
    "SEND_V2_FIELD_NAMES",
    "CheckTransactionStateRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "HeaderError",
    "NotifyConsumerIdsChangedRequestHeader",
    "OffsetResponseHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "TopicQueueRequestHeader",
    "TopicRequestHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "ViewMessageRequestHeader",
    "parse_send_message_request_header",
    "properties_to_string",
    "string_to_properties",
]

_INTEGER = re.compile(r"[+-]?[0-9]{1,20}")
_RANGES = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}
_TRUE, _FALSE = frozenset({"true", "1"}), frozenset({"false", "0"})
# Unsigned decimal lengths that always fit the kind (9 digits < 2**31, 18 < 2**63).
_SHORT_DIGITS = {"i32": 9, "i64": 18}


class HeaderError(ValueError):
    """A custom header field that is missing or does not parse; ``str(error)`` names the
    header and the wire field, fit for a response remark."""

    def __init__(self, header: str, field_name: str, problem: str) -> None:
        super().__init__(f"{header}: field {field_name!r} {problem}")
        self.header = header
        self.field_name = field_name


def _field(wire: str, kind: str, default: Any = dataclasses.MISSING) -> Any:
    """A header field: its wire name and kind (``str``, ``i32``, ``i64``, ``bool``); required
    (``@CFNotNull``) when it has no default."""
    metadata = {"wire": wire, "kind": kind}
    if default is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _parse_value(header: str, name: str, kind: str, raw: object) -> object:
    text = raw if isinstance(raw, str) else _to_text(header, name, raw)
    if kind == "str":
        return text
    if kind == "bool":
        if text == "false" or text == "true":  # what Java writes: no strip, no lower
            return text == "true"
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise HeaderError(header, name, f"is not a boolean: {text!r:.80}")
    if _INTEGER.fullmatch(text) is None:
        raise HeaderError(header, name, f"is not an integer: {text!r:.80}")
    number = int(text)
    low, high = _RANGES[kind]
    if not low <= number <= high:
        raise HeaderError(header, name, f"is out of the {kind} range: {number}")
    return number


def _to_text(header: str, name: str, raw: object) -> str:
    try:
        return ext_value_to_str(raw)
    except TypeError:
        raise HeaderError(header, name, f"is a {type(raw).__name__}, not a string") from None


_SPECS: dict[type, tuple[tuple[str, str, str, bool], ...]] = {}


def _specs(cls: type) -> tuple[tuple[str, str, str, bool], ...]:
    """(name, wire name, kind, required) of a header class's fields, read once: every request
    parses one header and ``dataclasses.fields`` builds its tuple anew at each call."""
    found = _SPECS.get(cls)
    if found is None:
        found = _SPECS[cls] = tuple(
            (spec.name, spec.metadata["wire"], spec.metadata["kind"],
             spec.default is dataclasses.MISSING)
            for spec in dataclasses.fields(cls)
        )  # fmt: skip
    return found


class _Header:
    """``from_ext_fields`` / ``to_ext_fields`` over the dataclass fields' wire names."""

    __slots__ = ()

    @classmethod
    def from_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        """The typed header from a command's extFields; HeaderError when a required field is
        missing or a value does not parse. Unknown fields are ignored."""
        return cls._parse(fields, {})

    @classmethod
    def _parse(cls, fields: Mapping[str, str], rename: Mapping[str, str]) -> Self:
        values: dict[str, object] = {}
        for name, wire, kind, required in _specs(cls):
            wire = rename.get(wire, wire)
            raw = fields.get(wire)
            if raw is None:
                if required:
                    raise HeaderError(cls.__name__, wire, "is missing")
                continue
            # What Java writes, inline (a send header's 13 fields: ~9 -> ~5 us): a string, or
            # unsigned digits short enough for the kind's range; the rest via _parse_value.
            if type(raw) is str:
                if kind == "str":
                    values[name] = raw
                    continue
                if len(raw) <= _SHORT_DIGITS.get(kind, 0) and raw.isascii() and raw.isdigit():
                    values[name] = int(raw)
                    continue
            values[name] = _parse_value(cls.__name__, wire, kind, raw)
        return cls(**values)

    def to_ext_fields(self) -> dict[str, str]:
        """extFields for the wire: every value a string (``true``/``false`` for booleans),
        fields that are None left out."""
        return self._render({})

    def _render(self, rename: Mapping[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name, wire, _kind, _required in _specs(type(self)):
            value = getattr(self, name)
            if value is not None:
                out[rename.get(wire, wire)] = ext_value_to_str(value)
        return out


# --- send -------------------------------------------------------------------------------------

# SendMessageRequestHeaderV2's one-letter names (``createSendMessageRequestHeaderV1``): long name
# -> short name. ``l`` is maxReconsumeTimes (consumeRetryTimes in 5.x); ``n`` (5.x) is the broker
# name, ``bname`` in the long form (RpcRequestHeader).
SEND_V2_FIELD_NAMES: dict[str, str] = {
    "producerGroup": "a",
    "topic": "b",
    "defaultTopic": "c",
    "defaultTopicQueueNums": "d",
    "queueId": "e",
    "sysFlag": "f",
    "bornTimestamp": "g",
    "flag": "h",
    "properties": "i",
    "reconsumeTimes": "j",
    "unitMode": "k",
    "maxReconsumeTimes": "l",
    "batch": "m",
    "bname": "n",
}


@dataclass(frozen=True, slots=True)
class SendMessageRequestHeader(_Header):
    """SEND_MESSAGE (10) with long names; 310/320 with ``a``..``n`` (``from_v2_ext_fields``)."""

    producer_group: str = _field("producerGroup", "str")
    topic: str = _field("topic", "str")
    default_topic: str = _field("defaultTopic", "str")  # "TBW102": auto-create template
    default_topic_queue_nums: int = _field("defaultTopicQueueNums", "i32")
    queue_id: int = _field("queueId", "i32")
    sys_flag: int = _field("sysFlag", "i32")  # MessageSysFlag: 0x1 compressed body...
    born_timestamp: int = _field("bornTimestamp", "i64")
    flag: int = _field("flag", "i32")  # the message's user flag
    properties: str | None = _field("properties", "str", None)
    reconsume_times: int = _field("reconsumeTimes", "i32", 0)
    unit_mode: bool = _field("unitMode", "bool", False)
    batch: bool = _field("batch", "bool", False)
    max_reconsume_times: int | None = _field("maxReconsumeTimes", "i32", None)
    broker_name: str | None = _field("bname", "str", None)

    @classmethod
    def from_v2_ext_fields(cls, fields: Mapping[str, str]) -> Self:
        """From SendMessageRequestHeaderV2's short names; errors name the short field."""
        return cls._parse(fields, SEND_V2_FIELD_NAMES)

    def to_v2_ext_fields(self) -> dict[str, str]:
        return self._render(SEND_V2_FIELD_NAMES)

    def properties_map(self) -> dict[str, str]:
        """The ``properties`` string as a dict (empty when absent)."""
        return string_to_properties(self.properties or "")


def parse_send_message_request_header(
    code: int, fields: Mapping[str, str]
) -> SendMessageRequestHeader:
    """The send header of a 10, 310 or 320 request by its code (long names for 10, short names
    for 310/320). A 320 request is always a batch; for 10 and 310 the ``batch`` field decides."""
    if code == RequestCode.SEND_MESSAGE:
        return SendMessageRequestHeader.from_ext_fields(fields)
    if code == RequestCode.SEND_MESSAGE_V2:
        return SendMessageRequestHeader.from_v2_ext_fields(fields)
    if code == RequestCode.SEND_BATCH_MESSAGE:
        header = SendMessageRequestHeader.from_v2_ext_fields(fields)
        return header if header.batch else dataclasses.replace(header, batch=True)
    raise ValueError(f"request code {code} is not a send (10, 310 or 320)")


@dataclass(frozen=True, slots=True)
class SendMessageResponseHeader(_Header):
    """The answer to 10/310/320: ``msgId`` is the offset message id (a batch: ids joined by
    commas), ``queueOffset`` the (first) queue offset."""

    msg_id: str = _field("msgId", "str")
    queue_id: int = _field("queueId", "i32")
    queue_offset: int = _field("queueOffset", "i64")
    transaction_id: str | None = _field("transactionId", "str", None)
    batch_uniq_id: str | None = _field("batchUniqId", "str", None)


# --- pull -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PullMessageRequestHeader(_Header):
    """PULL_MESSAGE (11). ``sys_flag`` is PullSysFlag (see the ``has_*`` properties)."""

    consumer_group: str = _field("consumerGroup", "str")
    topic: str = _field("topic", "str")
    queue_id: int = _field("queueId", "i32")
    queue_offset: int = _field("queueOffset", "i64")
    max_msg_nums: int = _field("maxMsgNums", "i32")
    sys_flag: int = _field("sysFlag", "i32")
    commit_offset: int = _field("commitOffset", "i64")
    suspend_timeout_millis: int = _field("suspendTimeoutMillis", "i64")
    sub_version: int = _field("subVersion", "i64")
    subscription: str | None = _field("subscription", "str", None)
    expression_type: str | None = _field("expressionType", "str", None)  # TAG (None) or SQL92
    max_msg_bytes: int | None = _field("maxMsgBytes", "i32", None)  # 5.x

    @property
    def has_commit_offset(self) -> bool:
        """Store ``commit_offset`` for the group first."""
        return bool(self.sys_flag & PULL_FLAG_COMMIT_OFFSET)

    @property
    def has_suspend(self) -> bool:
        """Long-poll up to ``suspend_timeout_millis`` when nothing is there."""
        return bool(self.sys_flag & PULL_FLAG_SUSPEND)

    @property
    def has_subscription(self) -> bool:
        """Filter by this request's ``subscription``; otherwise by the group's heartbeat."""
        return bool(self.sys_flag & PULL_FLAG_SUBSCRIPTION)

    @property
    def has_class_filter(self) -> bool:
        return bool(self.sys_flag & PULL_FLAG_CLASS_FILTER)


@dataclass(frozen=True, slots=True)
class PullMessageResponseHeader(_Header):
    """The answer to 11 (with codes 0/19/20/21); the body of a 0 is the records."""

    next_begin_offset: int = _field("nextBeginOffset", "i64")
    min_offset: int = _field("minOffset", "i64")
    max_offset: int = _field("maxOffset", "i64")
    suggest_which_broker_id: int = _field("suggestWhichBrokerId", "i64", 0)  # 0: the master
    offset_delta: int | None = _field("offsetDelta", "i64", None)
    topic_sys_flag: int | None = _field("topicSysFlag", "i32", None)
    group_sys_flag: int | None = _field("groupSysFlag", "i32", None)
    forbidden_type: int | None = _field("forbiddenType", "i32", None)


# --- consumer offsets -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryConsumerOffsetRequestHeader(_Header):
    """QUERY_CONSUMER_OFFSET (14): answered with ``QueryConsumerOffsetResponseHeader`` or 22."""

    consumer_group: str = _field("consumerGroup", "str")
    topic: str = _field("topic", "str")
    queue_id: int = _field("queueId", "i32")
    set_zero_if_not_found: bool | None = _field("setZeroIfNotFound", "bool", None)


@dataclass(frozen=True, slots=True)
class OffsetResponseHeader(_Header):
    """``{offset}``: the answer to 14, 29, 30 and 31."""

    offset: int = _field("offset", "i64")


QueryConsumerOffsetResponseHeader = OffsetResponseHeader


@dataclass(frozen=True, slots=True)
class UpdateConsumerOffsetRequestHeader(_Header):
    """UPDATE_CONSUMER_OFFSET (15); ``commit_offset`` may be -1 (ignore negative commits)."""

    consumer_group: str = _field("consumerGroup", "str")
    topic: str = _field("topic", "str")
    queue_id: int = _field("queueId", "i32")
    commit_offset: int = _field("commitOffset", "i64")


@dataclass(frozen=True, slots=True)
class TopicQueueRequestHeader(_Header):
    """``{topic, queueId}``: GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
    GET_EARLIEST_MSG_STORETIME (32)."""

    topic: str = _field("topic", "str")
    queue_id: int = _field("queueId", "i32")


@dataclass(frozen=True, slots=True)
class ResetOffsetRequestHeader(_Header):
    """INVOKE_BROKER_TO_RESET_OFFSET (222) and the RESET_CONSUMER_CLIENT_OFFSET (220) it sends
    (``isForce``: the Java bean field's name); ``timestamp`` -1: the queues' ends."""

    topic: str = _field("topic", "str")
    group: str = _field("group", "str")
    timestamp: int = _field("timestamp", "i64")
    is_force: bool = _field("isForce", "bool", False)


@dataclass(frozen=True, slots=True)
class SearchOffsetRequestHeader(_Header):
    """SEARCH_OFFSET_BY_TIMESTAMP (29)."""

    topic: str = _field("topic", "str")
    queue_id: int = _field("queueId", "i32")
    timestamp: int = _field("timestamp", "i64")


@dataclass(frozen=True, slots=True)
class ViewMessageRequestHeader(_Header):
    """VIEW_MESSAGE_BY_ID (33): the commit log offset decoded from the offset message id."""

    offset: int = _field("offset", "i64")


# --- routes, clients --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GetRouteInfoRequestHeader(_Header):
    """GET_ROUTEINFO_BY_TOPIC (105); 5.x clients may ask for standard JSON (quoted map keys)."""

    topic: str = _field("topic", "str")
    accept_standard_json_only: bool | None = _field("acceptStandardJsonOnly", "bool", None)


@dataclass(frozen=True, slots=True)
class UnregisterClientRequestHeader(_Header):
    """UNREGISTER_CLIENT (35); C++ sends an empty ``consumerGroup`` from a producer."""

    client_id: str = _field("clientID", "str")
    producer_group: str | None = _field("producerGroup", "str", None)
    consumer_group: str | None = _field("consumerGroup", "str", None)


@dataclass(frozen=True, slots=True)
class GetConsumerListByGroupRequestHeader(_Header):
    """GET_CONSUMER_LIST_BY_GROUP (38); the answer is a JSON body ``{"consumerIdList": [...]}``."""

    consumer_group: str = _field("consumerGroup", "str")


@dataclass(frozen=True, slots=True)
class NotifyConsumerIdsChangedRequestHeader(_Header):
    """NOTIFY_CONSUMER_IDS_CHANGED (40), broker -> consumer, sent oneway."""

    consumer_group: str = _field("consumerGroup", "str")


# --- admin (mqadmin, Dashboard), queries -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopicRequestHeader(_Header):
    """UPDATE_AND_CREATE_TOPIC (17): create, or update an existing topic. ``attributes`` (5.x)
    is ``+name=value,-name``; ``perm`` may carry PERM_INHERIT (1), which Wharf has no use for."""

    topic: str = _field("topic", "str")
    read_queue_nums: int = _field("readQueueNums", "i32")
    write_queue_nums: int = _field("writeQueueNums", "i32")
    perm: int = _field("perm", "i32")
    default_topic: str | None = _field("defaultTopic", "str", None)
    topic_filter_type: str | None = _field("topicFilterType", "str", None)
    topic_sys_flag: int | None = _field("topicSysFlag", "i32", None)
    order: bool = _field("order", "bool", False)
    attributes: str | None = _field("attributes", "str", None)


@dataclass(frozen=True, slots=True)
class TopicRequestHeader(_Header):
    """``{topic}``: DELETE_TOPIC_IN_BROKER (215), GET_TOPIC_STATS_INFO (202),
    QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    topic: str = _field("topic", "str")


@dataclass(frozen=True, slots=True)
class GetConsumeStatsRequestHeader(_Header):
    """GET_CONSUME_STATS (208): every topic the group has offsets for when ``topic`` is unset."""

    consumer_group: str = _field("consumerGroup", "str")
    topic: str | None = _field("topic", "str", None)


@dataclass(frozen=True, slots=True)
class GetConsumerConnectionListRequestHeader(_Header):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    consumer_group: str = _field("consumerGroup", "str")


@dataclass(frozen=True, slots=True)
class GetProducerConnectionListRequestHeader(_Header):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str = _field("producerGroup", "str")


@dataclass(frozen=True, slots=True)
class DeleteSubscriptionGroupRequestHeader(_Header):
    """DELETE_SUBSCRIPTIONGROUP (207): ``removeOffset`` also drops the group's offsets."""

    group_name: str = _field("groupName", "str")
    remove_offset: bool = _field("removeOffset", "bool", False)


@dataclass(frozen=True, slots=True)
class QueryMessageRequestHeader(_Header):
    """QUERY_MESSAGE (12): by KEYS entry, or by unique key when the extFields also carry
    ``_UNIQUE_KEY_QUERY=true``."""

    topic: str = _field("topic", "str")
    key: str = _field("key", "str")
    max_num: int = _field("maxNum", "i32")
    begin_timestamp: int = _field("beginTimestamp", "i64")
    end_timestamp: int = _field("endTimestamp", "i64")


@dataclass(frozen=True, slots=True)
class QueryMessageResponseHeader(_Header):
    index_last_update_timestamp: int = _field("indexLastUpdateTimestamp", "i64")
    index_last_update_phyoffset: int = _field("indexLastUpdatePhyoffset", "i64")


# --- transactions, retries --------------------------------------------------------------------

_TRANSACTION_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE, TRANSACTION_ROLLBACK_TYPE)


@dataclass(frozen=True, slots=True)
class EndTransactionRequestHeader(_Header):
    """END_TRANSACTION (37): ``commit_or_rollback`` is 0 (unknown), 8 (commit) or 12 (rollback)."""

    producer_group: str = _field("producerGroup", "str")
    tran_state_table_offset: int = _field("tranStateTableOffset", "i64")
    commit_log_offset: int = _field("commitLogOffset", "i64")  # of the half message
    commit_or_rollback: int = _field("commitOrRollback", "i32")
    msg_id: str = _field("msgId", "str")
    from_transaction_check: bool = _field("fromTransactionCheck", "bool", False)
    transaction_id: str | None = _field("transactionId", "str", None)
    topic: str | None = _field("topic", "str", None)  # 5.x

    transaction_types: ClassVar[tuple[int, ...]] = _TRANSACTION_TYPES

    def __post_init__(self) -> None:
        if self.commit_or_rollback not in _TRANSACTION_TYPES:
            raise HeaderError(
                type(self).__name__,
                "commitOrRollback",
                f"is {self.commit_or_rollback}, not 0 (unknown), 8 (commit) or 12 (rollback)",
            )


@dataclass(frozen=True, slots=True)
class CheckTransactionStateRequestHeader(_Header):
    """CHECK_TRANSACTION_STATE (39), broker -> producer, oneway; the body is the half message
    record. The producer answers with END_TRANSACTION (``fromTransactionCheck``) carrying
    ``tranStateTableOffset`` and ``commitLogOffset`` back."""

    tran_state_table_offset: int = _field("tranStateTableOffset", "i64")  # the transaction id
    commit_log_offset: int = _field("commitLogOffset", "i64")  # of the half record
    msg_id: str | None = _field("msgId", "str", None)  # UNIQ_KEY
    transaction_id: str | None = _field("transactionId", "str", None)  # UNIQ_KEY
    offset_msg_id: str | None = _field("offsetMsgId", "str", None)  # of the half record


@dataclass(frozen=True, slots=True)
class ConsumerSendMsgBackRequestHeader(_Header):
    """CONSUMER_SEND_MSG_BACK (36): C++ sends only offset, group and delayLevel (find the
    message by commit log ``offset``); ali-ons and Java add the origin fields."""

    offset: int = _field("offset", "i64")  # commit log offset of the failed message
    group: str = _field("group", "str")
    delay_level: int = _field("delayLevel", "i32")  # 0: the broker picks 3 + reconsume times
    origin_msg_id: str | None = _field("originMsgId", "str", None)
    origin_topic: str | None = _field("originTopic", "str", None)
    unit_mode: bool = _field("unitMode", "bool", False)
    max_reconsume_times: int | None = _field("maxReconsumeTimes", "i32", None)
