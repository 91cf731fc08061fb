from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CommandResponse(_message.Message):
    __slots__ = ("code", "remark")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicConfig(_message.Message):
    __slots__ = ("topic_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag", "order", "attributes")
    class AttributesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    order: bool
    attributes: _containers.ScalarMap[str, str]
    def __init__(self, topic_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ..., order: _Optional[bool] = ..., attributes: _Optional[_Mapping[str, str]] = ...) -> None: ...

class QueueData(_message.Message):
    __slots__ = ("broker_name", "read_queue_nums", "write_queue_nums", "perm", "topic_sys_flag")
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    READ_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    WRITE_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    PERM_FIELD_NUMBER: _ClassVar[int]
    TOPIC_SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int
    def __init__(self, broker_name: _Optional[str] = ..., read_queue_nums: _Optional[int] = ..., write_queue_nums: _Optional[int] = ..., perm: _Optional[int] = ..., topic_sys_flag: _Optional[int] = ...) -> None: ...

class BrokerData(_message.Message):
    __slots__ = ("cluster", "broker_name", "broker_addrs")
    class BrokerAddrsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    BROKER_ADDRS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    broker_name: str
    broker_addrs: _containers.ScalarMap[int, str]
    def __init__(self, cluster: _Optional[str] = ..., broker_name: _Optional[str] = ..., broker_addrs: _Optional[_Mapping[int, str]] = ...) -> None: ...

class TopicQueueMappingInfo(_message.Message):
    __slots__ = ("topic", "scope", "total_queues", "bname", "epoch", "dirty", "curr_id_map")
    class CurrIdMapEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_QUEUES_FIELD_NUMBER: _ClassVar[int]
    BNAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    CURR_ID_MAP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    scope: str
    total_queues: int
    bname: str
    epoch: int
    dirty: bool
    curr_id_map: _containers.ScalarMap[int, int]
    def __init__(self, topic: _Optional[str] = ..., scope: _Optional[str] = ..., total_queues: _Optional[int] = ..., bname: _Optional[str] = ..., epoch: _Optional[int] = ..., dirty: _Optional[bool] = ..., curr_id_map: _Optional[_Mapping[int, int]] = ...) -> None: ...

class TopicRouteData(_message.Message):
    __slots__ = ("queue_datas", "broker_datas", "topic_queue_mapping_by_broker")
    class TopicQueueMappingByBrokerEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TopicQueueMappingInfo
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TopicQueueMappingInfo, _Mapping]] = ...) -> None: ...
    QUEUE_DATAS_FIELD_NUMBER: _ClassVar[int]
    BROKER_DATAS_FIELD_NUMBER: _ClassVar[int]
    TOPIC_QUEUE_MAPPING_BY_BROKER_FIELD_NUMBER: _ClassVar[int]
    queue_datas: _containers.RepeatedCompositeFieldContainer[QueueData]
    broker_datas: _containers.RepeatedCompositeFieldContainer[BrokerData]
    topic_queue_mapping_by_broker: _containers.MessageMap[str, TopicQueueMappingInfo]
    def __init__(self, queue_datas: _Optional[_Iterable[_Union[QueueData, _Mapping]]] = ..., broker_datas: _Optional[_Iterable[_Union[BrokerData, _Mapping]]] = ..., topic_queue_mapping_by_broker: _Optional[_Mapping[str, TopicQueueMappingInfo]] = ...) -> None: ...

class DataVersion(_message.Message):
    __slots__ = ("state_version", "counter")
    STATE_VERSION_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    state_version: int
    counter: int
    def __init__(self, state_version: _Optional[int] = ..., counter: _Optional[int] = ...) -> None: ...

class LogicQueueMappingItem(_message.Message):
    __slots__ = ("gen", "queue_id", "bname", "logic_offset", "start_offset", "end_offset", "time_of_start", "time_of_end")
    GEN_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BNAME_FIELD_NUMBER: _ClassVar[int]
    LOGIC_OFFSET_FIELD_NUMBER: _ClassVar[int]
    START_OFFSET_FIELD_NUMBER: _ClassVar[int]
    END_OFFSET_FIELD_NUMBER: _ClassVar[int]
    TIME_OF_START_FIELD_NUMBER: _ClassVar[int]
    TIME_OF_END_FIELD_NUMBER: _ClassVar[int]
    gen: int
    queue_id: int
    bname: str
    logic_offset: int
    start_offset: int
    end_offset: int
    time_of_start: int
    time_of_end: int
    def __init__(self, gen: _Optional[int] = ..., queue_id: _Optional[int] = ..., bname: _Optional[str] = ..., logic_offset: _Optional[int] = ..., start_offset: _Optional[int] = ..., end_offset: _Optional[int] = ..., time_of_start: _Optional[int] = ..., time_of_end: _Optional[int] = ...) -> None: ...

class LogicQueueChain(_message.Message):
    __slots__ = ("items",)
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[LogicQueueMappingItem]
    def __init__(self, items: _Optional[_Iterable[_Union[LogicQueueMappingItem, _Mapping]]] = ...) -> None: ...

class TopicQueueMappingDetail(_message.Message):
    __slots__ = ("topic", "scope", "total_queues", "bname", "epoch", "dirty", "hosted_queues")
    class HostedQueuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: LogicQueueChain
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[LogicQueueChain, _Mapping]] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_QUEUES_FIELD_NUMBER: _ClassVar[int]
    BNAME_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    DIRTY_FIELD_NUMBER: _ClassVar[int]
    HOSTED_QUEUES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    scope: str
    total_queues: int
    bname: str
    epoch: int
    dirty: bool
    hosted_queues: _containers.MessageMap[int, LogicQueueChain]
    def __init__(self, topic: _Optional[str] = ..., scope: _Optional[str] = ..., total_queues: _Optional[int] = ..., bname: _Optional[str] = ..., epoch: _Optional[int] = ..., dirty: _Optional[bool] = ..., hosted_queues: _Optional[_Mapping[int, LogicQueueChain]] = ...) -> None: ...
