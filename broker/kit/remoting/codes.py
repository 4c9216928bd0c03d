"""RocketMQ 4.x remoting numbers: request and response codes, languages, serialize types, flags.

Mirrors ``org.apache.rocketmq.remoting.protocol`` ``RequestCode``, ``ResponseCode`` (with
``RemotingSysResponseCode`` 0-4 folded in), ``LanguageCode``, ``SerializeType`` and the flag bits
of ``RemotingCommand`` (``RPC_TYPE``, ``RPC_ONEWAY``), plus ``PullSysFlag`` and the transaction
values of ``MessageSysFlag`` that the pull and end-transaction headers carry.

Only the codes Wharf serves or sends are listed (the NameServer and broker codes the 4.x clients
and mqadmin use, and the broker -> client requests); a command's ``code`` stays a plain ``int`` so
an unknown code can still be answered with ``REQUEST_CODE_NOT_SUPPORTED``.

Traps:

- Request and response codes overlap (10 is SEND_MESSAGE in a request and FLUSH_DISK_TIMEOUT in
  a response): which table applies depends on the command's flag, never on the number.
- ``RPC_TYPE`` and ``RPC_ONEWAY`` are bit *positions* in RocketMQ (0 and 1); the masks are
  ``FLAG_RESPONSE`` (1) and ``FLAG_ONEWAY`` (2).
- The ROCKETMQ binary header stores code and version in 16 bits: 5.x pop codes (200050...) do not
  fit and are left out.
"""

from __future__ import annotations

from enum import IntEnum

# --- RemotingCommand flag -------------------------------------------------------------------

RPC_TYPE = 0  # bit position: set = response (RemotingCommandType.RESPONSE_COMMAND)
RPC_ONEWAY = 1  # bit position: set = the sender waits for no answer
FLAG_RESPONSE = 1 << RPC_TYPE
FLAG_ONEWAY = 1 << RPC_ONEWAY

# com.rocketmq.remoting.frameMaxLength: the whole frame, its 4-byte length field included.
DEFAULT_MAX_FRAME_LENGTH = 16 * 1024 * 1024

# The version every response carries, as Apache's broker stamps its own (RemotingCommand's
# rocketmq.remoting.version): MQVersion.Version.V4_9_8's ordinal. Clients keep it per broker
# and gate features on it: the 4.9 Java client refuses to pull with a SQL92 subscription from
# a broker older than V4_1_0_SNAPSHOT (232; PullAPIWrapper.pullKernelImpl), so with version 0
# its SQL92 push consumers pulled nothing at all (issue 66).
BROKER_VERSION = 409
# Its name, MQVersion.getVersionDesc(409): what Apache's broker answers as brokerVersionDesc
# (GET_BROKER_RUNTIME_INFO) and tools parse back into a version (MQVersion.Version.valueOf).
BROKER_VERSION_DESC = "V4_9_8"


class SerializeType(IntEnum):
    """How the command header is serialized: the top byte of the frame's second int32."""

    JSON = 0  # RemotingSerializable (fastjson): what every 4.x client sends and expects back
    ROCKETMQ = 1  # RocketMQSerializable: compact binary, Java with -Drocketmq.serialize.type


class LanguageCode(IntEnum):
    """The sender's language: a name in the JSON header, a byte in the ROCKETMQ header."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class RequestCode(IntEnum):
    """``RequestCode``: what a request asks (the code of a command whose response bit is clear)."""

    # broker: produce and consume
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39  # broker -> producer
    NOTIFY_CONSUMER_IDS_CHANGED = 40  # broker -> consumer, oneway
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43
    CHECK_CLIENT_CONFIG = 46
    # NameServer
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    # admin (mqadmin, Dashboard)
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220  # broker -> consumer
    GET_CONSUMER_STATUS_FROM_CLIENT = 221  # broker -> consumer
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_TOPICS_BY_CLUSTER = 224
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER = 305
    GET_CONSUMER_RUNNING_INFO = 307  # broker -> consumer
    CONSUME_MESSAGE_DIRECTLY = 309  # broker -> consumer
    SEND_MESSAGE_V2 = 310
    GET_UNIT_TOPIC_LIST = 311
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    SEND_BATCH_MESSAGE = 320
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_TOPIC_CONFIG = 351  # RocketMQ 5 (not in 4.9.8's RequestCode)


class ResponseCode(IntEnum):
    """``ResponseCode`` and ``RemotingSysResponseCode``: the code of a response."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10  # stored, not yet flushed: clients count it as sent
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202  # sic: RocketMQ's spelling
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208


# --- PullSysFlag (PULL_MESSAGE's sysFlag) -------------------------------------------------------

PULL_FLAG_COMMIT_OFFSET = 0x1  # store commitOffset for the group before reading
PULL_FLAG_SUSPEND = 0x2  # long-poll up to suspendTimeoutMillis when nothing is there
PULL_FLAG_SUBSCRIPTION = 0x4  # use this request's subscription, not the last heartbeat's
PULL_FLAG_CLASS_FILTER = 0x8  # filter server (obsolete)
PULL_FLAG_LITE_PULL = 0x10  # 5.x

# --- MessageSysFlag transaction values (END_TRANSACTION's commitOrRollback) -----------------------

TRANSACTION_NOT_TYPE = 0x0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


def request_code_name(code: int) -> str:
    """``RequestCode`` name of ``code`` for logs and metrics, or the number as text."""
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


def response_code_name(code: int) -> str:
    """``ResponseCode`` name of ``code`` for logs and metrics, or the number as text."""
    try:
        return ResponseCode(code).name
    except ValueError:
        return str(code)
