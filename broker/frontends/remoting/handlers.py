"""What the remoting listener serves: request code -> handler, over the port and the shared
kit (``FrontEndKit``): the send core, the pull read with its long poll, committed offsets, the
client registry and the send-back. The broker is also its own NameServer on the
same port (route, cluster and topic list codes): a 4.x client's ``namesrvAddr`` is the broker's
remoting address. See README.md in this folder for the table and what is not served yet.

Traps this module handles (the research note remoting.md, section 6):

- Responses are JSON with string extFields (``response_to`` + the typed headers).
- A send with ``batch`` set (code 10 from the C++ client, 310, always 320) carries
  ``encodeMessages`` records: decoded into one message each (``batch.py``), one append.
- A new group's first QUERY_CONSUMER_OFFSET follows RocketMQ's broker rule: 0 while the
  queue's min offset is 0 (clients then read from the start), QUERY_NOT_FOUND otherwise.
- The route of ``%RETRY%<group>`` is answered before any heartbeat (the C++ consumer asks it
  first); ``TBW102`` is answered while autoCreateTopicEnable is on.
- Negative offset commits (ali-ons commits -1) are ignored.
- PULL_MESSAGE answers the stored records as they are (the same layout as RocketMQ's
  CommitLog), statuses mapped as RocketMQ's PullMessageProcessor does. A topic over 127
  characters (created over Kafka or wharf.v1) is stored in RocketMQ 5's second record version,
  which 4.x clients cannot decode: its PULL is refused (SYSTEM_ERROR, the remark says why), and
  UPDATE_AND_CREATE_TOPIC creates no such name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from wharf.broker.core.clients import ConsumeFrom, MessageModel
from wharf.broker.core.errors import (
    InvalidSend,
    Reason,
    Refused,
    TopicNotFound,
    TopicNotReadable,
)
from wharf.broker.core.read import ReadStatus
from wharf.broker.core.retry import retry_topic
from wharf.broker.core.tags import parse_filter
from wharf.broker.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    UnavailableError,
    os_limit,
)
from wharf.broker.frontends.frontend_kit import FrontEndKit
from wharf.broker.frontends.remoting.admin import RemotingAdmin
from wharf.broker.frontends.remoting.batch import BatchError, decode_messages
from wharf.broker.frontends.remoting.broker_config import (
    broker_config_response,
    update_broker_config_response,
)
from wharf.broker.frontends.remoting.consumer_calls import ConsumerCalls
from wharf.broker.frontends.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetRouteInfoRequestHeader,
    HeaderError,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageResponseHeader,
    TopicQueueRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    parse_send_message_request_header,
)
from wharf.broker.frontends.remoting.locks import RemotingLocks
from wharf.broker.frontends.remoting.transactions import RemotingTransactions
from wharf.broker.kit.acl.caller import caller
from wharf.broker.kit.remoting.codes import TRANSACTION_ROLLBACK_TYPE, RequestCode, ResponseCode
from wharf.broker.kit.remoting.frame import RemotingCommand, response_to
from wharf.broker.kit.remoting.routes import (
    GroupAddresses,
    GroupQueues,
    cluster_info_response,
    kv_config_not_found,
    route_response,
    system_topic_list_response,
    topic_list_response,
    topic_not_exist,
)
from wharf.broker.kit.remoting.server import Connection, Handler
from wharf.broker.meta.groups import validate_group_name
from wharf.broker.meta.topics import MAX_ROCKETMQ_TOPIC_LENGTH, validate_topic_name
from wharf.store.codec.properties import (
    PROPERTY_CLUSTER,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
)
from wharf.store.errors import (
    DamagedQueueError,
    InvalidFilterError,
    InvalidMessageError,
    ResourceLimitError,
    StoreBusyError,
    StoreNotWritableError,
)
from wharf.store.model import GetStatus, MessageInput, PutStatus, RawGetResult

__all__ = ["RemotingHandlers", "error_response"]

log = logging.getLogger("broker.remoting")

DEFAULT_TOPIC = (
    "TBW102"  # RocketMQ's auto-create template topic (TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC)
)
SQL92 = "SQL92"
MAX_QUEUE_ID = 1024
PERM_WRITE = 2  # PermName.PERM_WRITE

_PUT_CODES = {
    PutStatus.PUT_OK: ResponseCode.SUCCESS,
    PutStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
}
_REASON_CODES = {
    Reason.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Reason.NOT_WRITABLE: ResponseCode.NO_PERMISSION,
    Reason.SHUTTING_DOWN: ResponseCode.SERVICE_NOT_AVAILABLE,
    Reason.ILLEGAL_QUEUE: ResponseCode.SYSTEM_ERROR,
}


def error_response(request: RemotingCommand, exc: BaseException) -> RemotingCommand:
    """A handler's exception as RocketMQ's broker answers it (the remark is the message)."""
    code: int
    limit = os_limit(exc)
    if limit is not None:  # an OS limit met (the operator's to raise): busy, with what to do
        return response_to(request, ResponseCode.SYSTEM_BUSY, remark=limit)
    if isinstance(exc, Refused):
        code = _REASON_CODES.get(exc.reason, ResponseCode.MESSAGE_ILLEGAL)
    elif isinstance(exc, (BatchError, InvalidMessageError)) and not isinstance(
        exc, InvalidFilterError
    ):
        code = ResponseCode.MESSAGE_ILLEGAL
    elif isinstance(exc, InvalidFilterError):
        code = ResponseCode.SUBSCRIPTION_PARSE_FAILED
    elif isinstance(exc, PermissionDeniedError):
        code = ResponseCode.NO_PERMISSION
    elif isinstance(exc, (ResourceExhaustedError, ResourceLimitError, StoreBusyError)):
        code = ResponseCode.SYSTEM_BUSY  # RocketMQ's answer to flow control and limits
    elif isinstance(exc, (UnavailableError, StoreNotWritableError)):
        code = ResponseCode.SERVICE_NOT_AVAILABLE
    elif isinstance(
        exc, (HeaderError, InvalidArgumentError, NotFoundError, ValueError, DamagedQueueError)
    ):  # (a damaged queue logged itself once)
        code = ResponseCode.SYSTEM_ERROR
    else:
        log.error("remoting: %s failed", request.code, exc_info=exc)
        code = ResponseCode.SYSTEM_ERROR
    return response_to(request, code, remark=str(exc) or type(exc).__name__)


def _ok(request: RemotingCommand, **kwargs: Any) -> RemotingCommand:
    return response_to(request, ResponseCode.SUCCESS, **kwargs)


def _json_body(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _parse_json_body(body: bytes) -> Any:
    """A request body as JSON (fastjson's output, jsoncpp's trailing newline)."""
    try:
        return json.loads(body.decode("utf-8", "replace").strip() or "{}")
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise InvalidArgumentError(f"body is not JSON: {exc}") from None


def _json_list(value: Any) -> list[Any]:
    """A HeartbeatData set: a JSON array, anything else (a mangled body) as empty."""
    return value if isinstance(value, list) else []


def _int_or_name(value: Any, names: dict[str, int], default: int) -> int:
    """A HeartbeatData enum: an ordinal (C++) or a name (Java, ali-ons)."""
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return int(value)
        return names.get(value.strip().upper(), default)
    return default


# RocketMQ's ordinals (or names) -> the client registry's neutral values.
_MESSAGE_MODELS = {"BROADCASTING": 0, "CLUSTERING": 1}
_MESSAGE_MODEL = {0: MessageModel.BROADCASTING, 1: MessageModel.CLUSTERING}
_CONSUME_FROM = {
    "CONSUME_FROM_LAST_OFFSET": 0,
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST": 1,
    "CONSUME_FROM_MIN_OFFSET": 2,
    "CONSUME_FROM_MAX_OFFSET": 3,
    "CONSUME_FROM_FIRST_OFFSET": 4,
    "CONSUME_FROM_TIMESTAMP": 5,
}
_CONSUME_FROM_NEUTRAL = {4: ConsumeFrom.FIRST_OFFSET, 5: ConsumeFrom.TIMESTAMP}


class RemotingHandlers:
    """The handler table of one broker; ``address`` is its remoting address as clients dial it
    (what routes name and what the store host holds)."""

    def __init__(self, ctx: FrontEndKit, address: str) -> None:
        self.ctx = ctx
        self.address = address
        # client id -> the connection it last heartbeated on (NOTIFY_CONSUMER_IDS_CHANGED).
        self.transactions = RemotingTransactions(ctx)
        ctx.check_targets.add_source(self.transactions.targets)
        self.locks = RemotingLocks()
        self.admin = RemotingAdmin(ctx)
        self.calls = ConsumerCalls(ctx, self.admin.raw_record)
        # WIPE_WRITE_PERM_OF_BROKER: the topic table's version when this broker's write
        # permission was wiped from its own routes (None: not wiped); see wipe_write_perm.
        self.write_wiped_at: int | None = None

    def table(self) -> dict[int, Handler]:
        codes: dict[int, Callable[[Connection, RemotingCommand], Any]] = {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_topic_list,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            RequestCode.HEART_BEAT: self._heartbeat_noted,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.END_TRANSACTION: self.transactions.end,
            RequestCode.LOCK_BATCH_MQ: self.locks.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.locks.unlock,
            # admin and queries (mqadmin, Dashboard): admin.py
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.admin.update_and_create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.admin.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.admin.get_all_topic_config,
            RequestCode.GET_TOPIC_STATS_INFO: self.admin.get_topic_stats,
            RequestCode.GET_CONSUME_STATS: self.admin.get_consume_stats,
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.admin.get_consumer_connection_list,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: (
                self.admin.update_and_create_subscription_group
            ),
            RequestCode.GET_BROKER_RUNTIME_INFO: self.admin.get_broker_runtime_info,
            RequestCode.VIEW_MESSAGE_BY_ID: self.admin.view_message,
            RequestCode.QUERY_MESSAGE: self.admin.query_message,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: self.admin.get_system_topic_list,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.admin.get_all_subscription_group,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.admin.query_topic_consume_by_who,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.admin.get_producer_connection_list,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.admin.delete_subscription_group,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.calls.get_consumer_running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.calls.consume_message_directly,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.calls.reset_offset,
            RequestCode.GET_BROKER_CONFIG: self.get_broker_config,
            RequestCode.UPDATE_BROKER_CONFIG: self.update_broker_config,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.admin.get_earliest_msg_storetime,
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.admin.get_all_consumer_offset,
            RequestCode.GET_TOPIC_CONFIG: self.admin.get_topic_config,
            # NameServer codes of mqadmin wipeWritePerm / addWritePerm (this broker is its
            # own NameServer on this port)
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
        }
        return {int(code): handler for code, handler in codes.items()}

    async def _heartbeat_noted(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """HEART_BEAT, the client's language and version noted for the connection list (203)."""
        self.admin.note_heartbeat(conn, request)
        return await self.heartbeat(conn, request)

    def connection_lost(self, conn: Connection) -> None:
        """A client's connection closed (it exited, crashed or was cut off): it leaves its
        groups now and their other members rebalance, as RocketMQ's broker does on a channel
        close (ClientHousekeepingService), instead of after the 2 min heartbeat expiry: a
        consumer that died must not keep its queues that long."""
        for client_id in conn.client_ids:
            if not self.ctx.port.clients.detach(client_id, conn):
                continue  # it heartbeats on another connection now
            groups, producers = self.ctx.port.clients.groups_of(client_id)
            self.ctx.port.clients.unregister(client_id, groups, producers)
            for group in groups:
                self._notify_ids_changed(group)

    # --- NameServer -------------------------------------------------------------------------
    def _group(self) -> GroupAddresses:
        cfg = self.ctx.config
        return GroupAddresses(cfg.broker_cluster_name, cfg.broker_name, {0: self.address})

    async def get_route(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetRouteInfoRequestHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        name = header.topic
        port = ctx.port
        topic = port.topic(name)
        defaults = port.topic_defaults
        read = write = 0
        perm = 6
        if topic is not None:
            read, write, perm = topic.read_queue_nums, topic.write_queue_nums, topic.perm
        elif name.startswith(retry_topic("")):
            try:
                topic = port.topic_as_sent(name)  # %RETRY%<group>: made with 1 queue
            except InvalidArgumentError as exc:
                return response_to(request, ResponseCode.TOPIC_NOT_EXIST, remark=str(exc))
            read, write, perm = topic.read_queue_nums, topic.write_queue_nums, topic.perm
        elif name == DEFAULT_TOPIC and defaults.auto_create:
            read = write = defaults.queue_nums
        elif defaults.auto_create:
            try:  # RocketMQ's TBW102 logic: the topic is made as the first send would make it
                topic = port.topic_as_sent(name)
            except (InvalidArgumentError, NotFoundError) as exc:
                return response_to(request, ResponseCode.TOPIC_NOT_EXIST, remark=str(exc))
            read, write, perm = topic.read_queue_nums, topic.write_queue_nums, topic.perm
        else:
            return topic_not_exist(request, name)
        if self.write_wiped_at is not None:
            if self.write_wiped_at == port.topics_version:
                perm &= ~PERM_WRITE
            else:  # the topics changed since: as Apache's NameServer on a re-registration
                self.write_wiped_at = None
        queues = GroupQueues(ctx.config.broker_name, read, write, perm)
        return route_response(request, [self._group()], [queues])

    async def get_cluster_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return cluster_info_response(request, [self._group()])

    async def get_topic_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        names = [t.name for t in self.ctx.port.topics(include_system=True)]
        return topic_list_response(request, names)

    async def get_kv_config(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return kv_config_not_found(request)

    async def get_broker_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return broker_config_response(request, self.ctx.config, int(self.ctx.started_at() * 1000))

    async def get_system_topic_list(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        return system_topic_list_response(request, [self._group()])

    async def update_broker_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """25 UPDATE_BROKER_CONFIG: nothing changes at run time (``broker_config.py``)."""
        return update_broker_config_response(
            request, self.ctx.config, self.ctx.port.store_config, conn.peer
        )

    def _write_perm_topics(self, request: RemotingCommand) -> int | None:
        """The number of topics a 205/327 for ``brokerName`` touches here: every topic of this
        broker when it names this broker, else 0 (Apache's NameServer counts the topics with
        a queueData of that broker name); None when brokerName is missing."""
        name = request.ext_fields.get("brokerName")
        if not name:
            return None
        if name != self.ctx.config.broker_name:
            return 0
        return len(self.ctx.port.topics(include_system=True))

    async def wipe_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """205 WIPE_WRITE_PERM_OF_BROKER (mqadmin wipeWritePerm -b NAME, before taking a
        broker out): a NameServer code (Apache's DefaultRequestProcessor); ``wharf-namesrv``
        answers it for its groups, and this broker for itself, being its clients' NameServer
        on this port. As Apache's RouteInfoManager: the write bit leaves the perm of the
        broker's queues in the routes answered (105), so producers send elsewhere (a lone
        broker: nowhere), until the topic table changes (Apache: until the broker
        re-registers a changed topic config) or 327 adds it back; the topics themselves and
        sends that still arrive are untouched. Response header ``wipeTopicCount``."""
        count = self._write_perm_topics(request)
        if count is None:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="missing header field brokerName"
            )
        if count:
            self.write_wiped_at = self.ctx.port.topics_version
        return _ok(request, ext_fields={"wipeTopicCount": str(count)})

    async def add_write_perm(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        """327 ADD_WRITE_PERM_OF_BROKER (mqadmin addWritePerm): undoes 205. Apache sets the
        queues' perm to read|write; here the topics' own perms are answered again (a
        read-only topic stays so). Response header ``addTopicCount``."""
        count = self._write_perm_topics(request)
        if count is None:
            return response_to(
                request, ResponseCode.SYSTEM_ERROR, remark="missing header field brokerName"
            )
        if count:
            self.write_wiped_at = None
        return _ok(request, ext_fields={"addTopicCount": str(count)})

    # --- clients ------------------------------------------------------------------------------
    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        data = _parse_json_body(request.body)
        if not isinstance(data, dict):
            raise InvalidArgumentError("HeartbeatData must be a JSON object")
        client_id = str(data.get("clientID") or "")
        if not client_id or len(client_id) > 255:
            raise InvalidArgumentError("HeartbeatData.clientID is required (1..255 chars)")
        changed: list[str] = []
        for consumer in _json_list(data.get("consumerDataSet")):
            if not isinstance(consumer, dict):
                continue
            group = str(consumer.get("groupName") or "")
            validate_group_name(group)
            subscriptions: dict[str, str] = {}
            for sub in _json_list(consumer.get("subscriptionDataSet")):
                if not isinstance(sub, dict):
                    continue
                topic = str(sub.get("topic") or "")
                validate_topic_name(topic)
                expression = str(sub.get("subString") or "*")
                if str(sub.get("expressionType") or "TAG").upper() == SQL92:
                    expression = f"SQL92: {expression}"
                subscriptions[topic] = expression
            model = _int_or_name(consumer.get("messageModel"), _MESSAGE_MODELS, 1)
            where = _int_or_name(consumer.get("consumeFromWhere"), _CONSUME_FROM, 0)
            ctx.port.join_group(group)
            self.admin.note_consume_type(group, consumer.get("consumeType"))
            before = ctx.port.clients.versions.get(group)
            known = ctx.port.clients.groups.get(group, {}).get(client_id)
            topics_before = None if known is None else set(known.subscriptions)
            after = ctx.port.clients.heartbeat(
                client_id,
                group,
                subscriptions,
                _MESSAGE_MODEL.get(model, MessageModel.CLUSTERING),
                _CONSUME_FROM_NEUTRAL.get(where, ConsumeFrom.LAST_OFFSET),
                caller=caller(),
            )
            # Apache's registerConsumer notifies on a new channel and on a subscription change
            # (a topic added or dropped: ConsumerGroupInfo.updateSubscription): a lite pull
            # consumer that subscribes after start() gets its queues now, not in 20 s.
            if after != before or (
                topics_before is not None and topics_before != set(subscriptions)
            ):
                changed.append(group)
        for producer in _json_list(data.get("producerDataSet")):
            if isinstance(producer, dict) and producer.get("groupName"):
                ctx.port.clients.producer_heartbeat(client_id, str(producer["groupName"]))
        ctx.port.clients.attach(client_id, conn)
        conn.client_ids.add(client_id)
        for group in changed:
            self._notify_ids_changed(group)
        return _ok(request)

    def _notify_ids_changed(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED (oneway) to every member, the one that just joined
        included, as Apache's broker does (ConsumerManager.registerConsumer -> the CHANGE
        event to all of the group's channels): members rebalance now instead of on their next
        timer, and a Java DefaultLitePullConsumer gets its queues at once, not after its 20 s
        rebalance."""
        ids, _ = self.ctx.port.clients.members(group)
        for client_id in ids:
            conn = self.ctx.port.clients.connection_of(client_id)
            if conn is not None and not conn.closed:
                conn.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": group})

    async def unregister(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UnregisterClientRequestHeader.from_ext_fields(request.ext_fields)
        groups = [header.consumer_group] if header.consumer_group else []
        producers = [header.producer_group] if header.producer_group else []
        self.ctx.port.clients.unregister(header.client_id, groups, producers, caller())
        for group in groups:
            self._notify_ids_changed(group)
        return _ok(request)

    async def consumer_list(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = GetConsumerListByGroupRequestHeader.from_ext_fields(request.ext_fields)
        ids, _ = self.ctx.port.clients.members(header.consumer_group)
        if not ids:  # as RocketMQ 4.x answers a group without members
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"no consumer for this group, {header.consumer_group}",
            )
        return _ok(request, body=_json_body({"consumerIdList": ids}))

    async def check_client_config(
        self, conn: Connection, request: RemotingCommand
    ) -> RemotingCommand:
        """CHECK_CLIENT_CONFIG (46): a Java push consumer with ``MessageSelector.bySql`` asks at
        ``start()`` whether the broker can filter its subscription (``checkClientInBroker``,
        which fails start() on any other answer): SUCCESS, 23 SUBSCRIPTION_PARSE_FAILED with
        the parse error, or 1 with enablePropertyFilter off (Apache's ClientManageProcessor)."""
        data = _parse_json_body(request.body)
        subscription = data.get("subscriptionData") if isinstance(data, dict) else None
        if not isinstance(subscription, dict):
            raise InvalidArgumentError("CHECK_CLIENT_CONFIG: the body has no subscriptionData")
        sql = str(subscription.get("expressionType") or "TAG").upper() == SQL92
        if sql and not self.ctx.config.enable_property_filter:
            return _sql92_off(request)
        parse_filter(str(subscription.get("subString") or "*"), sql, True)
        return _ok(request)

    # --- send ---------------------------------------------------------------------------------
    async def send(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        core = ctx.port.send
        header = parse_send_message_request_header(request.code, request.ext_fields)
        queue_id = header.queue_id if header.queue_id >= 0 else None
        topic, queue_id = core.admit(header.topic, queue_id)

        def message(body: bytes, properties: dict[str, str], flag: int) -> MessageInput:
            return MessageInput(
                body=body,
                properties=properties,
                flag=flag,
                # The transaction type is the TRAN_MSG property's business: stored as
                # RocketMQ stores a half, NOT_TYPE (its committed copy is an ordinary record).
                sys_flag=header.sys_flag & ~TRANSACTION_ROLLBACK_TYPE,
                born_timestamp=header.born_timestamp,
                born_host=conn.peer,
                reconsume_times=header.reconsume_times,
            )

        # Stored properties as Apache's 4.9.8 SendMessageProcessor stores them: CLUSTER (the
        # broker's cluster) on every message; a single send without WAIT=true (9 bytes a
        # message, meaningless once stored); a batch's messages with the request's own
        # properties after theirs (CommitLog's batch encoder appends them: the Java client's
        # WAIT=true), the request's winning a name both have, as a reader's map keeps the last.
        sent = header.properties_map()
        if header.batch:  # encodeMessages records: one message each, one append
            inputs = [
                message(m.body, {**m.properties, **sent}, m.flag)
                for m in decode_messages(request.body)
            ]
        else:
            sent.pop(PROPERTY_WAIT_STORE_MSG_OK, None)
            inputs = [message(request.body, sent, header.flag)]
        cluster = ctx.config.broker_cluster_name
        for item in inputs:  # ali-ons sends none: the broker makes one
            if not item.properties.get(PROPERTY_UNIQ_KEY):
                item.properties[PROPERTY_UNIQ_KEY] = ctx.unique_ids.next_id()
            item.properties[PROPERTY_CLUSTER] = cluster
        core.check_inputs(inputs)
        result = await core.put(topic.name, queue_id, inputs)
        append = result.append
        ctx.counters.messages_in += len(inputs)
        ctx.metrics.on_messages_in(topic.name, [len(m.body) for m in inputs])
        ids = ",".join(ctx.offset_ids.format(offset) for offset in append.offsets)
        reply = SendMessageResponseHeader(
            msg_id=ids, queue_id=queue_id, queue_offset=append.first_queue_offset
        )
        return response_to(request, _PUT_CODES[result.status], ext_fields=reply.to_ext_fields())

    # --- pull ---------------------------------------------------------------------------------
    def _subscription(self, header: PullMessageRequestHeader) -> tuple[str, bool]:
        """(expression, is SQL92) of a pull: its own (subscription flag) or the group's last
        heartbeat's."""
        if header.has_subscription:
            sql = (header.expression_type or "TAG").upper() == SQL92
            return header.subscription or "*", sql
        for client in self.ctx.port.clients.groups.get(header.consumer_group, {}).values():
            found = client.subscriptions.get(header.topic)
            if found is not None:
                sql = found.startswith("SQL92: ")
                return (found[len("SQL92: ") :] if sql else found), sql
        return "*", False

    async def pull(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        ctx = self.ctx
        header = PullMessageRequestHeader.from_ext_fields(request.ext_fields)
        name, queue_id, group = header.topic, header.queue_id, header.consumer_group
        if len(name) > MAX_ROCKETMQ_TOPIC_LENGTH:
            return _long_topic_pull(request, name)
        try:
            topic = ctx.port.readable_topic(name)
        except TopicNotFound:
            return response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{name}] not exist, apply first please!",
            )
        except TopicNotReadable:
            return response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{name}] pulling message is forbidden",
            )
        if not 0 <= queue_id < topic.read_queue_nums:
            return response_to(
                request,
                ResponseCode.SYSTEM_ERROR,
                remark=f"queueId[{queue_id}] is illegal, topic:[{name}] "
                f"topicConfig.readQueueNums:[{topic.read_queue_nums}]",
            )
        try:
            subscription_group = ctx.port.group_for_use(group)
        except NotFoundError as exc:
            return response_to(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, remark=str(exc))
        if not subscription_group.consume_enable:
            return response_to(
                request,
                ResponseCode.NO_PERMISSION,
                remark=f"subscription group no permission, {group}",
            )
        expression, sql = self._subscription(header)
        if sql and not ctx.config.enable_property_filter:
            return _sql92_off(request)
        tag_filter = parse_filter(expression, sql, True)
        if header.has_commit_offset and header.commit_offset >= 0:
            ctx.port.commit_offset(group, name, queue_id, header.commit_offset)
        offset = max(header.queue_offset, 0)
        wait_ms = max(header.suspend_timeout_millis, 0) if header.has_suspend else 0
        max_msgs = max(header.max_msg_nums, 0)
        read = ctx.port.read.read_waiting
        # First without waiting: only a caught-up read is held (Apache's PullMessageProcessor
        # suspends on PULL_NOT_FOUND only). A range whose messages the filter rejects up to
        # the queue end is answered 20 PULL_RETRY_IMMEDIATELY at once with nextBeginOffset past
        # it (NO_MATCHED_MESSAGE), where the core's read would hold it for the whole long poll
        # (15 s push, 20 s lite pull): the Java client moves its offset to that end and commits
        # it, so queues holding only messages a group does not match show no lag within ~1 s
        # instead of 15-20 s. Messages arriving during a hold that the filter rejects keep it
        # held, as Apache's PullRequestHoldService does. Costs a held pull one more store read.
        result, status = await read(name, queue_id, offset, max_msgs, tag_filter, 0, raw=True)
        if status is ReadStatus.NO_NEW and wait_ms > 0:
            result, _ = await read(name, queue_id, offset, max_msgs, tag_filter, wait_ms, raw=True)
        assert isinstance(result, RawGetResult)
        code, next_begin = _pull_code(result, offset)
        reply = PullMessageResponseHeader(
            next_begin_offset=next_begin,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            suggest_which_broker_id=0,
        )
        body = b""
        if code == ResponseCode.SUCCESS:
            body = result.records
            ctx.counters.messages_out += result.count
            ctx.metrics.on_messages_out(name, group, result.count, result.body_bytes)
        return response_to(request, code, ext_fields=reply.to_ext_fields(), body=body)

    # --- offsets ------------------------------------------------------------------------------
    async def query_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = QueryConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        ctx = self.ctx
        offset = ctx.port.committed_offset(header.consumer_group, header.topic, header.queue_id)
        if offset < 0:
            # RocketMQ's broker rule: a group without an offset starts at 0 while the queue
            # still starts at 0 (nothing deleted yet), unless the client asked not to.
            if header.set_zero_if_not_found is not False and (
                ctx.port.min_offset(header.topic, header.queue_id) <= 0
            ):
                offset = 0
            else:
                return response_to(
                    request,
                    ResponseCode.QUERY_NOT_FOUND,
                    remark="Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
                )
        return _ok(request, ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())

    async def update_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = UpdateConsumerOffsetRequestHeader.from_ext_fields(request.ext_fields)
        if header.commit_offset >= 0:  # ali-ons commits -1 for an untouched queue: ignored
            validate_group_name(header.consumer_group)
            validate_topic_name(header.topic)
            if not 0 <= header.queue_id < MAX_QUEUE_ID:
                raise InvalidArgumentError(f"queueId must be 0..{MAX_QUEUE_ID - 1}")
            self.ctx.port.commit_offset(
                header.consumer_group, header.topic, header.queue_id, header.commit_offset
            )
        return _ok(request)

    async def max_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctx.port.max_offset(header.topic, header.queue_id)
        return _ok(request, ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())

    async def min_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = TopicQueueRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctx.port.min_offset(header.topic, header.queue_id)
        return _ok(request, ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())

    async def search_offset(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = SearchOffsetRequestHeader.from_ext_fields(request.ext_fields)
        offset = self.ctx.port.offset_at(header.topic, header.queue_id, header.timestamp)
        return _ok(request, ext_fields=OffsetResponseHeader(offset=offset).to_ext_fields())

    # --- retry --------------------------------------------------------------------------------
    async def send_back(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        header = ConsumerSendMsgBackRequestHeader.from_ext_fields(request.ext_fields)
        if header.delay_level < -1:
            raise InvalidSend(Reason.ILLEGAL_PROPERTY, f"delayLevel {header.delay_level} < -1")
        await self.ctx.port.retry.send_back(
            header.group,
            header.offset,
            delay_level=header.delay_level,
            origin_topic=header.origin_topic or "",
            origin_msg_id=header.origin_msg_id or "",
            max_reconsume_times=max(header.max_reconsume_times or 0, 0),
        )
        return _ok(request)


def _sql92_off(request: RemotingCommand) -> RemotingCommand:
    """A SQL92 pull or CHECK_CLIENT_CONFIG while enablePropertyFilter is off: 1 SYSTEM_ERROR
    with the remark of Apache's PullMessageProcessor and ClientManageProcessor (the Java client
    throws on it either way; a bad expression is 23 SUBSCRIPTION_PARSE_FAILED)."""
    return response_to(
        request,
        ResponseCode.SYSTEM_ERROR,
        remark="The broker does not support consumer to filter message by SQL92 "
        "(enablePropertyFilter = false)",
    )


def _long_topic_pull(request: RemotingCommand, name: str) -> RemotingCommand:
    """A PULL answers the stored records as they are, and a topic over 127 characters is
    stored in RocketMQ 5's second record version (a two-byte TOPICLENGTH), which RocketMQ 4.x
    clients cannot decode (re-encoding would have to cut the name): refused, naming why."""
    return response_to(
        request,
        ResponseCode.SYSTEM_ERROR,
        remark=f"topic[{name[:40]}...] is {len(name)} characters: its records are RocketMQ 5's "
        f"second record version (topics over {MAX_ROCKETMQ_TOPIC_LENGTH} characters), which "
        "RocketMQ 4.x remoting clients cannot decode; read it over Kafka, apache.rocketmq.v2 "
        "gRPC or wharf.v1",
    )


def _pull_code(result: RawGetResult, offset: int) -> tuple[int, int]:
    """(response code, nextBeginOffset) of a read, as RocketMQ's PullMessageProcessor maps
    GetMessageStatus (master broker)."""
    status = result.status
    if status is GetStatus.FOUND:
        return ResponseCode.SUCCESS, result.next_begin_offset
    if status in (GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING):
        return ResponseCode.PULL_RETRY_IMMEDIATELY, result.next_begin_offset
    if status is GetStatus.NO_MESSAGE_IN_QUEUE:
        if offset != 0:
            return ResponseCode.PULL_OFFSET_MOVED, 0
        return ResponseCode.PULL_NOT_FOUND, 0
    if status in (GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_TOO_SMALL):
        return ResponseCode.PULL_OFFSET_MOVED, result.next_begin_offset
    # OFFSET_OVERFLOW_ONE (caught up), OFFSET_FOUND_NULL (a hole: go past it)
    return ResponseCode.PULL_NOT_FOUND, max(result.next_begin_offset, offset)
