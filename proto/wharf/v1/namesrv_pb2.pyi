from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TopicQueues(_message.Message):
    __slots__ = ("topic", "read_queue_nums", "write_queue_nums", "perm")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, topic: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class BrokerRegistration(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "address", "data_version", "heartbeat", "topics", "unregister", "epoch", "remoting_address", "kafka_address")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    UNREGISTER_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    data_version: int
    heartbeat: bool
    topics: _containers.RepeatedCompositeFieldContainer[TopicQueues]
    unregister: bool
    epoch: int
    remoting_address: str
    kafka_address: str
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., data_version: _Optional[int] = ..., heartbeat: _Optional[bool] = ..., topics: _Optional[_Iterable[_Union[TopicQueues, _Mapping]]] = ..., unregister: _Optional[bool] = ..., epoch: _Optional[int] = ..., remoting_address: _Optional[str] = ..., kafka_address: _Optional[str] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("need_register",)
    NEED_REGISTER_FIELD_NUMBER: _ClassVar[int]
    need_register: bool
    def __init__(self, need_register: _Optional[bool] = ...) -> None: ...

class QueryTopicRouteRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "addresses", "kafka_addresses")
    class AddressesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    class KafkaAddressesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    addresses: _containers.ScalarMap[int, str]
    kafka_addresses: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., addresses: _Optional[_Mapping[int, str]] = ..., kafka_addresses: _Optional[_Mapping[int, str]] = ...) -> None: ...

class TopicRoute(_message.Message):
    __slots__ = ("topic", "queues", "brokers", "version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueData]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerData]
    version: int
    def __init__(self, topic: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., brokers: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., version: _Optional[int] = ...) -> None: ...

class GetClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BrokerInfo(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_id", "address", "topics", "last_seen_ms_ago", "registered_at_ms", "remoting_address", "kafka_address")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REMOTING_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    KAFKA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_id: int
    address: str
    topics: int
    last_seen_ms_ago: int
    registered_at_ms: int
    remoting_address: str
    kafka_address: str
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., address: _Optional[str] = ..., topics: _Optional[int] = ..., last_seen_ms_ago: _Optional[int] = ..., registered_at_ms: _Optional[int] = ..., remoting_address: _Optional[str] = ..., kafka_address: _Optional[str] = ...) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("brokers",)
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    brokers: _containers.RepeatedCompositeFieldContainer[BrokerInfo]
    def __init__(self, brokers: _Optional[_Iterable[_Union[BrokerInfo, _Mapping]]] = ...) -> None: ...

class WatchRoutesRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class RouteChange(_message.Message):
    __slots__ = ("topic", "version")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    version: int
    def __init__(self, topic: _Optional[str] = ..., version: _Optional[int] = ...) -> None: ...
