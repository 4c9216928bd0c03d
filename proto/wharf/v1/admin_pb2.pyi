from wharf.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ListHalfMessagesRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class HalfMessage(_message.Message):
    __slots__ = ("transaction_id", "topic", "msg_id", "store_timestamp", "checks", "broker_name")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    STORE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CHECKS_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    topic: str
    msg_id: str
    store_timestamp: int
    checks: int
    broker_name: str
    def __init__(self, transaction_id: _Optional[str] = ..., topic: _Optional[str] = ..., msg_id: _Optional[str] = ..., store_timestamp: _Optional[int] = ..., checks: _Optional[int] = ..., broker_name: _Optional[str] = ...) -> None: ...

class ListHalfMessagesResponse(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[HalfMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[HalfMessage, _Mapping]]] = ...) -> None: ...

class ResolveHalfMessageRequest(_message.Message):
    __slots__ = ("transaction_id", "commit")
    TRANSACTION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    transaction_id: str
    commit: bool
    def __init__(self, transaction_id: _Optional[str] = ..., commit: _Optional[bool] = ...) -> None: ...

class ResolveHalfMessageResponse(_message.Message):
    __slots__ = ("resolution",)
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    resolution: str
    def __init__(self, resolution: _Optional[str] = ...) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicRequest(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("name", "read_queue_nums", "write_queue_nums", "perm", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class DeleteTopicRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteTopicResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("include_system", "with_stats")
    INCLUDE_SYSTEM_FIELD_NUMBER: _ClassVar[int]
    WITH_STATS_FIELD_NUMBER: _ClassVar[int]
    include_system: bool
    with_stats: bool
    def __init__(self, include_system: _Optional[bool] = ..., with_stats: _Optional[bool] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "stats")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicConfig]
    stats: _containers.RepeatedCompositeFieldContainer[TopicSummary]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicConfig, _Mapping]]] = ..., stats: _Optional[_Iterable[_Union[TopicSummary, _Mapping]]] = ...) -> None: ...

class TopicSummary(_message.Message):
    __slots__ = ("name", "total_messages", "written_messages")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    WRITTEN_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    name: str
    total_messages: int
    written_messages: int
    def __init__(self, name: _Optional[str] = ..., total_messages: _Optional[int] = ..., written_messages: _Optional[int] = ...) -> None: ...

class GetTopicStatsRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class QueueStats(_message.Message):
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

class GetTopicStatsResponse(_message.Message):
    __slots__ = ("name", "queues", "total_messages")
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    name: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueStats]
    total_messages: int
    def __init__(self, name: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueStats, _Mapping]]] = ..., total_messages: _Optional[int] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_broadcast_enable", "retry_max_times", "retry_queue_nums", "consume_from_where", "consume_timestamp", "consume_message_orderly")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    CONSUME_FROM_WHERE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_broadcast_enable: bool
    retry_max_times: int
    retry_queue_nums: int
    consume_from_where: _common_pb2.ConsumeFromWhere
    consume_timestamp: int
    consume_message_orderly: bool
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_broadcast_enable: _Optional[bool] = ..., retry_max_times: _Optional[int] = ..., retry_queue_nums: _Optional[int] = ..., consume_from_where: _Optional[_Union[_common_pb2.ConsumeFromWhere, str]] = ..., consume_timestamp: _Optional[int] = ..., consume_message_orderly: _Optional[bool] = ...) -> None: ...

class ListSubscriptionGroupsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSubscriptionGroupsResponse(_message.Message):
    __slots__ = ("groups",)
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    def __init__(self, groups: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ...) -> None: ...

class DeleteSubscriptionGroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class DeleteSubscriptionGroupResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetConsumerProgressRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueProgress(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "lag", "last_timestamp", "broker_name")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    lag: int
    last_timestamp: int
    broker_name: str
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., lag: _Optional[int] = ..., last_timestamp: _Optional[int] = ..., broker_name: _Optional[str] = ...) -> None: ...

class GetConsumerProgressResponse(_message.Message):
    __slots__ = ("consumer_group", "queues", "total_lag", "online_clients")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LAG_FIELD_NUMBER: _ClassVar[int]
    ONLINE_CLIENTS_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueProgress]
    total_lag: int
    online_clients: int
    def __init__(self, consumer_group: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueProgress, _Mapping]]] = ..., total_lag: _Optional[int] = ..., online_clients: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "timestamp")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    timestamp: int
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp: _Optional[int] = ...) -> None: ...

class ResetConsumerOffsetResponse(_message.Message):
    __slots__ = ("offsets",)
    class OffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.ScalarMap[int, int]
    def __init__(self, offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("broker_name", "queue_id", "offset")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    queue_id: int
    offset: int
    def __init__(self, broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class GetBrokerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerStatus(_message.Message):
    __slots__ = ("version", "broker_name", "endpoint", "flush_disk_type", "uptime_ms", "writable", "not_writable_reason", "commit_log_min_offset", "commit_log_max_offset", "commit_log_flushed_offset", "dispatch_behind_bytes", "disk_used_ratio", "topic_count", "group_count", "messages_in_total", "messages_out_total", "runtime", "replication")
    class RuntimeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    FLUSH_DISK_TYPE_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    NOT_WRITABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    COMMIT_LOG_FLUSHED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_BEHIND_BYTES_FIELD_NUMBER: _ClassVar[int]
    DISK_USED_RATIO_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    GROUP_COUNT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_IN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_OUT_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    version: str
    broker_name: str
    endpoint: str
    flush_disk_type: str
    uptime_ms: int
    writable: bool
    not_writable_reason: str
    commit_log_min_offset: int
    commit_log_max_offset: int
    commit_log_flushed_offset: int
    dispatch_behind_bytes: int
    disk_used_ratio: float
    topic_count: int
    group_count: int
    messages_in_total: int
    messages_out_total: int
    runtime: _containers.ScalarMap[str, str]
    replication: Replication
    def __init__(self, version: _Optional[str] = ..., broker_name: _Optional[str] = ..., endpoint: _Optional[str] = ..., flush_disk_type: _Optional[str] = ..., uptime_ms: _Optional[int] = ..., writable: _Optional[bool] = ..., not_writable_reason: _Optional[str] = ..., commit_log_min_offset: _Optional[int] = ..., commit_log_max_offset: _Optional[int] = ..., commit_log_flushed_offset: _Optional[int] = ..., dispatch_behind_bytes: _Optional[int] = ..., disk_used_ratio: _Optional[float] = ..., topic_count: _Optional[int] = ..., group_count: _Optional[int] = ..., messages_in_total: _Optional[int] = ..., messages_out_total: _Optional[int] = ..., runtime: _Optional[_Mapping[str, str]] = ..., replication: _Optional[_Union[Replication, _Mapping]] = ...) -> None: ...

class ReplicaInfo(_message.Message):
    __slots__ = ("broker_id", "address", "acked_offset", "lag_bytes", "lag_seconds", "in_sync")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ACKED_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAG_SECONDS_FIELD_NUMBER: _ClassVar[int]
    IN_SYNC_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    address: str
    acked_offset: int
    lag_bytes: int
    lag_seconds: float
    in_sync: bool
    def __init__(self, broker_id: _Optional[int] = ..., address: _Optional[str] = ..., acked_offset: _Optional[int] = ..., lag_bytes: _Optional[int] = ..., lag_seconds: _Optional[float] = ..., in_sync: _Optional[bool] = ...) -> None: ...

class Replication(_message.Message):
    __slots__ = ("role", "confirm_offset", "replicas", "master_ha_address", "lag_bytes", "ha_address", "epoch", "sync_state_set")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONFIRM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MASTER_HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    LAG_BYTES_FIELD_NUMBER: _ClassVar[int]
    HA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SYNC_STATE_SET_FIELD_NUMBER: _ClassVar[int]
    role: str
    confirm_offset: int
    replicas: _containers.RepeatedCompositeFieldContainer[ReplicaInfo]
    master_ha_address: str
    lag_bytes: int
    ha_address: str
    epoch: int
    sync_state_set: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, role: _Optional[str] = ..., confirm_offset: _Optional[int] = ..., replicas: _Optional[_Iterable[_Union[ReplicaInfo, _Mapping]]] = ..., master_ha_address: _Optional[str] = ..., lag_bytes: _Optional[int] = ..., ha_address: _Optional[str] = ..., epoch: _Optional[int] = ..., sync_state_set: _Optional[_Iterable[int]] = ...) -> None: ...

class TransferMasterRequest(_message.Message):
    __slots__ = ("to_broker_id",)
    TO_BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    to_broker_id: int
    def __init__(self, to_broker_id: _Optional[int] = ...) -> None: ...

class TransferMasterResponse(_message.Message):
    __slots__ = ("new_master_id", "epoch")
    NEW_MASTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    new_master_id: int
    epoch: int
    def __init__(self, new_master_id: _Optional[int] = ..., epoch: _Optional[int] = ...) -> None: ...
