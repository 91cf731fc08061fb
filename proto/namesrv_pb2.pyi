from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RegisterBrokerBody(_message.Message):
    __slots__ = ("topic_configs", "deleted_topics", "topic_queue_mapping_info")
    class TopicQueueMappingInfoEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.TopicQueueMappingInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.TopicQueueMappingInfo, _Mapping]] = ...) -> None: ...
    TOPIC_CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DELETED_TOPICS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_QUEUE_MAPPING_INFO_FIELD_NUMBER: _ClassVar[int]
    topic_configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    deleted_topics: _containers.RepeatedScalarFieldContainer[str]
    topic_queue_mapping_info: _containers.MessageMap[str, _common_pb2.TopicQueueMappingInfo]
    def __init__(self, topic_configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., deleted_topics: _Optional[_Iterable[str]] = ..., topic_queue_mapping_info: _Optional[_Mapping[str, _common_pb2.TopicQueueMappingInfo]] = ...) -> None: ...

class RegisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr", "data_version", "base_version", "full", "body", "compressed_body", "heartbeat_timeout_ms", "master_epoch", "register_period_ms")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    COMPRESSED_BODY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    MASTER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REGISTER_PERIOD_MS_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    data_version: _common_pb2.DataVersion
    base_version: _common_pb2.DataVersion
    full: bool
    body: RegisterBrokerBody
    compressed_body: bytes
    heartbeat_timeout_ms: int
    master_epoch: int
    register_period_ms: int
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., base_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., full: _Optional[bool] = ..., body: _Optional[_Union[RegisterBrokerBody, _Mapping]] = ..., compressed_body: _Optional[bytes] = ..., heartbeat_timeout_ms: _Optional[int] = ..., master_epoch: _Optional[int] = ..., register_period_ms: _Optional[int] = ...) -> None: ...

class RegisterBrokerResponse(_message.Message):
    __slots__ = ("code", "remark", "need_full")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    NEED_FULL_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    need_full: bool
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., need_full: _Optional[bool] = ...) -> None: ...

class UnregisterBrokerRequest(_message.Message):
    __slots__ = ("cluster_name", "broker_name", "broker_id", "broker_addr")
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    def __init__(self, cluster_name: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_id: _Optional[int] = ..., broker_addr: _Optional[str] = ...) -> None: ...

class GetRouteInfoRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GetRouteInfoResponse(_message.Message):
    __slots__ = ("code", "remark", "route", "warming_up", "brokers_heard")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    WARMING_UP_FIELD_NUMBER: _ClassVar[int]
    BROKERS_HEARD_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    route: _common_pb2.TopicRouteData
    warming_up: bool
    brokers_heard: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., route: _Optional[_Union[_common_pb2.TopicRouteData, _Mapping]] = ..., warming_up: _Optional[bool] = ..., brokers_heard: _Optional[_Iterable[str]] = ...) -> None: ...

class BrokerLiveInfo(_message.Message):
    __slots__ = ("broker_addr", "last_update_timestamp", "data_version", "topic_count")
    BROKER_ADDR_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    broker_addr: str
    last_update_timestamp: int
    data_version: _common_pb2.DataVersion
    topic_count: int
    def __init__(self, broker_addr: _Optional[str] = ..., last_update_timestamp: _Optional[int] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., topic_count: _Optional[int] = ...) -> None: ...

class ClusterInfo(_message.Message):
    __slots__ = ("broker_addr_table", "cluster_addr_table", "live_brokers", "warming_up")
    class BrokerAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.BrokerData
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.BrokerData, _Mapping]] = ...) -> None: ...
    class ClusterAddrTableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: BrokerNames
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[BrokerNames, _Mapping]] = ...) -> None: ...
    BROKER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ADDR_TABLE_FIELD_NUMBER: _ClassVar[int]
    LIVE_BROKERS_FIELD_NUMBER: _ClassVar[int]
    WARMING_UP_FIELD_NUMBER: _ClassVar[int]
    broker_addr_table: _containers.MessageMap[str, _common_pb2.BrokerData]
    cluster_addr_table: _containers.MessageMap[str, BrokerNames]
    live_brokers: _containers.RepeatedCompositeFieldContainer[BrokerLiveInfo]
    warming_up: bool
    def __init__(self, broker_addr_table: _Optional[_Mapping[str, _common_pb2.BrokerData]] = ..., cluster_addr_table: _Optional[_Mapping[str, BrokerNames]] = ..., live_brokers: _Optional[_Iterable[_Union[BrokerLiveInfo, _Mapping]]] = ..., warming_up: _Optional[bool] = ...) -> None: ...

class BrokerNames(_message.Message):
    __slots__ = ("broker_names",)
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class TopicList(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topics: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTopicInNamesrvRequest(_message.Message):
    __slots__ = ("topic", "cluster_name", "broker_names")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAMES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    cluster_name: str
    broker_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., cluster_name: _Optional[str] = ..., broker_names: _Optional[_Iterable[str]] = ...) -> None: ...

class NamesrvRuntimeInfo(_message.Message):
    __slots__ = ("table",)
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    def __init__(self, table: _Optional[_Mapping[str, str]] = ...) -> None: ...

class WritePermRequest(_message.Message):
    __slots__ = ("broker_name",)
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    def __init__(self, broker_name: _Optional[str] = ...) -> None: ...

class WritePermResponse(_message.Message):
    __slots__ = ("code", "remark", "topic_count", "registered")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TOPIC_COUNT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    topic_count: int
    registered: bool
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., topic_count: _Optional[int] = ..., registered: _Optional[bool] = ...) -> None: ...
