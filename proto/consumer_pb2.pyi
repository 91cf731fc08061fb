from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ConsumeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONSUME_PASSIVELY: _ClassVar[ConsumeType]
    CONSUME_ACTIVELY: _ClassVar[ConsumeType]

class MessageModel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLUSTERING: _ClassVar[MessageModel]
    BROADCASTING: _ClassVar[MessageModel]
CONSUME_PASSIVELY: ConsumeType
CONSUME_ACTIVELY: ConsumeType
CLUSTERING: MessageModel
BROADCASTING: MessageModel

class Subscription(_message.Message):
    __slots__ = ("topic", "expression")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    expression: str
    def __init__(self, topic: _Optional[str] = ..., expression: _Optional[str] = ...) -> None: ...

class QueueRef(_message.Message):
    __slots__ = ("topic", "broker_name", "queue_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    broker_name: str
    queue_id: int
    def __init__(self, topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_id: _Optional[int] = ...) -> None: ...

class ConsumerData(_message.Message):
    __slots__ = ("group", "consume_type", "message_model", "subscriptions", "queues", "orderly")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    consume_type: ConsumeType
    message_model: MessageModel
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    queues: _containers.RepeatedCompositeFieldContainer[QueueRef]
    orderly: bool
    def __init__(self, group: _Optional[str] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueRef, _Mapping]]] = ..., orderly: _Optional[bool] = ...) -> None: ...

class HeartbeatFrame(_message.Message):
    __slots__ = ("client_id", "consumers")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerData]
    def __init__(self, client_id: _Optional[str] = ..., consumers: _Optional[_Iterable[_Union[ConsumerData, _Mapping]]] = ...) -> None: ...

class GroupNotice(_message.Message):
    __slots__ = ("kind", "group", "topic", "broker_name", "queue_offsets")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[GroupNotice.Kind]
        IDS_CHANGED: _ClassVar[GroupNotice.Kind]
        OFFSETS_RESET: _ClassVar[GroupNotice.Kind]
    KIND_UNSPECIFIED: GroupNotice.Kind
    IDS_CHANGED: GroupNotice.Kind
    OFFSETS_RESET: GroupNotice.Kind
    class QueueOffsetsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    KIND_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BROKER_NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    kind: GroupNotice.Kind
    group: str
    topic: str
    broker_name: str
    queue_offsets: _containers.ScalarMap[int, int]
    def __init__(self, kind: _Optional[_Union[GroupNotice.Kind, str]] = ..., group: _Optional[str] = ..., topic: _Optional[str] = ..., broker_name: _Optional[str] = ..., queue_offsets: _Optional[_Mapping[int, int]] = ...) -> None: ...

class ConsumerListRequest(_message.Message):
    __slots__ = ("group",)
    GROUP_FIELD_NUMBER: _ClassVar[int]
    group: str
    def __init__(self, group: _Optional[str] = ...) -> None: ...

class ConsumerList(_message.Message):
    __slots__ = ("client_ids",)
    CLIENT_IDS_FIELD_NUMBER: _ClassVar[int]
    client_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, client_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LockBatchRequest(_message.Message):
    __slots__ = ("group", "client_id", "queues", "holders_only")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_ONLY_FIELD_NUMBER: _ClassVar[int]
    group: str
    client_id: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueRef]
    holders_only: bool
    def __init__(self, group: _Optional[str] = ..., client_id: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueRef, _Mapping]]] = ..., holders_only: _Optional[bool] = ...) -> None: ...

class QueueLease(_message.Message):
    __slots__ = ("queue", "client_id")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    queue: QueueRef
    client_id: str
    def __init__(self, queue: _Optional[_Union[QueueRef, _Mapping]] = ..., client_id: _Optional[str] = ...) -> None: ...

class LockBatchResponse(_message.Message):
    __slots__ = ("locked", "held")
    LOCKED_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    locked: _containers.RepeatedCompositeFieldContainer[QueueRef]
    held: _containers.RepeatedCompositeFieldContainer[QueueLease]
    def __init__(self, locked: _Optional[_Iterable[_Union[QueueRef, _Mapping]]] = ..., held: _Optional[_Iterable[_Union[QueueLease, _Mapping]]] = ...) -> None: ...

class SendMsgBackRequest(_message.Message):
    __slots__ = ("group", "topic", "body", "properties", "born_timestamp", "born_host", "flag", "msg_id", "delay_level", "max_reconsume_times")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    MSG_ID_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MAX_RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    body: bytes
    properties: bytes
    born_timestamp: int
    born_host: str
    flag: int
    msg_id: str
    delay_level: int
    max_reconsume_times: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[bytes] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., flag: _Optional[int] = ..., msg_id: _Optional[str] = ..., delay_level: _Optional[int] = ..., max_reconsume_times: _Optional[int] = ...) -> None: ...

class SendMsgBackResponse(_message.Message):
    __slots__ = ("code", "remark", "topic", "reconsume_times")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECONSUME_TIMES_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    topic: str
    reconsume_times: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., topic: _Optional[str] = ..., reconsume_times: _Optional[int] = ...) -> None: ...

class MemberInfo(_message.Message):
    __slots__ = ("client_id", "addr", "consume_type", "message_model", "subscriptions", "queues", "last_heartbeat_ms", "orderly")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    CONSUME_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_MODEL_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    ORDERLY_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    addr: str
    consume_type: ConsumeType
    message_model: MessageModel
    subscriptions: _containers.RepeatedCompositeFieldContainer[Subscription]
    queues: _containers.RepeatedCompositeFieldContainer[QueueRef]
    last_heartbeat_ms: int
    orderly: bool
    def __init__(self, client_id: _Optional[str] = ..., addr: _Optional[str] = ..., consume_type: _Optional[_Union[ConsumeType, str]] = ..., message_model: _Optional[_Union[MessageModel, str]] = ..., subscriptions: _Optional[_Iterable[_Union[Subscription, _Mapping]]] = ..., queues: _Optional[_Iterable[_Union[QueueRef, _Mapping]]] = ..., last_heartbeat_ms: _Optional[int] = ..., orderly: _Optional[bool] = ...) -> None: ...

class ConsumerConnection(_message.Message):
    __slots__ = ("members",)
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    members: _containers.RepeatedCompositeFieldContainer[MemberInfo]
    def __init__(self, members: _Optional[_Iterable[_Union[MemberInfo, _Mapping]]] = ...) -> None: ...

class ResetOffsetRequest(_message.Message):
    __slots__ = ("group", "topic", "timestamp")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    timestamp: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., timestamp: _Optional[int] = ...) -> None: ...

class QueueOffset(_message.Message):
    __slots__ = ("queue", "offset")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    queue: QueueRef
    offset: int
    def __init__(self, queue: _Optional[_Union[QueueRef, _Mapping]] = ..., offset: _Optional[int] = ...) -> None: ...

class ResetOffsetResponse(_message.Message):
    __slots__ = ("code", "remark", "offsets")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    offsets: _containers.RepeatedCompositeFieldContainer[QueueOffset]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[QueueOffset, _Mapping]]] = ...) -> None: ...
