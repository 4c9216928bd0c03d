"""The admin and query codes of mqadmin and the RocketMQ Dashboard, answered as RocketMQ's
AdminBrokerProcessor and QueryMessageProcessor answer them, through the core's admin
operations (``broker/core/admin.py``: the same validation, side effects and durability as
``wharf topic create`` and friends) and the store's index.

- 17 UPDATE_AND_CREATE_TOPIC: CreateTopic, or UpdateTopic when it exists (RocketMQ creates or
  updates); 215 DELETE_TOPIC_IN_BROKER: DeleteTopic (an unknown topic is SUCCESS, as RocketMQ's);
  21 GET_ALL_TOPIC_CONFIG: ``{dataVersion, topicConfigTable}``, system topics included.
- 202 GET_TOPIC_STATS_INFO: GetTopicStats as ``{offsetTable: {MessageQueue: TopicOffset}}``;
  208 GET_CONSUME_STATS: GetConsumerProgress as ``{consumeTps, offsetTable: {MessageQueue:
  OffsetWrapper}}``; 203 GET_CONSUMER_CONNECTION_LIST: the group's members, their remoting
  connections (address, language and version of their last heartbeat) and subscriptions.
- 200 UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: CreateSubscriptionGroup from a
  SubscriptionGroupConfig body; 28 GET_BROKER_RUNTIME_INFO: GetBrokerStatus as RocketMQ's
  KVTable keys.
- 33 VIEW_MESSAGE_BY_ID: the record at a commit log offset, as stored; 12 QUERY_MESSAGE: the
  records of a key (or unique key) from the IndexFiles, as stored.

Bodies are JSON as fastjson writes it, keys sorted. A map keyed by MessageQueue (the offset
tables) is written as fastjson writes one, with object keys -- ``{{"brokerName":"b","queueId":0,
"topic":"t"}:{...}}`` -- not standard JSON, but what the Java tools parse.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from wharf.broker.core.clients import ConsumeFrom, MessageModel
from wharf.broker.errors import InvalidArgumentError, NotFoundError
from wharf.broker.frontends.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    GetConsumerConnectionListRequestHeader,
    GetConsumeStatsRequestHeader,
    GetProducerConnectionListRequestHeader,
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    TopicQueueRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)
from wharf.broker.kit.remoting.codes import (
    BROKER_VERSION,
    BROKER_VERSION_DESC,
    LanguageCode,
    ResponseCode,
)
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.broker.meta.topics import MAX_ROCKETMQ_TOPIC_LENGTH, validate_topic_name
from wharf.broker.versions import VERSIONS

if TYPE_CHECKING:
    from wharf.broker.frontends.frontend_kit import FrontEndKit
    from wharf.broker.kit.remoting.server import Connection
    from wharf.broker.meta.groups import SubscriptionGroup

__all__ = ["RemotingAdmin", "fastjson_mq_table", "java_string_hash"]

UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"
DEFAULT_QUERY_MAX_NUM = 32  # RocketMQ's defaultQueryMaxNum
QUERY_MAX_CAP = 1024
PERM_READ_WRITE = 6
SQL92_PREFIX = "SQL92: "
# TopicValidator.SYSTEM_TOPIC_SET of RocketMQ 4.9.8: what 305 answers, with Wharf's own
# rmq_sys_ / RMQ_SYS_ topics (the Dashboard marks these %SYS% and hides them).
JAVA_SYSTEM_TOPICS = (
    "TBW102",
    "SCHEDULE_TOPIC_XXXX",
    "BenchmarkTest",
    "RMQ_SYS_TRANS_HALF_TOPIC",
    "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
)
SYSTEM_TOPIC_PREFIXES = ("rmq_sys_", "RMQ_SYS_")
# ConsumeType names by ordinal (the C++ client sends the ordinal, Java the name).
_CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), sort_keys=True)


def fastjson_mq_table(rows: Iterable[tuple[str, str, int, Any]]) -> str:
    """A ``Map<MessageQueue, V>`` as fastjson writes it: each key the MessageQueue object."""
    parts = [
        _json({"brokerName": broker, "queueId": queue_id, "topic": topic}) + ":" + _json(value)
        for topic, broker, queue_id, value in rows
    ]
    return "{" + ",".join(parts) + "}"


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (a SubscriptionData's ``codeSet``)."""
    data = text.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def _subscription(topic: str, expression: str, version: int) -> dict[str, Any]:
    """SubscriptionData as a 4.x client sends it in its heartbeat (TAG or SQL92)."""
    if expression.startswith(SQL92_PREFIX):
        return {
            "classFilterMode": False,
            "codeSet": [],
            "expressionType": "SQL92",
            "subString": expression[len(SQL92_PREFIX) :],
            "subVersion": version,
            "tagsSet": [],
            "topic": topic,
        }
    tags = [] if expression.strip() in ("", "*") else [t.strip() for t in expression.split("||")]
    tags = [t for t in tags if t]
    return {
        "classFilterMode": False,
        "codeSet": [java_string_hash(t) for t in tags],
        "expressionType": "TAG",
        "subString": expression or "*",
        "subVersion": version,
        "tagsSet": tags,
        "topic": topic,
    }


def _human_bytes(n: int) -> str:
    """``MixAll.humanReadableByteCount(n, false)``: binary units, one decimal."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def _runtime(seconds: float) -> str:
    """``StoreStatsService.getFormatRuntime``."""
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {secs} seconds ]"


class RemotingAdmin:
    """The admin and query handlers of one remoting port; a client's connection comes from the
    client registry (``connection_of``, attached at HEART_BEAT), ``seen`` is what each
    connection's last heartbeat said of its client (language, version), kept by
    ``note_heartbeat``."""

    def __init__(self, ctx: FrontEndKit) -> None:
        self.ctx = ctx
        self.seen: WeakKeyDictionary[Connection, tuple[LanguageCode, int]] = WeakKeyDictionary()
        self._rate_sample: tuple[float, int, int] | None = None  # (time, in, out)
        # group -> ConsumeType of its last remoting heartbeat (RocketMQ's ConsumerGroupInfo):
        # a pull consumer (DefaultLitePullConsumer, DefaultMQPullConsumer) is ACTIVELY, which
        # mqadmin consumerProgress shows as PULL and the Dashboard as its consume type.
        self.consume_types: dict[str, str] = {}

    def note_heartbeat(self, conn: Connection, request: RemotingCommand) -> None:
        self.seen[conn] = (request.language, request.version)

    def note_consume_type(self, group: str, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2:
            self.consume_types[group] = _CONSUME_TYPES[value]
        elif isinstance(value, str) and value.strip().upper() in _CONSUME_TYPES:
            self.consume_types[group] = value.strip().upper()

    def _data_version(self, counter: int) -> dict[str, int]:
        """RocketMQ's DataVersion of a table (topics, groups): its change counter, stamped with
        the broker's start."""
        return {
            "counter": counter,
            "stateVersion": 0,
            "timestamp": int(self.ctx.started_at() * 1000),
        }

    def _ok(self, request: RemotingCommand, body: str | bytes = b"") -> RemotingCommand:
        data = body.encode() if isinstance(body, str) else body
        return response_to(request, ResponseCode.SUCCESS, body=data)

    # --- topics -------------------------------------------------------------------------------
    async def update_and_create_topic(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = CreateTopicRequestHeader.from_ext_fields(request.ext_fields)
        name = header.topic
        if name == self.ctx.config.broker_cluster_name:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"the topic[{name}] is conflict with system reserved words.",
            )
        perm = header.perm & PERM_READ_WRITE  # PERM_INHERIT (1): nothing to inherit here
        current = self.ctx.port.topic(name)
        attributes = _parse_attributes(header.attributes, current is not None)
        read, write, admin = header.read_queue_nums, header.write_queue_nums, self.ctx.port.admin
        if current is None:
            # RocketMQ 4.x clients cannot read a longer name's records (a V2 record)
            validate_topic_name(name, MAX_ROCKETMQ_TOPIC_LENGTH)
            await admin.create_topic(name, read, write, perm or PERM_READ_WRITE, attributes)
        else:
            await admin.update_topic(name, read, write, perm, attributes)
        return self._ok(request)

    async def delete_topic(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        with contextlib.suppress(NotFoundError):  # RocketMQ: SUCCESS for a topic it lacks
            await self.ctx.port.admin.delete_topic(header.topic)
        return self._ok(request)

    async def get_all_topic_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        port = self.ctx.port
        table = {t.name: t.to_json() for t in port.topics(include_system=True)}
        body = {
            "dataVersion": self._data_version(port.topics_version),
            "topicConfigTable": table,
        }
        return self._ok(request, _json(body))

    async def get_topic_stats(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        if self.ctx.port.topic(header.topic) is None:
            return response_to(
                request, ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{header.topic}] not exist"
            )
        stats = self.ctx.port.admin.topic_stats(header.topic)
        broker = self.ctx.config.broker_name
        rows = [
            (
                header.topic,
                broker,
                q.queue_id,
                {
                    "lastUpdateTimestamp": q.last_update_timestamp,
                    "maxOffset": q.max_offset,
                    "minOffset": q.min_offset,
                },
            )
            for q in stats.queues
        ]
        return self._ok(request, '{"offsetTable":' + fastjson_mq_table(rows) + "}")

    async def get_system_topic_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """305 GET_SYSTEM_TOPIC_LIST_FROM_BROKER: the second step of the Java client's
        getSystemTopicList (after 304), which the Dashboard's topic page makes."""
        names = set(JAVA_SYSTEM_TOPICS)
        names.update(
            t.name
            for t in self.ctx.port.topics(include_system=True)
            if t.name.startswith(SYSTEM_TOPIC_PREFIXES)
        )
        return self._ok(request, _json({"topicList": sorted(names)}))

    async def query_topic_consume_by_who(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """300 QUERY_TOPIC_CONSUME_BY_WHO (mqadmin topicList -c, the Dashboard's topic
        consumers): the groups online with a subscription to the topic and those with an
        offset on it, as RocketMQ's GroupList ``{"groupList": [...]}``."""
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        topic = header.topic
        groups = self.ctx.port.groups_of_topic(topic)
        groups.update(
            group
            for group, members in self.ctx.port.clients.groups.items()
            if any(topic in client.subscriptions for client in members.values())
        )
        return self._ok(request, _json({"groupList": sorted(groups)}))

    async def get_topic_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """351 GET_TOPIC_CONFIG: not a 4.9 code (4.9.8's RequestCode has no 351); RocketMQ 5's
        MQClientAPIImpl.getTopicConfig (``topic``, ``lo=true``: DefaultMQAdminExt
        examineTopicConfig of the 5.x tools and Dashboard) asks it. Answered as 5.x's
        AdminBrokerProcessor.getTopicConfig: TopicConfigAndQueueMapping, the TopicConfig of
        21's table (no ``mappingDetail``: Wharf has no static topics, null is left out as
        fastjson does); unknown topic: 17 "No topic in this broker. topic: T"."""
        header = TopicRequestHeader.from_ext_fields(request.ext_fields)
        topic = self.ctx.port.topic(header.topic)
        if topic is None:
            return response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"No topic in this broker. topic: {header.topic}",
            )
        return self._ok(request, _json(topic.to_json()))

    async def get_earliest_msg_storetime(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """32 GET_EARLIEST_MSG_STORETIME (MQClientAPIImpl.getEarliestMsgStoretime: mqadmin
        and the Dashboard's queue views; header ``topic``, ``queueId``, 4.9.8's ``bname``):
        response header ``timestamp``, the store time of the queue's first message (at its min
        offset), -1 when it has none, as DefaultMessageStore.getEarliestMessageTime."""
        header = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        return response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"timestamp": str(self.earliest_store_time(header.topic, header.queue_id))},
        )

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        # A hole or a damaged record: none, as Apache's -1.
        return self.ctx.port.first_store_time(topic, queue_id)

    def earliest_log_store_time(self, min_offset: int) -> int:
        """The store time of the log's first record (at its min offset), -1 when the log is
        empty or that record cannot be read: DefaultMessageStore.getEarliestMessageTime (the
        runtime info's ``earliestMessageTimeStamp``)."""
        message = self.ctx.port.message_at(min_offset)
        return -1 if message is None else message.store_timestamp

    # --- groups -------------------------------------------------------------------------------
    async def get_all_subscription_group(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG: SubscriptionGroupWrapper, which the
        Dashboard's consumer page lists groups from (it fails the page on any other code) and
        DefaultMQAdminExt.examineSubscriptionGroupConfig picks one group from."""
        port = self.ctx.port
        table = {g.group_name: _subscription_group_config(g) for g in port.groups()}
        body = {
            "dataVersion": self._data_version(port.groups_version),
            "subscriptionGroupTable": table,
        }
        return self._ok(request, _json(body))

    async def update_and_create_subscription_group(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        data = _json_object(request.body)
        orderly = data.get("consumeMessageOrderly")
        await self.ctx.port.admin.put_group(
            str(data.get("groupName") or ""),
            consume_enable=_bool(data.get("consumeEnable"), True),
            consume_broadcast_enable=_bool(data.get("consumeBroadcastEnable"), True),
            retry_max_times=_int(data.get("retryMaxTimes"), 16),
            retry_queue_nums=_int(data.get("retryQueueNums"), 1),
            consume_message_orderly=None if orderly is None else _bool(orderly, False),
        )
        return self._ok(request)

    async def delete_subscription_group(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """207 DELETE_SUBSCRIPTIONGROUP (mqadmin deleteSubGroup, the Dashboard's consumer
        delete): the group's config goes, its offsets too with ``removeOffset`` (the core's
        delete_group); an unknown group is SUCCESS, as RocketMQ's."""
        header = DeleteSubscriptionGroupRequestHeader.from_ext_fields(request.ext_fields)
        name = header.group_name
        try:
            await self.ctx.port.admin.delete_group(name, offsets=header.remove_offset)
        except NotFoundError:  # no config: its offsets (if any) go all the same
            if header.remove_offset:
                self.ctx.port.admin.forget_offsets(name)
        return self._ok(request)

    async def get_producer_connection_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """204 GET_PRODUCER_CONNECTION_LIST (mqadmin producerConnection, the Dashboard's
        producer page): ProducerConnection ``{connectionSet: [Connection]}`` of the group's
        producers; none: 1 "the producer group[g] not exist", as RocketMQ's."""
        header = GetProducerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
        group = header.producer_group
        producers = self.ctx.port.clients.producers.get(group)
        if not producers:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"the producer group[{group}] not exist",
            )
        connections = [self._connection(client_id) for client_id in sorted(producers)]
        return self._ok(request, _json({"connectionSet": connections}))

    def _connection(self, client_id: str) -> dict[str, Any]:
        """RocketMQ's Connection of a client: its remoting address and the language and
        version of its last heartbeat (a client without a remoting connection: OTHER)."""
        channel = self.ctx.port.clients.connection_of(client_id)
        language, version, address = LanguageCode.OTHER, 0, ""
        if channel is not None and not channel.closed:
            language, version = self.seen.get(channel, (LanguageCode.OTHER, 0))
            address = channel.peer
        return {
            "clientAddr": address,
            "clientId": client_id,
            "language": language.name,
            "version": version,
        }

    async def get_consume_stats(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetConsumeStatsRequestHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        group = header.consumer_group
        try:
            queues = ctx.port.admin.consumer_progress(group, header.topic or "").queues
        except NotFoundError:  # RocketMQ: an empty table (the tools say "not consumed yet")
            queues = []
        by_queue = {(q.topic, q.queue_id): q for q in queues}
        # The topics: the one asked, else those with offsets (queues written to or not).
        names = {header.topic} if header.topic else set(ctx.port.offsets_of_group(group))
        names |= {q.topic for q in queues}
        # RocketMQ's rule: a group online without a subscription to a topic has no stats there.
        subscribed = ctx.port.clients.subscribed_topics(group)
        if subscribed:
            names &= subscribed
        broker = ctx.config.broker_name
        rows = []
        for topic_name in sorted(names):
            topic = ctx.port.topic(topic_name)
            if topic is None:  # offsets of a deleted topic: RocketMQ skips it
                continue
            for queue_id in range(topic.read_queue_nums):  # RocketMQ: the read queues
                q = by_queue.get((topic_name, queue_id))
                if q is not None:
                    broker_offset, consumer_offset = q.broker_offset, max(q.consumer_offset, 0)
                    last = q.last_timestamp
                else:  # a queue nothing was written to yet
                    broker_offset = ctx.port.max_offset(topic_name, queue_id)
                    consumer_offset = max(ctx.port.committed_offset(group, topic_name, queue_id), 0)
                    last = 0
                wrapper = {
                    "brokerOffset": broker_offset,
                    "consumerOffset": consumer_offset,
                    "lastTimestamp": last,
                    "pullOffset": consumer_offset,
                }
                rows.append((topic_name, broker, queue_id, wrapper))
        return self._ok(request, '{"consumeTps":0.0,"offsetTable":' + fastjson_mq_table(rows) + "}")

    async def get_consumer_connection_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        header = GetConsumerConnectionListRequestHeader.from_ext_fields(request.ext_fields)
        group = header.consumer_group
        members = self.ctx.port.clients.groups.get(group)
        if not members:
            return response_to(
                request,
                ResponseCode.CONSUMER_NOT_ONLINE,
                remark=f"the consumer group[{group}] not online",
            )
        connections = []
        subscriptions: dict[str, dict[str, Any]] = {}
        model = from_where = None
        version = self.ctx.port.clients.versions.get(group, 0)
        for client_id, client in sorted(members.items()):
            connections.append(self._connection(client_id))
            for topic, expression in client.subscriptions.items():
                subscriptions.setdefault(topic, _subscription(topic, expression, version))
            model = client.message_model if model is None else model
            from_where = client.consume_from_where if from_where is None else from_where
        body = {
            "connectionSet": connections,
            # The registry's neutral values carry RocketMQ's names.
            "consumeFromWhere": (from_where or ConsumeFrom.LAST_OFFSET).value,
            "consumeType": self.consume_types.get(group, "CONSUME_PASSIVELY"),
            "messageModel": (model or MessageModel.CLUSTERING).value,
            "subscriptionTable": subscriptions,
        }
        return self._ok(request, _json(body))

    async def get_all_consumer_offset(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """43 GET_ALL_CONSUMER_OFFSET (4.9.8: BrokerOuterAPI.getAllConsumerOffset, a slave's
        sync from its master; tools reading a broker's offsets): ConsumerOffsetManager.encode,
        ConsumerOffsetSerializeWrapper ``{"offsetTable": {"topic@group": {queueId: offset}}}``
        with the queue ids as fastjson writes Integer map keys: unquoted (``{0:12,1:5}``, as in
        RocketMQ's consumerOffset.json), from the broker's offset table (the port's ``offset_table``)."""
        table = self.ctx.port.offset_table()
        entries = []
        for key in sorted(table):
            queues = {int(q): int(o) for q, o in table[key].items()}
            inner = ",".join(f"{q}:{queues[q]}" for q in sorted(queues))
            entries.append(f"{_json(key)}:{{{inner}}}")
        return self._ok(request, '{"offsetTable":{' + ",".join(entries) + "}}")

    # --- broker -------------------------------------------------------------------------------
    async def get_broker_runtime_info(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        ctx = self.ctx
        stats = ctx.port.store_stats()
        now = time.monotonic()
        put_tps = get_tps = 0.0
        last = self._rate_sample
        if last is not None and now - last[0] > 0:
            put_tps = (ctx.counters.messages_in - last[1]) / (now - last[0])
            get_tps = (ctx.counters.messages_out - last[2]) / (now - last[0])
        self._rate_sample = (now, ctx.counters.messages_in, ctx.counters.messages_out)
        put, got = f"{put_tps:.2f}", f"{get_tps:.2f}"
        table = {
            # The version RocketMQ's tools parse (MQVersion.getVersionDesc: mqadmin
            # clusterList's column, the Dashboard): the one every response is stamped with;
            # Wharf's own release is "wharfVersion" below.
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "brokerVersion": str(BROKER_VERSION),
            "brokerActive": "true",
            "bootTimestamp": str(int(ctx.started_at() * 1000)),
            "runtime": _runtime(time.time() - ctx.started_at() if ctx.started_at() else 0),
            # Counted since the broker started (Wharf keeps no per-day counters).
            "msgPutTotalTodayNow": str(ctx.counters.messages_in),
            "msgGetTotalTodayNow": str(ctx.counters.messages_out),
            "msgPutTotalTodayMorning": "0",
            "msgGetTotalTodayMorning": "0",
            "msgPutTotalYesterdayMorning": "0",
            "msgGetTotalYesterdayMorning": "0",
            # Rates since the previous GET_BROKER_RUNTIME_INFO ("10s 1min 10min" in RocketMQ).
            "putTps": f"{put} {put} {put}",
            "getTransferedTps": f"{got} {got} {got}",
            "getTotalTps": f"{got} {got} {got}",
            "getFoundTps": f"{got} {got} {got}",
            "getMissTps": "0.00 0.00 0.00",
            "commitLogMinOffset": str(stats.commit_log_min_offset),
            "commitLogMaxOffset": str(stats.commit_log_max_offset),
            "commitLogDiskRatio": str(stats.disk_used_ratio),
            "dispatchBehindBytes": str(stats.dispatch_behind_bytes),
            "remainHowManyDataToFlush": _human_bytes(
                max(stats.commit_log_max_offset - stats.commit_log_flushed_offset, 0)
            ),
            "pageCacheLockTimeMills": "0",
            # mqadmin clusterList's "#Hour" is (now - this) in hours: 0 read as 1970.
            "earliestMessageTimeStamp": str(
                self.earliest_log_store_time(stats.commit_log_min_offset)
            ),
            "startAcceptSendRequestTimeStamp": "0",
            "sendThreadPoolQueueSize": "0",
            "pullThreadPoolQueueSize": "0",
            # mqadmin clusterList prints these two beside the TPS ("null" when absent)
            "sendThreadPoolQueueHeadWaitTimeMills": "0",
            "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueSize": "0",
            "EndTransactionQueueSize": "0",
            "timerReadBehind": "0",
            "timerOffsetBehind": "0",
            "timerCongestNum": "0",
            "timerEnqueueTps": "0.0",
            "timerDequeueTps": "0.0",
            # Wharf's own
            "brokerName": ctx.config.broker_name,
            "wharfVersion": VERSIONS["wharf"],
            "writable": "true" if stats.writable else "false",
            "notWritableReason": stats.not_writable_reason,
            "flushDiskType": ctx.port.store_config.flush_disk_type,
            "topicCount": str(ctx.port.topic_count()),
            "groupCount": str(ctx.port.group_count()),
        }
        return self._ok(request, _json({"table": table}))

    # --- messages -----------------------------------------------------------------------------
    def raw_record(self, offset: int) -> bytes | None:
        return self.ctx.port.record_at(offset)  # not a record start: not found, a user's offset

    async def view_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ViewMessageRequestHeader.from_ext_fields(request.ext_fields)
        record = self.raw_record(header.offset)
        if record is None:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"can not find message by the offset, {header.offset}",
            )
        return self._ok(request, record)

    async def query_message(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryMessageRequestHeader.from_ext_fields(request.ext_fields)
        port = self.ctx.port
        max_num = header.max_num
        if request.ext_fields.get(UNIQUE_MSG_QUERY_FLAG) == "true":
            max_num = DEFAULT_QUERY_MAX_NUM
        max_num = min(max(max_num, 0), QUERY_MAX_CAP)
        found = port.query_by_key(
            header.topic, header.key, max_num, header.begin_timestamp, header.end_timestamp
        )
        records = [r for r in (self.raw_record(m.commit_log_offset) for m in found) if r]
        index_timestamp, index_offset = port.index_position()
        reply = QueryMessageResponseHeader(
            index_last_update_timestamp=index_timestamp,
            index_last_update_phyoffset=index_offset,
        )
        if not records:
            return response_to(
                request,
                ResponseCode.QUERY_NOT_FOUND,
                remark="can not find message, maybe time range not correct",
                ext_fields=reply.to_ext_fields(),
            )
        return response_to(
            request, ResponseCode.SUCCESS, ext_fields=reply.to_ext_fields(), body=b"".join(records)
        )


def _subscription_group_config(group: SubscriptionGroup) -> dict[str, Any]:
    """SubscriptionGroupConfig as RocketMQ writes it (4.9's fields, 5.x's orderly flag and
    timeout); the settings Wharf does not have take RocketMQ's defaults."""
    return {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": group.consume_broadcast_enable,
        "consumeEnable": group.consume_enable,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": group.consume_message_orderly,
        "consumeTimeoutMinute": 15,
        "groupName": group.group_name,
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": group.retry_max_times,
        "retryQueueNums": group.retry_queue_nums,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def _parse_attributes(raw: str | None, update: bool) -> dict[str, str]:
    """``+name=value,-name`` (RocketMQ 5's AttributeParser) -> Wharf's attribute map (an empty
    value removes an attribute on update)."""
    out: dict[str, str] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        if item.startswith("-"):
            if update:
                out[item[1:]] = ""
            continue
        name, _, value = item.lstrip("+").partition("=")
        if name:
            out[name] = value
    return out


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body.decode("utf-8", "replace").strip() or "{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise InvalidArgumentError(f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidArgumentError("the body must be a JSON object")
    return data


def _bool(value: Any, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return default


def _int(value: Any, default: int) -> int:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return default
