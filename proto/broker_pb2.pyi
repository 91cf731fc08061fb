from proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueueAddressing(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADDRESSING_UNSPECIFIED: _ClassVar[QueueAddressing]
    LOGIC: _ClassVar[QueueAddressing]
    PHYSICAL: _ClassVar[QueueAddressing]
ADDRESSING_UNSPECIFIED: QueueAddressing
LOGIC: QueueAddressing
PHYSICAL: QueueAddressing

class MetadataVersions(_message.Message):
    __slots__ = ("topics", "mappings", "groups", "acls")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAPPINGS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    ACLS_FIELD_NUMBER: _ClassVar[int]
    topics: _common_pb2.DataVersion
    mappings: _common_pb2.DataVersion
    groups: _common_pb2.DataVersion
    acls: _common_pb2.DataVersion
    def __init__(self, topics: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., mappings: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., groups: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., acls: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class MetadataChangeRequest(_message.Message):
    __slots__ = ("known", "wait_ms")
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    known: MetadataVersions
    wait_ms: int
    def __init__(self, known: _Optional[_Union[MetadataVersions, _Mapping]] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class SendMessageRequest(_message.Message):
    __slots__ = ("producer_group", "topic", "queue_id", "bodies", "properties", "flag", "born_timestamp", "born_host", "sys_flag", "addressing", "records", "request_id")
    PRODUCER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BODIES_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    BORN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    BORN_HOST_FIELD_NUMBER: _ClassVar[int]
    SYS_FLAG_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    producer_group: str
    topic: str
    queue_id: int
    bodies: _containers.RepeatedScalarFieldContainer[bytes]
    properties: _containers.RepeatedScalarFieldContainer[bytes]
    flag: int
    born_timestamp: int
    born_host: str
    sys_flag: int
    addressing: QueueAddressing
    records: bytes
    request_id: int
    def __init__(self, producer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., bodies: _Optional[_Iterable[bytes]] = ..., properties: _Optional[_Iterable[bytes]] = ..., flag: _Optional[int] = ..., born_timestamp: _Optional[int] = ..., born_host: _Optional[str] = ..., sys_flag: _Optional[int] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ..., records: _Optional[bytes] = ..., request_id: _Optional[int] = ...) -> None: ...

class SendMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "queue_id", "queue_offset", "store_host", "physical_offsets", "request_id", "recall_handles")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STORE_HOST_FIELD_NUMBER: _ClassVar[int]
    PHYSICAL_OFFSETS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLES_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    queue_id: int
    queue_offset: int
    store_host: bytes
    physical_offsets: _containers.RepeatedScalarFieldContainer[int]
    request_id: int
    recall_handles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., store_host: _Optional[bytes] = ..., physical_offsets: _Optional[_Iterable[int]] = ..., request_id: _Optional[int] = ..., recall_handles: _Optional[_Iterable[str]] = ...) -> None: ...

class RecallMessageRequest(_message.Message):
    __slots__ = ("topic", "recall_handle")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECALL_HANDLE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    recall_handle: str
    def __init__(self, topic: _Optional[str] = ..., recall_handle: _Optional[str] = ...) -> None: ...

class RecallMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "message_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    message_id: str
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., message_id: _Optional[str] = ...) -> None: ...

class SendStreamFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[SendMessageRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[SendMessageRequest, _Mapping]]] = ...) -> None: ...

class SendStreamAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[SendMessageResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[SendMessageResponse, _Mapping]]] = ...) -> None: ...

class PullStreamFrame(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[PullMessageRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[PullMessageRequest, _Mapping]]] = ...) -> None: ...

class PullStreamAnswers(_message.Message):
    __slots__ = ("responses",)
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    responses: _containers.RepeatedCompositeFieldContainer[PullMessageResponse]
    def __init__(self, responses: _Optional[_Iterable[_Union[PullMessageResponse, _Mapping]]] = ...) -> None: ...

class PullMessageRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "queue_offset", "max_msg_nums", "sub_expression", "suspend_timeout_ms", "commit_offset", "max_bytes", "addressing", "request_id", "peer_read")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_MSG_NUMS_FIELD_NUMBER: _ClassVar[int]
    SUB_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    SUSPEND_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PEER_READ_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sub_expression: str
    suspend_timeout_ms: int
    commit_offset: int
    max_bytes: int
    addressing: QueueAddressing
    request_id: int
    peer_read: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., queue_offset: _Optional[int] = ..., max_msg_nums: _Optional[int] = ..., sub_expression: _Optional[str] = ..., suspend_timeout_ms: _Optional[int] = ..., commit_offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ..., request_id: _Optional[int] = ..., peer_read: _Optional[bool] = ...) -> None: ...

class PullMessageResponse(_message.Message):
    __slots__ = ("code", "remark", "next_begin_offset", "min_offset", "max_offset", "records", "offset_delta", "request_id")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    NEXT_BEGIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    OFFSET_DELTA_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes
    offset_delta: int
    request_id: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., next_begin_offset: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., records: _Optional[bytes] = ..., offset_delta: _Optional[int] = ..., request_id: _Optional[int] = ...) -> None: ...

class UpdateConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "commit_offset", "addressing", "clear")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    COMMIT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    commit_offset: int
    addressing: QueueAddressing
    clear: bool
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., commit_offset: _Optional[int] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ..., clear: _Optional[bool] = ...) -> None: ...

class QueryConsumerOffsetRequest(_message.Message):
    __slots__ = ("consumer_group", "topic", "queue_id", "addressing")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    queue_id: int
    addressing: QueueAddressing
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ...) -> None: ...

class QueueRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "addressing")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    addressing: QueueAddressing
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ...) -> None: ...

class OffsetResponse(_message.Message):
    __slots__ = ("code", "remark", "offset")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    offset: int
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., offset: _Optional[int] = ...) -> None: ...

class SearchOffsetRequest(_message.Message):
    __slots__ = ("topic", "queue_id", "timestamp", "upper", "addressing")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    UPPER_FIELD_NUMBER: _ClassVar[int]
    ADDRESSING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    timestamp: int
    upper: bool
    addressing: QueueAddressing
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., timestamp: _Optional[int] = ..., upper: _Optional[bool] = ..., addressing: _Optional[_Union[QueueAddressing, str]] = ...) -> None: ...

class QueryMessageRequest(_message.Message):
    __slots__ = ("topic", "key", "max_num", "begin_timestamp", "end_timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_FIELD_NUMBER: _ClassVar[int]
    BEGIN_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    END_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    key: str
    max_num: int
    begin_timestamp: int
    end_timestamp: int
    def __init__(self, topic: _Optional[str] = ..., key: _Optional[str] = ..., max_num: _Optional[int] = ..., begin_timestamp: _Optional[int] = ..., end_timestamp: _Optional[int] = ...) -> None: ...

class ViewMessageRequest(_message.Message):
    __slots__ = ("commit_log_offset",)
    COMMIT_LOG_OFFSET_FIELD_NUMBER: _ClassVar[int]
    commit_log_offset: int
    def __init__(self, commit_log_offset: _Optional[int] = ...) -> None: ...

class MessagesResponse(_message.Message):
    __slots__ = ("code", "remark", "records")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    records: bytes
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., records: _Optional[bytes] = ...) -> None: ...

class UpdateTopicRequest(_message.Message):
    __slots__ = ("config",)
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    config: _common_pb2.TopicConfig
    def __init__(self, config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class UpdateTopicListRequest(_message.Message):
    __slots__ = ("configs",)
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    def __init__(self, configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ...) -> None: ...

class TopicRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class GroupRequest(_message.Message):
    __slots__ = ("group_name",)
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    def __init__(self, group_name: _Optional[str] = ...) -> None: ...

class TopicConfigList(_message.Message):
    __slots__ = ("configs", "data_version")
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    data_version: _common_pb2.DataVersion
    def __init__(self, configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class TopicConfigChangesRequest(_message.Message):
    __slots__ = ("since",)
    SINCE_FIELD_NUMBER: _ClassVar[int]
    since: _common_pb2.DataVersion
    def __init__(self, since: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class TopicConfigChanges(_message.Message):
    __slots__ = ("configs", "deleted", "data_version", "whole")
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    WHOLE_FIELD_NUMBER: _ClassVar[int]
    configs: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicConfig]
    deleted: _containers.RepeatedScalarFieldContainer[str]
    data_version: _common_pb2.DataVersion
    whole: bool
    def __init__(self, configs: _Optional[_Iterable[_Union[_common_pb2.TopicConfig, _Mapping]]] = ..., deleted: _Optional[_Iterable[str]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ..., whole: _Optional[bool] = ...) -> None: ...

class SubscriptionGroupConfig(_message.Message):
    __slots__ = ("group_name", "consume_enable", "consume_broadcast_enable", "retry_queue_nums", "retry_max_times", "broker_id", "consume_message_orderly")
    GROUP_NAME_FIELD_NUMBER: _ClassVar[int]
    CONSUME_ENABLE_FIELD_NUMBER: _ClassVar[int]
    CONSUME_BROADCAST_ENABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_QUEUE_NUMS_FIELD_NUMBER: _ClassVar[int]
    RETRY_MAX_TIMES_FIELD_NUMBER: _ClassVar[int]
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    CONSUME_MESSAGE_ORDERLY_FIELD_NUMBER: _ClassVar[int]
    group_name: str
    consume_enable: bool
    consume_broadcast_enable: bool
    retry_queue_nums: int
    retry_max_times: int
    broker_id: int
    consume_message_orderly: bool
    def __init__(self, group_name: _Optional[str] = ..., consume_enable: _Optional[bool] = ..., consume_broadcast_enable: _Optional[bool] = ..., retry_queue_nums: _Optional[int] = ..., retry_max_times: _Optional[int] = ..., broker_id: _Optional[int] = ..., consume_message_orderly: _Optional[bool] = ...) -> None: ...

class SubscriptionGroupList(_message.Message):
    __slots__ = ("groups", "data_version")
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    groups: _containers.RepeatedCompositeFieldContainer[SubscriptionGroupConfig]
    data_version: _common_pb2.DataVersion
    def __init__(self, groups: _Optional[_Iterable[_Union[SubscriptionGroupConfig, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class TopicQueueStats(_message.Message):
    __slots__ = ("queue_id", "min_offset", "max_offset", "last_update_timestamp")
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    MIN_OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_UPDATE_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int
    def __init__(self, queue_id: _Optional[int] = ..., min_offset: _Optional[int] = ..., max_offset: _Optional[int] = ..., last_update_timestamp: _Optional[int] = ...) -> None: ...

class TopicStats(_message.Message):
    __slots__ = ("code", "remark", "queues")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    queues: _containers.RepeatedCompositeFieldContainer[TopicQueueStats]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[TopicQueueStats, _Mapping]]] = ...) -> None: ...

class ConsumeStatsRequest(_message.Message):
    __slots__ = ("consumer_group", "topic")
    CONSUMER_GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    consumer_group: str
    topic: str
    def __init__(self, consumer_group: _Optional[str] = ..., topic: _Optional[str] = ...) -> None: ...

class QueueConsumeStats(_message.Message):
    __slots__ = ("topic", "queue_id", "broker_offset", "consumer_offset", "last_timestamp")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_OFFSET_FIELD_NUMBER: _ClassVar[int]
    LAST_TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    topic: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int
    def __init__(self, topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., broker_offset: _Optional[int] = ..., consumer_offset: _Optional[int] = ..., last_timestamp: _Optional[int] = ...) -> None: ...

class ConsumeStats(_message.Message):
    __slots__ = ("code", "remark", "queues")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    queues: _containers.RepeatedCompositeFieldContainer[QueueConsumeStats]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., queues: _Optional[_Iterable[_Union[QueueConsumeStats, _Mapping]]] = ...) -> None: ...

class BrokerRuntimeInfo(_message.Message):
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

class UpdateTopicQueueMappingRequest(_message.Message):
    __slots__ = ("detail", "config", "expected_epoch")
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    detail: _common_pb2.TopicQueueMappingDetail
    config: _common_pb2.TopicConfig
    expected_epoch: int
    def __init__(self, detail: _Optional[_Union[_common_pb2.TopicQueueMappingDetail, _Mapping]] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ..., expected_epoch: _Optional[int] = ...) -> None: ...

class TopicQueueMappingResponse(_message.Message):
    __slots__ = ("code", "remark", "detail", "config")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    detail: _common_pb2.TopicQueueMappingDetail
    config: _common_pb2.TopicConfig
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., detail: _Optional[_Union[_common_pb2.TopicQueueMappingDetail, _Mapping]] = ..., config: _Optional[_Union[_common_pb2.TopicConfig, _Mapping]] = ...) -> None: ...

class ConsumerOffsetEntry(_message.Message):
    __slots__ = ("group", "topic", "queue_id", "offset")
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    QUEUE_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    group: str
    topic: str
    queue_id: int
    offset: int
    def __init__(self, group: _Optional[str] = ..., topic: _Optional[str] = ..., queue_id: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class TopicQueueMappingList(_message.Message):
    __slots__ = ("details", "data_version")
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    DATA_VERSION_FIELD_NUMBER: _ClassVar[int]
    details: _containers.RepeatedCompositeFieldContainer[_common_pb2.TopicQueueMappingDetail]
    data_version: _common_pb2.DataVersion
    def __init__(self, details: _Optional[_Iterable[_Union[_common_pb2.TopicQueueMappingDetail, _Mapping]]] = ..., data_version: _Optional[_Union[_common_pb2.DataVersion, _Mapping]] = ...) -> None: ...

class ConsumerOffsetList(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[ConsumerOffsetEntry]
    def __init__(self, offsets: _Optional[_Iterable[_Union[ConsumerOffsetEntry, _Mapping]]] = ...) -> None: ...

class BrokerConfigTable(_message.Message):
    __slots__ = ("table", "live_keys")
    class TableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TABLE_FIELD_NUMBER: _ClassVar[int]
    LIVE_KEYS_FIELD_NUMBER: _ClassVar[int]
    table: _containers.ScalarMap[str, str]
    live_keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, table: _Optional[_Mapping[str, str]] = ..., live_keys: _Optional[_Iterable[str]] = ...) -> None: ...

class UpdateBrokerConfigRequest(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class ProducerConnection(_message.Message):
    __slots__ = ("client_id", "addr", "last_heartbeat_age_ms")
    CLIENT_ID_FIELD_NUMBER: _ClassVar[int]
    ADDR_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    client_id: str
    addr: str
    last_heartbeat_age_ms: int
    def __init__(self, client_id: _Optional[str] = ..., addr: _Optional[str] = ..., last_heartbeat_age_ms: _Optional[int] = ...) -> None: ...

class ProducerConnectionList(_message.Message):
    __slots__ = ("code", "remark", "connections")
    CODE_FIELD_NUMBER: _ClassVar[int]
    REMARK_FIELD_NUMBER: _ClassVar[int]
    CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    code: int
    remark: str
    connections: _containers.RepeatedCompositeFieldContainer[ProducerConnection]
    def __init__(self, code: _Optional[int] = ..., remark: _Optional[str] = ..., connections: _Optional[_Iterable[_Union[ProducerConnection, _Mapping]]] = ...) -> None: ...

class TopicStatsRow(_message.Message):
    __slots__ = ("topic", "group", "total", "lag", "tps", "count_since_boot")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    GROUP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    TPS_FIELD_NUMBER: _ClassVar[int]
    COUNT_SINCE_BOOT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    group: str
    total: int
    lag: int
    tps: float
    count_since_boot: int
    def __init__(self, topic: _Optional[str] = ..., group: _Optional[str] = ..., total: _Optional[int] = ..., lag: _Optional[int] = ..., tps: _Optional[float] = ..., count_since_boot: _Optional[int] = ...) -> None: ...

class BrokerStatsTable(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[TopicStatsRow]
    def __init__(self, rows: _Optional[_Iterable[_Union[TopicStatsRow, _Mapping]]] = ...) -> None: ...
