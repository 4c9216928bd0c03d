from wharf.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SendStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEND_STATUS_UNSPECIFIED: _ClassVar[SendStatus]
    SEND_OK: _ClassVar[SendStatus]
    FLUSH_DISK_TIMEOUT: _ClassVar[SendStatus]
    FLUSH_SLAVE_TIMEOUT: _ClassVar[SendStatus]
    SLAVE_NOT_AVAILABLE: _ClassVar[SendStatus]

class PullStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PULL_STATUS_UNSPECIFIED: _ClassVar[PullStatus]
    FOUND: _ClassVar[PullStatus]
    NO_NEW_MSG: _ClassVar[PullStatus]
    NO_MATCHED_MSG: _ClassVar[PullStatus]
    OFFSET_ILLEGAL: _ClassVar[PullStatus]
SEND_STATUS_UNSPECIFIED: SendStatus
SEND_OK: SendStatus
FLUSH_DISK_TIMEOUT: SendStatus
FLUSH_SLAVE_TIMEOUT: SendStatus
SLAVE_NOT_AVAILABLE: SendStatus
PULL_STATUS_UNSPECIFIED: PullStatus
FOUND: PullStatus
NO_NEW_MSG: PullStatus
NO_MATCHED_MSG: PullStatus
OFFSET_ILLEGAL: PullStatus

class RecallMessageRequest(_message.Message):
    __slots__ = ("topic", "recall_handle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    recall_handle: str
    def __init__(self, topic: _Optional[str] = ..., recall_handle: _Optional[str] = ...) -> None: ...

class RecallMessageResponse(_message.Message):
    __slots__ = ("msg_id",)
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    def __init__(self, msg_id: _Optional[str] = ...) -> None: ...

class EndTransactionRequest(_message.Message):
    __slots__ = ("topic", "msg_id", "transaction_id", "commit", "from_check")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    FROM_CHECK_FIELD_NUMBER: _ClassVar[int]
    topic: str
    msg_id: str
    transaction_id: str
    commit: bool
    from_check: bool
    def __init__(self, topic: _Optional[str] = ..., msg_id: _Optional[str] = ..., transaction_id: _Optional[str] = ..., commit: _Optional[bool] = ..., from_check: _Optional[bool] = ...) -> None: ...

class EndTransactionResponse(_message.Message):
    __slots__ = ("resolution",)
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    resolution: str
    def __init__(self, resolution: _Optional[str] = ...) -> None: ...

class TransactionRange(_message.Message):
    __slots__ = ("first", "count")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    first: int
    count: int
    def __init__(self, first: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class EndTransactionsRequest(_message.Message):
    __slots__ = ("msg_id_prefix", "ranges", "commit", "rollback_rest", "topics")
    MSG_ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    RANGES_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_REST_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    msg_id_prefix: str
    ranges: _containers.RepeatedCompositeFieldContainer[TransactionRange]
    commit: bool
    rollback_rest: bool
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, msg_id_prefix: _Optional[str] = ..., ranges: _Optional[_Iterable[_Union[TransactionRange, _Mapping]]] = ..., commit: _Optional[bool] = ..., rollback_rest: _Optional[bool] = ..., topics: _Optional[_Iterable[str]] = ...) -> None: ...

class EndTransactionsResponse(_message.Message):
    __slots__ = ("committed", "rolled_back", "resolved_before")
    COMMITTED_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BEFORE_FIELD_NUMBER: _ClassVar[int]
    committed: int
    rolled_back: int
    resolved_before: int
    def __init__(self, committed: _Optional[int] = ..., rolled_back: _Optional[int] = ..., resolved_before: _Optional[int] = ...) -> None: ...

class TransactionChecksRequest(_message.Message):
    __slots__ = ("topics", "producer_group")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    producer_group: str
    def __init__(self, topics: _Optional[_Iterable[str]] = ..., producer_group: _Optional[str] = ...) -> None: ...

class TransactionCheck(_message.Message):
    __slots__ = ("transaction_id", "message")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    message: _common_pb2.MessageView
    def __init__(self, transaction_id: _Optional[str] = ..., message: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "messages", "producer_group", "request_id", "records", "parts", "batch_topics", "batch_sizes")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_TOPICS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.Message]
    producer_group: str
    request_id: int
    records: bytes
    parts: _containers.RepeatedCompositeFieldContainer[SendMessageRequest]
    batch_topics: _containers.RepeatedScalarFieldContainer[str]
    batch_sizes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.Message, _Mapping]]] = ..., producer_group: _Optional[str] = ..., request_id: _Optional[int] = ..., records: _Optional[bytes] = ..., parts: _Optional[_Iterable[_Union[SendMessageRequest, _Mapping]]] = ..., batch_topics: _Optional[_Iterable[str]] = ..., batch_sizes: _Optional[_Iterable[int]] = ...) -> None: ...

class SendResultEntry(_message.Message):
    __slots__ = ("status", "msg_id", "offset_msg_id", "queue_id", "queue_offset", "commit_log_offset")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    def __init__(self, status: _Optional[_Union[SendStatus, str]] = ..., msg_id: _Optional[str] = ..., offset_msg_id: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., commit_log_offset: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("results", "request_id", "error", "status", "queue_id", "first_queue_offset", "first_commit_log_offset", "store_host", "count", "parts", "batch_queue_ids", "batch_first_queue_offsets", "batch_first_commit_log_offsets", "batch_errors")
    class BatchErrorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: _common_pb2.ErrorInfo
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FIRST_COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_QUEUE_IDS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIRST_QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIRST_COMMIT_LOG_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    BATCH_ERRORS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResultEntry]
    request_id: int
    error: _common_pb2.ErrorInfo
    status: SendStatus
    queue_id: int
    first_queue_offset: int
    first_commit_log_offset: int
    store_host: str
    count: int
    parts: _containers.RepeatedCompositeFieldContainer[SendMessageResponse]
    batch_queue_ids: _containers.RepeatedScalarFieldContainer[int]
    batch_first_queue_offsets: _containers.RepeatedScalarFieldContainer[int]
    batch_first_commit_log_offsets: _containers.RepeatedScalarFieldContainer[int]
    batch_errors: _containers.MessageMap[int, _common_pb2.ErrorInfo]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResultEntry, _Mapping]]] = ..., request_id: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., status: _Optional[_Union[SendStatus, str]] = ..., queue_id: _Optional[int] = ..., first_queue_offset: _Optional[int] = ..., first_commit_log_offset: _Optional[int] = ..., store_host: _Optional[str] = ..., count: _Optional[int] = ..., parts: _Optional[_Iterable[_Union[SendMessageResponse, _Mapping]]] = ..., batch_queue_ids: _Optional[_Iterable[int]] = ..., batch_first_queue_offsets: _Optional[_Iterable[int]] = ..., batch_first_commit_log_offsets: _Optional[_Iterable[int]] = ..., batch_errors: _Optional[_Mapping[int, _common_pb2.ErrorInfo]] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_messages", "max_wait_ms", "tag_expression", "commit_offset", "raw_records", "request_id", "max_bytes", "cancel", "batch", "sql_expression")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RAW_RECORDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    SQL_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_messages: int
    max_wait_ms: int
    tag_expression: str
    commit_offset: int
    raw_records: bool
    request_id: int
    max_bytes: int
    cancel: bool
    batch: _containers.RepeatedCompositeFieldContainer[PullMessageRequest]
    sql_expression: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_messages: _Optional[int] = ..., max_wait_ms: _Optional[int] = ..., tag_expression: _Optional[str] = ..., commit_offset: _Optional[int] = ..., raw_records: _Optional[bool] = ..., request_id: _Optional[int] = ..., max_bytes: _Optional[int] = ..., cancel: _Optional[bool] = ..., batch: _Optional[_Iterable[_Union[PullMessageRequest, _Mapping]]] = ..., sql_expression: _Optional[str] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("status", "next_begin_offset", "min_offset", "max_offset", "messages", "records", "request_id", "error", "batch")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageView]
    records: bytes
    request_id: int
    error: _common_pb2.ErrorInfo
    batch: _containers.RepeatedCompositeFieldContainer[PullMessageResponse]
    def __init__(self, status: _Optional[_Union[PullStatus, str]] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.MessageView, _Mapping]]] = ..., records: _Optional[bytes] = ..., request_id: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., batch: _Optional[_Iterable[_Union[PullMessageResponse, _Mapping]]] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "begin_timestamp", "end_timestamp", "max_num")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    begin_timestamp: int
    end_timestamp: int
    max_num: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ..., max_num: _Optional[int] = ...) -> None: ...

class QueryMessageResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.MessageView]
    def __init__(self, messages: _Optional[_Iterable[_Union[_common_pb2.MessageView, _Mapping]]] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("msg_id", "topic")
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    msg_id: str
    topic: str
    def __init__(self, msg_id: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class ViewMessageResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: _common_pb2.MessageView
    def __init__(self, message: _Optional[_Union[_common_pb2.MessageView, _Mapping]] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ...) -> None: ...

class SearchOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class GetQueueOffsetsRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueOffsets(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_update_timestamp", "broker_name")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    broker_name: str
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_update_timestamp: _Optional[int] = ..., broker_name: _Optional[str] = ...) -> None: ...

class GetQueueOffsetsResponse(_message.Message):
    __slots__ = ("topic", "queues")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueOffsets]
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueOffsets, _Mapping]]] = ...) -> None: ...

class QueryRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueryRouteResponse(_message.Message):
    __slots__ = ("topic", "exists", "read_queue_nums", "write_queue_nums", "perm", "broker_name", "endpoint")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXISTS_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    exists: bool
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    broker_name: str
    endpoint: str
    def __init__(self, topic: _Optional[str] = ..., exists: _Optional[bool] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., broker_name: _Optional[str] = ..., endpoint: _Optional[str] = ...) -> None: ...

class Subscription(_message.Message):
    __slots__ = ("topic", "tag_expression", "sql_expression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TAG_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SQL_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    tag_expression: str
    sql_expression: str
    def __init__(self, topic: _Optional[str] = ..., tag_expression: _Optional[str] = ..., sql_expression: _Optional[str] = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("group", "subscriptions", "message_model", "consume_from_where", "consume_timestamp")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    group: str
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    message_model: _common_pb2.MessageModel
    consume_from_where: _common_pb2.ConsumeFromWhere
    consume_timestamp: int
    def __init__(self, group: _Optional[str] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., message_model: _Optional[_Union[_common_pb2.MessageModel, str]] = ..., consume_from_where: _Optional[_Union[_common_pb2.ConsumeFromWhere, str]] = ..., consume_timestamp: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("client_id", "consumers", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumers: _Optional[_Iterable[_Union[ConsumerData, _Mapping]]] = ..., producer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("consumer_list_versions",)
    class ConsumerListVersionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CONSUMER_LIST_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    consumer_list_versions: _containers.ScalarMap[str, int]
    def __init__(self, consumer_list_versions: _Optional[_Mapping[str, int]] = ...) -> None: ...

class UnregisterClientRequest(_message.Message):
    __slots__ = ("client_id", "consumer_groups", "producer_groups")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_GROUPS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumer_groups: _containers.RepeatedScalarFieldContainer[str]
    producer_groups: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_id: _Optional[str] = ..., consumer_groups: _Optional[_Iterable[str]] = ..., producer_groups: _Optional[_Iterable[str]] = ...) -> None: ...

class UnregisterClientResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerListRequest(_message.Message):
    __slots__ = ("consumer_group",)
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    def __init__(self, consumer_group: _Optional[str] = ...) -> None: ...

class GetConsumerListResponse(_message.Message):
    __slots__ = ("client_ids", "version")
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    version: int
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ..., version: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "offset", "durable")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DURABLE_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    offset: int
    durable: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ..., durable: _Optional[bool] = ...) -> None: ...

class UpdateConsumerOffsetResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class QueryConsumerOffsetResponse(_message.Message):
    __slots__ = ("offset",)
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    offset: int
    def __init__(self, offset: _Optional[int] = ...) -> None: ...

class SendMessageBackRequest(_message.Message):
    __slots__ = ("consumer_group", "commit_log_offset", "delay_level", "origin_msg_id", "origin_topic", "max_reconsume_times")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_MSG_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    commit_log_offset: int
    delay_level: int
    origin_msg_id: str
    origin_topic: str
    max_reconsume_times: int
    def __init__(self, consumer_group: _Optional[str] = ..., commit_log_offset: _Optional[int] = ..., delay_level: _Optional[int] = ..., origin_msg_id: _Optional[str] = ..., origin_topic: _Optional[str] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class SendMessageBackResponse(_message.Message):
    __slots__ = ("sent_to_dlq", "topic", "reconsume_times")
    SENT_TO_DLQ_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    sent_to_dlq: bool
    topic: str
    reconsume_times: int
    def __init__(self, sent_to_dlq: _Optional[bool] = ..., topic: _Optional[str] = ..., reconsume_times: _Optional[int] = ...) -> None: ...
